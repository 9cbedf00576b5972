// Groups: calls between horaGroupStart and horaGroupEnd are held (per thread) and run together
// at the outermost horaGroupEnd, across any number of communicators. A group whose calls name
// a host stream is queued on it as one piece of work; one whose calls name CUDA streams (one or
// several) is queued on all of them (comm/device.h).
#pragma once
#include <functional>

#include "comm/comm.h"
#include "comm/device.h"
#include "comm/stream.h"

namespace hora::group {

void start();
// Runs the held calls; throws the first error. Throws InvalidUsage without a matching start.
// Returns true when it leaves non-blocking communicator inits running (horaInProgress).
bool end();
bool active();
// Holds a communicator's init until the outermost end, which runs every held init at once (so
// that one thread may make several ranks' communicators), waits for the blocking ones and
// throws the first of their errors.
void addInit(horaComm* comm, std::function<void()> init);
// Ends the outermost group without running it: the planner's predicted time, in microseconds,
// of the communicator whose held calls take longest (each communicator's calls one after the
// other). The held calls are dropped.
double simulateEnd();
// Runs the call now (no stream), queues it on its stream, or holds it if a group is open.
// fn names the entry point, for the stream's error text.
void submit(horaComm* comm, const coll::Args& a, device::StreamRef stream = {}, const char* fn = "");

}  // namespace hora::group
