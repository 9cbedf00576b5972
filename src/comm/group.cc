#include "comm/group.h"

#include <algorithm>

#include "base/tls.h"
#include "coll/algorithm.h"

namespace hora::group {

namespace {
struct State {
  int depth = 0;
  Calls calls;
  HostStream* stream = nullptr;  // the host stream the held calls name (all the same)
  std::vector<void*> cudaStreams;  // or the CUDA stream of each held call (empty for host groups)
  bool named = false;            // whether any call has been held yet
  std::vector<std::pair<horaComm*, std::function<void()>>> inits;  // communicators to make at the end
};
State& state() { return PerThread<State>::get(); }  // base/tls.h

// Queues calls by `enqueue`, each first in its communicator's flight recorder (the entry starts
// when the call runs, or fails here if queueing fails). streams: each call's, or one for all.
template <class F>
void queue(const Calls& calls, const std::vector<void*>& streams, bool cuda, F&& enqueue) {
  std::vector<trace::Entry*> entries;
  for (size_t i = 0; i < calls.size(); ++i)
    entries.push_back(calls[i].first->trace->queued(calls[i].second, streams[std::min(i, streams.size() - 1)], cuda));
  try {
    enqueue();
  } catch (...) {
    for (size_t i = 0; i < calls.size(); ++i) calls[i].first->trace->dropQueued(entries[i]);
    throw;
  }
}

void runNow(const Calls& calls) {
  for (const auto& call : calls) awaitStreamWork(call.first);
  device::runSync(calls);
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


// The held inits, all at once (each on its communicator's own thread); waits for the blocking
// ones and throws the first failure. Returns whether non-blocking ones go on.
bool runInits(std::vector<std::pair<horaComm*, std::function<void()>>>& inits) {
  bool anyPending = false;
  for (auto& [c, work] : inits) c->runInBackground(std::move(work));
  const Error* first = nullptr;
  Error firstError(Errc::Success, "");
  for (auto& [c, work] : inits) {
    if (!c->opts.blocking) {
      anyPending = true;
      continue;
    }
    c->joinBackground();
    const Errc e = c->asyncError();
    if (e != Errc::Success && !first) {
      firstError = Error(e, format("making the communicator of rank %d of %d: %s", c->self().rank, c->self().nranks, c->lastError()));
      first = &firstError;
    }
  }
  inits.clear();
  if (first) throw firstError;
  return anyPending;
}
}  // namespace

void start() { ++state().depth; }

bool active() { return state().depth > 0; }

void addInit(horaComm* comm, std::function<void()> init) { state().inits.emplace_back(comm, std::move(init)); }

bool end() {
  State& t = state();
  if (t.depth == 0) fail(Errc::InvalidUsage, "horaGroupEnd without a matching horaGroupStart");
  if (--t.depth > 0) return false;
  bool pending = false;
  if (!t.inits.empty()) {
    std::vector<std::pair<horaComm*, std::function<void()>>> inits;
    inits.swap(t.inits);
    try {
      pending = runInits(inits);
    } catch (const Error&) {
      t.calls.clear();
      t.cudaStreams.clear();
      t.stream = nullptr;
      t.named = false;
      throw;
    }
  }
  Calls calls;
  calls.swap(t.calls);
  HostStream* stream = t.stream;
  std::vector<void*> cudaStreams;
  cudaStreams.swap(t.cudaStreams);
  t.stream = nullptr;
  t.named = false;
  if (calls.empty()) return pending;
  if (stream) {
    queue(calls, {stream}, false, [&] { stream->enqueue("horaGroupEnd", calls); });
    return pending;
  }
  try {
    if (!cudaStreams.empty()) queue(calls, cudaStreams, true, [&] { device::enqueue("horaGroupEnd", calls, cudaStreams); });
    else runNow(calls);
  } catch (const Error& e) {
    noteGroupError(calls, e);
    throw;
  }
  return pending;
}

double simulateEnd() {
  State& t = state();
  if (t.depth == 0) fail(Errc::InvalidUsage, "horaGroupSimulateEnd without a matching horaGroupStart");
  if (t.depth > 1) fail(Errc::InvalidUsage, "horaGroupSimulateEnd ends only the outermost group (%d are open)", t.depth);
  if (!t.inits.empty())
    fail(Errc::InvalidUsage, "horaGroupSimulateEnd: the group makes communicators; end it with horaGroupEnd");
  --t.depth;
  Calls calls;
  calls.swap(t.calls);
  t.cudaStreams.clear();
  t.stream = nullptr;
  t.named = false;
  std::vector<std::pair<horaComm*, double>> perComm;
  for (const auto& [c, a] : calls) {
    c->check();
    // Planned as runCalls plans it: alone when it is its communicator's only collective.
    size_t collectives = 0;
    for (const auto& [c2, a2] : calls)
      collectives += c2 == c && a2.kind != coll::Kind::Send && a2.kind != coll::Kind::Recv;
    const bool alone = collectives == 1;
    double us;
    if (a.kind == coll::Kind::Send || a.kind == coll::Kind::Recv) {
      us = coll::algorithm(coll::Algo::P2P).predictUs(a, c->shape, c->planner.costs);
    } else {
      coll::Choice why;
      coll::plan(a, c->shape, c->planner, alone, &why);
      us = why.predictedUs;
    }
    auto it = std::find_if(perComm.begin(), perComm.end(), [&](const auto& p) { return p.first == c; });
    if (it == perComm.end()) perComm.emplace_back(c, us);
    else it->second += us;
  }
  double most = 0;
  for (const auto& p : perComm) most = std::max(most, p.second);
  return most;
}

void submit(horaComm* comm, const coll::Args& a, device::StreamRef ref, const char* fn) {
  State& t = state();  // one lookup of the thread's state
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
    const Calls one{{comm, a}};
    queue(one, {ref.cuda}, true, [&] { device::enqueue(fn, one, {ref.cuda}); });
    return;
  }
  if (stream) {
    comm->check();
    queue(Calls{{comm, a}}, {stream}, false, [&] { stream->enqueue(fn, Calls{{comm, a}}); });
    return;
  }
  awaitStreamWork(comm);
  device::runSyncOne(comm, a);
}

}  // namespace hora::group
