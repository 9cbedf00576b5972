// Ranks of one process on one GPU (threads, each with its communicator) whose collectives are
// kernels that spin for each other: the kernel of one rank for call n waits on the GPU for the
// kernel of another for call n. If that other rank's thread is meanwhile waiting on the device
// for the first kernel (cudaDeviceSynchronize, a copy to pageable memory, an operation on the
// legacy stream), it never queues its own: a deadlock until the kernels' timeout. So a rank
// queues its kernel for call n only once every rank of its clique (the ranks of this process on
// this GPU) has come to call n, on the host; threads meet in microseconds.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace hora::device {

// The members' call numbers, and a condition to sleep on; the wait itself is the caller's, through
// the library's one wait (base/wait.h): a rank spins (where every rank has a core), yields, then
// sleeps here until a member comes to the call.
class KernelGate {
 public:
  explicit KernelGate(size_t members) : reached_(members) {
    for (auto& r : reached_) r.store(0);
  }

  // Member i has come to call n (numbers grow by one per call).
  void enter(size_t i, uint64_t n) {
    reached_[i].store(n);
    if (sleepers_.load() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  }
  // The first member short of call n, or the members' count once every one has come to it.
  size_t late(uint64_t n) const {
    for (size_t j = 0; j < reached_.size(); ++j)
      if (reached_[j].load() < n) return j;
    return reached_.size();
  }
  bool all(uint64_t n) const { return late(n) == reached_.size(); }
  // Sleeps until every member has come to call n, or for `most` at most (Waiter::idle's block).
  void sleep(uint64_t n, std::chrono::milliseconds most) {
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_.fetch_add(1);  // (then a look: enter() stores, then reads this; both in order)
    cv_.wait_for(lock, most, [&] { return all(n); });
    sleepers_.fetch_sub(1);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::atomic<uint64_t>> reached_;  // by member: the last call it has come to
  std::atomic<int> sleepers_{0};
};

// The gate of the clique whose first rank's region is `key`, made by the first member to ask.
std::shared_ptr<KernelGate> gateFor(const void* key, size_t members);

}  // namespace hora::device
