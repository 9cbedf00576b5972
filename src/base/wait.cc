#include "base/wait.h"

#include <sched.h>

#include <thread>

#include "base/error.h"

namespace hora {

milliseconds Waiter::remaining(Clock::time_point now) const {
  auto left = std::chrono::duration_cast<milliseconds>(last_ + timeout_ - now);
  return left.count() > 0 ? left : milliseconds(0);
}

void Waiter::check() {
  if (abort_ && abort_->load(std::memory_order_relaxed))
    fail(Errc::InvalidUsage, "communicator aborted while waiting for %s", what_().c_str());
  const Clock::time_point now = Clock::now();
  if (progressed_) {
    progressed_ = false;
    last_ = now;
  }
  if (now - last_ >= timeout_)
    fail(Errc::Timeout, "timed out after %lld ms without progress waiting for %s",
         static_cast<long long>(timeout_.count()), what_().c_str());
}

// Spinning (idle() inline): one pause per round (a pause is up to ~60 cycles on recent x86; more
// per round would delay noticing the peer), and the clock read here once every 64 rounds.
void Waiter::backOff(const Block& block) {
  const Clock::time_point now = Clock::now();
  if (progressed_) {
    progressed_ = false;
    last_ = now;  // progress came after the previous reading, so no later than now
  }
  if (!idle_) {
    idle_ = true;
    idleSince_ = now;
    spins_ = 0;
  }
  const auto idleFor = now - idleSince_;
  if (idleFor < spinFor_) {
    relax();
    return;
  }
  check();
  if (idleFor < spinFor_ + kYieldFor) {
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
