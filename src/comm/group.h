// Groups: calls between horaGroupStart and horaGroupEnd are held (per thread) and run together
// at the outermost horaGroupEnd, across any number of communicators.
#pragma once
#include "comm/comm.h"

namespace hora::group {

void start();
// Runs the held calls; throws the first error. Throws InvalidUsage without a matching start.
void end();
bool active();
// Runs the call now, or holds it if a group is open.
void submit(horaComm* comm, const coll::Args& a);

}  // namespace hora::group
