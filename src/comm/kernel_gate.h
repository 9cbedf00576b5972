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
#include <thread>
#include <vector>

namespace hora::device {

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
  // Returns 0 once every member has come to call n; else, when stop() says so (checked every
  // millisecond) -1, or when timeout passes with a member short of n, that member's index + 1.
  // (A group over several communicators enters every gate first, then waits at each: ranks may
  // order a group's communicators differently.)
  // The threads of a clique come to a call within microseconds of each other, and a sleep on the
  // condition and its wake-up cost tens of them (21 us a meeting of 2 threads on 2 cores, against
  // well under 1 us looking): it looks first, pausing, then yielding, and sleeps only after.
  template <class Stop>
  int await(uint64_t n, const Stop& stop, std::chrono::milliseconds timeout) {
    for (int k = 0; k < kLooks; ++k) {
      if (late(n) == reached_.size()) return 0;
      if (k < kLooks / 2) {
        pause();
      } else {
        std::this_thread::yield();
      }
    }
    const auto until = std::chrono::steady_clock::now() + timeout;
    std::unique_lock<std::mutex> lock(mu_);
    sleepers_.fetch_add(1);  // (then a look: enter() stores, then reads this; both in order)
    int result = 0;
    for (;;) {
      const size_t l = late(n);
      if (l == reached_.size()) break;
      if (stop()) {
        result = -1;
        break;
      }
      if (std::chrono::steady_clock::now() >= until) {
        result = static_cast<int>(l) + 1;
        break;
      }
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
    sleepers_.fetch_sub(1);
    return result;
  }

 private:
  static constexpr int kLooks = 2000;
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  // The first member short of call n, or the members' count.
  size_t late(uint64_t n) const {
    for (size_t j = 0; j < reached_.size(); ++j)
      if (reached_[j].load() < n) return j;
    return reached_.size();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::atomic<uint64_t>> reached_;  // by member: the last call it has come to
  std::atomic<int> sleepers_{0};
};

// The gate of the clique whose first rank's region is `key`, made by the first member to ask.
std::shared_ptr<KernelGate> gateFor(const void* key, size_t members);

}  // namespace hora::device
