// Bruck's AllGather: ceil(log2 n) steps for any n, for small blocks on many ranks.
//
// Terms. Each rank gathers into a staging buffer of n blocks, its own first: after the step of
// distance d = 1, 2, 4, ... its first 2d blocks (at most n) are the blocks of ranks r, r+1, ...
// At that step rank r sends its first min(d, n-d) blocks to rank r-d and receives as many from
// rank r+d into blocks d, d+1, ...; a final local rotation puts block j at rank r+j's place in
// the result. ceil(log2 n) waits, against the ring's n-1; each rank sends and receives
// (n-1) N*E bytes, as in the ring, but in larger messages that do not pipeline, plus a copy of
// the result.
#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

using core::Deps;
using core::reduceAction;

void bruckAllGather(const Args& a, const JobShape& t, const Plan&, core::Scratch& scratch, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count, block = N * E;
  if (N == 0) return;
  const kernels::ReduceSpec copy = Reducer{a, n}.spec(false, false);
  uint8_t* mine = at(a.recvbuf, static_cast<size_t>(r) * N, E);
  if (n == 1) {
    if (a.sendbuf != mine) b.local(reduceAction(mine, a.sendbuf, nullptr, N, copy));
    return;
  }
  uint8_t* tmp = static_cast<uint8_t*>(scratch.get(static_cast<size_t>(n) * block));
  // A send reads every block received so far: it waits for the send before it (which waited
  // for everything earlier) and the last receive.
  Deps held{b.local(reduceAction(tmp, a.sendbuf, nullptr, N, copy)), -1};
  for (int d = 1; d < n; d *= 2) {
    const size_t cnt = static_cast<size_t>(std::min(d, n - d));
    const int32_t sent = b.send(mod(r - d, n), tmp, cnt * block, held);
    const int32_t got = b.recv(mod(r + d, n), tmp + static_cast<size_t>(d) * block, cnt * block);
    held = Deps{sent, got};
  }
  // The rotation: block j is rank r+j's.
  const size_t head = static_cast<size_t>(n - r);
  b.local(reduceAction(mine, tmp, nullptr, head * N, copy), held);
  if (r > 0) b.local(reduceAction(a.recvbuf, tmp + head * block, nullptr, static_cast<size_t>(r) * N, copy), held);
}

namespace {
// ceil(log2 n) waits; (n-1) N*E bytes each way, and a copy of n N*E into the result.
class Bruck final : public Algorithm {
 public:
  Algo id() const override { return Algo::Bruck; }
  bool implements(Kind k) const override { return k == Kind::AllGather; }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype)), n = t.nranks;
    const LinkCost& l = t.slowest;
    // Step k sends min(2^k, n-2^k) blocks to rank r - 2^k; across hosts the ranks of a host
    // whose partners are elsewhere share its link.
    double wire = 0;
    for (int d = 1; d < t.nranks; d *= 2)
      wire += std::min(d, t.nranks - d) *
              (t.layout ? t.layout->crossingAtOnce(t.nranks, [&](int r) { return mod(r - d, t.nranks); }) : 1);
    const double move = t.stage ? bytesUs(6 * (n - 1) * N, c.memoryGBps, t) + bytesUs((n - 1) * N, c.stage.gbps, t)
                                : bytesUs(wire * N, l.gbps, t);
    return c.base("bruck", a.kind) + ceilLog2(t.nranks) * waitUs(l, t, c) +
           c.factor("bruck", a.kind) * (move + bytesUs(2 * n * N, c.memoryGBps, t));
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    bruckAllGather(a, t, p, s, b);
  }
};
}  // namespace

const Algorithm& algorithmBruck() {
  static const Bruck a;
  return a;
}

}  // namespace hora::coll
