// Binomial trees: Broadcast and Reduce in ceil(log2 n) steps, for small buffers on many ranks;
// Gather and Scatter over the same tree are in gather.cc.
//
// Terms. Position q = (rank - root) mod n. Rank q's parent is q minus its lowest set bit; its
// children are q + 2^j for every 2^j below that bit (below the first power of two >= n at the
// root) with q + 2^j < n. The root has ceil(log2 n) children, and a message reaches every rank
// after ceil(log2 n) steps, against the chain's n-1 and the binary tree's 2 per level.
//
// Broadcast: each rank receives N*E bytes (the root none) and sends N*E to each child, the
// largest subtree first; the root sends ceil(log2 n) N*E. Reduce: the reverse, each rank
// reducing its input and its children's partial results in one pass (children in order) before
// sending the sum to its parent. Both move in chunks of the plan's chunk through the pipeline
// of tree.cc, so a large buffer streams, but the root's link carries log2(n) times the buffer:
// the chain wins there.
#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

TreeLinks binomialLinks(int n, int q) {
  TreeLinks l;
  int top = 1;
  while (top < n) top <<= 1;
  int below = top;  // children are q + m for m < below
  if (q > 0) {
    below = q & -q;
    l.up = q - below;
  }
  for (int m = below >> 1; m > 0; m >>= 1)
    if (q + m < n) l.down.push_back(q + m);
  return l;
}

int binomialSubtree(int n, int q) {
  if (q == 0) return n;
  return std::min(q & -q, n - q);
}

void binomialBroadcast(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) {
  const int n = t.nranks;
  treeRootedBroadcast(a, p, unroot(binomialLinks(n, mod(t.rank - a.root, n)), a.root, n), s, b);
}

void binomialReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) {
  const int n = t.nranks;
  treeRootedReduce(a, n, p, unroot(binomialLinks(n, mod(t.rank - a.root, n)), a.root, n), s, b);
}

namespace {
// Gather and Scatter (gather.cc): ceil(log2 n) waits. The root's link carries (n-1) N*E as the
// linear algorithm's does, but each level stores and forwards: a chunk (or a subtree smaller than
// one) per level before the pipeline is full, and on one host all ranks' forwarding (the sum of the
// subtree sizes, in blocks, against the linear algorithm's n-1) shares the host's memory and cores.
double gatherUs(const Args& a, const JobShape& t, const Costs& c) {
  const int n = t.nranks;
  const double N = static_cast<double>(a.count * dataTypeSize(a.dtype)), C = 512.0 * 1024;
  const LinkCost& l = t.slowest;
  auto move = [&](double bytes) {
    return t.stage ? bytesUs(6 * bytes, c.memoryGBps, t) + bytesUs(bytes, c.stage.gbps, t) : bytesUs(bytes, l.gbps, t);
  };
  double blocks = n - 1;
  if (t.hosts == 1) {
    blocks = 0;
    for (int q = 1; q < n; ++q) blocks += binomialSubtree(n, q);
  }
  const int levels = ceilLog2(n);
  // Inner ranks copy their own block in (Gather) or out (Scatter) of their scratch; the root its own.
  return c.base("binomial", a.kind) + levels * waitUs(l, t, c) +
         c.factor("binomial", a.kind) *
             (move(blocks * N) + std::max(0, levels - 1) * move(std::min(N, C)) + bytesUs(2 * N, c.memoryGBps, t));
}

// Broadcast and Reduce: ceil(log2 n) levels, but the root sends (or receives) every chunk once
// per level: the root's link is busy ceil(log2 n) N*E, and that is the critical path.
class Binomial final : public Algorithm {
 public:
  Algo id() const override { return Algo::Binomial; }
  bool implements(Kind k) const override {
    return k == Kind::Broadcast || k == Kind::Reduce || k == Kind::Gather || k == Kind::Scatter;
  }
  const char* unfit(const Args& a, const JobShape& t, bool) const override {
    if (a.kind == Kind::Gather || a.kind == Kind::Scatter) return nullptr;  // nothing reduced: any number of ranks
    return t.nranks > (1 << (kernels::kMaxSources - 1)) ? "its root reduces every child at once, 2^15 ranks at most"
                                                         : nullptr;
  }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    if (a.kind == Kind::Gather || a.kind == Kind::Scatter) return gatherUs(a, t, c);
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype)), C = 512.0 * 1024;
    const double chunk = std::min(N, C), chunks = std::max(1.0, std::ceil(N / C)), levels = ceilLog2(t.nranks);
    const LinkCost& l = t.slowest;
    const double move = t.stage ? bytesUs(6 * chunk, c.memoryGBps, t) + bytesUs(chunk, c.stage.gbps, t)
                                : bytesUs(chunk, l.gbps, t);
    const double reduce = a.kind == Kind::Reduce ? bytesUs(2 * chunk, c.memoryGBps, t) : 0;
    return c.base("binomial", a.kind) + levels * chunks * (waitUs(l, t, c) + c.factor("binomial", a.kind) * (move + reduce));
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    if (a.kind == Kind::Broadcast) binomialBroadcast(a, t, p, s, b);
    else if (a.kind == Kind::Reduce) binomialReduce(a, t, p, s, b);
    else binomialGatherScatter(a, t, p, s, b);
  }
};
}  // namespace

const Algorithm& algorithmBinomial() {
  static const Binomial a;
  return a;
}

}  // namespace hora::coll
