// The flight recorder's coarse clock (trace_clock.h): one thread per process that reads the
// time-stamp counter every kCoarseTickUs while a recorder that records lives, and waits on a
// condition otherwise.
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
  std::mutex mu;  // live's changes, and the thread's start
  std::condition_variable users;
  std::atomic<int> live{0};  // recorders that record
  bool runs = false;         // the thread runs in this process
  std::atomic<uint64_t> wakeups{0};
  std::atomic<bool> hasClock{false};
  clockid_t cpu{};           // the thread's CPU-time clock, once hasClock
};
std::atomic<Ticker*> gTicker{nullptr};

Ticker& ticker() {
  static bool once = [] {
    gTicker.store(new Ticker());
    // A fork waits for the thread to let go of the lock; the child (where the thread is gone)
    // gets a new ticker with the live count, and starts a thread with its next recorder.
    pthread_atfork([] { gTicker.load()->mu.lock(); }, [] { gTicker.load()->mu.unlock(); },
                   [] {
                     Ticker* old = gTicker.load();
                     auto* fresh = new Ticker();
                     fresh->live.store(old->live.load());
                     gTicker.store(fresh);  // the old one stays locked, and is never freed
                     gCoarse.runs.store(false);
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
    if (t->live.load(std::memory_order_relaxed) == 0) {
      std::unique_lock<std::mutex> lock(t->mu);
      t->users.wait(lock, [t] { return t->live.load(std::memory_order_relaxed) > 0; });
    }
    gCoarse.ticks.store(ticks(), std::memory_order_relaxed);
    t->wakeups.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::microseconds(kCoarseTickUs));
  }
}

}  // namespace

ClockCost clockCost() {
  Ticker& t = ticker();
  ClockCost c;
  c.wakeups = t.wakeups.load(std::memory_order_relaxed);
  timespec ts{};
  if (t.hasClock.load() && clock_gettime(t.cpu, &ts) == 0)
    c.cpuNs = static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
  return c;
}

void clockUser(bool joins) {
  Ticker& t = ticker();
  std::lock_guard<std::mutex> lock(t.mu);
  if (!joins) {
    t.live.fetch_sub(1);
    return;
  }
  gCoarse.ticks.store(ticks(), std::memory_order_relaxed);  // fresh before the first call
  t.live.fetch_add(1);
  if (!t.runs) {
    try {
      std::thread(tickLoop, &t).detach();
      t.runs = true;
      gCoarse.runs.store(true);
    } catch (const std::exception& e) {
      // Without the thread, every start reads the counter itself (coarseTicks).
      HORA_WARN(log::kInit, "flight recorder: no clock thread (%s): each call reads the clock", e.what());
    }
  }
  t.users.notify_all();
}

}  // namespace hora::trace
