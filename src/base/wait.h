// The one wait of the library. Every loop that waits for something (a socket, a peer, a
// flag) is written as
//
//     Waiter w(timeout, &abortFlag, [&] { return std::string("recv from rank 3"); });
//     while (!done()) {
//       if (tryToAdvance()) w.progressed();
//       else w.idle([&](std::chrono::milliseconds most) { poll(fds, n, most.count()); });
//     }
//
// idle() backs off from spinning to yielding to blocking (the caller's block function, for
// example a poll() on its descriptors, given at most kMaxBlock), so more ranks than cores still
// run at a sane speed; and it throws hora::Error when the abort flag is set (Errc::InvalidUsage,
// "aborted") or when nothing has progressed for the whole timeout (Errc::Timeout, naming what
// was awaited). The timeout counts from the last progress, so a long transfer that keeps moving
// never times out, while a silent peer does.
#pragma once
#include <atomic>
#include <chrono>
#include <functional>
#include <string>

namespace hora {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class Waiter {
 public:
  using Describe = std::function<std::string()>;
  using Block = std::function<void(milliseconds most)>;

  // Idle this long spinning, then this long yielding the CPU, before blocking. Yielding costs
  // a spin's latency when every rank has a core (nothing else is runnable: sched_yield returns
  // at once) and hands the core to a peer when ranks outnumber cores; measured with
  // allreduce_perf (8 bytes, 2/4/8 ranks on 2 cores), yielding alone for 100 us beat spinning
  // first (8 us) by 25-30% at 4 and 8 ranks and matched it at 2.
  static constexpr std::chrono::microseconds kSpinFor{0};
  static constexpr std::chrono::microseconds kYieldFor{100};
  // A block never lasts longer than this, so the abort flag is seen promptly even when
  // nothing wakes the blocker.
  static constexpr milliseconds kMaxBlock{50};

  Waiter(milliseconds timeout, const std::atomic<bool>* abortFlag, Describe what)
      : timeout_(timeout), abort_(abortFlag), what_(std::move(what)), last_(Clock::now()) {}

  void progressed() {
    idle_ = false;
    last_ = Clock::now();
  }

  // Nothing advanced: back off once, then check the abort flag and the deadline.
  void idle(const Block& block);
  // As idle() with nothing to block on: sleeps briefly instead.
  void idle();

  // Throws if aborted or out of time; cheap enough to call in any loop.
  void check();

  milliseconds timeout() const { return timeout_; }

 private:
  milliseconds remaining(Clock::time_point now) const;

  milliseconds timeout_;
  const std::atomic<bool>* abort_;
  Describe what_;
  Clock::time_point last_;       // the last progress
  Clock::time_point idleSince_;  // the start of this idle stretch
  bool idle_ = false;
};

}  // namespace hora
