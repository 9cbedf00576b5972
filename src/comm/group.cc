#include "comm/group.h"

namespace hora::group {

namespace {
struct State {
  int depth = 0;
  Calls calls;
  HostStream* stream = nullptr;  // the host stream the held calls name (all the same)
  std::vector<void*> cudaStreams;  // or the CUDA stream of each held call (empty for host groups)
  bool named = false;            // whether any call has been held yet
  Calls one = Calls(1);
};
thread_local State tState;

void runNow(const Calls& calls) {
  for (const auto& call : calls) awaitStreamWork(call.first);
  device::runCalls(calls);
}

// The failure of a group is each communicator's of the group too: horaGetLastError(comm) says
// it, as it would for a call outside a group.
void noteGroupError(const Calls& calls, const Error& e) {
  const std::string text = std::string("horaGroupEnd: ") + e.what();
  for (size_t i = 0; i < calls.size(); ++i) {
    bool first = true;
    for (size_t k = 0; k < i; ++k) first &= calls[k].first != calls[i].first;
    if (first) calls[i].first->setLastError(text);
  }
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
  std::vector<void*> cudaStreams;
  cudaStreams.swap(t.cudaStreams);
  t.stream = nullptr;
  t.named = false;
  if (calls.empty()) return;
  if (stream) {
    stream->enqueue("horaGroupEnd", std::move(calls));
    return;
  }
  try {
    if (!cudaStreams.empty()) device::enqueue("horaGroupEnd", calls, cudaStreams);
    else runNow(calls);
  } catch (const Error& e) {
    noteGroupError(calls, e);
    throw;
  }
}

void submit(horaComm* comm, const coll::Args& a, device::StreamRef ref, const char* fn) {
  State& t = tState;  // one lookup of the thread's state (a call in a shared library)
  HostStream* stream = ref.host;
  if (t.depth > 0) {
    comm->check();
    // One host stream (or none) for the whole group; or a CUDA stream for every call.
    const bool cudaGroup = !t.cudaStreams.empty();
    if (t.named && (stream != t.stream || (ref.cuda != nullptr) != cudaGroup))
      fail(Errc::InvalidUsage, "every call of a group must name the same host stream, or every one a CUDA stream, "
           "or none (this one names %p, the first named %p)",
           ref.cuda ? ref.cuda : static_cast<void*>(stream),
           cudaGroup ? t.cudaStreams[0] : static_cast<void*>(t.stream));
    t.stream = stream;
    t.named = true;
    t.calls.emplace_back(comm, a);
    if (ref.cuda) t.cudaStreams.push_back(ref.cuda);
    return;
  }
  if (ref.cuda) {
    comm->check();
    device::enqueue(fn, Calls{{comm, a}}, {ref.cuda});
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
