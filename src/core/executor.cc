#include "core/executor.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "base/error.h"
#include "base/host.h"
#include "base/socket.h"

namespace hora::core {

bool Executor::ready(uint32_t g) const {
  const Op& o = op(g);
  uint32_t b = base_[refs_[g].job];
  for (int32_t d : o.dep)
    if (d >= 0 && !done_[b + static_cast<uint32_t>(d)]) return false;
  if (o.ndepList) {
    const std::vector<int32_t>& list = jobs_->at(refs_[g].job).program->depLists;
    for (uint32_t i = 0; i < o.ndepList; ++i) {
      int32_t d = list[o.depList + i];
      if (d >= 0 && !done_[b + static_cast<uint32_t>(d)]) return false;
    }
  }
  return true;
}

bool Executor::drainEngines() {
  bool any = false;
  for (ComputeEngine* e : engines_) {
    if (!e->busy()) continue;
    completed_.clear();
    any |= e->progress(completed_);
    for (transport::Cookie c : completed_) {
      done_[c] = 1;
      ++ndone_;
    }
  }
  return any;
}

ComputeEngine& Executor::engineOf(uint32_t g) const {
  const Job& job = jobs_->at(refs_[g].job);
  if (op(g).action.engine == Engine::Copies) {
    if (!job.copies) fail(Errc::Internal, "a program copies device memory where its job has no copy engine");
    return *job.copies;
  }
  ComputeEngine* e = job.engine;
  return e ? *e : const_cast<CpuEngine&>(cpu_);
}

// A finished message: a receive's action is posted to its engine, which completes the op.
void Executor::complete(uint32_t g) {
  const Op& o = op(g);
  if (o.kind == OpKind::Recv && o.action.active && o.action.count) {
    engineOf(g).post(o.action, *jobs_->at(refs_[g].job).program, g);
    return;
  }
  done_[g] = 1;
  ++ndone_;
}

void Executor::copyRemote(uint32_t g) {
  const Job& job = jobs_->at(refs_[g].job);
  const Op& o = op(g);
  // The member's word, read once (its wait has ordered it before this read) and checked before
  // it is used: it must describe the very chunk and length this rank expects.
  transport::SharedStage::Published seen;
  memcpy(&seen, o.action.src0, sizeof seen);
  const std::string& who = job.stage->memberName(o.peer);
  if (seen.chunk != o.value || seen.bytes != o.total || seen.put > seen.bytes || o.offset > o.total ||
      o.bytes > o.total - o.offset)
    fail(Errc::Remote, "%s published %llu bytes of chunk %llu for this rank to %s, where it expects %llu bytes of chunk %llu%s",
         who.c_str(), static_cast<unsigned long long>(seen.bytes), static_cast<unsigned long long>(seen.chunk),
         o.kind == OpKind::Fetch ? "read" : "write", static_cast<unsigned long long>(o.total),
         static_cast<unsigned long long>(o.value), callOf(job).c_str());
  // A Fetch leaves the tail that the member writes into this rank's buffer itself.
  const uint64_t end = o.kind == OpKind::Fetch ? std::min(o.offset + o.bytes, o.total - seen.put) : o.offset + o.bytes;
  if (end <= o.offset) return;
  try {
    if (o.kind == OpKind::Fetch) job.stage->readMember(o.peer, seen.address + o.offset, o.buf, end - o.offset);
    else job.stage->writeMember(o.peer, (seen.result ? seen.result : seen.address) + o.offset, o.buf, end - o.offset);
  } catch (const Error& e) {
    throwPublishedCause(&job);  // a member that failed first says why
    throw Error(e.code(), std::string(e.what()) + callOf(job));
  }
}

void Executor::checkCall(const Job& j, int only) {
  if (!j.stage || !j.callTag) return;
  uint64_t theirs = 0;
  int p = j.stage->mismatch(j.callNo, j.callTag, &theirs, only);
  if (p >= 0)
    fail(Errc::InvalidUsage, "mismatched calls: %s is in %s, this rank in %s", j.stage->memberName(p).c_str(),
         transport::describeTag(theirs).c_str(), transport::describeTag(j.callTag).c_str());
}

void Executor::enqueue(std::vector<CounterQueue>& qs, size_t& n, const transport::SharedStage* st, int counter,
                       uint32_t g) {
  size_t qi = 0;
  while (qi < n && !(qs[qi].stage == st && qs[qi].counter == counter)) ++qi;
  if (qi == n) {
    if (qs.size() <= n) qs.emplace_back();
    CounterQueue& q = qs[n++];
    q.stage = st;
    q.counter = counter;
    q.ops.clear();
    q.next = 0;
  }
  qs[qi].ops.push_back(g);
}

bool Executor::armWaits() {
  bool sleep = true, blocked = false;
  Errc relayed = Errc::Success;
  std::string gone;
  for (const Job& j : *jobs_) checkCall(j);
  for (size_t qi = 0; qi < nwaits_; ++qi) {
    const CounterQueue& wq = waits_[qi];
    if (wq.atEnd()) continue;
    // Once per stage: ask to be woken, and watch the peers.
    bool first = true;
    for (size_t k = 0; k < qi; ++k) first &= waits_[k].atEnd() || waits_[k].stage != wq.stage;
    if (first) {
      Errc r = Errc::Success;
      std::string why = wq.stage->arm(-1, &r, fds_);
      if (gone.empty()) {
        gone = why;
        relayed = r;
      }
    }
    // After arming: a post that came just before is seen here, one that comes after rings.
    if (ready(wq.head())) {
      if (waitSatisfied(wq.head())) sleep = false;
      else blocked = true;
    }
  }
  // A peer posts before it leaves: only when this rank waits for a post that has not come is
  // a peer's leaving an error.
  if (sleep && blocked && !gone.empty()) {
    disarmWaits();
    peerStopped(gone, relayed);
  }
  return sleep;
}

void Executor::disarmWaits() {
  for (size_t qi = 0; qi < nwaits_; ++qi)
    if (!waits_[qi].atEnd()) waits_[qi].stage->disarm();
}

milliseconds Executor::holdFor(milliseconds timeout) {
  // The cause, if a rank waited for knows it, arrives within moments of that rank's own
  // timeout, which came at about the same time as this one.
  return std::min(timeout, milliseconds(10000));
}

void Executor::checkStrays() const {
  for (size_t ji = 0; ji < jobs_->size(); ++ji) {
    const Job& j = (*jobs_)[ji];
    if (!j.program->call) continue;
    bool first = true;  // once per communicator
    for (size_t k = 0; k < ji; ++k) first &= (*jobs_)[k].conns != j.conns || !(*jobs_)[k].program->call;
    if (!first) continue;
    for (int p = 0; p < j.nranks; ++p) {
      transport::Connection* c = j.conns[p];
      uint16_t call = 0;
      uint64_t tag = 0;
      if (c && j.earlier) {  // the earlier calls' checks first: they come first on the link
        const std::string why = j.earlier(j.earlierCtx, c, p);
        if (!why.empty()) fail(Errc::InvalidUsage, "%s", why.c_str());
      }
      if (!c || !c->pendingFrame(&call, &tag) || !call) continue;
      // Of this call's number (a later call's is left alone), and no job of it has that tag.
      const Job* mine = nullptr;
      bool known = false;
      for (const Job& o : *jobs_)
        if (o.conns == j.conns && o.program->call == call) {
          if (!mine) mine = &o;
          known |= o.program->tag == tag;
        }
      if (mine && !known)
        fail(Errc::InvalidUsage, "mismatched calls: %s is in %s, this rank in %s (call #%u of the communicator; its "
             "message came where this rank expects none)", c->peerName().c_str(), transport::describeTag(tag).c_str(),
             transport::describeTag(mine->program->tag).c_str(), call);

    }
  }
}

bool Executor::releaseHeld() {
  bool any = false;
  for (const Queue& q : queues_) any |= q.conn->releaseHeld();
  return any;
}

bool Executor::heldOut() const {
  for (const Job& j : *jobs_)
    if (j.flushHeld && j.heldOn && j.heldOn->busy()) return false;
  return true;
}

bool Executor::holding() const {
  for (const Queue& q : queues_)
    if (q.conn->holding()) return true;
  return false;
}

void Executor::block(milliseconds most) {
  // What a link holds back (call checks) goes out once this rank has been asleep for a while:
  // the peer may be waiting for it, if only in the rare case where it ran a whole window of
  // calls ahead (comm/call_check.h). Most waits end sooner, and a write at every one of them
  // cost more than the checks' own batches (a rank that waits at every call wrote at every call).
  if (holding()) {
    const Clock::time_point now = Clock::now();
    if (!holdingAsleep_) {
      holdingAsleep_ = true;
      heldSince_ = now;
    }
    const auto held = std::chrono::duration_cast<milliseconds>(now - heldSince_);
    if (held >= kHoldAsleep) {
      holdingAsleep_ = false;
      if (releaseHeld()) return;
    } else {
      most = std::min(most, kHoldAsleep - held);
    }
  }
  markWaits();
  // Stuck for a while: a message that waits where this call expects none, of this call's
  // number but another collective, is a peer in another call (whose pattern of messages may
  // never meet this one's: a hang, not a mismatch found by a receive).
  if (++idleBlocks_ >= 3) {
    const Clock::time_point now = Clock::now();  // at most every 250 ms: a peek per link
    if (now - lastStrayCheck_ >= milliseconds(250)) {
      lastStrayCheck_ = now;
      checkStrays();
    }
  }
  fds_.clear();
  bool sleep = armWaits();
  for (const Queue& q : queues_)
    if (q.conn->busy()) {
      sleep &= q.conn->armWakeup();  // may throw: a peer is gone
      q.conn->addPollFds(fds_);
    }
  for (const Job& j : *jobs_)
    if (j.wakeFd >= 0) fds_.push_back(pollfd{j.wakeFd, POLLIN, 0});
  // A device engine's work finishes without a descriptor to wake this rank: look again soon.
  const bool engineBusy = std::any_of(engines_.begin(), engines_.end(), [](ComputeEngine* e) { return e->busy(); });
  if (sleep && engineBusy) {
    pollFor(fds_.data(), fds_.size(), 0);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  } else if (sleep) {
    pollFor(fds_.data(), fds_.size(), static_cast<int>(most.count()));
  }
  for (const Queue& q : queues_)
    if (q.conn->busy()) q.conn->disarmWakeup();
  disarmWaits();
}

Executor::Queue& Executor::queueOf(transport::Connection* c, const Job& job, int peer, size_t& nq) {
  size_t qi = 0;
  while (qi < nq && queues_[qi].conn != c) ++qi;
  if (qi < nq) return queues_[qi];
  if (queues_.size() <= nq) {
    queues_.emplace_back();
    if (spareLists_.size() >= 2) {
      queues_.back().sends = std::move(spareLists_.back());
      spareLists_.pop_back();
      queues_.back().recvs = std::move(spareLists_.back());
      spareLists_.pop_back();
    }
  }
  Queue& q = queues_[nq++];
  q.conn = c;
  q.job = &job;
  q.peer = peer;
  q.sends.clear();
  q.recvs.clear();
  q.nextSend = q.nextRecv = 0;
  return q;
}

void Executor::queueMessage(uint32_t g, size_t& nq) {
  const Job& job = jobs_->at(refs_[g].job);
  const Op& o = op(g);
  Queue& q = queueOf(job.conns[o.peer], job, o.peer, nq);
  (o.kind == OpKind::Send ? q.sends : q.recvs).push_back(g);
}

void Executor::run(const std::vector<Job>& jobs, milliseconds timeout, std::chrono::microseconds spinFor) {
  // Each stage says this rank runs a call, for as long as it does (SharedStage::runs). The calls
  // of a group are mostly of one communicator: a stage is marked once.
  struct Running {
    const std::vector<Job>& jobs;
    explicit Running(const std::vector<Job>& js) : jobs(js) { mark(true); }
    ~Running() { mark(false); }
    void mark(bool on) const {
      for (size_t i = 0; i < jobs.size(); ++i) {
        const transport::SharedStage* st = jobs[i].stage;
        bool seen = !st;
        for (size_t k = 0; k < i && !seen; ++k) seen = jobs[k].stage == st;
        if (!seen) st->running(on);
      }
    }
  } running(jobs);
  jobs_ = &jobs;
  base_.clear();
  refs_.clear();
  locals_.clear();
  deferred_.clear();
  checked_.assign(jobs.size(), 0);
  nsignals_ = nwaits_ = 0;
  ndone_ = 0;
  cpu_.reset();
  engines_.clear();
  for (const Job& j : jobs) {
    ComputeEngine* e = j.engine ? j.engine : &cpu_;
    if (std::find(engines_.begin(), engines_.end(), e) == engines_.end()) engines_.push_back(e);
    if (j.copies && std::find(engines_.begin(), engines_.end(), j.copies) == engines_.end())
      engines_.push_back(j.copies);
  }
  size_t nq = 0;
  for (uint32_t j = 0; j < jobs.size(); ++j) {
    base_.push_back(static_cast<uint32_t>(refs_.size()));
    const Program& p = *jobs[j].program;
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      refs_.push_back(Ref{j, i});
      const Op& o = p.ops[i];
      uint32_t g = static_cast<uint32_t>(refs_.size() - 1);
      if (o.kind == OpKind::Local) {
        locals_.push_back(g);
        continue;
      }
      if (o.kind == OpKind::Fetch || o.kind == OpKind::Put) {
        if (!jobs[j].stage || jobs[j].stage->memberAccess() == transport::SharedStage::Access::None || o.peer < 0 ||
            o.peer >= jobs[j].stage->size())
          fail(Errc::Internal, "a program reads a stage member's memory where the stage cannot");
        locals_.push_back(g);  // run as it becomes ready, as an action on this thread
        continue;
      }
      if (o.kind == OpKind::Signal || o.kind == OpKind::Wait) {
        if (!jobs[j].stage || o.counter < 0 || o.counter >= transport::SharedStage::kCounters)
          fail(Errc::Internal, "a program uses shared-stage counters it does not have");
        if (o.kind == OpKind::Signal) enqueue(signals_, nsignals_, jobs[j].stage, o.counter, g);
        else enqueue(waits_, nwaits_, jobs[j].stage, o.counter, g);
        continue;
      }
      if (o.peer < 0 || o.peer >= jobs[j].nranks || !jobs[j].conns[o.peer])
        fail(Errc::Internal, "a program addresses rank %d, which has no connection", o.peer);
      (jobs[j].pointToPoint ? queueMessage(g, nq) : deferred_.push_back(g));
    }
  }
  // Point-to-point traffic and collective traffic apart on every link, as NCCL's channels keep
  // them: each link carries the group's sends and receives first, then its collectives'
  // messages, on every rank alike, whatever order the caller gave them in (a link's messages
  // are matched in order). Neither waits on the other: a send or receive depends on nothing
  // of a collective, so it goes first at once.
  for (uint32_t g : deferred_) queueMessage(g, nq);
  deferred_.clear();
  // A link holding messages back gets a queue of its own, if the call does not use it: they go
  // out when this rank waits (block()), and a flush waits for them.
  flushing_ = false;
  for (const Job& j : jobs) {
    flushing_ |= j.flushHeld;
    if (!j.heldOn) continue;
    if (j.flushHeld) j.heldOn->releaseHeld();
    if (j.heldOn->holding() || j.heldOn->busy()) queueOf(j.heldOn, j, j.heldPeer, nq);  // (busy: released, not yet out)
  }
  while (queues_.size() > nq) {
    spareLists_.push_back(std::move(queues_.back().sends));
    spareLists_.push_back(std::move(queues_.back().recvs));
    queues_.pop_back();
  }
  const size_t total = refs_.size();
  done_.assign(total, 0);
  if (total == 0 && heldOut()) return;
  try {
    loop(jobs, timeout, spinFor);
  } catch (Error& e) {
    // The caller's text says the first wait; the log and the dump get every one.
    if (e.detail().empty() && !dynamic_cast<const PeerFailure*>(&e)) e.setDetail(describeWait(true));
    throw;
  }
}

void Executor::loop(const std::vector<Job>& jobs, milliseconds timeout, std::chrono::microseconds spinFor) {
  const size_t total = refs_.size();
  Waiter w(timeout, nullptr, [this] { return describeWait(); }, spinFor);
  // A timeout held back: a rank that waits only on ranks of its own host, none of them stopped
  // or gone, times out at about the moment the one it waits for does, and that one may know
  // the cause (the rank that fell silent, on this host or across the network). So the wait
  // goes on, for at most another timeout, for that rank's failure to arrive (its abort frame,
  // its failure text in the stage: a PeerFailure that names the cause); only if none does is
  // the timeout reported. Progress in the meantime ends the hold. Ranks waited for that have not
  // begun the call (absentPeers) know no cause: they are named at once.
  idleBlocks_ = 0;
  holdingAsleep_ = false;
  marked_ = false;
  std::exception_ptr heldTimeout;
  Clock::time_point heldUntil{};
  size_t doneAtScan = SIZE_MAX;  // local ops become ready only when something completes
  for (;;) {
    bool moved = false;
    // Post: messages whose dependencies are done, in each direction's order.
    for (Queue& q : queues_) {
      while (q.nextSend < q.sends.size() && ready(q.sends[q.nextSend])) {
        uint32_t g = q.sends[q.nextSend++];
        const Op& o = op(g);
        const Program& pr = *jobs[refs_[g].job].program;
        q.conn->setCall(o.counter >= 0 ? static_cast<uint16_t>(o.counter) : pr.call);
        q.conn->postSend(o.buf, o.bytes, o.value ? o.value : pr.tag, g);
        moved = true;
      }
      while (q.nextRecv < q.recvs.size() && ready(q.recvs[q.nextRecv])) {
        uint32_t g = q.recvs[q.nextRecv++];
        const Op& o = op(g);
        const Program& pr = *jobs[refs_[g].job].program;
        q.conn->setCall(o.counter >= 0 ? static_cast<uint16_t>(o.counter) : pr.call);
        q.conn->postRecv(o.buf, o.bytes, o.value ? o.value : pr.tag, g);
        moved = true;
      }
    }
    // Post: actions whose dependencies are done.
    const bool scan = doneAtScan != ndone_;
    doneAtScan = ndone_;
    // (In program order: an engine runs what it is given in the order it is given it.)
    if (scan) {
      size_t kept = 0;
      for (size_t i = 0; i < locals_.size(); ++i) {
        const uint32_t g = locals_[i];
        if (!ready(g)) {
          locals_[kept++] = g;
          continue;
        }
        if (op(g).kind == OpKind::Fetch || op(g).kind == OpKind::Put) {
          copyRemote(g);
          done_[g] = 1;
          ++ndone_;
        } else {
          engineOf(g).post(op(g).action, *jobs_->at(refs_[g].job).program, g);
        }
        moved = true;
      }
      locals_.resize(kept);
    }
    // Test and complete: actions.
    moved |= drainEngines();
    // Signals complete as they are posted.
    for (size_t qi = 0; qi < nsignals_; ++qi) {
      CounterQueue& sq = signals_[qi];
      const size_t first = sq.next;
      for (; !sq.atEnd() && ready(sq.head()); ++sq.next) {
        const Op& o = op(sq.head());
        sq.stage->post(o.counter, o.value);
        done_[sq.head()] = 1;
        ++ndone_;
        moved = true;
      }
      // One wake-up for the signals of this pass (on their stage), after the last of them.
      if (sq.next != first) {
        bool later = false;
        for (size_t k = qi + 1; k < nsignals_; ++k)
          later |= signals_[k].stage == sq.stage && !signals_[k].atEnd() && ready(signals_[k].head());
        if (!later) sq.stage->wakeAll();
      }
    }
    // Test and complete: waits.
    for (size_t qi = 0; qi < nwaits_; ++qi)
      for (CounterQueue& wq = waits_[qi]; !wq.atEnd() && ready(wq.head()) && waitSatisfied(wq.head()); ++wq.next) {
        const uint32_t g = wq.head();
        // Every rank has posted, so every rank has announced its call: compare, once a job.
        if (!checked_[refs_[g].job]) {
          checked_[refs_[g].job] = 1;
          checkCall(jobs_->at(refs_[g].job));
        }
        done_[g] = 1;
        ++ndone_;
        moved = true;
      }
    // Test and complete: messages (a receive's action goes to its engine).
    for (Queue& q : queues_) {
      if (!q.conn->busy()) continue;
      completed_.clear();
      try {
        moved |= q.conn->progress(completed_);
      } catch (const PeerFailure&) {
        throw;
      } catch (const Error& e) {
        // A rank of this host whose process is gone or stopped is named as the cause first.
        const bool peerCause = e.code() == Errc::Remote || e.code() == Errc::Timeout;
        if (peerCause) throwPublishedCause();
        const std::string state =
            peerCause && q.job->localProcs ? q.job->localProcs[q.peer].stalled() : std::string();
        throw Error(e.code(), (state.empty() ? "" : q.conn->peerName() + " " + state + ": ") + e.what() +
                                  "; while waiting for " + describeWait());
      }
      for (transport::Cookie c : completed_) complete(c);
    }
    // The actions of the messages that just arrived (the CPU engine has already run them):
    // complete them now, so that what depends on them is posted in the next pass.
    moved |= drainEngines();
    if (ndone_ == total && (!flushing_ || heldOut())) {
      if (std::none_of(engines_.begin(), engines_.end(), [](ComputeEngine* e) { return e->busy(); })) {
        if (marked_) clearMarks();
        return;
      }
      continue;
    }
    if (moved) {
      idleBlocks_ = 0;
      holdingAsleep_ = false;
      if (marked_) clearMarks();
      w.progressed();
      heldTimeout = nullptr;
      continue;
    }
    for (const Job& j : jobs)
      if (j.abortFlag && j.abortFlag->load(std::memory_order_relaxed))
        fail(Errc::InvalidUsage, "the communicator was aborted while waiting for %s", describeWait().c_str());
    if (heldTimeout) {
      if (Clock::now() >= heldUntil) {
        try {
          std::rethrow_exception(heldTimeout);
        } catch (const Error& e) {
          throwPublishedCause();
          const std::string stalled = stalledPeers();
          if (!stalled.empty()) throwPublishedCause();  // published since (as in blockOnCounter)
          if (!stalled.empty()) fail(Errc::Timeout, "%s; %s", stalled.c_str(), e.what());
          throw;
        }
      }
      block(Waiter::kMaxBlock);
      continue;
    }
    try {
      w.idle([this](milliseconds most) { block(most); });
    } catch (const Error& e) {
      if (e.code() != Errc::Timeout) throw;
      // A rank of this host that is stopped or gone is the cause: name it at once (unless it
      // failed first, and said why).
      throwPublishedCause();
      const std::string stalled = stalledPeers();
      if (!stalled.empty()) throwPublishedCause();  // published since (as in blockOnCounter)
      if (!stalled.empty()) fail(Errc::Timeout, "%s; %s", stalled.c_str(), e.what());
      const std::string absent = absentPeers();
      if (!absent.empty()) fail(Errc::Timeout, "%s; %s", absent.c_str(), e.what());
      if (!waitsOnlyLocal()) throw;
      heldTimeout = std::current_exception();
      heldUntil = Clock::now() + holdFor(timeout);
    }
  }
}

}  // namespace hora::core
