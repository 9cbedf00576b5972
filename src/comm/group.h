// Groups: calls between horaGroupStart and horaGroupEnd are held (per thread) and run together
// at the outermost horaGroupEnd, across any number of communicators. A group whose calls name
// a host stream is queued on it as one piece of work.
#pragma once
#include "comm/comm.h"
#include "comm/stream.h"

namespace hora::group {

void start();
// Runs the held calls; throws the first error. Throws InvalidUsage without a matching start.
void end();
bool active();
// Runs the call now (stream null), queues it on the stream, or holds it if a group is open.
// fn names the entry point, for the stream's error text.
void submit(horaComm* comm, const coll::Args& a, HostStream* stream = nullptr, const char* fn = "");

}  // namespace hora::group
