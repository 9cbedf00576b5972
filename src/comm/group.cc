#include "comm/group.h"

namespace hora::group {

namespace {
struct State {
  int depth = 0;
  std::vector<std::pair<horaComm*, coll::Args>> calls;
};
thread_local State tState;
}  // namespace

void start() { ++tState.depth; }

bool active() { return tState.depth > 0; }

void end() {
  if (tState.depth == 0) fail(Errc::InvalidUsage, "horaGroupEnd without a matching horaGroupStart");
  if (--tState.depth > 0) return;
  std::vector<std::pair<horaComm*, coll::Args>> calls;
  calls.swap(tState.calls);
  if (!calls.empty()) runCalls(calls);
}

void submit(horaComm* comm, const coll::Args& a) {
  if (tState.depth > 0) {
    comm->check();
    tState.calls.emplace_back(comm, a);
    return;
  }
  thread_local std::vector<std::pair<horaComm*, coll::Args>> one(1);
  one[0] = {comm, a};
  runCalls(one);
}

}  // namespace hora::group
