// Rooted collectives as pipelined chains: Broadcast and Reduce.
//
// Terms. The ranks form a chain ordered from the root: position q = (rank - root) mod n. The
// buffer of N elements of E bytes is cut into chunks of C elements, and chunk k moves along
// the chain while chunk k+1 follows it, so all links are busy at once.
//
// Broadcast. Data flows root -> q=1 -> ... -> q=n-1. Every rank but the root receives the
// buffer once, straight into its result, and every rank but the last forwards it: N*E bytes in
// and out per rank, n-1 + N/C - 1 pipeline steps.
//
// Reduce. Data flows the other way, q=n-1 -> ... -> q=1 -> root: each rank adds its input to
// the partial sum arriving from behind and passes it on; the root's sum is the result. N*E
// bytes in and out per rank, n-1 + N/C - 1 steps; every element is reduced in one fixed order.
// Partial sums of non-root ranks live in `slots` staging buffers (their result buffer is not
// theirs to use); a slot is refilled only after the send that forwarded it has completed.
#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

using core::Deps;
using core::ProgramBuilder;
using core::reduceAction;
using core::SlotPool;

void chainBroadcast(const Args& a, const JobShape& t, const Plan& p, core::Scratch&, ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (N == 0) return;
  const int q = mod(r - a.root, n);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t C = chunkElems(a, p), chunks = chunksIn(N, C);
  const Range all{0, N};
  if (q == 0 && a.sendbuf != a.recvbuf)
    b.local(reduceAction(a.recvbuf, a.sendbuf, nullptr, N, Reducer{a, n}.spec(false, false)));
  for (size_t c = 0; c < chunks; ++c) {
    Range k = chunkOf(all, C, c);
    if (q == 0) {
      if (n > 1) b.send(next, at(a.sendbuf, k.begin, E), k.size() * E);
      continue;
    }
    int32_t got = b.recv(prev, at(a.recvbuf, k.begin, E), k.size() * E);
    if (q < n - 1) b.send(next, at(a.recvbuf, k.begin, E), k.size() * E, Deps{got});
  }
}

void chainReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  const Reducer red{a, n};
  if (N == 0) return;
  const int q = mod(r - a.root, n);
  if (red.single(a.sendbuf, b)) return;
  const int toward = mod(r - 1, n), from = mod(r + 1, n);  // toward the root, from behind
  const size_t C = chunkElems(a, p), chunks = chunksIn(N, C);
  const Range all{0, N};
  const bool inPlace = a.sendbuf == a.recvbuf;
  SlotPool slots(scratch, p.slots, C * E);
  for (size_t c = 0; c < chunks; ++c) {
    Range k = chunkOf(all, C, c);
    const size_t bytes = k.size() * E;
    const uint8_t* in = at(a.sendbuf, k.begin, E);
    if (q == n - 1) {  // the start of the chain: its input, scaled for PreMulSum
      if (!red.scalesInput()) {
        b.send(toward, in, bytes);
        continue;
      }
      SlotPool::Slot sl = slots.take();
      int32_t scale = b.local(reduceAction(sl.ptr, in, nullptr, k.size(), red.spec(true, false)), Deps{sl.freeAfter});
      slots.release(sl, b.send(toward, sl.ptr, bytes, Deps{scale}));
    } else if (q > 0) {  // the middle: add this rank's input and pass it on
      SlotPool::Slot sl = slots.take();
      int32_t got = b.recv(from, sl.ptr, bytes, Deps{sl.freeAfter},
                           reduceAction(sl.ptr, in, sl.ptr, k.size(), red.spec(true, false)));
      slots.release(sl, b.send(toward, sl.ptr, bytes, Deps{got}));
    } else if (!inPlace) {  // the root, out of place: straight into the result
      uint8_t* dst = at(a.recvbuf, k.begin, E);
      b.recv(from, dst, bytes, Deps{}, reduceAction(dst, in, dst, k.size(), red.spec(true, true)));
    } else {  // the root, in place
      SlotPool::Slot sl = slots.take();
      uint8_t* dst = at(a.recvbuf, k.begin, E);
      slots.release(sl, b.recv(from, sl.ptr, bytes, Deps{sl.freeAfter},
                               reduceAction(dst, dst, sl.ptr, k.size(), red.spec(true, true))));
    }
  }
}

namespace {
// The pipelined chain: n-1 + chunks-1 steps of one chunk each.
class Chain final : public Algorithm {
 public:
  Algo id() const override { return Algo::Chain; }
  bool implements(Kind k) const override { return k == Kind::Broadcast || k == Kind::Reduce; }
  // A Broadcast over links among up to kPipelinedMost ranks is predicted as it runs in a
  // sequence of calls: its root gives and returns, each rank receives once and forwards once,
  // and a rank's next call starts while its successor still forwards the last, so a call costs
  // about one wait however many ranks there are (the depth, n-1 waits, is paid once per
  // sequence). Measured with broadcast_perf over TCP on the 2-core machine, us per call, chain
  // against tree and binomial: 3 ranks 4.4 / 6.4 / 7.5 at 8 bytes and 6.5 / 7.1 / 8.2 at 4 KiB;
  // 4 ranks 3.0-5.1 / 7.0-11.3 / 5.6-9.2 at 8 bytes; 8 ranks 9.9 / 16.6 / 12.6 at 8 bytes,
  // 13.9 / 18.6 / 18.6 at 4 KiB; 4 hosts of 2 ranks (network namespaces, the chain in host
  // order) 11-27 us from 8 bytes to 4 KiB against 21-43 for the trees and 56-63 for hier. With
  // more ranks the n-1 waits stay in the prediction: a lone call pays them (63 at 64 ranks,
  // against the trees' 6), and that many has not been measured.
  static constexpr int kPipelinedMost = 8;
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype)), C = 512.0 * 1024;
    const bool pipelined = a.kind == Kind::Broadcast && !t.stage && t.nranks <= kPipelinedMost;
    const double chunk = std::min(N, C), chunks = std::max(1.0, std::ceil(N / C));
    const LinkCost& l = t.slowest;
    const double move = t.stage ? bytesUs(6 * chunk, c.memoryGBps, t) + bytesUs(chunk, c.stage.gbps, t)
                                : bytesUs(chunk, l.gbps, t);
    // In a sequence, a rank in the middle receives and forwards every chunk of every call: two
    // moves of its bytes per chunk, where the pipeline of a lone call overlaps them.
    const double f = c.factor("chain", a.kind);
    if (pipelined) return c.base("chain", a.kind) + waitUs(l, t, c) + f * chunks * 2 * move;
    return c.base("chain", a.kind) + (t.nranks - 1 + chunks - 1) * (waitUs(l, t, c) + f * move);
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, ProgramBuilder& b) const override {
    if (buildInHostOrder(*this, a, t, p, s, b)) return;
    if (a.kind == Kind::Broadcast) chainBroadcast(a, t, p, s, b);
    else chainReduce(a, t, p, s, b);
  }
};
}  // namespace

const Algorithm& algorithmChain() {
  static const Chain a;
  return a;
}

}  // namespace hora::coll
