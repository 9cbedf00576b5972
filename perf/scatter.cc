// scatter_perf: the scatter benchmark, compatible with nccl-tests' scatter_perf.
// The harness (common.h) does everything but what is specific to the collective.
#include "common.h"

namespace {

// The shape of reducescatter (common.h's BlockCollective): the root's sendbuff is the vector
// of n blocks, each rank receives one; in place, a rank's recvbuff is its block of the vector.
// algbw counts the whole vector and busbw = algbw x (n-1)/n, as nccl-tests: the root sends out
// the n - 1 blocks that are not its own.
class Scatter : public hperf::BlockCollective {
 public:
  Scatter() : BlockCollective(false) {}
  const char* name() const override { return "scatter"; }
  bool hasRoot() const override { return true; }

  horaResult_t run(const hperf::TestCase& tc, const void* send, void* recv, horaComm_t comm) const override {
    return horaScatter(send, recv, tc.counts.param, tc.type, tc.root, comm, tc.stream);
  }
  // Only the root's sendbuff is read; the others' are left as they are (in place, poisoned),
  // so that a rank the data never reached is counted wrong.
  void fillInput(const hperf::TestCase& tc, void* send) const override {
    if (tc.rank == tc.root) tc.pattern->fill(send, tc.counts.send, tc.root, 0);
  }
  // Rank r holds block r of the root's vector: global indices from r * recvcount.
  size_t checkOutput(const hperf::TestCase& tc, const void* recv) const override {
    return tc.pattern->checkInput(recv, tc.counts.recv, tc.root, static_cast<size_t>(tc.rank) * tc.counts.recv);
  }
};

}  // namespace

int main(int argc, char** argv) {
  Scatter coll;
  return hperf::perfMain(argc, argv, coll);
}
