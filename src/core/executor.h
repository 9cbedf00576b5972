// The progress engine: runs the programs of one call (or one group of calls, across any
// number of communicators) to completion on the calling thread. It posts each op once its
// dependencies are done, drives every busy connection without blocking, runs the actions
// (reductions) of arrived messages, and when nothing moves waits through the one Waiter
// (base/wait.h): spin, yield, then poll() on the busy sockets and the communicators' wake fds.
// A peer's failure, a timeout without progress or an abort throws hora::Error.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "base/wait.h"
#include "core/program.h"
#include "transports/shm/world.h"
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
  const shm::World* world = nullptr;  // for Post and Wait ops: this host's ranks
  // With a world: the collective call announced there (World::announce), checked against the
  // peers' when this job waits; tag 0 for none.
  uint64_t callNo = 0, callTag = 0;
};

class Executor {
 public:
  // Runs all jobs at once until every op of every job has completed.
  void run(const std::vector<Job>& jobs, milliseconds timeout,
           std::chrono::microseconds spinFor = std::chrono::microseconds(0));
  // Without a program: waits as run() would (spinning, yielding, then asleep on the host's
  // doorbell) until every rank of job.world, this one included (or only local rank `only`, if
  // not -1), has set `counter` to at least `value`. A dead or stopped peer, the abort flag or
  // the timeout throw. With `check`, the job's call is then checked against the peers' (as
  // run() checks it after its first wait).
  void awaitCounter(const Job& job, int counter, uint64_t value, int only, bool check, milliseconds timeout,
                    std::chrono::microseconds spinFor);

 private:
  struct Queue {
    transport::Connection* conn;
    std::vector<uint32_t> sends, recvs;  // global op indices, in program order
    size_t nextSend = 0, nextRecv = 0;
  };
  struct Ref {
    uint32_t job, op;
  };

  const Op& op(uint32_t g) const { return jobs_->at(refs_[g].job).program->ops[refs_[g].op]; }
  bool ready(uint32_t g) const;
  void complete(uint32_t g);
  void runAction(const Action& a, const Program& p);
  std::string describeWait() const;
  void block(milliseconds most);

  const std::vector<Job>* jobs_ = nullptr;
  std::vector<uint32_t> base_;  // first global index of each job
  std::vector<Ref> refs_;
  std::vector<uint8_t> done_;
  size_t ndone_ = 0;
  std::vector<Queue> queues_;
  std::vector<uint32_t> locals_;
  // Post and Wait ops by host and counter, in program order. A counter only grows, so its
  // posts happen in order even when a later chunk is ready first, and its waits are satisfied
  // in order; and an op depends only on earlier ones, so looking at the head of each queue is
  // enough (and keeps a long pipeline's waits from being rescanned on every pass).
  struct CounterQueue {
    const shm::World* world = nullptr;
    int counter = 0;
    std::vector<uint32_t> ops;
    size_t next = 0;
    bool atEnd() const { return next == ops.size(); }
    uint32_t head() const { return ops[next]; }
  };
  std::vector<CounterQueue> posts_, waits_;
  size_t nposts_ = 0, nwaits_ = 0;
  static void enqueue(std::vector<CounterQueue>& qs, size_t& n, const shm::World* w, int counter, uint32_t g);
  std::vector<uint8_t> checked_;  // by job: its call has been compared with the peers'
  void checkCall(const Job& j);
  bool waitSatisfied(uint32_t g) const;
  void post(uint32_t g);
  bool armWaits();       // before blocking: false if a wait is satisfied after all
  // Asks for the doorbell and watches the peers' processes; returns why a peer will never post
  // again (its process is gone, or it closed its rings), or "": of every peer, or only of
  // local rank `only` if not -1. `relayed`: the text is a failed peer's own (pass it on as is).
  std::string armWorld(const shm::World& w, int only, bool& relayed);
  // Throws armWorld's finding: as the peer's own failure (relayed) or as Errc::Remote.
  [[noreturn]] static void peerStopped(const std::string& why, bool relayed);
  static bool counterReached(const shm::World& w, int counter, uint64_t value, int only = -1);
  void disarmWaits();
  std::vector<transport::Cookie> completed_;
  std::vector<pollfd> fds_;
};

}  // namespace hora::core
