// What the executor says when a wait fails or a peer stops: the call a job belongs to, what this
// rank waits for and who is behind, a peer's published cause (core/executor.h).
#include <algorithm>
#include <exception>

#include "base/error.h"
#include "base/host.h"
#include "base/socket.h"
#include "core/executor.h"

namespace hora::core {

// " in AllReduce(count 1024, float, sum) (call #3 on rank 1 of 4)": a job's call, for texts.
std::string Executor::callOf(const Job& j) {
  const uint64_t tag = j.program ? j.program->tag : j.callTag;
  return (tag ? " in " + transport::describeTag(tag) : std::string()) +
         (j.describe ? " (" + j.describe(j.describeCtx) + ")" : std::string());
}

std::string Executor::describeWait(bool full) const {
  // Each wait, and the call it belongs to (said once for the waits of one call in a row).
  std::vector<std::pair<std::string, std::string>> waits;
  for (const Queue& q : queues_) {
    size_t firstRecv = q.nextRecv, firstSend = q.nextSend;
    // The oldest posted but unfinished message in each direction is what we wait for.
    for (size_t i = 0; i < q.nextRecv; ++i)
      if (!done_[q.recvs[i]]) { firstRecv = i; break; }
    for (size_t i = 0; i < q.nextSend; ++i)
      if (!done_[q.sends[i]]) { firstSend = i; break; }
    auto add = [&](const char* what, uint32_t g, const char* dir) {
      waits.emplace_back(format("%s of %zu bytes %s %s", what, op(g).bytes, dir, q.conn->peerName().c_str()),
                         callOf(jobs_->at(refs_[g].job)));
    };
    if (firstRecv < q.nextRecv) add("a message", q.recvs[firstRecv], "from");
    if (firstSend < q.nextSend) add("sending a message", q.sends[firstSend], "to");
  }
  for (size_t qi = 0; qi < nwaits_; ++qi) {
    const CounterQueue& wq = waits_[qi];
    if (wq.atEnd() || !ready(wq.head()) || waitSatisfied(wq.head())) continue;
    waits.emplace_back(behind(*wq.stage, wq.counter, op(wq.head()).value, -1, full ? wq.stage->size() : 1),
                       callOf(jobs_->at(refs_[wq.head()].job)));
  }
  if (waits.empty()) return "this rank's own reductions and copies";
  if (!full) return waits[0].first + waits[0].second;
  std::string s;
  for (size_t i = 0; i < waits.size(); ++i) {
    s += (i ? "; " : "") + waits[i].first;
    if (i + 1 == waits.size() || waits[i + 1].second != waits[i].second) s += waits[i].second;
  }
  return s;
}

std::string Executor::behind(const transport::SharedStage& st, int counter, uint64_t value, int only, int most) {
  std::vector<std::pair<uint64_t, int>> late;
  for (int m = 0; m < st.size(); ++m)
    if (m != st.index() && (only < 0 || m == only) && st.posted(m, counter) < value)
      late.emplace_back(st.posted(m, counter), m);
  std::sort(late.begin(), late.end());
  if (late.empty()) return format("this rank to reach chunk %llu of counter %d of the shared stage",
                                  static_cast<unsigned long long>(value), counter);
  std::string s;
  for (size_t i = 0; i < late.size() && i < static_cast<size_t>(std::max(most, 1)); ++i)
    s += format("%s%s to post chunk %llu of counter %d of the shared stage (it has posted %llu)", i ? "; " : "",
                st.memberName(late[i].second).c_str(), static_cast<unsigned long long>(value), counter,
                static_cast<unsigned long long>(late[i].first));
  if (late.size() > static_cast<size_t>(std::max(most, 1)))
    s += format(" (and %zu more)", late.size() - static_cast<size_t>(std::max(most, 1)));
  return s;
}

std::string Executor::stalledMembers(const Job& job, int counter, uint64_t value, int only) {
  const transport::SharedStage& st = *job.stage;
  std::string s;
  for (int m = 0; m < st.size(); ++m) {
    if (m == st.index() || (only >= 0 && m != only) || st.posted(m, counter) >= value || !job.localProcs) continue;
    const std::string why = job.localProcs[st.ranks()[static_cast<size_t>(m)]].stalled();
    if (!why.empty()) s += (s.empty() ? "" : "; ") + st.memberName(m) + " " + why;
  }
  return s;
}

namespace {
std::string notBegun(const transport::SharedStage& st, int m, uint64_t call) {
  return format("%s has not begun call #%llu and runs none (its last: #%llu)", st.memberName(m).c_str(),
                static_cast<unsigned long long>(call), static_cast<unsigned long long>(st.lastCall(m)));
}
}  // namespace

std::string Executor::absentMembers(const Job& job, int counter, uint64_t value, int only) {
  if (!job.stage || job.callNo == 0) return "";
  const transport::SharedStage& st = *job.stage;
  std::string s;
  for (int m = 0; m < st.size(); ++m) {
    if (m == st.index() || (only >= 0 && m != only) || st.posted(m, counter) >= value) continue;
    if (st.lastCall(m) >= job.callNo || st.runs(m)) return "";
    s += (s.empty() ? "" : "; ") + notBegun(st, m, job.callNo);
  }
  return s;
}

std::string Executor::absentPeers() const {
  std::string s;
  for (const Queue& q : queues_) {
    if (!q.conn->busy()) continue;
    const Job& j = *q.job;
    if (!j.stage || j.callNo == 0) return "";
    const std::vector<int>& ranks = j.stage->ranks();
    const auto it = std::find(ranks.begin(), ranks.end(), q.peer);
    if (it == ranks.end()) return "";
    const int m = static_cast<int>(it - ranks.begin());
    if (j.stage->lastCall(m) >= j.callNo || j.stage->runs(m)) return "";
    const std::string why = notBegun(*j.stage, m, j.callNo);
    if (s.find(why) == std::string::npos) s += (s.empty() ? "" : "; ") + why;
  }
  for (size_t qi = 0; qi < nwaits_; ++qi) {
    const CounterQueue& wq = waits_[qi];
    if (wq.atEnd() || !ready(wq.head()) || waitSatisfied(wq.head())) continue;
    const std::string why = absentMembers(jobs_->at(refs_[wq.head()].job), wq.counter, op(wq.head()).value, -1);
    if (why.empty()) return "";
    if (s.find(why) == std::string::npos) s += (s.empty() ? "" : "; ") + why;
  }
  return s;
}

std::string Executor::stalledPeers() const {
  std::string s;
  for (const Queue& q : queues_) {
    if (!q.conn->busy() || !q.job->localProcs) continue;
    const std::string why = q.job->localProcs[q.peer].stalled();
    if (!why.empty() && s.find(q.conn->peerName()) == std::string::npos)
      s += (s.empty() ? "" : "; ") + q.conn->peerName() + " " + why;
  }
  for (size_t qi = 0; qi < nwaits_; ++qi) {
    const CounterQueue& wq = waits_[qi];
    if (wq.atEnd() || !ready(wq.head()) || waitSatisfied(wq.head())) continue;
    const std::string why = stalledMembers(jobs_->at(refs_[wq.head()].job), wq.counter, op(wq.head()).value, -1);
    if (!why.empty() && s.find(why) == std::string::npos) s += (s.empty() ? "" : "; ") + why;
  }
  return s;
}

void Executor::throwPublishedCause(const Job* only) {
  std::vector<pollfd> unused;
  for (size_t ji = 0; jobs_ && ji < (only ? 1 : jobs_->size()); ++ji) {
    const Job& j = only ? *only : (*jobs_)[ji];
    if (!j.stage) continue;
    Errc relayed = Errc::Success;
    unused.clear();
    const std::string why = j.stage->arm(-1, &relayed, unused);
    j.stage->disarm();
    if (relayed != Errc::Success) throw PeerFailure(why, relayed);
  }
  if (only) return;
  for (const Queue& q : queues_) {
    if (!q.conn->busy() || !q.job->localProcs || !q.job->localProcs[q.peer]) continue;
    try {
      q.conn->armWakeup();  // reads a gone peer's published failure
    } catch (const PeerFailure&) {
      q.conn->disarmWakeup();
      throw;
    } catch (const Error&) {
      // A symptom (the peer is gone, without a word): the caller names it.
    }
    q.conn->disarmWakeup();
  }
}

bool Executor::waitsOnlyLocal() const {
  bool any = false;
  for (const Queue& q : queues_) {
    if (!q.conn->busy()) continue;
    if (!q.job->localProcs || !q.job->localProcs[q.peer]) return false;
    any = true;
  }
  for (size_t qi = 0; qi < nwaits_; ++qi)
    any |= !waits_[qi].atEnd();
  return any;
}

bool Executor::waitSatisfied(uint32_t g) const {
  const Op& o = op(g);
  return jobs_->at(refs_[g].job).stage->reached(o.counter, o.value, -1);
}

void Executor::peerStopped(const std::string& why, Errc relayed) {
  if (relayed != Errc::Success) throw PeerFailure(why, relayed);  // a failed peer's own text and code
  fail(Errc::Remote, "%s", why.c_str());
}

void Executor::awaitCounter(const Job& job, int counter, uint64_t value, int only, bool check, milliseconds timeout,
                            std::chrono::microseconds spinFor) {
  const transport::SharedStage& st = *job.stage;
  WaitMark* const mark = job.mark;
  if (mark) mark->stageWaits.store(mark->stageWaits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (!st.reached(counter, value, only)) blockOnCounter(job, counter, value, only, timeout, spinFor);
  if (mark && mark->what.load(std::memory_order_relaxed) != WaitMark::None) mark->clear();  // marked: it blocked
  if (check) checkCall(job, only);
}

void Executor::blockOnCounter(const Job& job, int counter, uint64_t value, int only, milliseconds timeout,
                              std::chrono::microseconds spinFor) {
  const transport::SharedStage& st = *job.stage;
  WaitMark* const mark = job.mark;
  // A timeout while the members behind run is held back once, for at most another timeout:
  // one of them may be waiting on the rank that really stopped, and will say so (its failure
  // text, read by arm()). A member that is stopped or gone is named at once, and so are members
  // that have not begun the call (absentMembers: they wait on nothing of it).
  std::exception_ptr held;
  while (!st.reached(counter, value, only)) {
    // The description captures one pointer, so that std::function keeps it without allocating.
    struct What {
      const Job& job;
      int counter;
      uint64_t value;
      int only;
    } what{job, counter, value, only};
    Waiter wt(timeout, job.abortFlag, [w = &what] {
      return behind(*w->job.stage, w->counter, w->value, w->only) + callOf(w->job);
    }, spinFor);
    try {
      while (!st.reached(counter, value, only))
        wt.idle([&](milliseconds most) {
          checkCall(job);
          if (mark) markStage(*mark, st, counter, value, only, mark->stageWaits.load(std::memory_order_relaxed), 0);
          fds_.clear();
          Errc relayed = Errc::Success;
          const std::string gone = st.arm(only, &relayed, fds_);
          if (job.wakeFd >= 0) fds_.push_back(pollfd{job.wakeFd, POLLIN, 0});
          // A peer posts before it leaves: look again before taking its leaving for an error.
          if (!st.reached(counter, value, only)) {
            if (!gone.empty()) {
              st.disarm();
              peerStopped(gone, relayed);
            }
            pollFor(fds_.data(), fds_.size(), static_cast<int>(most.count()));
          }
          st.disarm();
        });
    } catch (Error& e) {
      // The caller's text names the rank furthest behind; the log and the dump get them all.
      if (e.detail().empty() && !dynamic_cast<const PeerFailure*>(&e))
        e.setDetail(behind(st, counter, value, only, st.size()) + callOf(job));
      // A cause relayed from the rank waited for is the answer, whatever its code (a timeout of
      // its own, say, while this rank held its own back): not this rank's timeout again.
      if (e.code() != Errc::Timeout || dynamic_cast<const PeerFailure*>(&e)) throw;
      throwPublishedCause(&job);
      const std::string stalled = stalledMembers(job, counter, value, only);
      if (!stalled.empty()) {
        // A rank that failed publishes why before it exits: one seen gone now may have done so
        // since the look above (both timed out at about the same moment).
        throwPublishedCause(&job);
        Error named(Errc::Timeout, stalled + "; " + e.what());
        named.setDetail(e.detail());
        throw named;
      }
      if (held || !job.localProcs) std::rethrow_exception(held ? held : std::current_exception());
      const std::string absent = absentMembers(job, counter, value, only);
      if (!absent.empty()) {
        Error named(Errc::Timeout, absent + "; " + e.what());
        named.setDetail(e.detail());
        throw named;
      }
      held = std::current_exception();
      timeout = holdFor(timeout);
    }
  }
}

}  // namespace hora::core
