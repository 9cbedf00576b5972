// Gather and Scatter, as NCCL's: Gather brings every rank's block of N elements to the root,
// rank i's at i*N of the root's result; Scatter sends block i of the root's input to rank i. Two
// algorithms each (the algorithm objects are the direct one, direct.cc, and the binomial one,
// binomial.cc); the shared stage's flat algorithm (stage.cc) takes small lone calls on one host.
//
// Terms. n ranks, root R, blocks of N elements of E bytes, chunks of C elements (the plan's
// chunk). Position q = (rank - R) mod n; the root's big buffer holds the blocks in rank order,
// so position p's block is at ((p + R) mod n) * N.
//
// Linear (direct). Gather: every other rank sends its block to the root, which receives each
// straight into its place; Scatter: the root sends block j to rank j, straight into its result.
// Every message is cut into chunks of C (as p2p.cc cuts one), so a large block streams while
// the n-1 transfers share the root's link. The root moves (n-1) N*E, every other rank N*E: the
// fewest bytes any algorithm can move, in one step, but the root waits for (or on) n-1 ranks.
//
// Binomial. The tree of binomial.cc over positions: position q's subtree holds the positions
// [q, q + size(q)), size(q) = min(lowbit(q), n - q). Gather: a leaf sends its block to its
// parent; an inner rank copies its block to the front of a scratch buffer of size(q) blocks in
// position order, receives each child's subtree into its place behind it, and sends the whole
// to its parent; the root receives its children's subtrees straight into the result. Scatter is
// the reverse: the root sends each child its subtree's blocks (the largest subtree first); an
// inner rank receives its subtree into scratch, forwards each child's part and copies its own
// block out; a leaf receives its block straight into its result. ceil(log2 n) steps. The root
// still moves (n-1) N*E and rank q moves size(q) N*E out and (size(q)-1) N*E in (Gather; the
// reverse for Scatter), so all ranks together move N*E times the sum of the subtree sizes,
// (n/2) log2 n blocks for n a power of two, against the linear algorithm's n-1: fewer waits,
// more bytes.
//
// Pieces. A subtree's positions are ranks R.. up to n-1 and then 0.. again: in the root's
// buffer the run of positions breaks where position n-R is rank 0. Every message of positions
// [c, c + s) is cut there, and each side of the cut into chunks of C; both ends cut alike, so
// the root receives (or sends) every piece in its place. An inner rank forwards chunk by chunk:
// each piece it sends waits only for the pieces that filled its bytes.
#include <algorithm>

#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

using core::Deps;
using core::ProgramBuilder;
using core::reduceAction;

namespace {

// This rank's own block into (Gather) or out of (Scatter) the root's big buffer, unless the
// call is in place there.
void copyOwn(const Args& a, int n, void* dst, const void* src, ProgramBuilder& b) {
  if (dst != src) b.local(reduceAction(dst, src, nullptr, a.count, Reducer{a, n}.spec(false, false)));
}

// The root's big buffer: its result (Gather) or input (Scatter).
void* bigOf(const Args& a) { return a.kind == Kind::Gather ? a.recvbuf : const_cast<void*>(a.sendbuf); }

}  // namespace

void linearGatherScatter(const Args& a, const JobShape& t, const Plan& p, ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank, R = a.root;
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (N == 0) return;
  const bool gather = a.kind == Kind::Gather;
  const size_t C = chunkElems(a, p), chunks = chunksIn(N, C);
  const Range all{0, N};
  if (r != R) {
    for (size_t c = 0; c < chunks; ++c) {
      const Range k = chunkOf(all, C, c);
      if (gather) b.send(R, at(a.sendbuf, k.begin, E), k.size() * E);
      else b.recv(R, at(a.recvbuf, k.begin, E), k.size() * E);
    }
    return;
  }
  uint8_t* big = static_cast<uint8_t*>(bigOf(a));
  uint8_t* own = at(big, static_cast<size_t>(R) * N, E);
  if (gather) copyOwn(a, n, own, a.sendbuf, b);
  else copyOwn(a, n, a.recvbuf, own, b);
  // Rank by rank from the root's successor; the executor has every rank's chunks in flight.
  for (int k = 1; k < n; ++k) {
    const int j = mod(R + k, n);
    uint8_t* block = at(big, static_cast<size_t>(j) * N, E);
    for (size_t c = 0; c < chunks; ++c) {
      const Range x = chunkOf(all, C, c);
      if (gather) b.recv(j, block + x.begin * E, x.size() * E);
      else b.send(j, block + x.begin * E, x.size() * E);
    }
  }
}

namespace {

// The pieces of the message of positions [c, c + s), in elements of the message: cut where
// position w = n - R is rank 0, and into chunks of C; each given to `each`, in order.
template <class Each>
void forPieces(int c, int s, int w, size_t N, size_t C, Each&& each) {
  const size_t total = static_cast<size_t>(s) * N;
  const size_t cut = c < w && w < c + s ? static_cast<size_t>(w - c) * N : total;
  for (const Range& run : {Range{0, cut}, Range{cut, total}})
    for (size_t k = 0; k < chunksIn(run.size(), C); ++k) each(chunkOf(run, C, k));
}
// How many pieces forPieces gives at most for a message of m elements.
size_t mostPieces(size_t m, size_t C) { return m / C + 2; }

// Where element e of the message of positions from c lies in the root's big buffer (a piece
// never crosses the cut, so its elements follow on).
uint8_t* inBig(void* big, int n, int R, size_t N, size_t E, int c, size_t e) {
  const int rank = mod(c + static_cast<int>(e / N) + R, n);
  return at(big, static_cast<size_t>(rank) * N + e % N, E);
}

// What filled a scratch buffer: element ranges, in order, and the op that filled each (at most
// `most` of them, in scratch: a call allocates nothing).
struct Filled {
  Range* ranges;
  int32_t* ops;
  size_t n = 0, most;
  Filled(core::Scratch& s, size_t capacity)
      : ranges(s.array<Range>(capacity, Range{0, 0})), ops(s.array<int32_t>(capacity, -1)), most(capacity) {}
  void add(Range x, int32_t op) {
    if (n == most) fail(Errc::Internal, "binomial Gather/Scatter: more than %zu pieces", most);
    ranges[n] = x;
    ops[n++] = op;
  }
  // What waits until every range that overlaps x is filled: the ops themselves, or a join of them.
  Deps before(ProgramBuilder& b, Range x) const {
    const Range* it = std::upper_bound(ranges, ranges + n, x.begin, [](size_t v, const Range& y) { return v < y.end; });
    const Range* end = it;
    while (end != ranges + n && end->begin < x.end) ++end;
    const size_t k = static_cast<size_t>(end - it), from = static_cast<size_t>(it - ranges);
    if (k > 2) return Deps{b.localAll(core::Action{}, ops + from, k, nullptr, 0)};
    return Deps{k ? ops[from] : -1, k > 1 ? ops[from + 1] : -1};
  }
};

}  // namespace

void binomialGatherScatter(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const int n = t.nranks, R = a.root, q = mod(t.rank - R, n), w = n - R;
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (N == 0) return;
  const bool gather = a.kind == Kind::Gather;
  const size_t C = chunkElems(a, p);
  const TreeLinks l = binomialLinks(n, q);  // in positions
  const auto rankOf = [&](int pos) { return mod(pos + R, n); };
  if (q == 0) {  // the root: every piece in its place in the big buffer
    void* big = bigOf(a);
    uint8_t* own = at(big, static_cast<size_t>(R) * N, E);
    if (gather) copyOwn(a, n, own, a.sendbuf, b);
    else copyOwn(a, n, a.recvbuf, own, b);
    for (int c : l.down)
      forPieces(c, binomialSubtree(n, c), w, N, C, [&](const Range& x) {
        uint8_t* there = inBig(big, n, R, N, E, c, x.begin);
        if (gather) b.recv(rankOf(c), there, x.size() * E);
        else b.send(rankOf(c), there, x.size() * E);
      });
    return;
  }
  const int size = binomialSubtree(n, q), up = rankOf(l.up);
  if (size == 1) {  // a leaf: its block, straight from its input or into its result
    forPieces(q, 1, w, N, C, [&](const Range& x) {
      if (gather) b.send(up, at(a.sendbuf, x.begin, E), x.size() * E);
      else b.recv(up, at(a.recvbuf, x.begin, E), x.size() * E);
    });
    return;
  }
  // An inner rank: its subtree's blocks in position order in scratch, its own first.
  uint8_t* tmp = static_cast<uint8_t*>(scratch.get(static_cast<size_t>(size) * N * E));
  const kernels::ReduceSpec copy = Reducer{a, n}.spec(false, false);
  // Every piece of the subtree's message (its own block, then each child's) is added once.
  Filled filled(scratch, mostPieces(static_cast<size_t>(size) * N, C) + 2 * (l.down.size() + 1));
  if (gather) {
    filled.add(Range{0, N}, b.local(reduceAction(tmp, a.sendbuf, nullptr, N, copy)));
    // Children from the nearest (the smallest subtree) on, so that the ranges come in order.
    for (auto c = l.down.rbegin(); c != l.down.rend(); ++c) {
      const size_t off = static_cast<size_t>(*c - q) * N;
      forPieces(*c, binomialSubtree(n, *c), w, N, C, [&](const Range& x) {
        filled.add(Range{off + x.begin, off + x.end}, b.recv(rankOf(*c), tmp + (off + x.begin) * E, x.size() * E));
      });
    }
    forPieces(q, size, w, N, C, [&](const Range& x) { b.send(up, tmp + x.begin * E, x.size() * E, filled.before(b, x)); });
    return;
  }
  forPieces(q, size, w, N, C, [&](const Range& x) { filled.add(x, b.recv(up, tmp + x.begin * E, x.size() * E)); });
  for (int c : l.down) {  // the largest subtree first: it has the most to forward
    const size_t off = static_cast<size_t>(c - q) * N;
    forPieces(c, binomialSubtree(n, c), w, N, C, [&](const Range& x) {
      b.send(rankOf(c), tmp + (off + x.begin) * E, x.size() * E, filled.before(b, Range{off + x.begin, off + x.end}));
    });
  }
  b.local(reduceAction(a.recvbuf, tmp, nullptr, N, copy), filled.before(b, Range{0, N}));
}

}  // namespace hora::coll
