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
  const Clock::time_point now = Clock::now();
  if (!idle_) {
    idle_ = true;
    idleSince_ = now;
  }
  const auto idleFor = now - idleSince_;
  if (idleFor < kSpinFor) {
    for (int i = 0; i < 16; ++i) cpuRelax();
    return;
  }
  check();
  if (idleFor < kSpinFor + kYieldFor) {
    sched_yield();
    return;
  }
  milliseconds most = std::min(kMaxBlock, remaining(now));
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
