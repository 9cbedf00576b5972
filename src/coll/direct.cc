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

void directAllReduce(const Args& a, const Topo& t, const Plan&, core::Scratch& scratch, core::ProgramBuilder& b) {
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
  std::vector<const void*> inputs(static_cast<size_t>(n));
  std::vector<int32_t> deps;
  inputs[static_cast<size_t>(r)] = mine;
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    int32_t sent = b.send(to, mine, bytes, Deps{scaled});
    if (a.sendbuf == a.recvbuf) deps.push_back(sent);  // the result overwrites what is sent
    void* in = scratch.get(bytes);
    inputs[static_cast<size_t>(from)] = in;
    deps.push_back(b.recv(from, in, bytes));
  }
  deps.push_back(scaled);
  kernels::ReduceSpec spec = red.spec(false, true);
  b.localAll(reduceAction(a.recvbuf, nullptr, nullptr, N, spec), deps, inputs);
}


// Recursive-doubling AllReduce, for small buffers on more ranks. With p the largest power of
// two <= n, ranks p..n-1 first hand their input to rank r-p; then in round k = 0..log2(p)-1 rank r
// swaps its partial result with rank r^2^k and combines the two; finally ranks r < n-p hand the
// result back to rank r+p. log2(p) (+2 when n is not a power of two) steps, log2(p) * N*E bytes
// each way per rank. Partners combine the same two values (in opposite order, and every op is
// commutative), so all ranks hold the same bits after every round.
void rdAllReduce(const Args& a, const Topo& t, const Plan&, core::Scratch& scratch, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count, bytes = N * E;
  const Reducer red{a, n};
  if (N == 0) return;
  if (red.single(a.sendbuf, b)) return;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const bool inPlace = a.sendbuf == a.recvbuf;
  // This rank's input, scaled for PreMulSum (a partner does not know this rank's scalar).
  const void* own = a.sendbuf;
  int32_t ready = -1;
  if (red.scalesInput()) {
    void* s = scratch.get(bytes);
    ready = b.local(reduceAction(s, a.sendbuf, nullptr, N, red.spec(true, false)));
    own = s;
  }
  kernels::ReduceSpec sum = red.spec(false, false), last = red.spec(false, true);
  if (r >= p) {  // an extra rank: hand over, then receive the result
    int32_t sent = b.send(r - p, own, bytes, Deps{ready});
    b.recv(r - p, a.recvbuf, bytes, Deps{inPlace ? sent : -1});
    return;
  }
  const void* acc = own;
  if (r < n - p) {  // fold in the extra rank's input
    void* in = scratch.get(bytes);
    int32_t got = b.recv(r + p, in, bytes);
    ready = b.local(reduceAction(a.recvbuf, own, in, N, sum), Deps{got, ready});
    acc = a.recvbuf;
  }
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

namespace {
// Direct: one step, but n-1 messages of N out and n-1 in, all at once (they queue on the link
// and for the cores), then an n-way reduction of (n+1)N of memory traffic.
class Direct final : public Algorithm {
 public:
  Algo id() const override { return Algo::Direct; }
  bool implements(Kind k) const override { return k == Kind::AllReduce; }
  const char* unfit(const Args&, const Topo& t, bool) const override {
    return t.nranks > kernels::kMaxSources ? "it reduces every input at once, 16 ranks at most" : nullptr;
  }
  double predictUs(const Args& a, const Topo& t, const Costs& c) const override {
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype)), n = t.nranks;
    const LinkCost& l = t.slowest;
    const double message = t.stage ? bytesUs(3 * N, c.memoryGBps, t) + bytesUs(N, c.stage.gbps, t) : bytesUs(N, l.gbps, t);
    return c.base("direct") + (n - 1) * (waitUs(l, t, c) + message) + bytesUs((n + 1) * N, c.memoryGBps, t);
  }
  void build(const Args& a, const Topo& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    directAllReduce(a, t, p, s, b);
  }
};

// Recursive doubling: log2(p) steps (+2 when n is not a power of two), each N out, N in, and
// a reduction of 2N into N (3N of memory traffic).
class RecursiveDoubling final : public Algorithm {
 public:
  Algo id() const override { return Algo::RecursiveDoubling; }
  bool implements(Kind k) const override { return k == Kind::AllReduce; }
  double predictUs(const Args& a, const Topo& t, const Costs& c) const override {
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype));
    int p = 1, steps = 0;
    while (p * 2 <= t.nranks) p *= 2, ++steps;
    if (p != t.nranks) steps += 2;
    const LinkCost& l = t.slowest;
    // Over memory a message is copied in and out of a ring: 3N of local traffic and N read
    // from the peer's; over a network N crosses the wire.
    const bool memory = t.stage != nullptr;
    const double perStep = memory ? bytesUs(6 * N, c.memoryGBps, t) + bytesUs(N, c.stage.gbps, t)
                                  : bytesUs(N, l.gbps, t) + bytesUs(3 * N, c.memoryGBps, t);
    return c.base("rd") + steps * (waitUs(l, t, c) + perStep);
  }
  void build(const Args& a, const Topo& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    rdAllReduce(a, t, p, s, b);
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
