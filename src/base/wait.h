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

  // Idle `spinFor` spinning (the constructor's argument), then kYieldFor yielding the CPU,
  // before blocking. When ranks outnumber cores, a spin holds the core a peer needs: measured
  // with allreduce_perf (8 bytes, 4 and 8 ranks on 2 cores), yielding at once beat spinning
  // first by 25-30%. When every rank has a core, the yield is a syscall on the latency path
  // (a third of an 8-byte allreduce at 2 ranks): the communicator then asks for kSpinWhenAlone.
  static constexpr std::chrono::microseconds kSpinWhenAlone{20};
  static constexpr std::chrono::microseconds kYieldFor{100};
  // A block never lasts longer than this, so the abort flag is seen promptly even when
  // nothing wakes the blocker.
  static constexpr milliseconds kMaxBlock{50};

  Waiter(milliseconds timeout, const std::atomic<bool>* abortFlag, Describe what,
         std::chrono::microseconds spinFor = std::chrono::microseconds(0))
      : timeout_(timeout), abort_(abortFlag), what_(std::move(what)), spinFor_(spinFor) {}

  // Reads the clock only when idle: a spinning loop that progresses often stays cheap.
  void progressed() {
    idle_ = false;
    progressed_ = true;
  }

  // Nothing advanced: back off once, then check the abort flag and the deadline. `block` is
  // any callable taking the milliseconds it may block; a spinning round (most rounds of a short
  // wait) is inline and neither calls nor wraps it, and the rest pass it by reference, so a
  // lambda that captures a whole frame never costs an allocation per round.
  template <typename F>
  void idle(F&& block) {
    if (idle_ && spinFor_.count() > 0 && (++spins_ & 63) != 0) {
      relax();
      return;
    }
    backOff(Block(std::ref(block)));
  }
  // As idle() with nothing to block on: sleeps briefly instead.
  void idle();

  // Throws if aborted or out of time; cheap enough to call in any loop.
  void check();

  milliseconds timeout() const { return timeout_; }

  // One round of a spin: tells the CPU (and a sibling hardware thread) that this one waits.
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

 private:
  milliseconds remaining(Clock::time_point now) const;
  void backOff(const Block& block);  // idle() past a spinning round

  milliseconds timeout_;
  const std::atomic<bool>* abort_;
  Describe what_;
  std::chrono::microseconds spinFor_;
  bool progressed_ = true;       // since last_ was read (the start counts: the clock is read lazily)
  unsigned spins_ = 0;           // idle() calls since the clock was last read
  Clock::time_point last_;       // the last progress (or a time after it, when progressed_)
  Clock::time_point idleSince_;  // the start of this idle stretch
  bool idle_ = false;
};

}  // namespace hora
