#include "comm/group.h"

namespace hora::group {

namespace {
struct State {
  int depth = 0;
  std::vector<std::pair<horaComm*, coll::Args>> calls;
  std::vector<std::pair<horaComm*, coll::Args>> one = std::vector<std::pair<horaComm*, coll::Args>>(1);
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
  State& t = tState;  // one lookup of the thread's state (a call in a shared library)
  if (t.depth > 0) {
    comm->check();
    t.calls.emplace_back(comm, a);
    return;
  }
  t.one[0] = {comm, a};
  runCalls(t.one);
}

}  // namespace hora::group
