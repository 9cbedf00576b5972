#include "base/wait.h"

#include <sched.h>

#include <thread>

#include "base/error.h"

namespace hora {

static inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

milliseconds Waiter::remaining(Clock::time_point now) const {
  auto left = std::chrono::duration_cast<milliseconds>(last_ + timeout_ - now);
  return left.count() > 0 ? left : milliseconds(0);
}

void Waiter::check() {
  if (abort_ && abort_->load(std::memory_order_relaxed))
    fail(Errc::InvalidUsage, "communicator aborted while waiting for %s", what_().c_str());
  if (Clock::now() - last_ >= timeout_)
    fail(Errc::Timeout, "timed out after %lld ms without progress waiting for %s",
         static_cast<long long>(timeout_.count()), what_().c_str());
}

void Waiter::idle(const Block& block) {
  ++idleRounds_;
  if (idleRounds_ <= kSpinRounds) {
    for (int i = 0; i < 32; ++i) cpuRelax();
    // The clock is read every few spins only.
    if (++sinceCheck_ < 8) return;
    sinceCheck_ = 0;
    check();
    return;
  }
  if (idleRounds_ <= kSpinRounds + kYieldRounds) {
    sched_yield();
    check();
    return;
  }
  check();
  milliseconds most = std::min(kMaxBlock, remaining(Clock::now()));
  if (most.count() <= 0) most = milliseconds(1);
  block(most);
  check();
}

void Waiter::idle() {
  idle([](milliseconds most) {
    std::this_thread::sleep_for(std::min(most, milliseconds(1)));
  });
}

}  // namespace hora
