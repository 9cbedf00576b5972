#include "comm/group.h"

namespace hora::group {

namespace {
struct State {
  int depth = 0;
  Calls calls;
  HostStream* stream = nullptr;  // the stream the held calls name (all the same)
  bool named = false;            // whether any call has been held yet
  Calls one = Calls(1);
};
thread_local State tState;

void runNow(const Calls& calls) {
  for (const auto& call : calls) awaitStreamWork(call.first);
  runCalls(calls);
}
}  // namespace

void start() { ++tState.depth; }

bool active() { return tState.depth > 0; }

void end() {
  State& t = tState;
  if (t.depth == 0) fail(Errc::InvalidUsage, "horaGroupEnd without a matching horaGroupStart");
  if (--t.depth > 0) return;
  Calls calls;
  calls.swap(t.calls);
  HostStream* stream = t.stream;
  t.stream = nullptr;
  t.named = false;
  if (calls.empty()) return;
  if (stream) {
    stream->enqueue("horaGroupEnd", std::move(calls));
    return;
  }
  try {
    runNow(calls);
  } catch (const Error& e) {
    // The failure is each communicator's of the group too: horaGetLastError(comm) says it, as
    // it would for a call outside a group.
    const std::string text = std::string("horaGroupEnd: ") + e.what();
    for (size_t i = 0; i < calls.size(); ++i) {
      bool first = true;
      for (size_t k = 0; k < i; ++k) first &= calls[k].first != calls[i].first;
      if (first) calls[i].first->setLastError(text);
    }
    throw;
  }
}

void submit(horaComm* comm, const coll::Args& a, HostStream* stream, const char* fn) {
  State& t = tState;  // one lookup of the thread's state (a call in a shared library)
  if (t.depth > 0) {
    comm->check();
    if (t.named && stream != t.stream)
      fail(Errc::InvalidUsage, "every call of a group must name the same stream (this one names %p, the first "
           "named %p)", static_cast<void*>(stream), static_cast<void*>(t.stream));
    t.stream = stream;
    t.named = true;
    t.calls.emplace_back(comm, a);
    return;
  }
  if (stream) {
    comm->check();
    stream->enqueue(fn, Calls{{comm, a}});
    return;
  }
  t.one[0] = {comm, a};
  runNow(t.one);
}

}  // namespace hora::group
