// The flight recorder: each communicator keeps its last HORA_TRACE_CALLS calls in a ring (what
// each asked for, how it was planned, where it stands and when), so that a hang or a failure can
// be explained after the fact, on every rank, by hora-inspect.
//
// Writing is the calling thread's alone and costs a few stores: with no call queued on a stream,
// a slot is taken and stamped without a locked instruction or a clock reading (the start comes
// from a coarse clock, trace_clock.h), its fields are atomics written relaxed inside a sequence
// lock (a reader that sees the version change, or odd, reads again), and nothing is allocated.
// The executor writes what a blocked call waits for into the call's entry (core/wait_mark.h)
// when it starts to block.
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

#include "base/error.h"
#include "coll/collective.h"
#include "comm/trace_clock.h"
#include "core/wait_mark.h"

namespace hora::trace {

enum class State : uint8_t { Empty = 0, Queued = 1, Started = 2, Done = 3, Failed = 4 };

// One call: one cache line, the only memory a small call's record touches besides its
// communicator's wait mark. Its identity (seq to rootPeer) is written under `version` (odd while
// it is written); state and times are single atomics.
struct alignas(64) Entry {
  std::atomic<uint32_t> version{0};
  std::atomic<uint8_t> state{0};
  std::atomic<uint64_t> seq{0};    // this rank's calls on the communicator, from 1 (0: empty)
  std::atomic<uint64_t> call{0};   // the collective's number, the same on every rank (0: send/recv)
  std::atomic<uint64_t> count{0};
  // kind | dtype << 8 | op << 16 | algorithm << 24 | inner algorithm << 32 | flags << 40 | group << 48;
  // flags (detail::k*): queued on a host or a CUDA stream (then Queued holds when, and on which
  // stream), run by the device, its end read from the clock
  std::atomic<uint64_t> shape{0};
  std::atomic<int64_t> rootPeer{-1};   // root or peer (detail::rootOrPeer) | chunk bytes << 32
  // ticks(); started from coarseTicks() when the call starts with no call queued; ended only
  // once the state is done or failed (a started entry keeps its slot's previous end)
  std::atomic<uint64_t> started{0}, ended{0};
};
// What only a queued call has, beside its entry.
struct Queued {
  std::atomic<uint64_t> at{0};  // ticks()
  std::atomic<uint64_t> stream{0};
};

namespace detail {

constexpr uint64_t kCudaStream = 1, kHostStream = 2, kOnDevice = 4, kTimeEnd = 8;  // Entry::shape's flags

inline bool isP2p(coll::Kind k) { return k == coll::Kind::Send || k == coll::Kind::Recv; }
// The peer of a send or receive, else the root (a dump says it only for a rooted collective).
inline int64_t rootOrPeer(const coll::Args& a) { return isP2p(a.kind) ? a.peer : a.root; }
// Entry::shape. The end of a call of 8192 elements or more (64 KiB of 8-byte ones, 8 KiB of
// bytes: a few microseconds at least) is read from the clock (kTimeEnd); counting elements
// rather than bytes spares a small call the multiplication.
inline uint64_t packShape(const coll::Args& a, const coll::Plan* p, uint64_t flags, size_t group) {
  const uint64_t algo = p ? static_cast<uint64_t>(p->algo) + 1 : 0, inner = p ? static_cast<uint64_t>(p->inner) + 1 : 0;
  if (a.count >= 8192) flags |= kTimeEnd;
  return static_cast<uint64_t>(a.kind) | static_cast<uint64_t>(a.dtype) << 8 | static_cast<uint64_t>(a.op) << 16 |
         algo << 24 | inner << 32 | flags << 40 | (group < 0xffff ? group : 0xffff) << 48;
}
// Entry::rootPeer: the root or peer in the low 32 bits, the chunk's bytes in the high ones.
inline int64_t packWho(const coll::Args& a, const coll::Plan* p) {
  const uint64_t chunk = p ? p->chunkBytes : 0;
  return static_cast<int64_t>((static_cast<uint64_t>(rootOrPeer(a)) & 0xffffffffu) |
                              (chunk < UINT32_MAX ? chunk : UINT32_MAX) << 32);
}
// An entry's version, from its seq (s): 4s + 1 while its identity is written as the slot is
// taken, 4s + 2 once written, 4s + 3 and 4s + 4 while and once a queued call's start rewrites
// it. Odd: being written (a reader reads again). A slot's versions only grow (its next entry's
// seq is at least s + 1), so the writer stores them without reading the slot first, and without
// a locked instruction (one would wait for the slot's cache line).
constexpr uint32_t versionOf(uint64_t seq, uint32_t phase) { return static_cast<uint32_t>(seq * 4 + phase); }

}  // namespace detail

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
  Entry* start(const coll::Args& a, const coll::Plan& p, size_t group) {
    if (!keep_) return nullptr;
    return queued_.load(std::memory_order_relaxed) > 0 ? start(a, &p, group) : startAlone(a, &p, group);
  }
  // A call the device runs itself (a device-initiated collective's kernel, comm/device.cc): it
  // starts as it is queued on its stream, and finish() is called once its kernel has returned.
  Entry* startOnDevice(const coll::Args& a);
  // The end is read from the clock for a call of 8192 elements or more, or one that had to
  // block: one that finished without blocking took about as long as a wait spins (well under a
  // millisecond), and ends at its start as far as the record says, which saves a clock reading
  // on the smallest calls (where it would be a percent of the call).
  void finish(Entry* e, bool ok) {
    if (!e || e->state.load(std::memory_order_relaxed) != static_cast<uint8_t>(State::Started)) return;
    uint64_t end = e->started.load(std::memory_order_relaxed);
    if ((e->shape.load(std::memory_order_relaxed) >> 40 & detail::kTimeEnd) || mark_.sinceUs.load(std::memory_order_relaxed)) {
      end = ticks();
      lastTicks_.store(end, std::memory_order_relaxed);
    }
    e->ended.store(end, std::memory_order_relaxed);
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
  // A call that starts while calls are queued (or one the device runs): finds its queued
  // entry, or takes a slot by a locked instruction.
  Entry* start(const coll::Args& a, const coll::Plan* p, size_t group);
  // A call that starts with no call queued, the usual case: plain stores into the next slot,
  // stamped from the coarse clock (trace_clock.h). Another thread that queues a call at this very
  // moment could take the same slot, and then one of the two entries is garbled (every field is
  // an atomic: nothing worse).
  Entry* startAlone(const coll::Args& a, const coll::Plan* p, size_t group) {
    const uint64_t n = next_.load(std::memory_order_relaxed);
    next_.store(n + 1, std::memory_order_relaxed);
    Entry* e = &ring_[n & mask_];
    __builtin_prefetch(e + 1, 1);  // the next call's slot into this core's cache (past the end once a lap: harmless)
    e->version.store(detail::versionOf(n + 1, 1), std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    e->seq.store(n + 1, std::memory_order_relaxed);
    uint64_t call = 0;
    if (!detail::isP2p(a.kind)) {
      call = calls_.load(std::memory_order_relaxed) + 1;
      calls_.store(call, std::memory_order_relaxed);
    }
    e->call.store(call, std::memory_order_relaxed);
    e->count.store(a.count, std::memory_order_relaxed);
    e->shape.store(detail::packShape(a, p, 0, group), std::memory_order_relaxed);
    e->rootPeer.store(detail::packWho(a, p), std::memory_order_relaxed);
    const uint64_t coarse = coarseTicks(), last = lastTicks_.load(std::memory_order_relaxed);
    e->started.store(coarse > last ? coarse : last, std::memory_order_relaxed);
    resetMark();
    e->state.store(static_cast<uint8_t>(State::Started), std::memory_order_relaxed);
    close(e, detail::versionOf(n + 1, 2));
    return e;
  }
  // The wait mark of a call that starts: stored only where it is not reset already.
  void resetMark() {
    if (mark_.what.load(std::memory_order_relaxed) != core::WaitMark::None) mark_.clear();
    if (mark_.sinceUs.load(std::memory_order_relaxed)) mark_.sinceUs.store(0, std::memory_order_relaxed);
    mark_.stageWaits.store(0, std::memory_order_relaxed);  // counted by every wait on the stage
  }
  Entry* take();  // the next slot, by a locked instruction, its identity open for writing
  // Closes an entry's identity with the even version v (trace.cc: versionOf).
  static void close(Entry* e, uint32_t v) { e->version.store(v, std::memory_order_release); }

  const int rank_, nranks_;
  const std::string name_;
  std::unique_ptr<Entry[]> ring_;
  std::unique_ptr<Queued[]> queuedAt_;  // by slot, as ring_
  core::WaitMark mark_;
  uint64_t mask_ = 0;    // slots - 1 (slots: a power of two, at least capacity)
  uint64_t keep_ = 0;    // capacity: the entries a dump shows
  std::atomic<uint64_t> next_{0};  // entries taken so far
  std::atomic<uint64_t> calls_{0};  // collectives numbered so far
  // The latest ticks() read by this recorder (a start from the coarse clock is never earlier).
  std::atomic<uint64_t> lastTicks_{0};
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

// A call's entry, with the recorder it belongs to (while the call runs).
struct Traced {
  Recorder* recorder;
  Entry* entry;
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
