// reducescatter_perf: the reduce-scatter benchmark, compatible with nccl-tests'
// reduce_scatter_perf. The harness (common.h) does everything but what is specific to the
// collective.
#include "common.h"

namespace {

class ReduceScatter : public hperf::BlockCollective {
 public:
  // Each rank receives one block; the scattered vector is sendbuff.
  ReduceScatter() : BlockCollective(false) {}
  const char* name() const override { return "reducescatter"; }
  bool hasOp() const override { return true; }

  horaResult_t run(const hperf::TestCase& tc, const void* send, void* recv, horaComm_t comm) const override {
    return horaReduceScatter(send, recv, tc.counts.param, tc.type, tc.op, comm, tc.stream);
  }
  void fillInput(const hperf::TestCase& tc, void* send) const override {
    tc.pattern->fill(send, tc.counts.send, tc.rank, 0);
  }
  // Rank r holds block r of the reduction: global indices from r * recvcount.
  size_t checkOutput(const hperf::TestCase& tc, const void* recv) const override {
    return tc.pattern->checkReduced(recv, tc.counts.recv, static_cast<size_t>(tc.rank) * tc.counts.recv);
  }
};

}  // namespace

int main(int argc, char** argv) {
  ReduceScatter coll;
  return hperf::perfMain(argc, argv, coll);
}
