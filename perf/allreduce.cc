// allreduce_perf: the all-reduce benchmark, compatible with nccl-tests' all_reduce_perf.
// The harness (common.h) does everything but what is specific to the collective.
#include "common.h"

namespace {

// Every rank sends and receives `count` elements (the default counts); in place is the
// same buffer.
class AllReduce : public hperf::Collective {
 public:
  const char* name() const override { return "allreduce"; }
  bool hasOp() const override { return true; }
  // Each rank sends and receives 2(n-1)/n of the data (ring reduce-scatter + all-gather).
  double busBwFactor(int nranks) const override {
    return nranks > 0 ? 2.0 * (nranks - 1) / nranks : 0.0;
  }

  horaResult_t run(const hperf::TestCase& tc, const void* send, void* recv, horaComm_t comm) const override {
    return horaAllReduce(send, recv, tc.counts.param, tc.type, tc.op, comm, tc.stream);
  }
  void fillInput(const hperf::TestCase& tc, void* send) const override {
    tc.pattern->fill(send, tc.counts.send, tc.rank, 0);
  }
  size_t checkOutput(const hperf::TestCase& tc, const void* recv) const override {
    return tc.pattern->checkReduced(recv, tc.counts.recv, 0);
  }
};

}  // namespace

int main(int argc, char** argv) {
  AllReduce coll;
  return hperf::perfMain(argc, argv, coll);
}
