// Helpers shared by the algorithms: buffer arithmetic and the reduction specs of a call.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/inline_vec.h"
#include "coll/collective.h"

namespace hora::coll { class Algorithm; }

namespace hora::coll {

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Element range [begin, end) of segment s when count elements are split into n near-equal
// segments (the first count % n segments are one longer).
struct Range {
  size_t begin, end;
  size_t size() const { return end - begin; }
};
inline Range segment(size_t count, int n, int s) {
  size_t q = count / static_cast<size_t>(n), r = count % static_cast<size_t>(n);
  size_t us = static_cast<size_t>(s);
  size_t b = q * us + std::min(us, r);
  return Range{b, b + q + (us < r ? 1 : 0)};
}

// Chunk c (of at most `chunk` elements) of a range; empty when c is past its end.
inline Range chunkOf(const Range& r, size_t chunk, size_t c) {
  size_t b = std::min(r.end, r.begin + c * chunk);
  return Range{b, std::min(r.end, b + chunk)};
}
inline size_t chunksIn(size_t elems, size_t chunk) { return (elems + chunk - 1) / chunk; }

// A byte pointer to element i of a buffer.
inline uint8_t* at(const void* base, size_t i, size_t esz) {
  return static_cast<uint8_t*>(const_cast<void*>(base)) + i * esz;
}

// The reduction specs of a call. `local` marks src0 as this rank's own input (PreMulSum scales
// it); `last` marks the step that completes a result (Avg divides it).
struct Reducer {
  const Args& a;
  int nranks;
  kernels::ReduceSpec spec(bool local, bool last) const {
    kernels::ReduceSpec s;
    s.dtype = a.dtype;
    s.op = a.op;
    if (local && a.op == RedOp::PreMulSum) {
      s.premulFirst = true;
      s.scalar = a.scalar;
    }
    if (last && a.op == RedOp::Avg) {
      s.divide = true;
      s.divisor = static_cast<uint64_t>(a.divideBy ? a.divideBy : nranks);
    }
    return s;
  }
  // Whether this rank's input must be transformed before it is sent as it is.
  bool scalesInput() const { return a.op == RedOp::PreMulSum; }
  // A reduction on one rank: the result is the input, scaled (PreMulSum), divided by 1 (Avg)
  // and copied where needed. Adds that op (if any) and returns true when nranks == 1.
  bool single(const void* in, core::ProgramBuilder& b) const {
    if (nranks != 1) return false;
    if (in != a.recvbuf || scalesInput() || (a.op == RedOp::Avg && a.divideBy > 1))
      b.local(core::reduceAction(a.recvbuf, in, nullptr, a.count, spec(true, true)));
    return true;
  }
};

// Per-algorithm builders (ring.cc, chain.cc, p2p.cc).
void stageAllReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void stageBroadcast(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void stageHierAllReduce(const Args& a, const JobShape& t, const Plan& p, const Algorithm& inner,
                        const int* team, size_t teamSize, int teamIndex, core::Scratch& scratch,
                        core::ProgramBuilder& b);
void stageFlatNow(const Args& a, const JobShape& t, const AwaitFn& await);
// The fold of recursive doubling and Rabenseifner's (direct.cc), p the largest power of two <=
// n: a rank from p on hands its input (scaled for PreMulSum) to rank r-p, receives the result
// from it and gets false; another gets true, in *acc its input scaled for PreMulSum, with rank
// r+p's folded in (in the result buffer) when r < n-p, and in *ready the op that made it.
bool foldIn(const Args& a, const JobShape& t, int p, core::Scratch& s, core::ProgramBuilder& b, const void** acc,
            int32_t* ready);
void rdAllReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void directAllReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void ringAllReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void ringAllGather(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void ringReduceScatter(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void chainBroadcast(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void chainReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void p2p(const Args& a, const JobShape& t, const Plan& p, core::ProgramBuilder& b);
void pairwiseAllToAll(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void disseminationBarrier(const JobShape& t, core::Scratch& s, core::ProgramBuilder& b);
// Trees and logarithmic algorithms (tree.cc, binomial.cc, rabenseifner.cc, bruck.cc, direct.cc):
// they read only t.rank and t.nranks, so they build as well for a sub-team of ranks.
void treeAllReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void treeBroadcast(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void treeReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void binomialBroadcast(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void binomialReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void rabenseifnerAllReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void rdAllGather(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
void bruckAllGather(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);
// Gather and Scatter (gather.cc): linear (the direct algorithm's) and over the binomial tree.
void linearGatherScatter(const Args& a, const JobShape& t, const Plan& p, core::ProgramBuilder& b);
void binomialGatherScatter(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b);

// One rank's place in a tree, as ranks: its parent (-1 at the root) and its children, in the
// order their partial results are reduced (and the broadcast sends).
struct TreeLinks {
  static constexpr size_t kMostChildren = 32;  // a binomial tree's rank has at most log2(n)
  int up = -1;
  InlineVec<int, kMostChildren> down;
};
// The pipelined tree over a rooted collective's ranks (tree.cc): Broadcast from, or Reduce to,
// the root of `l`, chunk by chunk.
void treeRootedBroadcast(const Args& a, const Plan& p, const TreeLinks& l, core::Scratch& s, core::ProgramBuilder& b);
void treeRootedReduce(const Args& a, int nranks, const Plan& p, const TreeLinks& l, core::Scratch& s,
                      core::ProgramBuilder& b);
// The binomial tree over positions 0..n-1 (binomial.cc): position q's links, in positions, and
// the size of its subtree, which holds the positions [q, q + size).
TreeLinks binomialLinks(int n, int q);
int binomialSubtree(int n, int q);
// Links of position q (rank - root mod n) mapped back to ranks.
inline TreeLinks unroot(TreeLinks l, int root, int n) {
  if (l.up >= 0) l.up = mod(l.up + root, n);
  for (int& d : l.down) d = mod(d + root, n);
  return l;
}

// An op that completes once every op of deps has (a local that does nothing): a join for ops
// that take at most two dependencies.
template <class Ids>
int32_t join(core::ProgramBuilder& b, const Ids& deps) {
  return b.localAll(core::Action{}, deps.data(), deps.size(), nullptr, 0);
}
// The largest power of two <= n (n >= 1), and its log2.
inline int floorPow2(int n, int* log = nullptr) {
  int p = 1, k = 0;
  while (p * 2 <= n) p *= 2, ++k;
  if (log) *log = k;
  return p;
}
// ceil(log2(n)) for n >= 1.
inline int ceilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Builds `algo`'s program for a call `sub` on a team of ranks, as member `me` of it (the team
// numbered 0..k-1 as if it were the communicator), and appends it to b with the team's ranks
// as peers, after `gate`. Returns an op that completes with it (gate when it is empty).
int32_t buildOnTeam(const Algorithm& algo, const Args& sub, const int* team, size_t teamSize, int me, const Plan& p,
                    core::Scratch& scratch, core::ProgramBuilder& b, int32_t gate);
// Across hosts whose ranks are not consecutive: builds a ring or a chain over the ranks in host
// order, so that it crosses each host's link once each way (AllGather and ReduceScatter through
// a copy of their blocks in that order), and returns true; false when the order is right.
bool buildInHostOrder(const Algorithm& algo, const Args& a, const JobShape& t, const Plan& p, core::Scratch& s,
                      core::ProgramBuilder& b);

inline size_t chunkElems(const Args& a, const Plan& p) {
  return std::max<size_t>(1, p.chunkBytes / dataTypeSize(a.dtype));
}

}  // namespace hora::coll
