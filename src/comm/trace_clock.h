// The flight recorder's clocks (comm/trace.h). A call's start is stamped from a coarse clock:
// the time-stamp counter as a thread of the process last read it, kept in a cache line of its
// own that every call only reads. Reading the counter itself at every start was most of what
// the recorder cost a small call (a few nanoseconds of a 0.3 us call); the coarse clock costs a
// load. Everything else (a queued call, the end of a large or blocked call) reads the counter.
#pragma once
#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <ctime>

namespace hora::trace {

// The entries' clock: the time-stamp counter where there is one, else the monotonic clock in
// nanoseconds. A dump turns it into wall-clock time.
inline uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
#endif
}

// How often the clock thread reads ticks() into the coarse clock: a start is stamped at most
// this much early, plus however late the thread is scheduled on a loaded machine. Each wakeup
// costs the process about 13 us of CPU on the 2-core VM: every 10 ms that is 0.13% of a core
// while calls are made (every millisecond it was 1.2%, more than the recorder's whole cost on a
// small call). A tick in which no call started parks the thread until the next start, so an
// idle process (between bursts of calls, or holding a communicator it does not use) has no
// wakeups at all.
constexpr long kCoarseTickUs = 10000;

// The coarse clock's state. Off: no clock thread (it could not start, or this is a child of
// fork that has made no recorder yet): every start reads the counter. Idle: the thread ticks and
// no call has started since its last tick. Used: a call has started since. Parked: the thread
// sleeps; the next start reads the counter, stores it, and wakes the thread.
enum CoarseState : uint32_t { kCoarseOff = 0, kCoarseIdle = 1, kCoarseUsed = 2, kCoarseParked = 3 };

struct alignas(64) CoarseClock {
  std::atomic<uint64_t> ticks{0};
  std::atomic<uint32_t> state{kCoarseOff};
};
extern CoarseClock gCoarse;

// The start of a call where the clock is not simply in use: marks it used, or reads the counter
// (and wakes a parked thread), in trace_clock.cc.
uint64_t coarseTicksSlow();

// ticks() as of the clock thread's last tick (never later than ticks() now, at most a tick and
// the thread's scheduling earlier), or ticks() itself where the thread is parked or does not run.
// Costs two loads where calls come at least once a tick.
inline uint64_t coarseTicks() {
  if (gCoarse.state.load(std::memory_order_acquire) == kCoarseUsed) return gCoarse.ticks.load(std::memory_order_relaxed);
  return coarseTicksSlow();
}

// What the clock thread of this process has cost so far: its wakeups and its CPU time (0 where
// it does not run). For tests/trace_cost, which cannot switch it off on one side of its
// comparison.
struct ClockCost {
  uint64_t wakeups = 0;
  uint64_t cpuNs = 0;
};
ClockCost clockCost();

// A recorder that records is made: the clock thread starts in this process if it does not run
// here yet (the first recorder, or the first after a fork).
void clockUser();

}  // namespace hora::trace
