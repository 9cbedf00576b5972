// AllToAll and Barrier as programs (the shared stage's flat algorithm, stage.cc, takes small
// ones on one host).
//
// AllToAll, pairwise: in step k = 1..n-1 rank r sends block (r+k) mod n to that rank and
// receives block (r-k) mod n from that rank, so every rank has one message in and one out per
// step and no two ranks send to one rank in the same step. All steps are issued at once; the
// executor orders messages per peer. Each rank sends and receives (n-1)/n of its buffer.
// In place, a received block may still have to be sent (to the rank it came from, in step
// n-k): every block lands in scratch and is copied to its place once both are done.
//
// Barrier, by dissemination: in round k = 0..ceil(log2 n)-1 rank r sends a byte to rank
// r+2^k once it has heard in every round before, and waits for one from rank r-2^k; a rank
// leaves the last round only after hearing, directly or through the rounds before, from
// every other rank.
#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

using core::Deps;

void pairwiseAllToAll(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count, bytes = N * E;
  if (N == 0) return;
  const bool inPlace = a.sendbuf == a.recvbuf;
  if (!inPlace) b.local(core::reduceAction(at(a.recvbuf, static_cast<size_t>(r) * N, E),
                                           at(a.sendbuf, static_cast<size_t>(r) * N, E), nullptr, N,
                                           Reducer{a, n}.spec(false, false)));
  const size_t C = chunkElems(a, p), chunks = chunksIn(N, C);
  const Range all{0, N};
  // In place: per block j and chunk c, the op that sends it and the one that receives it.
  int32_t* const sent = inPlace ? scratch.array<int32_t>(static_cast<size_t>(n) * chunks, -1) : nullptr;
  int32_t* const got = inPlace ? scratch.array<int32_t>(static_cast<size_t>(n) * chunks, -1) : nullptr;
  uint8_t** const landing = scratch.array<uint8_t*>(static_cast<size_t>(n), nullptr);
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    uint8_t* out = at(a.sendbuf, static_cast<size_t>(to) * N, E);
    uint8_t* in = inPlace ? static_cast<uint8_t*>(scratch.get(bytes)) : at(a.recvbuf, static_cast<size_t>(from) * N, E);
    landing[static_cast<size_t>(from)] = in;
    for (size_t c = 0; c < chunks; ++c) {
      Range x = chunkOf(all, C, c);
      int32_t s = b.send(to, out + x.begin * E, x.size() * E);
      int32_t g = b.recv(from, in + x.begin * E, x.size() * E);
      if (inPlace) {
        sent[static_cast<size_t>(to) * chunks + c] = s;
        got[static_cast<size_t>(from) * chunks + c] = g;
      }
    }
  }
  if (!inPlace) return;
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    for (size_t c = 0; c < chunks; ++c) {
      Range x = chunkOf(all, C, c);
      const size_t i = static_cast<size_t>(j) * chunks + c;
      b.local(core::reduceAction(at(a.recvbuf, static_cast<size_t>(j) * N + x.begin, E),
                                 landing[static_cast<size_t>(j)] + x.begin * E, nullptr, x.size(),
                                 Reducer{a, n}.spec(false, false)),
              Deps{got[i], sent[i]});
    }
  }
}

void disseminationBarrier(const JobShape& t, core::Scratch& scratch, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  int32_t heard = -1, sent = -1;
  auto* token = static_cast<uint8_t*>(scratch.get(1));
  *token = 0;
  for (int d = 1; d < n; d *= 2) {
    // After every earlier round's message, not just the last one's: the previous send
    // started only after the rounds before it.
    sent = b.send(mod(r + d, n), token, 1, Deps{heard, sent});
    heard = b.recv(mod(r - d, n), scratch.get(1), 1);
  }
}

namespace {
class Pairwise final : public Algorithm {
 public:
  Algo id() const override { return Algo::Pairwise; }
  bool implements(Kind k) const override { return k == Kind::AllToAll; }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double block = static_cast<double>(a.count * dataTypeSize(a.dtype));
    const LinkCost& l = t.slowest;
    return c.base("pairwise", a.kind) + waitUs(l, t, c) + c.factor("pairwise", a.kind) * (t.nranks - 1) * bytesUs(block, l.gbps, t);
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    pairwiseAllToAll(a, t, p, s, b);
  }
};

class Dissemination final : public Algorithm {
 public:
  Algo id() const override { return Algo::Dissemination; }
  bool implements(Kind k) const override { return k == Kind::Barrier; }
  double predictUs(const Args&, const JobShape& t, const Costs& c) const override {
    return std::ceil(std::log2(std::max(2, t.nranks))) * waitUs(t.slowest, t, c);
  }
  void build(const Args&, const JobShape& t, const Plan&, core::Scratch& s, core::ProgramBuilder& b) const override {
    disseminationBarrier(t, s, b);
  }
};
}  // namespace

const Algorithm& algorithmPairwise() {
  static const Pairwise a;
  return a;
}

const Algorithm& algorithmDissemination() {
  static const Dissemination a;
  return a;
}

}  // namespace hora::coll
