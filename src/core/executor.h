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
};

class Executor {
 public:
  // Runs all jobs at once until every op of every job has completed.
  void run(const std::vector<Job>& jobs, milliseconds timeout);

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
  std::vector<transport::Cookie> completed_;
  std::vector<pollfd> fds_;
};

}  // namespace hora::core
