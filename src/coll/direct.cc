// Direct AllReduce, for small buffers: every rank sends its whole input to every other rank
// and reduces the n inputs itself, in rank order 0..n-1, so every rank computes the same bits.
//
// One step instead of the ring's 2(n-1): the latency of one message (all n-1 in flight at once)
// plus one n-way reduction. Each rank sends and receives (n-1) * N*E bytes, against the ring's
// 2(n-1)/n * N*E, so it only pays while a message costs its latency, not its bytes. PreMulSum
// sends the input already scaled (a peer does not know this rank's scalar).
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

}  // namespace hora::coll
