// The executor's marks for the flight recorder (wait_mark.h): what each job of a blocked call
// waits for, written when the executor is about to block.
#include "core/wait_mark.h"

#include "core/executor.h"
#include "transports/stage.h"

namespace hora::core {

void markStage(WaitMark& mark, const transport::SharedStage& st, int counter, uint64_t value, int only, uint32_t step,
               uint32_t steps) {
  int late = -1;
  for (int m = 0; m < st.size(); ++m)
    if (m != st.index() && (only < 0 || m == only) && st.posted(m, counter) < value &&
        (late < 0 || st.posted(m, counter) < st.posted(late, counter)))
      late = m;
  if (late >= 0) mark.set(WaitMark::Stage, st.ranks()[static_cast<size_t>(late)], step, steps, wallMicros());
}

void Executor::markWaits() {
  jobMarked_.assign(jobs_->size(), 0);
  bool any = false;
  for (const Job& j : *jobs_) any |= j.mark != nullptr;
  if (!any) return;
  const int64_t now = wallMicros();
  // The k-th of a job's ops in list (k from 1), and how many of them it has.
  auto position = [this](const std::vector<uint32_t>& list, size_t i, uint32_t* of) {
    const uint32_t job = refs_[list[i]].job;
    uint32_t k = 0, n = 0;
    for (size_t x = 0; x < list.size(); ++x)
      if (refs_[list[x]].job == job) {
        ++n;
        if (x <= i) ++k;
      }
    *of = n;
    return k;
  };
  auto mark = [&](uint32_t g, WaitMark::What what, int peer, const std::vector<uint32_t>& list, size_t i) {
    const uint32_t job = refs_[g].job;
    WaitMark* m = (*jobs_)[job].mark;
    if (!m || jobMarked_[job]) return;
    jobMarked_[job] = 1;
    uint32_t of = 0;
    const uint32_t k = position(list, i, &of);
    m->set(what, peer, k, of, now);
    marked_ = true;
  };
  // A receive not yet in first (what a peer has not sent), then a send that has not left.
  for (const Queue& q : queues_)
    for (size_t i = 0; i < q.nextRecv; ++i)
      if (!done_[q.recvs[i]]) {
        mark(q.recvs[i], WaitMark::Recv, q.peer, q.recvs, i);
        break;
      }
  for (const Queue& q : queues_)
    for (size_t i = 0; i < q.nextSend; ++i)
      if (!done_[q.sends[i]]) {
        mark(q.sends[i], WaitMark::Send, q.peer, q.sends, i);
        break;
      }
  for (size_t qi = 0; qi < nwaits_; ++qi) {
    const CounterQueue& wq = waits_[qi];
    if (wq.atEnd() || !ready(wq.head()) || waitSatisfied(wq.head())) continue;
    const uint32_t job = refs_[wq.head()].job;
    WaitMark* m = (*jobs_)[job].mark;
    if (!m || jobMarked_[job]) continue;
    jobMarked_[job] = 1;
    uint32_t of = 0;
    const uint32_t k = position(wq.ops, wq.next, &of);
    markStage(*m, *wq.stage, wq.counter, op(wq.head()).value, -1, k, of);
    marked_ = true;
  }
}

void Executor::clearMarks() {
  for (const Job& j : *jobs_)
    if (j.mark) j.mark->clear();
  marked_ = false;
}

}  // namespace hora::core
