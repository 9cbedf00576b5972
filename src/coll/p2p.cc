// Send and Recv. A message of N elements of E bytes travels as chunks of C elements, so a
// large one keeps every socket of the connection busy; both sides cut it the same way, and a
// mismatch in count or datatype shows up as a length or tag mismatch on the first chunk.
// Bytes moved: N*E out (Send) or in (Recv); no staging, no copy.
#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

void p2p(const Args& a, const JobShape&, const Plan& p, core::ProgramBuilder& b) {
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  const size_t C = chunkElems(a, p), chunks = chunksIn(N, C);
  const Range all{0, N};
  for (size_t c = 0; c < chunks; ++c) {
    Range k = chunkOf(all, C, c);
    if (a.kind == Kind::Send) b.send(a.peer, at(a.sendbuf, k.begin, E), k.size() * E);
    else b.recv(a.peer, at(a.recvbuf, k.begin, E), k.size() * E);
  }
}

namespace {
class P2P final : public Algorithm {
 public:
  Algo id() const override { return Algo::P2P; }
  bool implements(Kind k) const override { return k == Kind::Send || k == Kind::Recv; }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const LinkCost& l = t.slowest;
    return waitUs(l, t, c) + bytesUs(static_cast<double>(a.count * dataTypeSize(a.dtype)), l.gbps, t);
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch&, core::ProgramBuilder& b) const override {
    p2p(a, t, p, b);
  }
};
}  // namespace

const Algorithm& algorithmP2P() {
  static const P2P a;
  return a;
}

}  // namespace hora::coll
