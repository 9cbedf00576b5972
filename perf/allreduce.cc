// allreduce_perf: the all-reduce benchmark, compatible with nccl-tests' all_reduce_perf.
// The harness (common.h) does everything but what is specific to the collective.
#include "common.h"

namespace {

class AllReduce : public hperf::Collective {
 public:
  const char* name() const override { return "allreduce"; }
  bool hasOp() const override { return true; }
  bool hasRoot() const override { return false; }

  // Every rank sends and receives `count` elements; in place is the same buffer.
  hperf::Counts counts(size_t count, int /*nranks*/) const override {
    hperf::Counts c;
    c.send = c.recv = c.param = count;
    return c;
  }
  double algBytes(const hperf::Counts& c, size_t typeSize, int /*nranks*/) const override {
    return static_cast<double>(c.param) * static_cast<double>(typeSize);
  }
  // Each rank sends and receives 2(n-1)/n of the data (ring reduce-scatter + all-gather).
  double busBwFactor(int nranks) const override {
    return nranks > 0 ? 2.0 * (nranks - 1) / nranks : 0.0;
  }

  horaResult_t run(const hperf::TestCase& tc, const void* send, void* recv, horaComm_t comm) const override {
    return horaAllReduce(send, recv, tc.counts.param, tc.type, tc.op, comm, nullptr);
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
