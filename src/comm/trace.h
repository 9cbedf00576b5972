// The flight recorder: each communicator keeps its last HORA_TRACE_CALLS calls in a ring (what
// each asked for, how it was planned, where it stands and when), so that a hang or a failure can
// be explained after the fact, on every rank, by hora-inspect.
//
// Writing is the calling thread's alone and costs a few stores: a slot is taken with one atomic
// increment, its fields are atomics written relaxed inside a sequence lock (a reader that sees
// the count change, or odd, reads again), and nothing is allocated. The executor writes what a
// blocked call waits for into the call's entry (core/wait_mark.h) when it starts to block.
//
// Reading is the dump's: JSON, one file per process (hora-dump.<host>.<pid>.json in
// HORA_DUMP_DIR, default the working directory), with every live communicator of the process;
// written when a communicator fails (a peer's failure, a timeout, a mismatch), on SIGUSR1 (the
// handler posts a semaphore; a thread of the library writes the file), and by
// horaCommDump. A dump reads only this process's memory: it never waits for a peer.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <ctime>

#include "base/error.h"
#include "coll/collective.h"
#include "core/wait_mark.h"

namespace hora::trace {

enum class State : uint8_t { Empty = 0, Queued = 1, Started = 2, Done = 3, Failed = 4 };

// The entries' clock, read twice per call: the time-stamp counter where there is one (a few
// nanoseconds; a system call's clock costs several times that, a few percent of a small call),
// else the monotonic clock in nanoseconds. A dump turns it into wall-clock time (wallOf).
inline uint64_t ticks() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
#endif
}

// One call: one cache line, the only memory a small call's record touches besides its
// communicator's wait mark. Its identity (seq to rootPeer) is written under `version` (odd while
// it is written); state and times are single atomics.
struct alignas(64) Entry {
  std::atomic<uint32_t> version{0};
  std::atomic<uint8_t> state{0};
  std::atomic<uint8_t> timeEnd{0};  // finish() reads the clock (a large call)
  std::atomic<uint64_t> seq{0};    // this rank's calls on the communicator, from 1 (0: empty)
  std::atomic<uint64_t> call{0};   // the collective's number, the same on every rank (0: send/recv)
  std::atomic<uint64_t> count{0};
  // kind | dtype << 8 | op << 16 | algorithm << 24 | inner algorithm << 32 | flags << 40 | group << 48;
  // flags: queued on a host or a CUDA stream (then Queued holds when, and on which stream)
  std::atomic<uint64_t> shape{0};
  std::atomic<int64_t> rootPeer{-1};   // root or peer (-1: none) | chunk bytes << 32
  std::atomic<uint64_t> started{0}, ended{0};  // ticks(); 0: not yet
};
// What only a queued call has, beside its entry.
struct Queued {
  std::atomic<uint64_t> at{0};  // ticks()
  std::atomic<uint64_t> stream{0};
};

// The ranks of the communicator, as a dump names them.
struct PeerId {
  int rank;
  std::string host;
  int pid;
};

class Recorder {
 public:
  // capacity: calls kept (0: none recorded; the communicator is still dumped).
  Recorder(int capacity, int rank, int nranks, std::string name);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // The communicator is ready: its id and its ranks.
  void identify(uint64_t commId, std::vector<PeerId> peers);
  // A call queued on a stream (host or CUDA), to start later; null when the recorder is off.
  Entry* queued(const coll::Args& a, const void* stream, bool cuda);
  // A queued call that will never start (queueing it failed): marked failed.
  void dropQueued(Entry* e);
  // A call that starts now (the one that queued(), if it was queued): its entry, or null when
  // the recorder is off. `group`: the calls run together (1 alone).
  Entry* start(const coll::Args& a, const coll::Plan& p, size_t group) { return start(a, &p, group); }
  // A call the device runs itself (a device-initiated collective's kernel, comm/device.cc): it
  // starts as it is queued on its stream, and finish() is called once its kernel has returned.
  Entry* startOnDevice(const coll::Args& a);
  // The end is read from the clock for a call that moved 64 KiB or more, or had to block: one
  // that finished without blocking took about as long as a wait spins (well under a
  // millisecond), and ends at its start as far as the record says, which saves a clock reading
  // on the smallest calls (where it would be a percent of the call).
  void finish(Entry* e, bool ok) {
    if (!e || e->state.load(std::memory_order_relaxed) != static_cast<uint8_t>(State::Started)) return;
    e->ended.store(e->timeEnd.load(std::memory_order_relaxed) || mark_.sinceUs.load(std::memory_order_relaxed)
                       ? ticks() : e->started.load(std::memory_order_relaxed),
                   std::memory_order_relaxed);
    e->state.store(static_cast<uint8_t>(ok ? State::Done : State::Failed), std::memory_order_release);
  }
  // The communicator's state, as dumps say it.
  // `waits`: everything the failed call waited for (Error::detail), for the dump only.
  void failed(Errc code, const std::string& text, const std::string& waits = std::string());
  void aborted();

  // The communicator as one JSON object.
  std::string json() const;
  int rank() const { return rank_; }
  bool on() const { return keep_ != 0; }  // records calls (and dumps on a failure)
  uint64_t recorded() const { return next_.load(std::memory_order_relaxed); }  // entries taken so far
  // What the communicator's running call waits for (the executor writes it; a communicator runs
  // one call, or one group, at a time): the dump shows it on its started entries, or on the
  // last failed one. Null when the recorder is off.
  core::WaitMark* mark() { return keep_ ? &mark_ : nullptr; }

 private:
  Entry* start(const coll::Args& a, const coll::Plan* p, size_t group);
  Entry* take(bool alone);  // the next slot, its identity open for writing
  static void close(Entry* e) { e->version.fetch_add(1, std::memory_order_release); }

  const int rank_, nranks_;
  const std::string name_;
  std::unique_ptr<Entry[]> ring_;
  std::unique_ptr<Queued[]> queuedAt_;  // by slot, as ring_
  core::WaitMark mark_;
  uint64_t mask_ = 0;    // slots - 1 (slots: a power of two, at least capacity)
  uint64_t keep_ = 0;    // capacity: the entries a dump shows
  std::atomic<uint64_t> next_{0};  // entries taken so far
  std::atomic<uint64_t> calls_{0};  // collectives numbered so far
  std::atomic<int> queued_{0};      // entries queued and not yet started
  std::atomic<uint64_t> firstQueued_{0};  // no queued entry is older than this one
  std::atomic<int> state_{0};       // 0 initialising, 1 ready, 2 failed, 3 aborted
  mutable std::mutex mu_;           // the fields below
  uint64_t commId_ = 0;
  std::vector<PeerId> peers_;
  int errorCode_ = 0;
  std::string errorText_;
  std::string errorWaits_;
};

// Writes the dump of every live communicator of this process where HORA_DUMP_DIR says;
// `reason`: "failure", "signal". Returns the file's path, or "" after a warning.
std::string dumpProcess(const char* reason);
// Writes one communicator's dump to `path`: a file, a directory (the usual name in it), or ""
// (the usual place). Returns the path; throws Errc::System when it cannot be written.
std::string dumpOne(const Recorder& r, const std::string& path);
// Installs the SIGUSR1 handler (once per process; the previous handler is kept and called after
// ours) and starts the thread that writes the dumps it asks for.
void installSignal();

}  // namespace hora::trace
