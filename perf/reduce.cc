// reduce_perf: the reduce benchmark, compatible with nccl-tests' reduce_perf.
// The harness (common.h) does everything but what is specific to the collective.
#include "common.h"

namespace {

// Every rank's buffers hold `count` elements (the default counts); in place is the same
// buffer. busbw = algbw, as nccl-tests: each byte crosses each link of the chain once.
class Reduce : public hperf::Collective {
 public:
  const char* name() const override { return "reduce"; }
  bool hasOp() const override { return true; }
  bool hasRoot() const override { return true; }

  horaResult_t run(const hperf::TestCase& tc, const void* send, void* recv, horaComm_t comm) const override {
    return horaReduce(send, recv, tc.counts.param, tc.type, tc.op, tc.root, comm, tc.stream);
  }
  void fillInput(const hperf::TestCase& tc, void* send) const override {
    tc.pattern->fill(send, tc.counts.send, tc.rank, 0);
  }
  // Only the root's recvbuff is defined after the call.
  size_t checkOutput(const hperf::TestCase& tc, const void* recv) const override {
    return tc.rank == tc.root ? tc.pattern->checkReduced(recv, tc.counts.recv, 0) : 0;
  }
};

}  // namespace

int main(int argc, char** argv) {
  Reduce coll;
  return hperf::perfMain(argc, argv, coll);
}
