// AllReduce through shared memory, when every rank of the communicator is on this host.
//
// Each rank's segment has a stage of four slots of C bytes (in[0], in[1], out[0], out[1]) and
// four counters that only it writes and every other rank reads:
//
//   InReady   the chunk whose input is in my in-slot       OutReady  ... whose slice is in my out-slot
//   InFree    the chunk whose in-slots I have read         OutFree   ... whose out-slots I have read
//
// Chunks are numbered by one sequence shared by every call on the host (Topo::shmSeq), and
// chunk s uses slots s%2, so chunk s+1 fills the other slots while chunk s is still being read.
//
// Flat (small buffers, one chunk): copy my input in, post InReady, wait for everyone's, then
// reduce all n inputs straight out of the n in-slots, in rank order, into my result. One wait:
// the latency of one flag. Each rank reads n*N*E bytes.
//
// Slice (the rest, pipelined by chunk): copy in, post, wait; reduce my 1/n slice of the chunk
// from all n in-slots into my out-slot; post OutReady, wait for everyone's; copy the n slices
// out of the n out-slots into my result. Each rank copies N*E in, reads N*E and writes N*E/n
// reducing, and copies N*E out: about 5 N*E bytes of memory traffic against the ring's
// 9(n-1)/n N*E through transport rings, and 2 waits per chunk instead of 2(n-1) steps.
//
// Every element is reduced once, by one rank, in rank order: all ranks get the same bits.
#include <cstring>

#include "coll/common.h"
#include "kernels/cpu/reduce.h"

namespace hora::coll {

namespace {
enum Counter { kInReady = 0, kOutReady = 1, kInFree = 2, kOutFree = 3 };

struct Slots {
  const shm::World& w;
  size_t C;  // bytes per slot
  uint8_t* in(int rank, uint64_t s) const { return stage(rank) + (s % 2) * C; }
  uint8_t* out(int rank, uint64_t s) const { return stage(rank) + (2 + s % 2) * C; }
  uint8_t* stage(int rank) const {
    return static_cast<uint32_t>(rank) == w.localIndex ? w.own.stage() : w.peers[static_cast<size_t>(rank)].segment.stage();
  }
};

// Waiting for a counter to reach s-2 or less is waiting for nothing.
int32_t waitFor(core::ProgramBuilder& b, Counter c, uint64_t s, core::Deps d = {}) {
  return s >= 3 ? b.wait(c, s - 2, d) : -1;
}
}  // namespace

size_t shmSlotBytes(const shm::World& w) { return static_cast<size_t>(w.own.header()->stageBytes / 4); }

void shmAllReduce(const Args& a, const Topo& t, const Plan& p, core::Scratch&, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  const Reducer red{a, n};
  if (red.single(a.sendbuf, b) || N == 0) return;
  const Slots slots{*t.world, shmSlotBytes(*t.world)};
  const size_t C = std::max<size_t>(1, slots.C / E);  // elements per chunk
  const bool flat = p.algo == Algo::ShmFlat && N <= C;
  std::vector<const void*> srcs(static_cast<size_t>(n));
  for (size_t k = 0; k * C < N; ++k) {
    const Range chunk{k * C, std::min(N, (k + 1) * C)};
    const uint64_t s = ++*t.shmSeq;
    // My input in.
    int32_t freeIn = waitFor(b, kInFree, s);
    int32_t in = b.local(core::reduceAction(slots.in(r, s), at(a.sendbuf, chunk.begin, E), nullptr, chunk.size(),
                                            red.spec(true, false)),
                         core::Deps{freeIn});
    int32_t all = b.wait(kInReady, s, core::Deps{b.post(kInReady, s, core::Deps{in})});
    if (flat) {
      for (int j = 0; j < n; ++j) srcs[static_cast<size_t>(j)] = slots.in(j, s);
      int32_t done = b.localAll(core::reduceAction(at(a.recvbuf, chunk.begin, E), nullptr, nullptr, chunk.size(),
                                                   red.spec(false, true)),
                                {all}, srcs);
      // Nothing to read from out-slots: keep the other counters in step for later chunks.
      for (Counter c : {kInFree, kOutReady, kOutFree}) b.post(c, s, core::Deps{done});
      continue;
    }
    // My slice of the chunk, reduced from every in-slot into my out-slot.
    const Range mine = segment(chunk.size(), n, r);
    int32_t freeOut = waitFor(b, kOutFree, s);
    for (int j = 0; j < n; ++j) srcs[static_cast<size_t>(j)] = slots.in(j, s) + mine.begin * E;
    int32_t reduced = mine.size() ? b.localAll(core::reduceAction(slots.out(r, s) + mine.begin * E, nullptr, nullptr,
                                                                  mine.size(), red.spec(false, true)),
                                               {all, freeOut}, srcs)
                                  : b.local(core::Action{}, core::Deps{all, freeOut});
    b.post(kInFree, s, core::Deps{reduced});
    int32_t gathered = b.wait(kOutReady, s, core::Deps{b.post(kOutReady, s, core::Deps{reduced})});
    // Every slice out into my result.
    for (int j = 0; j < n; ++j) {
      const Range theirs = segment(chunk.size(), n, j);
      if (!theirs.size()) continue;
      gathered = b.local(core::reduceAction(at(a.recvbuf, chunk.begin + theirs.begin, E), slots.out(j, s) + theirs.begin * E,
                                            nullptr, theirs.size(), red.spec(false, false)),
                         core::Deps{gathered});
    }
    b.post(kOutFree, s, core::Deps{gathered});
  }
}

bool shmFlatNowApplies(const Args& a, const Topo& t, const Plan& p) {
  return a.kind == Kind::AllReduce && p.algo == Algo::ShmFlat && t.world && t.nranks > 1 &&
         t.nranks <= kernels::kMaxSources && a.count > 0 &&
         a.count * dataTypeSize(a.dtype) <= shmSlotBytes(*t.world);
}

void shmFlatNow(const Args& a, const Topo& t, const AwaitFn& await) {
  const int n = t.nranks, r = t.rank;
  const Reducer red{a, n};
  const Slots slots{*t.world, shmSlotBytes(*t.world)};
  std::atomic<uint64_t>* mine = t.world->own.header()->counters;
  const uint64_t s = ++*t.shmSeq;
  if (s >= 3) await(kInFree, s - 2, false);
  const kernels::ReduceSpec in = red.spec(true, false);
  if (in.premulFirst) {
    void* dst[1] = {slots.in(r, s)};
    const void* src[1] = {a.sendbuf};
    kernels::reduce(dst, 1, src, 1, a.count, in);
  } else {
    memcpy(slots.in(r, s), a.sendbuf, a.count * dataTypeSize(a.dtype));
  }
  mine[kInReady].store(s, std::memory_order_release);
  t.world->wakeAll();
  await(kInReady, s, true);
  const void* srcs[kernels::kMaxSources];
  for (int j = 0; j < n; ++j) srcs[j] = slots.in(j, s);
  void* dst[1] = {a.recvbuf};
  kernels::reduce(dst, 1, srcs, n, a.count, red.spec(false, true));
  // As the program does: the other counters follow, so that later chunks of either algorithm
  // find them in step.
  for (Counter c : {kInFree, kOutReady, kOutFree}) mine[c].store(s, std::memory_order_release);
  t.world->wakeAll();
}

}  // namespace hora::coll
