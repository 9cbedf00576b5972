// allgather_perf: the all-gather benchmark, compatible with nccl-tests' all_gather_perf.
// The harness (common.h) does everything but what is specific to the collective.
#include "common.h"

namespace {

class AllGather : public hperf::BlockCollective {
 public:
  // Each rank sends one block; the gathered vector is recvbuff.
  AllGather() : BlockCollective(true) {}
  const char* name() const override { return "allgather"; }

  horaResult_t run(const hperf::TestCase& tc, const void* send, void* recv, horaComm_t comm) const override {
    return horaAllGather(send, recv, tc.counts.param, tc.type, comm, tc.stream);
  }
  // Indices are global, so that every block of the result differs from every other.
  void fillInput(const hperf::TestCase& tc, void* send) const override {
    tc.pattern->fill(send, tc.counts.send, tc.rank, static_cast<size_t>(tc.rank) * tc.counts.send);
  }
  size_t checkOutput(const hperf::TestCase& tc, const void* recv) const override {
    const size_t block = tc.counts.send;
    const size_t bytes = block * hperf::typeSize(tc.type);
    size_t wrong = 0;
    for (int r = 0; r < tc.nranks; ++r) {
      const size_t ur = static_cast<size_t>(r);
      wrong += tc.pattern->checkInput(static_cast<const char*>(recv) + ur * bytes, block, r, ur * block);
    }
    return wrong;
  }
};

}  // namespace

int main(int argc, char** argv) {
  AllGather coll;
  return hperf::perfMain(argc, argv, coll);
}
