// Direct AllReduce, for small buffers: every rank sends its whole input to every other rank
// and reduces the n inputs itself, in rank order 0..n-1, so every rank computes the same bits.
//
// One step instead of the ring's 2(n-1): the latency of one message (all n-1 in flight at once)
// plus one n-way reduction. Each rank sends and receives (n-1) * N*E bytes, against the ring's
// 2(n-1)/n * N*E, so it only pays while a message costs its latency, not its bytes. PreMulSum
// sends the input already scaled (a peer does not know this rank's scalar).
#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

using core::Deps;
using core::reduceAction;

void directAllReduce(const Args& a, const JobShape& t, const Plan&, core::Scratch& scratch, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count, bytes = N * E;
  const Reducer red{a, n};
  if (N == 0) return;
  const void* mine = a.sendbuf;
  int32_t scaled = -1;
  if (red.scalesInput()) {
    void* s = scratch.get(bytes);
    scaled = b.local(reduceAction(s, a.sendbuf, nullptr, N, red.spec(true, false)));
    mine = s;
  }
  const void** inputs = scratch.array<const void*>(static_cast<size_t>(n), nullptr);
  int32_t* deps = scratch.array<int32_t>(2 * static_cast<size_t>(n), -1);
  size_t ndeps = 0;
  inputs[static_cast<size_t>(r)] = mine;
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    int32_t sent = b.send(to, mine, bytes, Deps{scaled});
    if (a.sendbuf == a.recvbuf) deps[ndeps++] = sent;  // the result overwrites what is sent
    void* in = scratch.get(bytes);
    inputs[static_cast<size_t>(from)] = in;
    deps[ndeps++] = b.recv(from, in, bytes);
  }
  deps[ndeps++] = scaled;
  kernels::ReduceSpec spec = red.spec(false, true);
  b.localAll(reduceAction(a.recvbuf, nullptr, nullptr, N, spec), deps, ndeps, inputs, static_cast<size_t>(n));
}


bool foldIn(const Args& a, const JobShape& t, int p, core::Scratch& scratch, core::ProgramBuilder& b, const void** acc,
            int32_t* ready) {
  const int n = t.nranks, r = t.rank;
  const size_t N = a.count, bytes = N * dataTypeSize(a.dtype);
  const Reducer red{a, n};
  // This rank's input, scaled for PreMulSum (a partner does not know this rank's scalar).
  *acc = a.sendbuf;
  *ready = -1;
  if (red.scalesInput()) {
    void* s = scratch.get(bytes);
    *ready = b.local(reduceAction(s, a.sendbuf, nullptr, N, red.spec(true, false)));
    *acc = s;
  }
  if (r >= p) {  // an extra rank: hand over, then receive the result
    int32_t sent = b.send(r - p, *acc, bytes, Deps{*ready});
    b.recv(r - p, a.recvbuf, bytes, Deps{a.sendbuf == a.recvbuf ? sent : -1});
    return false;
  }
  if (r < n - p) {  // fold in the extra rank's input
    void* in = scratch.get(bytes);
    int32_t got = b.recv(r + p, in, bytes);
    *ready = b.local(reduceAction(a.recvbuf, *acc, in, N, red.spec(false, false)), Deps{got, *ready});
    *acc = a.recvbuf;
  }
  return true;
}

// Recursive-doubling AllReduce, for small buffers on more ranks. With p the largest power of
// two <= n, ranks p..n-1 first hand their input to rank r-p; then in round k = 0..log2(p)-1 rank r
// swaps its partial result with rank r^2^k and combines the two; finally ranks r < n-p hand the
// result back to rank r+p. log2(p) (+2 when n is not a power of two) steps, log2(p) * N*E bytes
// each way per rank. Partners combine the same two values (in opposite order, and every op is
// commutative), so all ranks hold the same bits after every round.
void rdAllReduce(const Args& a, const JobShape& t, const Plan&, core::Scratch& scratch, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count, bytes = N * E;
  const Reducer red{a, n};
  if (N == 0) return;
  if (red.single(a.sendbuf, b)) return;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const void* acc = nullptr;
  int32_t ready = -1;
  if (!foldIn(a, t, p, scratch, b, &acc, &ready)) return;
  kernels::ReduceSpec sum = red.spec(false, false), last = red.spec(false, true);
  for (int k = 1; k < p; k *= 2) {
    const int partner = r ^ k;
    int32_t sent = b.send(partner, acc, bytes, Deps{ready});
    void* in = scratch.get(bytes);
    int32_t got = b.recv(partner, in, bytes);
    // Combine only once the send has finished reading acc (it may be the result buffer).
    ready = b.local(reduceAction(a.recvbuf, acc, in, N, k * 2 == p ? last : sum), Deps{sent, got});
    acc = a.recvbuf;
  }
  if (r < n - p) b.send(r + p, a.recvbuf, bytes, Deps{ready});
}

// Recursive-doubling AllGather. With p the largest power of two <= n, rank r < n-p first
// receives rank r+p's block and holds blocks r and r+p; then in round k = 0..log2(p)-1 rank r
// swaps the blocks of its group (ranks r & ~(2^k-1) .. +2^k, and those plus p) with rank
// r ^ 2^k, straight into their places in the result: at most two contiguous runs each way.
// Finally ranks r < n-p send the whole result to rank r+p. log2(p) (+2) steps; (n-1) N*E
// bytes in per rank, in messages that double every round.
void rdAllGather(const Args& a, const JobShape& t, const Plan&, core::Scratch&, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count, block = N * E;
  if (N == 0) return;
  const kernels::ReduceSpec copy = Reducer{a, n}.spec(false, false);
  uint8_t* mine = at(a.recvbuf, static_cast<size_t>(r) * N, E);
  const int p = floorPow2(n), extra = n - p;
  if (r >= p) {  // an extra rank: hand over its block, then receive the result
    const int32_t sent = b.send(r - p, a.sendbuf, block);
    b.recv(r - p, a.recvbuf, static_cast<size_t>(n) * block, Deps{a.sendbuf == mine ? sent : -1});
    return;
  }
  InlineVec<int32_t, 4> held;  // what the next sends read
  if (a.sendbuf != mine) held.push_back(b.local(reduceAction(mine, a.sendbuf, nullptr, N, copy)));
  if (r < extra) held.push_back(b.recv(r + p, at(a.recvbuf, static_cast<size_t>(r + p) * N, E), block));
  // The blocks of group [g, g+size): the run g.. and the run g+p.. (those below n).
  auto runs = [&](int g, int size, auto&& each) {
    each(g, size);
    if (g + p < n) each(g + p, std::min(size, n - p - g));
  };
  for (int d = 1; d < p; d *= 2) {
    const int32_t ready = held.size() > 1 ? join(b, held) : held.empty() ? -1 : held[0];
    held.clear();
    held.push_back(ready);
    const int partner = r ^ d, mineAt = r & ~(d - 1), theirs = partner & ~(d - 1);
    runs(mineAt, d, [&](int first, int cnt) {
      b.send(partner, at(a.recvbuf, static_cast<size_t>(first) * N, E), static_cast<size_t>(cnt) * block, Deps{ready});
    });
    runs(theirs, d, [&](int first, int cnt) {
      held.push_back(b.recv(partner, at(a.recvbuf, static_cast<size_t>(first) * N, E), static_cast<size_t>(cnt) * block));
    });
  }
  if (r < extra) b.send(r + p, a.recvbuf, static_cast<size_t>(n) * block, Deps{held.size() > 1 ? join(b, held) : held[0]});
}

namespace {
// Direct: one step, but n-1 messages of N out and n-1 in, all at once (they queue on the link
// and for the cores), then an n-way reduction of (n+1)N of memory traffic. Gather and Scatter
// (gather.cc): the root's n-1 messages of N each, in flight together, so the root waits once and
// handles each further message at a message's latency, and its own block copied (gather_perf -N 8
// on 2 cores: 35 us against the binomial tree's 41 at 4 KiB in all, 160 against 298 at 2 MiB).
class Direct final : public Algorithm {
 public:
  Algo id() const override { return Algo::Direct; }
  bool implements(Kind k) const override { return k == Kind::AllReduce || k == Kind::Gather || k == Kind::Scatter; }
  const char* unfit(const Args& a, const JobShape& t, bool) const override {
    return a.kind == Kind::AllReduce && t.nranks > kernels::kMaxSources ? "it reduces every input at once, 16 ranks at most"
                                                                         : nullptr;
  }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype)), n = t.nranks;
    const LinkCost& l = t.slowest;
    const double message = t.stage ? bytesUs(3 * N, c.memoryGBps, t) + bytesUs(N, c.stage.gbps, t) : bytesUs(N, l.gbps, t);
    if (a.kind != Kind::AllReduce) {
      const double move = t.stage ? bytesUs(6 * N, c.memoryGBps, t) + bytesUs(N, c.stage.gbps, t) : bytesUs(N, l.gbps, t);
      return c.base("direct", a.kind) + waitUs(l, t, c) + std::max(0.0, n - 2) * l.latencyUs +
             c.factor("direct", a.kind) * ((n - 1) * move + bytesUs(2 * N, c.memoryGBps, t));
    }
    return c.base("direct", a.kind) + (n - 1) * waitUs(l, t, c) +
           c.factor("direct", a.kind) * ((n - 1) * message + bytesUs((n + 1) * N, c.memoryGBps, t));
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    if (a.kind == Kind::AllReduce) directAllReduce(a, t, p, s, b);
    else linearGatherScatter(a, t, p, b);
  }
};

// Recursive doubling: log2(p) steps (+2 when n is not a power of two), each N out, N in, and
// a reduction of 2N into N (3N of memory traffic).
class RecursiveDoubling final : public Algorithm {
 public:
  Algo id() const override { return Algo::RecursiveDoubling; }
  bool implements(Kind k) const override { return k == Kind::AllReduce || k == Kind::AllGather; }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype));
    if (a.kind == Kind::AllGather) return allGatherUs(N, t, c);
    int p = 1, steps = 0;
    while (p * 2 <= t.nranks) p *= 2, ++steps;
    if (p != t.nranks) steps += 2;
    const LinkCost& l = t.slowest;
    // Over memory a message is copied in and out of a ring: 3N of local traffic and N read
    // from the peer's; over a network N crosses the wire.
    const bool memory = t.stage != nullptr;
    // Messages' worth on the link: across hosts the ranks of a host whose partners are
    // elsewhere share its link; the extra ranks' two steps are one pair each.
    double wire = steps - ceilLog2(p);
    for (int d = 1; d < p; d *= 2) wire += sharedLink(t, p, d);
    const double perStep = memory ? bytesUs(6 * N, c.memoryGBps, t) + bytesUs(N, c.stage.gbps, t)
                                  : bytesUs(3 * N, c.memoryGBps, t);
    const double link = memory ? 0 : bytesUs(N, l.gbps, t);
    return c.base("rd", a.kind) + steps * waitUs(l, t, c) + c.factor("rd", a.kind) * (steps * perStep + wire * link);
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    if (a.kind == Kind::AllGather) rdAllGather(a, t, p, s, b);
    else rdAllReduce(a, t, p, s, b);
  }

 private:
  // AllGather: log2(p) waits (+2), (n-1) N bytes in, and for the extra ranks the whole result.
  static double allGatherUs(double N, const JobShape& t, const Costs& c) {
    int steps = 0;
    const int p = floorPow2(t.nranks, &steps);
    const double n = t.nranks;
    const LinkCost& l = t.slowest;
    auto move = [&](double bytes) {
      return t.stage ? bytesUs(6 * bytes, c.memoryGBps, t) + bytesUs(bytes, c.stage.gbps, t) : bytesUs(bytes, l.gbps, t);
    };
    const double f = c.factor("rd", Kind::AllGather);
    // Step d moves d blocks; across hosts the ranks of a host whose partners are elsewhere
    // share its link (on one host, (p-1) N in all).
    double blocks = 0;
    for (int d = 1; d < p; d *= 2) blocks += d * (t.stage ? 1 : sharedLink(t, p, d));
    double us = c.base("rd", Kind::AllGather) + steps * waitUs(l, t, c) + f * move(blocks * N);
    if (p != t.nranks) us += 2 * waitUs(l, t, c) + f * (move(N) + move(n * N) + move((p - 1) * N));
    return us;
  }
};
}  // namespace

const Algorithm& algorithmDirect() {
  static const Direct a;
  return a;
}

const Algorithm& algorithmRecursiveDoubling() {
  static const RecursiveDoubling a;
  return a;
}

}  // namespace hora::coll
