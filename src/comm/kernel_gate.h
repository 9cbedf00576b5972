// Ranks of one process on one GPU (threads, each with its communicator) whose collectives are
// kernels that spin for each other: the kernel of one rank for call n waits on the GPU for the
// kernel of another for call n. If that other rank's thread is meanwhile waiting on the device
// for the first kernel (cudaDeviceSynchronize, a copy to pageable memory, an operation on the
// legacy stream), it never queues its own: a deadlock until the kernels' timeout. So a rank
// queues its kernel for call n only once every rank of its clique (the ranks of this process on
// this GPU) has come to call n, on the host; threads meet in microseconds.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace hora::device {

class KernelGate {
 public:
  explicit KernelGate(size_t members) : reached_(members, 0) {}

  // Member i has come to call n (numbers grow by one per call).
  void enter(size_t i, uint64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    reached_[i] = n;
    cv_.notify_all();
  }
  // Returns 0 once every member has come to call n; else, when stop() says so (checked every
  // millisecond) -1, or when timeout passes with a member short of n, that member's index + 1.
  // (A group over several communicators enters every gate first, then waits at each: ranks may
  // order a group's communicators differently.)
  template <class Stop>
  int await(uint64_t n, const Stop& stop, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      size_t late = reached_.size();
      for (size_t j = 0; j < reached_.size() && late == reached_.size(); ++j)
        if (reached_[j] < n) late = j;
      if (late == reached_.size()) return 0;
      if (stop()) return -1;
      if (std::chrono::steady_clock::now() >= until) return static_cast<int>(late) + 1;
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> reached_;
};

// The gate of the clique whose first rank's region is `key`, made by the first member to ask.
std::shared_ptr<KernelGate> gateFor(const void* key, size_t members);

}  // namespace hora::device
