// Rabenseifner's AllReduce: a reduce-scatter by recursive halving, then an allgather by
// recursive doubling, for mid-sized buffers on many ranks.
//
// Terms. p is the largest power of two <= n. Ranks p..n-1 first hand their input (scaled, for
// PreMulSum) to rank r-p, which reduces it into its own; at the end they receive the result
// back, as in recursive doubling (direct.cc). Among the p ranks, at the step of distance
// d = p/2, p/4, ..., 1 rank r keeps one half of its current range (the lower when r & d is
// 0), sends the other half to rank r ^ d, and reduces the half it keeps with what r ^ d sends;
// after log2 p steps rank r holds one p-th of the result, reduced over all ranks, and the last
// step divides for Avg. The allgather retraces the steps, d = 1, 2, ..., p/2: each rank sends
// its range to r ^ d and receives r ^ d's range in its place in the result.
//
// 2 log2 p steps (+2 when n is not a power of two); each rank sends and receives 2(p-1)/p N*E
// bytes (+N*E each way for the fold), as the ring does, in log2 p waits per phase instead of
// n-1. Every element is reduced on one rank in one fixed order and then copied, so all ranks
// hold the same bits.
#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

using core::Deps;
using core::reduceAction;

void rabenseifnerAllReduce(const Args& a, const JobShape& t, const Plan&, core::Scratch& scratch, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count, bytes = N * E;
  const Reducer red{a, n};
  if (N == 0 || red.single(a.sendbuf, b)) return;
  int steps = 0;
  const int p = floorPow2(n, &steps);
  // The input to reduce: this rank's (scaled, for PreMulSum), with the extra rank's folded in.
  const void* cur = nullptr;
  int32_t have = -1;
  if (!foldIn(a, t, p, scratch, b, &cur, &have)) return;
  // Recursive halving. keep[i], give[i]: the ranges of step i; gave[i]: the send of give[i].
  InlineVec<Range, 32> keep, give;
  InlineVec<int32_t, 32> gave;
  Range range{0, N};
  for (int d = p / 2; d >= 1; d /= 2) {
    const int partner = r ^ d;
    const size_t mid = range.begin + range.size() / 2;
    const Range lo{range.begin, mid}, hi{mid, range.end};
    const Range k = (r & d) ? hi : lo, g = (r & d) ? lo : hi;
    gave.push_back(g.size() ? b.send(partner, at(cur, g.begin, E), g.size() * E, Deps{have}) : -1);
    int32_t got = -1;
    if (k.size()) {
      void* in = scratch.get(k.size() * E);
      got = b.recv(partner, in, k.size() * E, Deps{have},
                   reduceAction(at(a.recvbuf, k.begin, E), at(cur, k.begin, E), in, k.size(), red.spec(false, d == 1)));
    }
    have = got;
    cur = a.recvbuf;
    keep.push_back(k);
    give.push_back(g);
    range = k;
  }
  // Recursive doubling: the ranges back, in reverse. A send waits for what this rank holds
  // (the last send, which waited for all before it, and the last receive); a receive for the
  // send that read the same range at the step of the same distance.
  Deps held{have, -1};
  for (int i = steps - 1; i >= 0; --i) {
    const int partner = r ^ (p / 2 >> i);
    const Range k = keep[static_cast<size_t>(i)], g = give[static_cast<size_t>(i)];
    const int32_t sent = k.size() ? b.send(partner, at(a.recvbuf, k.begin, E), k.size() * E, held) : -1;
    const int32_t got = g.size() ? b.recv(partner, at(a.recvbuf, g.begin, E), g.size() * E,
                                          Deps{gave[static_cast<size_t>(i)]})
                                 : -1;
    held = Deps{sent, got};
  }
  if (r < n - p) b.send(r + p, a.recvbuf, bytes, held);
}

namespace {
// 2 log2 p waits (+2 for the fold), 2(p-1)/p N*E bytes each way and a reduction of (p-1)/p of
// the buffer (3 times its bytes of memory traffic); the fold costs a whole buffer each way.
class Rabenseifner final : public Algorithm {
 public:
  Algo id() const override { return Algo::Rabenseifner; }
  bool implements(Kind k) const override { return k == Kind::AllReduce; }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype));
    int steps = 0;
    const int pw = floorPow2(t.nranks, &steps);
    const double p = pw, part = (p - 1) / p;
    const bool fold = pw != t.nranks;
    const LinkCost& l = t.slowest;
    auto move = [&](double bytes) {
      return t.stage ? bytesUs(6 * bytes, c.memoryGBps, t) + bytesUs(bytes, c.stage.gbps, t) : bytesUs(bytes, l.gbps, t);
    };
    const double f = c.factor("rabenseifner", a.kind);
    double us = c.base("rabenseifner", a.kind) + 2 * steps * waitUs(l, t, c) +
                f * (move(2 * part * N) + bytesUs(3 * part * N, c.memoryGBps, t));
    if (fold) us += 2 * waitUs(l, t, c) + f * (2 * move(N) + bytesUs(3 * N, c.memoryGBps, t));
    return us;
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    rabenseifnerAllReduce(a, t, p, s, b);
  }
};
}  // namespace

const Algorithm& algorithmRabenseifner() {
  static const Rabenseifner a;
  return a;
}

}  // namespace hora::coll
