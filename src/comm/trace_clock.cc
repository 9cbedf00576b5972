// The flight recorder's coarse clock (trace_clock.h): one thread per process, started with its
// first recorder, that reads the time-stamp counter every kCoarseTickUs while calls start, and
// parks on a condition after a tick in which none did.
#include "comm/trace_clock.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <ctime>

#include "base/log.h"

namespace hora::trace {

CoarseClock gCoarse;

namespace {

// Never destroyed: the thread may tick while the process exits.
struct Ticker {
  std::mutex mu;  // the thread's start; its parking (with `parked`)
  std::condition_variable parked;
  bool runs = false;  // the thread runs in this process
  std::atomic<uint64_t> wakeups{0};
  std::atomic<bool> hasClock{false};
  clockid_t cpu{};  // the thread's CPU-time clock, once hasClock
};
std::atomic<Ticker*> gTicker{nullptr};

Ticker& ticker() {
  static bool once = [] {
    gTicker.store(new Ticker());
    // A fork waits for the thread to let go of the lock; the child (where the thread is gone)
    // gets a new ticker, reads the counter at every start, and starts a thread with its next
    // recorder.
    pthread_atfork([] { gTicker.load()->mu.lock(); }, [] { gTicker.load()->mu.unlock(); },
                   [] {
                     gTicker.store(new Ticker());  // the old one stays locked, and is never freed
                     gCoarse.state.store(kCoarseOff);
                   });
    return true;
  }();
  (void)once;
  return *gTicker.load();
}

void tickLoop(Ticker* t) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);  // the process's signals go to its own threads
  if (pthread_getcpuclockid(pthread_self(), &t->cpu) == 0) t->hasClock.store(true);
  for (;;) {
    gCoarse.ticks.store(ticks(), std::memory_order_release);
    t->wakeups.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::microseconds(kCoarseTickUs));
    uint32_t s = kCoarseUsed;
    if (gCoarse.state.compare_exchange_strong(s, kCoarseIdle)) continue;  // calls started: tick on
    // No call started in the whole tick: park until one does (coarseTicksSlow stores a fresh
    // reading and wakes this thread). Off means a fork's child, where this thread is not.
    if (s == kCoarseIdle && gCoarse.state.compare_exchange_strong(s, kCoarseParked)) {
      std::unique_lock<std::mutex> lock(t->mu);
      t->parked.wait(lock, [] { return gCoarse.state.load(std::memory_order_acquire) != kCoarseParked; });
    }
  }
}

}  // namespace

uint64_t coarseTicksSlow() {
  uint32_t s = gCoarse.state.load(std::memory_order_acquire);
  for (;;) {
    switch (s) {
      case kCoarseUsed:
        return gCoarse.ticks.load(std::memory_order_relaxed);
      case kCoarseIdle:
        // The first start since the last tick: the reading is at most a tick old.
        if (gCoarse.state.compare_exchange_weak(s, kCoarseUsed, std::memory_order_acq_rel)) continue;
        break;
      case kCoarseParked: {
        // The first start after a tick without one: this start reads the counter, and the clock
        // runs again. The reading goes first, so that a start that sees Used never takes the
        // reading from before the pause.
        const uint64_t now = ticks();
        gCoarse.ticks.store(now, std::memory_order_release);
        if (gCoarse.state.compare_exchange_strong(s, kCoarseUsed, std::memory_order_acq_rel)) {
          Ticker& t = ticker();
          { std::lock_guard<std::mutex> lock(t.mu); }  // the thread waits, or has not yet checked
          t.parked.notify_all();
        }
        return now;
      }
      default:
        return ticks();
    }
  }
}

ClockCost clockCost() {
  Ticker& t = ticker();
  ClockCost c;
  c.wakeups = t.wakeups.load(std::memory_order_relaxed);
  timespec ts{};
  if (t.hasClock.load() && clock_gettime(t.cpu, &ts) == 0)
    c.cpuNs = static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
  return c;
}

void clockUser() {
  Ticker& t = ticker();
  std::lock_guard<std::mutex> lock(t.mu);
  if (t.runs) return;
  try {
    gCoarse.ticks.store(ticks(), std::memory_order_relaxed);  // fresh before the first call
    std::thread(tickLoop, &t).detach();
    t.runs = true;
    gCoarse.state.store(kCoarseUsed, std::memory_order_release);
  } catch (const std::exception& e) {
    // Without the thread, every start reads the counter itself (coarseTicksSlow).
    HORA_WARN(log::kInit, "flight recorder: no clock thread (%s): each call reads the clock", e.what());
  }
}

}  // namespace hora::trace
