// Where a call waits, for the flight recorder (comm/trace.h). The executor writes it when a
// wait of the call starts to block (never while it spins) and clears it when the call moves
// again; any thread may read it at any time (every field is an atomic of its own, so a reader
// may see a mark half written: it is a report, not a protocol).
#pragma once
#include <atomic>
#include <cstdint>
#include <ctime>

namespace hora::transport {
class SharedStage;
}

namespace hora::core {

struct WaitMark {
  enum What : uint8_t {
    None = 0,   // not blocked
    Recv = 1,   // a message from `peer`
    Send = 2,   // a message to `peer` to leave
    Stage = 3,  // `peer` to post a chunk in the shared stage
  };
  std::atomic<uint8_t> what{None};
  std::atomic<int32_t> peer{-1};
  // 1-based: which message with `peer` in this call (of `steps` in all), or which of the call's
  // waits on the shared stage (steps 0: not known in advance).
  std::atomic<uint32_t> step{0};
  std::atomic<uint32_t> steps{0};
  std::atomic<int64_t> sinceUs{0};  // when it started to block (microseconds since the epoch)
  // The waits on the shared stage this call has made so far (the step of a Stage mark).
  std::atomic<uint32_t> stageWaits{0};

  // Marks the wait (once per blocked stretch: `since` only the first time).
  void set(What w, int32_t p, uint32_t s, uint32_t of, int64_t nowUs) {
    peer.store(p, std::memory_order_relaxed);
    step.store(s, std::memory_order_relaxed);
    steps.store(of, std::memory_order_relaxed);
    if (what.load(std::memory_order_relaxed) == None) sinceUs.store(nowUs, std::memory_order_relaxed);
    what.store(w, std::memory_order_release);
  }
  void clear() { what.store(None, std::memory_order_relaxed); }
};

// Marks a wait on the shared stage `st` for the member furthest behind on counter (below
// value), or for member `only` (-1: any); nothing if none is behind.
void markStage(WaitMark& mark, const transport::SharedStage& st, int counter, uint64_t value, int only, uint32_t step,
               uint32_t steps);

// Microseconds since the epoch (CLOCK_REALTIME): comparable across the processes of a host, and
// across hosts as far as their clocks agree.
inline int64_t wallMicros() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace hora::core
