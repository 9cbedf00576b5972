// Send and Recv. A message of N elements of E bytes travels as chunks of C elements, so a
// large one keeps every socket of the connection busy; both sides cut it the same way, and a
// mismatch in count or datatype shows up as a length or tag mismatch on the first chunk.
// Bytes moved: N*E out (Send) or in (Recv); no staging, no copy.
#include "coll/common.h"

namespace hora::coll {

void p2p(const Args& a, const Topo&, const Plan& p, core::ProgramBuilder& b) {
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  const size_t C = chunkElems(a, p), chunks = chunksIn(N, C);
  const Range all{0, N};
  for (size_t c = 0; c < chunks; ++c) {
    Range k = chunkOf(all, C, c);
    if (a.kind == Kind::Send) b.send(a.peer, at(a.sendbuf, k.begin, E), k.size() * E);
    else b.recv(a.peer, at(a.recvbuf, k.begin, E), k.size() * E);
  }
}

}  // namespace hora::coll
