// Running calls: plan and build each call's program, then run them all at once on this thread.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/log.h"
#include "comm/comm.h"
#include "core/executor.h"

namespace hora {

namespace {
std::string describeComm(const void* ctx) { return static_cast<const horaComm*>(ctx)->describeCall(); }

struct BusyGuard {
  std::vector<horaComm*>& comms;  // thread_local storage: no allocation per call
  ~BusyGuard() {
    for (horaComm* c : comms) c->busy.store(false);
    comms.clear();
  }
};
}  // namespace

void runCalls(const std::vector<std::pair<horaComm*, coll::Args>>& calls) {
  thread_local core::Executor executor;
  thread_local std::vector<core::Program> programs;
  thread_local std::vector<core::Job> jobs;

  thread_local std::vector<horaComm*> busyComms;
  busyComms.clear();
  BusyGuard guard{busyComms};
  for (const auto& [c, a] : calls) {
    if (std::find(guard.comms.begin(), guard.comms.end(), c) != guard.comms.end()) continue;
    c->check();
    if (c->busy.exchange(true))
      fail(Errc::InvalidUsage, "the communicator of rank %d is in use by another thread (a communicator "
           "serves one thread at a time)", c->rank);
    guard.comms.push_back(c);
    c->scratch.reset();
  }
  if (programs.size() < calls.size()) programs.resize(calls.size());
  jobs.clear();
  // A receive into memory that a send of the same group reads (in-place send/recv) lands in
  // scratch and is copied to its place once every send has completed.
  struct Deferred {
    void* to;
    const void* from;
    size_t bytes;
  };
  thread_local std::vector<Deferred> deferred;
  thread_local std::vector<coll::Args> adjusted;
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
  milliseconds timeout = milliseconds::max();
  std::chrono::microseconds spinFor = std::chrono::microseconds::max();
  for (size_t i = 0; i < calls.size(); ++i) {
    horaComm* c = calls[i].first;
    const coll::Args& a = adjusted[i];
    coll::Topo topo{c->rank, c->nranks};
    if (c->shmWorld && static_cast<int>(c->shmWorld->nlocal) == c->nranks) {
      topo.world = c->shmWorld.get();
      topo.shmSeq = &c->shmSeq;
    }
    programs[i].clear();
    coll::build(a, topo, coll::plan(a, topo, c->tuner), c->scratch, programs[i]);
    ++c->calls;
    HORA_TRACE(log::kColl, "%s: %s, %zu ops", c->describeCall().c_str(), coll::describe(a).c_str(),
               programs[i].ops.size());
    core::Job j;
    j.program = &programs[i];
    j.conns = c->connPtrs.data();
    j.nranks = c->nranks;
    j.abortFlag = &c->aborting;
    j.wakeFd = c->wakeFd.get();
    j.describe = describeComm;
    j.describeCtx = c;
    j.world = c->shmWorld.get();
    jobs.push_back(j);
    timeout = std::min(timeout, c->opts.timeout);
    spinFor = std::min(spinFor, c->spinFor);
  }
  // Announce each communicator's collectives on its host, for a cheap mismatch check.
  thread_local std::vector<uint64_t> tags;
  for (horaComm* c : guard.comms) {
    if (!c->shmWorld) continue;
    tags.clear();
    core::Job* first = nullptr;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (calls[i].first != c || calls[i].second.kind == coll::Kind::Send || calls[i].second.kind == coll::Kind::Recv)
        continue;
      tags.push_back(programs[i].tag);
      if (!first) first = &jobs[i];
    }
    if (!first) continue;
    first->callNo = ++c->collectives;
    first->callTag = coll::groupTag(tags);
    c->shmWorld->announce(first->callNo, first->callTag);
  }
  try {
    executor.run(jobs, timeout, spinFor);
    for (const Deferred& d : deferred) memcpy(d.to, d.from, d.bytes);
  } catch (const Error& e) {
    // Every communicator of the group may have half-done work: all of them stop.
    for (horaComm* c : guard.comms)
      if (!c->aborting.load()) c->fail(e);
    throw;
  }
}

}  // namespace hora
