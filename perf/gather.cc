// gather_perf: the gather benchmark, compatible with nccl-tests' gather_perf.
// The harness (common.h) does everything but what is specific to the collective.
#include "common.h"

namespace {

// The shape of allgather (common.h's BlockCollective): each rank sends one block, the root's
// recvbuff is the gathered vector; in place, a rank's block sits at rank * block in it. algbw
// counts the whole vector and busbw = algbw x (n-1)/n, as nccl-tests: the root takes in the
// n - 1 blocks that are not its own.
class Gather : public hperf::BlockCollective {
 public:
  Gather() : BlockCollective(true) {}
  const char* name() const override { return "gather"; }
  bool hasRoot() const override { return true; }

  horaResult_t run(const hperf::TestCase& tc, const void* send, void* recv, horaComm_t comm) const override {
    return horaGather(send, recv, tc.counts.param, tc.type, tc.root, comm, tc.stream);
  }
  // Indices are global, so that every block of the result differs from every other.
  void fillInput(const hperf::TestCase& tc, void* send) const override {
    tc.pattern->fill(send, tc.counts.send, tc.rank, static_cast<size_t>(tc.rank) * tc.counts.send);
  }
  // Only the root's recvbuff is defined after the call.
  size_t checkOutput(const hperf::TestCase& tc, const void* recv) const override {
    if (tc.rank != tc.root) return 0;
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
  Gather coll;
  return hperf::perfMain(argc, argv, coll);
}
