// Compute engines: where the executor's actions (reductions and copies, program.h) run. An
// engine is asynchronous in form, as UCC's execution engines are: post() starts an action and
// progress() reports the ones that have finished, so that a CUDA kernel (finished when its
// event is) can be an op of the same program as a TCP send. The CPU engine runs each action
// inside post() and reports it at the next progress().
#pragma once
#include <vector>

#include "core/program.h"
#include "transports/transport.h"

namespace hora::core {

class ComputeEngine {
 public:
  virtual ~ComputeEngine() = default;
  // Starts `a` (its sources from `p` when it has a source list); `cookie` comes back from
  // progress() once it has finished.
  virtual void post(const Action& a, const Program& p, transport::Cookie cookie) = 0;
  // Appends the cookies of finished actions; returns whether there were any.
  virtual bool progress(std::vector<transport::Cookie>& completed) = 0;
  virtual bool busy() const = 0;
  // Forgets what a run that ended early (by an error) left, once nothing of it still runs.
  virtual void reset() = 0;
};

// Runs one action on this thread with the CPU kernels.
void runOnCpu(const Action& a, const Program& p);

class CpuEngine final : public ComputeEngine {
 public:
  void post(const Action& a, const Program& p, transport::Cookie cookie) override {
    runOnCpu(a, p);
    done_.push_back(cookie);
  }
  bool progress(std::vector<transport::Cookie>& completed) override {
    if (done_.empty()) return false;
    completed.insert(completed.end(), done_.begin(), done_.end());
    done_.clear();
    return true;
  }
  bool busy() const override { return !done_.empty(); }
  void reset() override { done_.clear(); }

 private:
  std::vector<transport::Cookie> done_;
};

}  // namespace hora::core
