// The progress engine: runs the programs of one call (or one group of calls, across any
// number of communicators) to completion on the calling thread. It posts each op once its
// dependencies are done (a message to its connection, an action to its compute engine, a signal
// to its shared stage), tests what is in flight without blocking, completes what has finished,
// and when nothing moves waits through the one Waiter (base/wait.h): spin, yield, then poll()
// on what the busy connections, the stages and the communicators' wake fds offer. It knows no
// particular transport. A peer's failure, a timeout without progress or an abort throws
// hora::Error.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "base/host.h"

#include "base/wait.h"
#include "core/compute.h"
#include "core/program.h"
#include "core/wait_mark.h"
#include "transports/stage.h"
#include "transports/transport.h"

namespace hora::core {

struct Job {
  const Program* program = nullptr;
  transport::Connection* const* conns = nullptr;  // indexed by peer rank
  int nranks = 0;
  const std::atomic<bool>* abortFlag = nullptr;
  int wakeFd = -1;
  std::string (*describe)(const void* ctx) = nullptr;  // "AllReduce #3 on rank 1", for errors
  const void* describeCtx = nullptr;
  const transport::SharedStage* stage = nullptr;  // for Signal and Wait ops
  // By peer rank, the process of a rank of this host, else an empty one (null: none known). A
  // wait that times out names such a peer as stopped or gone (from its pidfd and its state in
  // /proc), and holds its timeout back while it waits on such peers alone and they run
  // (Executor::run).
  const ProcessRef* localProcs = nullptr;
  ComputeEngine* engine = nullptr;  // for actions; null: the executor's CPU engine
  ComputeEngine* copies = nullptr;  // for the actions of Engine::Copies (device_copies.h)
  // With a stage: the collective call announced there (SharedStage::announce), checked against
  // the peers' when this job waits; tag 0 for none.
  uint64_t callNo = 0, callTag = 0;
  // When stuck: the frames waiting from `peer` where no receive wants them, against what this
  // rank still expects of earlier calls (its call checks not yet received, comm/call_check.h),
  // taking those that agree: the mismatch's text, or "" (null: nothing expected).
  std::string (*earlier)(void* ctx, transport::Connection* conn, int peer) = nullptr;
  void* earlierCtx = nullptr;
  // Where the flight recorder learns what this job waits for (null: not recorded).
  WaitMark* mark = nullptr;
  // A send or receive (horaSend, horaRecv): on each link its messages go before those of the
  // group's collectives, on every rank alike.
  bool pointToPoint = false;
  // The link (to rank heldPeer) where this job's communicator may have messages held back:
  // released once this rank has slept kHoldAsleep in a wait, as a peer may wait for them
  // (Executor::block). With flushHeld, the
  // run ends only once they are out (before the link closes).
  transport::Connection* heldOn = nullptr;
  int heldPeer = -1;
  bool flushHeld = false;
};

class Executor {
 public:
  // Runs all jobs at once until every op of every job has completed.
  void run(const std::vector<Job>& jobs, milliseconds timeout,
           std::chrono::microseconds spinFor = std::chrono::microseconds(0));
  // Without a program: waits as run() would (spinning, yielding, then asleep) until every
  // member of job.stage, this one included (or only member `only`, if not -1), has set
  // `counter` to at least `value`. A dead or stopped peer, the abort flag or
  // the timeout throw. With `check`, the job's call is then checked against the peers' (as
  // run() checks it after its first wait).
  void awaitCounter(const Job& job, int counter, uint64_t value, int only, bool check, milliseconds timeout,
                    std::chrono::microseconds spinFor);

  // How long a timeout is held back for the cause to arrive: the timeout, at most 10 s.
  static milliseconds holdFor(milliseconds timeout);

 private:
  struct Queue {
    transport::Connection* conn;
    const Job* job;  // the first job that uses it
    int peer;
    std::vector<uint32_t> sends, recvs;  // global op indices, in program order
    size_t nextSend = 0, nextRecv = 0;
  };
  struct Ref {
    uint32_t job, op;
  };

  // Every message in flight is with a rank of this host (Job::localProcs), and every stage
  // wait is on one (a stage is always within a host).
  bool waitsOnlyLocal() const;
  // The waited-for ranks of this host that are stopped or gone ("rank 2 (...) is stopped ..."),
  // "" if none.
  std::string stalledPeers() const;
  // A rank of this host that failed published why (its failure record in the stage, the state
  // its connection reads) before it exited: that first cause wins over what /proc says of its
  // process now (gone, or another process under its pid). Throws it as that peer's failure, if
  // one of `jobs` (or, with none given, of the running call) has it; returns otherwise. Looked
  // at before a timeout names a stopped or gone rank of this host.
  void throwPublishedCause(const Job* only = nullptr);
  const Op& op(uint32_t g) const { return jobs_->at(refs_[g].job).program->ops[refs_[g].op]; }
  bool ready(uint32_t g) const;
  // awaitCounter's wait, once the counter is found short (out of line: the common call finds it
  // reached and pays for none of it).
  void blockOnCounter(const Job& job, int counter, uint64_t value, int only, milliseconds timeout,
                      std::chrono::microseconds spinFor);
  void copyRemote(uint32_t g);  // a Fetch or Put op, now, on this thread
  void complete(uint32_t g);
  ComputeEngine& engineOf(uint32_t g) const;
  bool drainEngines();  // completes the ops of finished actions; returns whether there were any
  // What this rank waits for. Short (a caller's text): the first wait, the rank furthest behind
  // and the call, once, with how many more waits there are; full (the WARN log and the dump):
  // every wait and every rank behind, each call named once.
  std::string describeWait(bool full = false) const;
  static std::string callOf(const Job& j);
  // The queue of link c (made if new, for job's messages to `peer`; nq: the queues in use).
  Queue& queueOf(transport::Connection* c, const Job& job, int peer, size_t& nq);
  // Appends message op g to the queue of its link (made if new; nq: the queues in use).
  void queueMessage(uint32_t g, size_t& nq);
  std::vector<uint32_t> deferred_;  // collective messages, queued after the point-to-point ones
  // run()'s loop over the prepared queues, until every op is done or one fails.
  void loop(const std::vector<Job>& jobs, milliseconds timeout, std::chrono::microseconds spinFor);
  // The members of a stage behind on counter (below value), the furthest behind first, at most
  // `most` of them, as "rank 3 (host, pid 9) to post chunk 9 of counter 0 of the shared stage
  // (it has posted 7)".
  static std::string behind(const transport::SharedStage& st, int counter, uint64_t value, int only, int most = 1);
  static std::string stalledMembers(const Job& job, int counter, uint64_t value, int only);
  // The members behind on counter (below value; all, or only `only`) when not one of them has
  // begun job's call or runs another ("rank 2 (...) has not begun call #7 and runs none (its
  // last: #6)"), else "": such a rank waits on nothing of the communicator, so no cause of its
  // own will come from it and a timeout is not held back for one (one stuck in an earlier call
  // may be waiting on the culprit). "" too where the job's call has no number.
  static std::string absentMembers(const Job& job, int counter, uint64_t value, int only);
  // As absentMembers over everything this rank waits on in loop(): "" if any of it is with a
  // rank that has begun the call (or whose call is not known).
  std::string absentPeers() const;
  void block(milliseconds most);
  // Before blocking: each job's mark says what it waits for (the oldest message in flight with
  // a peer, else the stage member furthest behind); cleared when anything moves.
  void markWaits();
  void clearMarks();
  bool marked_ = false;
  std::vector<uint8_t> jobMarked_;
  // Releases what the queues' links hold back (Job::heldOn); whether any did.
  bool releaseHeld();
  bool flushing_ = false;  // some job has flushHeld: the run waits for the held messages too
  bool heldOut() const;    // none of the jobs' held messages is left to send
  // Throws if a peer's frame waits, unclaimed, with this call's number and another tag.
  void checkStrays() const;
  unsigned idleBlocks_ = 0;  // blocks since the last progress
  // What a link holds back goes out after this much asleep since the last progress (block()).
  static constexpr milliseconds kHoldAsleep{1};
  bool holding() const;  // some link of the run holds messages back
  bool holdingAsleep_ = false;
  Clock::time_point heldSince_{};
  Clock::time_point lastStrayCheck_{};

  const std::vector<Job>* jobs_ = nullptr;
  std::vector<uint32_t> base_;  // first global index of each job
  std::vector<Ref> refs_;
  std::vector<uint8_t> done_;
  size_t ndone_ = 0;
  std::vector<Queue> queues_;
  // The lists of the queues a call did not need, kept for the next call's (run() drops the
  // queues past the call's last, whose storage would otherwise be freed and allocated again).
  std::vector<std::vector<uint32_t>> spareLists_;
  std::vector<uint32_t> locals_;
  // Signal and Wait ops by stage and counter, in program order. A counter only grows, so its
  // posts happen in order even when a later chunk is ready first, and its waits are satisfied
  // in order; and an op depends only on earlier ones, so looking at the head of each queue is
  // enough (and keeps a long pipeline's waits from being rescanned on every pass).
  struct CounterQueue {
    const transport::SharedStage* stage = nullptr;
    int counter = 0;
    std::vector<uint32_t> ops;
    size_t next = 0;
    bool atEnd() const { return next == ops.size(); }
    uint32_t head() const { return ops[next]; }
  };
  std::vector<CounterQueue> signals_, waits_;
  size_t nsignals_ = 0, nwaits_ = 0;
  static void enqueue(std::vector<CounterQueue>& qs, size_t& n, const transport::SharedStage* st, int counter,
                      uint32_t g);
  std::vector<uint8_t> checked_;  // by job: its call has been compared with the peers'
  void checkCall(const Job& j, int only = -1);  // against every member's call, or only's
  bool waitSatisfied(uint32_t g) const;
  bool armWaits();       // before blocking: false if a wait is satisfied after all
  // Throws SharedStage::arm's finding: as the peer's own failure with its code (relayed), or as
  // Errc::Remote.
  [[noreturn]] static void peerStopped(const std::string& why, Errc relayed);
  void disarmWaits();
  CpuEngine cpu_;
  std::vector<ComputeEngine*> engines_;  // every engine of the jobs, once each
  std::vector<transport::Cookie> completed_;
  std::vector<pollfd> fds_;
};

}  // namespace hora::core
