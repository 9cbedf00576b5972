// Running calls: plan and build each call's program, then run them all at once on this thread.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <thread>

#include "base/log.h"
#include "base/tls.h"
#include "base/wait.h"
#include "comm/comm.h"
#include "comm/link_check.h"
#include "core/device_copies.h"
#include "core/executor.h"

namespace hora {

namespace {
std::string describeComm(const void* ctx) { return static_cast<const horaComm*>(ctx)->describeCall(); }

// Ends the flight recorder's entries of a thread's calls: done once `ok` is set, else (an
// exception left the call) failed.
using trace::Traced;
struct TraceGuard {
  std::vector<Traced>& entries;  // thread_local storage: no allocation per call
  bool ok = false;
  ~TraceGuard() {
    for (const Traced& t : entries) t.recorder->finish(t.entry, ok);
    entries.clear();
  }
};
void failEntries(std::vector<Traced>& entries) {
  for (const Traced& t : entries) t.recorder->finish(t.entry, false);
}

struct BusyGuard {
  std::vector<horaComm*>& comms;  // thread_local storage: no allocation per call
  ~BusyGuard() {
    for (horaComm* c : comms) c->busy.store(false, std::memory_order_release);
    comms.clear();
  }
};

// A receive into memory that a send of the same group reads (in-place send/recv) lands in
// scratch and is copied to its place once every send has completed.
struct Deferred {
  void* to;
  const void* from;
  size_t bytes;
};

// Everything runCalls keeps between calls on a thread, so that a call allocates nothing; one
// thread_local (each costs a lookup per call in a shared library).
struct ThreadState {
  core::Executor executor;
  std::vector<core::Program> programs;
  std::vector<core::Job> jobs;
  std::vector<horaComm*> busyComms;
  std::vector<Deferred> deferred;
  std::vector<coll::Args> adjusted;
  std::vector<uint64_t> tags;
  std::vector<coll::Plan> plans;
  std::vector<size_t> atOnce;
  std::vector<Traced> traced;  // by call
  std::vector<std::pair<horaComm*, coll::Args>> one;  // runOne's call, where it goes to runCalls
  core::Program copies;  // copies of device buffers that are not ops of a call's program
  CheckPlans checks;  // the call checks a call sends and receives (planChecks)
};
// The thread's state, behind one load from the thread pointer (base/tls.h). (GCC treats the
// address of a thread_local of a shared library as cheap to compute again, and did, with a
// __tls_get_addr call at each use in runCalls: 22 per call, a tenth of a small call's
// instructions.)
ThreadState& threadState() { return PerThread<ThreadState>::get(); }

const coll::JobShape& shapeOf(horaComm* c) { return c->shape; }

}  // namespace

core::Job jobOf(horaComm* c, const core::Program* program, trace::Entry* entry) {
  core::Job j;
  j.mark = entry ? c->trace->mark() : nullptr;
  j.program = program;
  j.conns = c->connPtrs.data();
  j.nranks = c->self().nranks;
  j.abortFlag = &c->aborting;
  j.wakeFd = c->wakeFd.get();
  j.describe = describeComm;
  j.describeCtx = c;
  j.stage = c->stage.get();
  j.localProcs = c->self().localProcs.empty() ? nullptr : c->self().localProcs.data();
  j.earlier = earlierCheck;
  j.earlierCtx = c;
  if (c->shape.callCheck && !c->shape.stage && c->self().nranks > 1) {  // its checks to the successor may be held back (planChecks)
    j.heldPeer = (c->self().rank + 1) % c->self().nranks;
    j.heldOn = c->connPtrs[static_cast<size_t>(j.heldPeer)];
  }
  return j;
}

namespace {

// The plan of a collective (not a send or receive), cached with what running it needs to know
// of it, and explained at INFO the first time a communicator makes one for its collective and
// size class (a power of two).
const PlanCache::Entry& planned(horaComm* c, const coll::Args& a, const coll::JobShape& topo, bool alone) {
  // Every prediction depends on the collective, its bytes and whether it is alone (the rest is
  // the communicator's), and which algorithms may run on whether each rank scales its own input
  // (PreMulSum: a Reduce's single copy may not): the last plan of each is kept.
  const uint64_t bytes = a.count * dataTypeSize(a.dtype);
  const uint64_t scales = a.op == RedOp::PreMulSum;
  static_assert(static_cast<uint64_t>(coll::Kind::Scatter) < 32, "the collective takes the key's top 5 bits");
  const uint64_t key =
      (static_cast<uint64_t>(a.kind) << 59 | scales << 57 | static_cast<uint64_t>(alone) << 56 | bytes) + 1;
  // The slot is the top bits of a Fibonacci hash of the key, which every bit of the key reaches.
  // (It was the key's low bits, the size's alone: calls of one size and different collectives,
  // an FSDP step's AllGather and ReduceScatter, took one slot, and each was planned again.)
  static_assert(std::tuple_size<decltype(c->plans.entries)>::value == 64, "the index is the hash's top 6 bits");
  PlanCache::Entry& slot = c->plans.entries[(key * 0x9E3779B97F4A7C15ull) >> 58];
  if (slot.key == key && bytes < (uint64_t(1) << 56)) return slot;
  coll::Choice why;
  const coll::Plan p = coll::plan(a, topo, c->planner, alone, &why);
  slot.key = key;
  slot.plan = p;
  slot.runsNow = alone && topo.stage && coll::algorithm(p.algo).runsNow(a, topo);
  slot.checksLater = coll::stageChecksLater(a, topo);
  if (log::enabled(log::Level::Info, log::kColl)) {
    uint32_t cls = 0;
    while ((uint64_t(1) << cls) < bytes) ++cls;
    const uint32_t sizeClass = static_cast<uint32_t>(a.kind) << 8 | cls;
    if (std::find(c->plans.explained.begin(), c->plans.explained.end(), sizeClass) == c->plans.explained.end()) {
      c->plans.explained.push_back(sizeClass);
      HORA_INFO(log::kColl, "%s", coll::explain(a, topo, p, why).c_str());
    }
  }
  return slot;
}

// The plan of any call: a send or receive's is point-to-point.
coll::Plan planOf(horaComm* c, const coll::Args& a, const coll::JobShape& topo, bool alone) {
  if (a.kind == coll::Kind::Send || a.kind == coll::Kind::Recv) {
    coll::Plan p;
    p.algo = coll::Algo::P2P;
    p.chunkBytes = c->planner.chunkBytes;
    return p;
  }
  return planned(c, a, topo, alone).plan;
}

// A lone call whose algorithm runs it at once through the shared stage, without a program.
// Returns false if the call is not one (its callers chose it by the algorithm's runsNow).
bool runAtOnce(horaComm* c, const coll::Args& a, const coll::JobShape& topo, const coll::Plan& plan,
               core::Executor& executor, trace::Entry* entry, bool later) {
  const coll::Algorithm& algo = coll::algorithm(plan.algo);
  if (!topo.stage) return false;
  const transport::SharedStage::Running running(c->stage.get());
  ++c->seq.calls;
  c->seq.nextFrameCall();  // numbered as the same call going through messages would be
  HORA_TRACE(log::kColl, "%s: %s by %s, at once through the shared stage", c->describeCall().c_str(),
             coll::describe(a).c_str(), algo.name());
  core::Job j = jobOf(c, nullptr, entry);
  j.callNo = ++c->seq.collectives;
  j.callTag = coll::makeTag(a);
  if (later) compareLater(c, j.callNo);
  c->stage->announce(j.callNo, j.callTag);
  try {
    // Compared in batches (each a read of the predecessor's announcements), and before any call
    // that reads no cell. A batch the predecessor has not reached yet (a Reduce's senders run
    // ahead of its root) is not looked at again for another batch of calls: looking at every
    // call read the predecessor's announcement line while it wrote it, a cache line crossing
    // cores twice per call.
    const uint64_t batch = c->spinFor.count() > 0 ? kCompareBatchAlone : kCompareBatch;
    if (c->seq.uncheckedFrom &&
        (!later || (c->seq.uncheckedTo - c->seq.uncheckedFrom >= batch && c->seq.uncheckedTo >= c->seq.compareAgainAt)) &&
        !compareEarlierCalls(c))
      c->seq.compareAgainAt = c->seq.uncheckedTo + batch;
    auto await = [&](int counter, uint64_t value, int only, bool check) {
      executor.awaitCounter(j, counter, value, only, check, c->opts.timeout, c->spinFor);
    };
    algo.runNow(a, topo, coll::AwaitFn(await, j.callNo, j.callTag));
    // Never further behind than the announcements are kept: compare, waiting if need be, until
    // half the window is left, not all of it: a predecessor that catches up wholly then waits
    // for this rank's next call, and the two meet every kUncheckedMost calls.
    if (later && c->seq.uncheckedFrom && c->seq.uncheckedTo - c->seq.uncheckedFrom >= kUncheckedMost)
      awaitEarlierCalls(c, false, kUncheckedMost / 2);
  } catch (const Error& e) {
    c->trace->finish(entry, false);
    if (!c->aborting.load()) c->fail(e);
    throw;
  }
  return true;
}
// The lone calls that run at once, each on a thread of its own; throws the first failure.
void runAtOnceTogether(const std::vector<std::pair<horaComm*, coll::Args>>& calls, const std::vector<coll::Args>& adjusted,
                       const std::vector<coll::Plan>& plans, const std::vector<size_t>& atOnce,
                       const std::vector<Traced>& traced) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(atOnce.size());
  for (size_t k = 0; k < atOnce.size(); ++k)
    threads.emplace_back([&, k] {
      const size_t i = atOnce[k];
      try {
        core::Executor executor;
        log::RankScope scope(calls[i].first->self().rank);
        if (!runAtOnce(calls[i].first, adjusted[i], shapeOf(calls[i].first), plans[i], executor, traced[i].entry,
                       coll::stageChecksLater(adjusted[i], shapeOf(calls[i].first))))
          fail(Errc::Internal, "a shared-stage plan did not run at once");
      } catch (...) {
        errors[k] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// Copies between device buffers and their host blocks, now, on the engine of `dc` (for a call
// that does not run as a program of its own: at once through the shared stage).
void runCopies(horaComm* c, core::Executor& executor, const core::DeviceCopies& dc, bool in) {
  const std::vector<core::DeviceCopy>& list = in ? dc.ins : dc.outs;
  if (list.empty()) return;
  core::Program& p = threadState().copies;
  core::copiesProgram(p, list);
  core::Job j = jobOf(c, &p, nullptr);
  j.copies = dc.engine;
  try {
    executor.run({j}, c->opts.timeout, c->spinFor);
  } catch (...) {
    dc.engine->reset();  // nothing of it still running when the blocks go back
    throw;
  }
}

// Marks c as in use by this thread's call, after checking its state.
void take(horaComm* c) {
  c->check();
  if (c->busy.exchange(true))
    fail(Errc::InvalidUsage, "the communicator of rank %d is in use by another thread (a communicator serves one "
         "thread at a time)", c->self().rank);
  c->scratch.reset();
}

// take(), released by the guard.
void claim(horaComm* c, BusyGuard& guard) {
  take(c);
  guard.comms.push_back(c);
}

// A lone collective that runs at once through the shared stage (most small calls among the
// ranks of one host): the steps runCalls takes for it, without a group's bookkeeping (its
// vectors, its loops over calls, its guards). Returns false, having done nothing, where the call
// is not one.
bool runLone(horaComm* c, const coll::Args& a) {
  if (!c->stage || a.kind == coll::Kind::Send || a.kind == coll::Kind::Recv) return false;
  const coll::JobShape& topo = shapeOf(c);
  take(c);
  struct Release {
    horaComm* c;
    ~Release() { c->busy.store(false, std::memory_order_release); }
  } release{c};
  const PlanCache::Entry& cached = planned(c, a, topo, true);
  if (!cached.runsNow) return false;  // released: runCalls takes it again
  const coll::Plan plan = cached.plan;
  const bool later = cached.checksLater;
  struct Finish {
    trace::Recorder* recorder;
    trace::Entry* entry;
    bool ok = false;
    ~Finish() { recorder->finish(entry, ok); }
  } finish{c->trace.get(), c->trace->start(a, plan, 1)};
  if (!runAtOnce(c, a, topo, plan, threadState().executor, finish.entry, later))
    fail(Errc::Internal, "a shared-stage plan did not run at once");
  finish.ok = true;
  return true;
}
}  // namespace

void runOnStage(horaComm* c, const coll::Args& a, const transport::SharedStage& stage, core::ComputeEngine& engine) {
  ThreadState& ts = threadState();
  ts.busyComms.clear();
  BusyGuard guard{ts.busyComms};
  claim(c, guard);
  coll::JobShape t = c->shape;
  t.stage = &stage;
  t.stageSeq = &c->seq.stageSeq;
  coll::Plan plan;
  plan.algo = coll::Algo::Slice;
  ts.traced.clear();
  TraceGuard traceGuard{ts.traced};
  ts.traced.push_back(Traced{c->trace.get(), c->trace->start(a, plan, 1)});
  if (ts.programs.empty()) ts.programs.resize(1);
  core::Program& p = ts.programs[0];
  p.clear();
  coll::build(a, t, plan, c->scratch, p);
  ++c->seq.calls;
  p.call = c->seq.nextFrameCall();
  HORA_TRACE(log::kColl, "%s: %s by %s through a stage of its own, %zu ops", c->describeCall().c_str(),
             coll::describe(a).c_str(), coll::algoName(plan.algo), p.ops.size());
  ts.jobs.clear();
  ts.jobs.push_back(jobOf(c, &p, ts.traced[0].entry));
  core::Job& j = ts.jobs.back();
  j.stage = &stage;
  j.engine = &engine;
  j.callNo = ++c->seq.collectives;
  j.callTag = p.tag;
  stage.announce(j.callNo, j.callTag);
  try {
    if (c->seq.uncheckedFrom) compareEarlierCalls(c);
    ts.executor.run(ts.jobs, c->opts.timeout, c->spinFor);
    traceGuard.ok = true;
  } catch (const Error& e) {
    failEntries(ts.traced);
    if (!c->aborting.load()) c->fail(e);
    throw;
  }
}

void awaitLinkChecks(horaComm* c, bool meet) {
  if (!c->seq.linkChecks.used || c->self().nranks < 2) return;
  take(c);
  struct Release {
    horaComm* c;
    ~Release() { c->busy.store(false, std::memory_order_release); }
  } release{c};
  ThreadState& ts = threadState();
  LinkChecks& lc = c->seq.linkChecks;
  const size_t expected = lc.expected.size();
  ts.checks.reserve(3);  // the rest received, the meeting, the flush
  ts.checks.jobs.clear();
  size_t slot = 0;
  const int pred = (c->self().rank + c->self().nranks - 1) % c->self().nranks;
  transport::Connection* fromPred = c->connPtrs[static_cast<size_t>(pred)];
  if (!meet && fromPred->holdsBack()) {
    // The predecessor may hold its last checks back until it closes its end, perhaps on this
    // same thread after this rank: what has come is compared, the rest is not waited for.
    const std::string why = earlierCheck(c, fromPred, pred);
    if (!why.empty()) fail(Errc::InvalidUsage, "%s", why.c_str());
    lc.expected.clear();
  }
  if (!lc.expected.empty()) ts.checks.jobs.push_back(checkRecvJob(ts.checks, slot++, c, lc.expected.size()));
  if (meet) {
    core::Program& p = ts.checks.programs[slot];
    p.clear();
    coll::Args barrier;
    barrier.kind = coll::Kind::Barrier;
    coll::buildAgreement(shapeOf(c), coll::makeTag(barrier), c->scratch, p);
    p.call = c->seq.nextFrameCall();
    ts.checks.of[slot] = CheckOf{c, 0, false};
    core::Job j = jobOf(c, &p, nullptr);
    j.describe = describeCheck;
    j.describeCtx = &ts.checks.of[slot];
    ts.checks.jobs.push_back(j);
  }
  // The checks this rank holds back for its successor go out too, before the links close.
  core::Program& none = ts.checks.programs[2];
  none.clear();
  ts.checks.jobs.push_back(jobOf(c, &none, nullptr));
  ts.checks.jobs.back().flushHeld = true;
  HORA_TRACE(log::kColl, "rank %d of %d: %s receives %zu call checks%s", c->self().rank, c->self().nranks,
             meet ? "finalize" : "destroy", expected, meet ? ", then meets every rank" : "");
  ts.executor.run(ts.checks.jobs, c->opts.timeout, c->spinFor);
  if (meet) lc.used = false;  // met: a second finalize has nothing to wait for
}

void runOne(horaComm* c, const coll::Args& a) {
  if (runLone(c, a)) return;
  ThreadState& ts = threadState();
  ts.one.resize(1);
  ts.one[0] = {c, a};
  runCalls(ts.one);
}

void runCalls(const std::vector<std::pair<horaComm*, coll::Args>>& calls, const std::vector<core::DeviceCopies>* copies) {
  if (calls.size() == 1 && !copies && runLone(calls[0].first, calls[0].second)) return;
  const auto staged = [copies](size_t i) -> const core::DeviceCopies* {
    return copies && i < copies->size() && !(*copies)[i].empty() ? &(*copies)[i] : nullptr;
  };
  ThreadState& ts = threadState();
  core::Executor& executor = ts.executor;
  std::vector<core::Program>& programs = ts.programs;
  std::vector<core::Job>& jobs = ts.jobs;
  ts.busyComms.clear();
  BusyGuard guard{ts.busyComms};
  for (const auto& [c, a] : calls)
    if (std::find(guard.comms.begin(), guard.comms.end(), c) == guard.comms.end()) claim(c, guard);
  std::vector<Traced>& traced = ts.traced;
  traced.clear();
  TraceGuard traceGuard{traced};
  if (programs.size() < calls.size()) programs.resize(calls.size());
  jobs.clear();
  std::vector<Deferred>& deferred = ts.deferred;
  std::vector<coll::Args>& adjusted = ts.adjusted;
  deferred.clear();
  adjusted.clear();
  for (const auto& [c, a] : calls) {
    adjusted.push_back(a);
    if (a.kind != coll::Kind::Recv || a.count == 0) continue;
    const size_t bytes = a.count * dataTypeSize(a.dtype);
    const auto lo = reinterpret_cast<uintptr_t>(a.recvbuf);
    bool overlaps = false;
    for (const auto& [c2, s] : calls) {
      if (s.kind != coll::Kind::Send || s.count == 0) continue;
      const auto slo = reinterpret_cast<uintptr_t>(s.sendbuf);
      overlaps |= slo < lo + bytes && lo < slo + s.count * dataTypeSize(s.dtype);
    }
    if (!overlaps) continue;
    void* stage = c->scratch.get(bytes);
    deferred.push_back(Deferred{a.recvbuf, stage, bytes});
    adjusted.back().recvbuf = stage;
  }
  // Each call is planned once, here. A collective is planned as alone when it is the only one of
  // its communicator in this call or group: the same answer on every rank of that communicator,
  // whatever sends and receives each rank adds to the group (deciding by the group's size made
  // ranks choose different algorithms, and hang). One planned alone that runs through the shared
  // stage runs at once, before the group's other work, communicators in the order of their ids
  // (the same on every rank, so no two ranks wait on each other in two stages).
  std::vector<coll::Plan>& plans = ts.plans;
  plans.clear();
  std::vector<size_t>& atOnce = ts.atOnce;
  atOnce.clear();
  for (size_t i = 0; i < calls.size(); ++i) {
    horaComm* c = calls[i].first;
    const bool p2p = adjusted[i].kind == coll::Kind::Send || adjusted[i].kind == coll::Kind::Recv;
    size_t collectives = 0;
    for (size_t k = 0; k < calls.size(); ++k)
      collectives += calls[k].first == c && calls[k].second.kind != coll::Kind::Send &&
                     calls[k].second.kind != coll::Kind::Recv;
    const bool alone = !p2p && collectives == 1;
    plans.push_back(planOf(c, adjusted[i], shapeOf(c), alone));
    traced.push_back(Traced{c->trace.get(), c->trace->start(calls[i].second, plans[i], calls.size())});
    if (alone && c->stage && coll::algorithm(plans[i].algo).runsNow(adjusted[i], shapeOf(c))) atOnce.push_back(i);
  }
  if (!atOnce.empty()) {
    if (atOnce.size() > 1)  // (a lone call, the common case, has nothing to sort)
      std::sort(atOnce.begin(), atOnce.end(), [&](size_t x, size_t y) { return calls[x].first->self().commId < calls[y].first->self().commId; });
    // Several ranks of one communicator in this group (one thread driving them, as with
    // horaCommInitAll): each waits for the others, so they run side by side, a thread each.
    bool sameComm = false;
    for (size_t k = 1; k < atOnce.size(); ++k)
      sameComm |= calls[atOnce[k]].first->self().commId == calls[atOnce[k - 1]].first->self().commId;
    // Their device buffers, if any, are copied in whole before and out after.
    for (size_t i : atOnce)
      if (const core::DeviceCopies* dc = staged(i)) runCopies(calls[i].first, executor, *dc, true);
    if (sameComm) {
      runAtOnceTogether(calls, adjusted, plans, atOnce, traced);
    } else {
      for (size_t i : atOnce) {
        if (!runAtOnce(calls[i].first, adjusted[i], shapeOf(calls[i].first), plans[i], executor, traced[i].entry,
                       coll::stageChecksLater(adjusted[i], shapeOf(calls[i].first))))
          fail(Errc::Internal, "a shared-stage plan did not run at once");
      }
    }
    for (size_t i : atOnce)
      if (const core::DeviceCopies* dc = staged(i)) runCopies(calls[i].first, executor, *dc, false);
    if (atOnce.size() == calls.size()) {
      traceGuard.ok = true;
      return;
    }
  }
  milliseconds timeout = milliseconds::max();
  std::chrono::microseconds spinFor = std::chrono::microseconds::max();
  for (size_t i = 0; i < calls.size(); ++i) {
    horaComm* c = calls[i].first;
    const coll::Args& a = adjusted[i];
    const coll::JobShape& topo = shapeOf(c);
    programs[i].clear();
    if (std::find(atOnce.begin(), atOnce.end(), i) != atOnce.end()) {  // done above: nothing left to run
      jobs.push_back(jobOf(c, &programs[i], nullptr));
      continue;
    }
    const coll::Plan& plan = plans[i];
    coll::build(a, topo, plan, c->scratch, programs[i]);
    ++c->seq.calls;
    HORA_TRACE(log::kColl, "%s: %s by %s, chunk %zu bytes, %zu ops", c->describeCall().c_str(),
               coll::describe(a).c_str(), coll::algoName(plan.algo), plan.chunkBytes, programs[i].ops.size());
    const core::DeviceCopies* dc = staged(i);
    if (dc) {
      // A receive that lands in scratch first (above) is copied out once it is in its block.
      core::DeviceCopies mine = *dc;
      if (a.recvbuf != calls[i].second.recvbuf) mine.outs.clear();
      const core::CopiesAdded n = core::addDeviceCopies(programs[i], mine);
      HORA_TRACE(log::kColl, "%s: device buffers through host blocks, %zu copies in and %zu out (%zu unchanged, "
                 "not copied out) as ops of its program", c->describeCall().c_str(), n.in, n.out, n.outSkipped);
    }
    jobs.push_back(jobOf(c, &programs[i], traced[i].entry));
    if (dc) jobs.back().copies = dc->engine;
    jobs.back().pointToPoint = a.kind == coll::Kind::Send || a.kind == coll::Kind::Recv;
    timeout = std::min(timeout, c->opts.timeout);
    spinFor = std::min(spinFor, c->spinFor);
  }
  // Number the collectives in frames once every program is built (a build that throws leaves
  // the numbers as they were, the same as on the other ranks).
  for (size_t i = 0; i < calls.size(); ++i)
    if (calls[i].second.kind != coll::Kind::Send && calls[i].second.kind != coll::Kind::Recv &&
        std::find(atOnce.begin(), atOnce.end(), i) == atOnce.end())
      programs[i].call = calls[i].first->seq.nextFrameCall();
  // Announce each communicator's collectives on its host, for a cheap mismatch check.
  std::vector<uint64_t>& tags = ts.tags;
  for (horaComm* c : guard.comms) {
    if (!c->stage) continue;
    tags.clear();
    core::Job* first = nullptr;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].first != c || calls[i].second.kind == coll::Kind::Send || calls[i].second.kind == coll::Kind::Recv ||
          std::find(atOnce.begin(), atOnce.end(), i) != atOnce.end())
        continue;
      tags.push_back(programs[i].tag);
      if (!first) first = &jobs[i];
    }
    if (!first) continue;
    first->callNo = ++c->seq.collectives;
    first->callTag = coll::groupTag(tags);
    c->stage->announce(first->callNo, first->callTag);
  }
  // The call checks over the links (comm/call_check.h), first on their links.
  try {
    // Inside: taking the checks that have come may meet a peer's abort frame (its failure).
    planChecks(ts.checks, guard.comms, calls, programs, adjusted, atOnce, traced);
    if (!ts.checks.jobs.empty()) jobs.insert(jobs.begin(), ts.checks.jobs.begin(), ts.checks.jobs.end());
    jobs.insert(jobs.end(), ts.checks.lateJobs.begin(), ts.checks.lateJobs.end());
    for (horaComm* c : guard.comms)
      if (c->seq.uncheckedFrom && c->stage) compareEarlierCalls(c);
    executor.run(jobs, timeout, spinFor);
    for (const Deferred& d : deferred) memcpy(d.to, d.from, d.bytes);
    for (size_t i = 0; i < calls.size(); ++i)
      if (const core::DeviceCopies* dc = staged(i); dc && adjusted[i].recvbuf != calls[i].second.recvbuf)
        runCopies(calls[i].first, executor, *dc, false);
    traceGuard.ok = true;
  } catch (const Error& e) {
    // No copy of a device buffer is left running when its block goes back.
    for (size_t i = 0; i < calls.size(); ++i)
      if (const core::DeviceCopies* dc = staged(i)) dc->engine->reset();
    failEntries(traced);
    // Every communicator of the group may have half-done work: all of them stop.
    for (horaComm* c : guard.comms)
      if (!c->aborting.load()) c->fail(e);
    throw;
  }
}

}  // namespace hora
