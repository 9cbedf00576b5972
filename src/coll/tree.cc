// Trees: AllReduce by the double binary tree, Broadcast and Reduce by a pipelined binary tree.
//
// Terms. The binary tree is NCCL's: over ranks 0..n-1, rank r's lowest set bit b places it at
// height log2(b); its parent is (r ^ b) | 2b (or r ^ b when that is past the end), its
// children r - b/2 and r + b/2 (the latter, when past the end, moved down to r + b/4, ...).
// Rank 0 is the root, with one child; the odd ranks are the leaves. Depth: ceil(log2 n).
//
// A buffer of N elements of E bytes moves through a tree in chunks of C elements (the plan's
// chunk): while chunk k goes up (or down) one level, chunk k+1 follows one level behind, so a
// tree of depth H takes H + N/C - 1 steps.
//
// Reduce (up): a leaf sends its input (scaled, for PreMulSum); an inner rank receives its
// children's partial results into staging slots and reduces its own input, then the children
// in order, into a slot of its own that it sends to its parent; the root reduces into the
// result, dividing there for Avg. Every element is reduced once on each rank of the tree in a
// fixed order. A non-root never writes its result buffer. Each rank receives up to 2 N*E and
// sends N*E.
//
// Broadcast (down): the root sends each chunk to its children; every other rank receives it
// straight into its result and forwards it. Each rank receives N*E and sends up to 2 N*E.
//
// AllReduce: the double binary tree. Tree 0 is the tree above; tree 1 is its mirror (rank r
// plays n-1-r) when n is even and its shift by one (rank r plays r-1) when n is odd, so that
// the leaves of one are the inner ranks of the other (for odd n rank 0, tree 0's root with one
// child, is inner in both). Each tree reduces half of the buffer to its root and broadcasts the
// result back down: every rank sends and receives about N*E in each direction over
// 2*ceil(log2 n) + N/(2C) - 1 steps, against the ring's 2(n-1), and the result on every rank
// is the root's bits.
//
// Order and deadlock. Messages between two ranks match in the order the programs add them, and
// one pair of ranks may be linked in both trees (parent and child in one, child and parent in
// the other). Every rank therefore adds its ops in one global schedule: at time t, tree 0's
// chunk t up and chunk t-D down, then tree 1's, with D = depth + 1. Each op then waits only
// for ops of earlier times or of the same time and tree, where the chunk flows one way: a
// receive waits for slots freed by chunks long done, a send for the reduction or receive that
// filled it, and a receive of the result for this rank's own send up (in place, that send reads
// the buffer the result overwrites). No wait closes a cycle.
#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

using core::Deps;
using core::ProgramBuilder;
using core::reduceAction;
using core::SlotPool;

namespace {

// NCCL's binary tree: the links of rank r of n (ncclGetBtree).
TreeLinks btree(int n, int r) {
  TreeLinks l;
  int bit = 1;
  while (bit < n && !(bit & r)) bit <<= 1;
  if (r == 0) {
    if (n > 1) l.down.push_back(bit >> 1);
    return l;
  }
  int up = (r ^ bit) | (bit << 1);
  if (up >= n) up = r ^ bit;
  l.up = up;
  int low = bit >> 1;
  if (low == 0) return l;
  l.down.push_back(r - low);
  while (low && r + low >= n) low >>= 1;
  if (low) l.down.push_back(r + low);
  return l;
}

// The complementary tree (ncclGetDtree): the mirror for even n, the shift by one for odd n.
TreeLinks dtree(int n, int r) {
  const bool odd = n % 2 == 1;
  auto there = [&](int x) { return odd ? mod(x - 1, n) : n - 1 - x; };
  auto back = [&](int x) { return odd ? mod(x + 1, n) : n - 1 - x; };
  TreeLinks l = btree(n, there(r));
  if (l.up >= 0) l.up = back(l.up);
  for (int& d : l.down) d = back(d);
  return l;
}

// One tree's pipeline over one range of the buffers, chunk by chunk.
class TreePipe {
 public:
  TreePipe(const Args& a, const Reducer& red, const TreeLinks& l, Range range, size_t C, int slots, core::Scratch& s,
           ProgramBuilder& b)
      : a_(a), red_(red), l_(l), range_(range), C_(C), E_(dataTypeSize(a.dtype)), b_(b),
        own_(s, l.up >= 0 ? slots : 1, l.up >= 0 ? C * E_ : 64), chunks_(chunksIn(range.size(), C)) {
    for (size_t i = 0; i < l.down.size(); ++i) fromChild_.emplace_back(s, slots, C * E_);
    if (chunks_ > kInlineChunks) many_.assign(chunks_, -1);
    else for (size_t c = 0; c < chunks_; ++c) few_[c] = -1;
    inputRead_ = chunks_ > kInlineChunks ? many_.data() : few_;
  }
  TreePipe(const TreePipe&) = delete;
  TreePipe& operator=(const TreePipe&) = delete;
  size_t chunks() const { return chunks_; }

  // Chunk c toward the root: the root's result lands in the result buffer.
  void up(size_t c) {
    const Range k = chunkOf(range_, C_, c);
    if (!k.size()) return;
    const size_t bytes = k.size() * E_;
    const uint8_t* in = at(a_.sendbuf, k.begin, E_);
    const bool root = l_.up < 0;
    if (l_.down.empty()) {  // a leaf: its input, scaled for PreMulSum
      if (!red_.scalesInput()) {
        inputRead_[c] = b_.send(l_.up, in, bytes);
        return;
      }
      SlotPool::Slot sl = own_.take();
      inputRead_[c] = b_.local(reduceAction(sl.ptr, in, nullptr, k.size(), red_.spec(true, false)), Deps{sl.freeAfter});
      own_.release(sl, b_.send(l_.up, sl.ptr, bytes, Deps{inputRead_[c]}));
      return;
    }
    InlineVec<int32_t, TreeLinks::kMostChildren + 1> deps;
    InlineVec<const void*, TreeLinks::kMostChildren + 1> srcs{in};
    InlineVec<SlotPool::Slot, TreeLinks::kMostChildren> taken;
    for (size_t i = 0; i < l_.down.size(); ++i) {
      SlotPool::Slot sl = fromChild_[i].take();
      deps.push_back(b_.recv(l_.down[i], sl.ptr, bytes, Deps{sl.freeAfter}));
      srcs.push_back(sl.ptr);
      taken.push_back(sl);
    }
    SlotPool::Slot mine{nullptr, -1, 0};
    void* dst = at(a_.recvbuf, k.begin, E_);
    if (!root) {
      mine = own_.take();
      deps.push_back(mine.freeAfter);
      dst = mine.ptr;
    }
    const int32_t sum = b_.localAll(reduceAction(dst, nullptr, nullptr, k.size(), red_.spec(true, root)), deps.data(),
                                    deps.size(), srcs.data(), srcs.size());
    for (size_t i = 0; i < taken.size(); ++i) fromChild_[i].release(taken[i], sum);
    inputRead_[c] = sum;
    if (!root) own_.release(mine, b_.send(l_.up, dst, bytes, Deps{sum}));
  }

  // Chunk c away from the root, into every other rank's result. The root sends from `rootSrc`
  // (its result, or the input of a Broadcast) once up(c) is done; another rank receives once
  // up(c) has read its input (in place, the result overwrites it).
  void down(size_t c, const void* rootSrc) {
    const Range k = chunkOf(range_, C_, c);
    if (!k.size()) return;
    const size_t bytes = k.size() * E_;
    int32_t have = inputRead_[c];
    const uint8_t* src = at(a_.recvbuf, k.begin, E_);
    if (l_.up < 0) src = at(rootSrc, k.begin, E_);
    else have = b_.recv(l_.up, at(a_.recvbuf, k.begin, E_), bytes, Deps{have});
    for (int child : l_.down) b_.send(child, src, bytes, Deps{have});
  }

 private:
  const Args& a_;
  const Reducer& red_;
  const TreeLinks& l_;
  Range range_;
  size_t C_, E_;
  ProgramBuilder& b_;
  SlotPool own_;                                          // partial results sent up (not at the root)
  InlineVec<SlotPool, TreeLinks::kMostChildren> fromChild_;  // partial results of each child
  // Per chunk: the op of up() that last read the input; in place for the chunks of a small call.
  static constexpr size_t kInlineChunks = 16;
  size_t chunks_;
  int32_t few_[kInlineChunks];
  std::vector<int32_t> many_;
  int32_t* inputRead_;
};

}  // namespace

void treeRootedBroadcast(const Args& a, const Plan& p, const TreeLinks& l, core::Scratch& s, ProgramBuilder& b) {
  const size_t N = a.count;
  if (N == 0) return;
  const Reducer red{a, 1};
  if (l.up < 0 && a.sendbuf != a.recvbuf) b.local(reduceAction(a.recvbuf, a.sendbuf, nullptr, N, red.spec(false, false)));
  TreePipe pipe(a, red, l, Range{0, N}, chunkElems(a, p), 1, s, b);
  for (size_t c = 0; c < pipe.chunks(); ++c) pipe.down(c, a.sendbuf);
}

void treeRootedReduce(const Args& a, int nranks, const Plan& p, const TreeLinks& l, core::Scratch& s, ProgramBuilder& b) {
  const Reducer red{a, nranks};
  if (a.count == 0 || red.single(a.sendbuf, b)) return;
  TreePipe pipe(a, red, l, Range{0, a.count}, chunkElems(a, p), p.slots, s, b);
  for (size_t c = 0; c < pipe.chunks(); ++c) pipe.up(c);
}

void treeBroadcast(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, ProgramBuilder& b) {
  const int n = t.nranks;
  treeRootedBroadcast(a, p, unroot(btree(n, mod(t.rank - a.root, n)), a.root, n), s, b);
}

void treeReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, ProgramBuilder& b) {
  const int n = t.nranks;
  treeRootedReduce(a, n, p, unroot(btree(n, mod(t.rank - a.root, n)), a.root, n), s, b);
}

void treeAllReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t N = a.count;
  const Reducer red{a, n};
  if (N == 0 || red.single(a.sendbuf, b)) return;
  const size_t C = chunkElems(a, p), half = (N + 1) / 2;
  const TreeLinks l0 = btree(n, r), l1 = dtree(n, r);
  TreePipe t0(a, red, l0, Range{0, half}, C, p.slots, s, b), t1(a, red, l1, Range{half, N}, C, p.slots, s, b);
  const size_t D = static_cast<size_t>(ceilLog2(n)) + 1, chunks = std::max(t0.chunks(), t1.chunks());
  for (size_t time = 0; time < chunks + D; ++time)
    for (TreePipe* tp : {&t0, &t1}) {
      if (time < chunks) tp->up(time);
      if (time >= D) tp->down(time - D, a.recvbuf);
    }
}

namespace {
// Pipelined trees: H = ceil(log2 n) levels, then a step per further chunk; a step costs a wait
// and the bytes an inner rank moves each way: two chunks (to or from its two children) for
// Broadcast and Reduce; for AllReduce, where both trees run at once and chunks go up and down
// at once, three in the tree where it is inner and one in the other, per chunk of its half.
// Reducing costs three chunks of memory traffic per step.
class Tree final : public Algorithm {
 public:
  Algo id() const override { return Algo::Tree; }
  bool implements(Kind k) const override { return k == Kind::AllReduce || k == Kind::Broadcast || k == Kind::Reduce; }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double E = static_cast<double>(dataTypeSize(a.dtype)), H = ceilLog2(t.nranks), C = 512.0 * 1024;
    // AllReduce: each tree carries half the buffer up and then down.
    const double N = a.count * E / (a.kind == Kind::AllReduce ? 2 : 1);
    const double chunk = std::min(N, C), chunks = std::max(1.0, std::ceil(N / C));
    const double levels = a.kind == Kind::AllReduce ? 2 * H : H;
    const LinkCost& l = t.slowest;
    const double perStep = (a.kind == Kind::AllReduce ? 4 : 2) * chunk;
    const double move = t.stage ? bytesUs(6 * perStep, c.memoryGBps, t) + bytesUs(perStep, c.stage.gbps, t)
                                : bytesUs(perStep, l.gbps, t);
    const double reduce = a.kind == Kind::Broadcast ? 0 : bytesUs(3 * chunk, c.memoryGBps, t);
    return c.base("tree", a.kind) + (levels + chunks - 1) * (waitUs(l, t, c) + c.factor("tree", a.kind) * (move + reduce));
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, ProgramBuilder& b) const override {
    if (a.kind == Kind::AllReduce) treeAllReduce(a, t, p, s, b);
    else if (a.kind == Kind::Broadcast) treeBroadcast(a, t, p, s, b);
    else treeReduce(a, t, p, s, b);
  }
};
}  // namespace

const Algorithm& algorithmTree() {
  static const Tree a;
  return a;
}

}  // namespace hora::coll
