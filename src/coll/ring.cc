// Ring algorithms: AllReduce, AllGather, ReduceScatter.
//
// Terms. n ranks sit on a ring; rank r sends only to next = r+1 and receives only from
// prev = r-1 (mod n). A buffer of N elements of E bytes is cut into n segments of about N/n
// elements (segment(), common.h) and every segment into chunks of C elements (the plan's
// chunk), so that while chunk k of one step is on the wire, chunk k-1 is being reduced and
// chunk k+1 is being sent: the steps pipeline.
//
// ReduceScatter (RS), n-1 steps. At step s rank r sends segment r-s-1 and receives segment
// r-s-2, reducing what arrives into its own contribution; after step n-2 rank r holds segment r
// reduced over all ranks. Each rank sends and receives (n-1)/n * N*E bytes.
//
// AllGather (AG), n-1 steps. At step t rank r forwards block r-t and receives block r-t-1
// straight into its place in the result. Each rank sends and receives (n-1)/n of the result.
//
// AllReduce = RS then AG over the same segments (segment indices shifted by one so that rank r
// ends RS owning segment r+1): each rank sends and receives 2(n-1)/n * N*E bytes in 2(n-1)
// steps, the bandwidth optimum for a ring. Every segment is reduced in one fixed order and
// then copied, so every rank ends with bit-identical results.
//
// Memory. Out of place, a chunk of the result is received straight into the result buffer
// and reduced there with the rank's input; in place, it lands in one of `slots` staging
// buffers first. ReduceScatter's partial sums live in staging buffers (its result buffer
// holds one segment only). A staging buffer is reused only after the op that last read it has
// completed, which bounds the pipeline's depth.
#include <vector>

#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

using core::Action;
using core::Deps;
using core::ProgramBuilder;
using core::reduceAction;
using core::SlotPool;

void ringAllReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  const Reducer red{a, n};
  if (N == 0) return;
  if (red.single(a.sendbuf, b)) return;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const bool inPlace = a.sendbuf == a.recvbuf;
  const size_t C = chunkElems(a, p);
  size_t maxChunks = 0;
  for (int s = 0; s < n; ++s) maxChunks = std::max(maxChunks, chunksIn(segment(N, n, s).size(), C));

  // rsRecv[s][c], rsSend[s][c], agRecv[t][c]: op ids, for dependencies (in scratch).
  struct Grid {
    int32_t* ids;
    size_t width;
    int32_t* operator[](int s) const { return ids + static_cast<size_t>(s) * width; }
  };
  auto grid = [&] { return Grid{scratch.array<int32_t>(static_cast<size_t>(n - 1) * maxChunks, -1), maxChunks}; };
  const Grid rsRecv = grid(), rsSend = grid(), agRecv = grid();
  SlotPool slots(scratch, inPlace ? p.slots : 1, inPlace ? C * E : 64);  // in place only

  // PreMulSum sends its own segment scaled: scale it into the result buffer first.
  const Range own = segment(N, n, r);
  int32_t scaled = -1;
  if (red.scalesInput())
    scaled = b.local(reduceAction(at(a.recvbuf, own.begin, E), at(a.sendbuf, own.begin, E), nullptr,
                                  own.size(), red.spec(true, false)));
  const void* firstSrc = red.scalesInput() ? a.recvbuf : a.sendbuf;

  for (int s = 0; s < n - 1; ++s) {
    const Range sseg = segment(N, n, mod(r - s, n)), rseg = segment(N, n, mod(r - s - 1, n));
    const bool last = s == n - 2;
    for (size_t c = 0; c < maxChunks; ++c) {
      Range sc = chunkOf(sseg, C, c);
      if (sc.size()) {
        if (s == 0) rsSend[s][c] = b.send(next, at(firstSrc, sc.begin, E), sc.size() * E, Deps{scaled});
        else rsSend[s][c] = b.send(next, at(a.recvbuf, sc.begin, E), sc.size() * E, Deps{rsRecv[s - 1][c]});
      }
      Range rc = chunkOf(rseg, C, c);
      if (rc.size()) {
        uint8_t* dst = at(a.recvbuf, rc.begin, E);
        if (!inPlace) {
          rsRecv[s][c] = b.recv(prev, dst, rc.size() * E, Deps{},
                                reduceAction(dst, at(a.sendbuf, rc.begin, E), dst, rc.size(), red.spec(true, last)));
        } else {
          SlotPool::Slot slot = slots.take();
          rsRecv[s][c] = b.recv(prev, slot.ptr, rc.size() * E, Deps{slot.freeAfter},
                                reduceAction(dst, dst, slot.ptr, rc.size(), red.spec(true, last)));
          slots.release(slot, rsRecv[s][c]);
        }
      }
    }
  }
  for (int s = 0; s < n - 1; ++s) {
    const Range sseg = segment(N, n, mod(r + 1 - s, n)), rseg = segment(N, n, mod(r - s, n));
    for (size_t c = 0; c < maxChunks; ++c) {
      Range sc = chunkOf(sseg, C, c);
      if (sc.size())
        b.send(next, at(a.recvbuf, sc.begin, E), sc.size() * E,
               Deps{s == 0 ? rsRecv[n - 2][c] : agRecv[s - 1][c]});
      Range rc = chunkOf(rseg, C, c);
      // The chunk being overwritten was last read by RS's send at the same step.
      if (rc.size()) agRecv[s][c] = b.recv(prev, at(a.recvbuf, rc.begin, E), rc.size() * E, Deps{rsSend[s][c]});
    }
  }
}

void ringAllGather(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (N == 0) return;
  uint8_t* mine = at(a.recvbuf, static_cast<size_t>(r) * N, E);
  if (a.sendbuf != mine) b.local(reduceAction(mine, a.sendbuf, nullptr, N, Reducer{a, n}.spec(false, false)));
  if (n == 1) return;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t C = chunkElems(a, p), chunks = chunksIn(N, C);
  const Range all{0, N};
  int32_t* prevRecv = scratch.array<int32_t>(chunks, -1);
  int32_t* thisRecv = scratch.array<int32_t>(chunks, -1);
  for (int s = 0; s < n - 1; ++s) {
    const size_t sblk = static_cast<size_t>(mod(r - s, n)), rblk = static_cast<size_t>(mod(r - s - 1, n));
    for (size_t c = 0; c < chunks; ++c) {
      Range k = chunkOf(all, C, c);
      if (s == 0) b.send(next, at(a.sendbuf, k.begin, E), k.size() * E);
      else b.send(next, at(a.recvbuf, sblk * N + k.begin, E), k.size() * E, Deps{prevRecv[c]});
      thisRecv[c] = b.recv(prev, at(a.recvbuf, rblk * N + k.begin, E), k.size() * E);
    }
    std::swap(prevRecv, thisRecv);
  }
}

void ringReduceScatter(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count;  // N: elements per rank
  const Reducer red{a, n};
  if (N == 0) return;
  const uint8_t* ownIn = at(a.sendbuf, static_cast<size_t>(r) * N, E);
  if (red.single(ownIn, b)) return;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  const bool inPlace = ownIn == a.recvbuf;
  const size_t C = chunkElems(a, p), chunks = chunksIn(N, C);
  const Range all{0, N};
  // Partial sums travel through staging buffers, two per chunk of a window of W chunks: the
  // sum that arrives at step s lands in buffer s%2 and is forwarded at step s+1 from there, so
  // an arrival waits only for the send of the step before (which read that buffer), never for
  // the send of its own step, whose completion may need the next rank to move first: every wait
  // points to an earlier step, and the ring cannot deadlock. Windows bound the staging memory
  // to 2W chunks.
  const size_t W = std::min(chunks, std::max<size_t>(static_cast<size_t>(p.slots), 16));
  uint8_t** buf = scratch.array<uint8_t*>(2 * W, nullptr);
  for (size_t i = 0; i < 2 * W; ++i) buf[i] = static_cast<uint8_t*>(scratch.get(C * E));
  int32_t* lastUse = scratch.array<int32_t>(2 * W, -1);  // must finish before a rewrite
  int32_t* holder = scratch.array<int32_t>(W, -1);

  for (size_t w0 = 0; w0 < chunks; w0 += W) {
    const size_t w1 = std::min(chunks, w0 + W);
    for (int s = 0; s < n - 1; ++s) {
      const size_t sblk = static_cast<size_t>(mod(r - s - 1, n)), rblk = static_cast<size_t>(mod(r - s - 2, n));
      const bool last = s == n - 2;
      for (size_t c = w0; c < w1; ++c) {
        const size_t i = c - w0;
        const Range k = chunkOf(all, C, c);
        const size_t bytes = k.size() * E;
        // Send: this rank's input block at step 0 (scaled into buffer 1 for PreMulSum), then the
        // partial sum that arrived at the previous step.
        if (s == 0) {
          const uint8_t* src = at(a.sendbuf, sblk * N + k.begin, E);
          if (red.scalesInput()) {
            const size_t b1 = 2 * i + 1;
            int32_t scale = b.local(reduceAction(buf[b1], src, nullptr, k.size(), red.spec(true, false)), Deps{lastUse[b1]});
            lastUse[b1] = b.send(next, buf[b1], bytes, Deps{scale});
          } else {
            b.send(next, src, bytes);
          }
        } else {
          const size_t old = 2 * i + static_cast<size_t>((s - 1) % 2);
          lastUse[old] = b.send(next, buf[old], bytes, Deps{holder[i]});
        }
        // Receive a partial sum and add this rank's input to it.
        const uint8_t* in = at(a.sendbuf, rblk * N + k.begin, E);
        const size_t cur = 2 * i + static_cast<size_t>(s % 2);
        if (!last) {
          holder[i] = lastUse[cur] = b.recv(prev, buf[cur], bytes, Deps{lastUse[cur]},
                                            reduceAction(buf[cur], in, buf[cur], k.size(), red.spec(true, false)));
        } else if (!inPlace) {
          uint8_t* dst = at(a.recvbuf, k.begin, E);
          b.recv(prev, dst, bytes, Deps{}, reduceAction(dst, in, dst, k.size(), red.spec(true, true)));
        } else {
          uint8_t* dst = at(a.recvbuf, k.begin, E);
          lastUse[cur] = b.recv(prev, buf[cur], bytes, Deps{lastUse[cur]},
                                reduceAction(dst, dst, buf[cur], k.size(), red.spec(true, true)));
        }
      }
    }
  }
}

namespace {
// Through memory, the share of an AllGather chunk's traffic that the ring pays when it forwards
// the chunk while still in cache (the AllReduce's "ring" factor, cost.h, says as much of a chunk
// reduced while in cache).
constexpr double kForwardedFromCache = 0.6;

// The ring: 2(n-1) steps for AllReduce, n-1 for the others, each moving a block of N/n (the
// result's N for AllGather) in chunks; every message waits for one on the link.
class Ring final : public Algorithm {
 public:
  Algo id() const override { return Algo::Ring; }
  bool implements(Kind k) const override {
    return k == Kind::AllReduce || k == Kind::AllGather || k == Kind::ReduceScatter;
  }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double n = t.nranks, E = static_cast<double>(dataTypeSize(a.dtype));
    // Bytes of the block each step moves, and the steps.
    const double block = a.kind == Kind::AllReduce ? a.count * E / n : a.count * E;
    const double steps = (a.kind == Kind::AllReduce ? 2 : 1) * (n - 1);
    const double reducing = a.kind == Kind::AllGather ? 0 : n - 1;  // steps that reduce
    const LinkCost& l = t.slowest;
    const double chunks = std::max(1.0, std::ceil(block / static_cast<double>(512 * 1024)));
    const bool memory = t.stage != nullptr;
    // Through memory an AllGather's chunk is forwarded while still in cache, as an AllReduce's
    // is reduced (kForwardedFromCache): 4 processes, 1-16 MiB in a group, the ring 10-20%
    // ahead of rd, which moves as many bytes. Over a network the bytes cost what they move: 4
    // ranks over TCP on one host, rd 1.3-1.6x faster than the ring from 64 KiB to 4 MiB.
    const double cached = memory && a.kind == Kind::AllGather ? kForwardedFromCache : 1;
    const double move = memory ? cached * (bytesUs(6 * block, c.memoryGBps, t) + bytesUs(block, c.stage.gbps, t))
                               : bytesUs(block, l.gbps, t);
    return c.base("ring", a.kind) + steps * chunks * waitUs(l, t, c) +
           c.factor("ring", a.kind) * (steps * move + reducing * bytesUs(3 * block, c.memoryGBps, t));
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, ProgramBuilder& b) const override {
    if (buildInHostOrder(*this, a, t, p, s, b)) return;
    if (a.kind == Kind::AllReduce) ringAllReduce(a, t, p, s, b);
    else if (a.kind == Kind::AllGather) ringAllGather(a, t, p, s, b);
    else ringReduceScatter(a, t, p, s, b);
  }
};
}  // namespace

const Algorithm& algorithmRing() {
  static const Ring a;
  return a;
}

}  // namespace hora::coll
