// broadcast_perf: the broadcast benchmark, compatible with nccl-tests' broadcast_perf.
// The harness (common.h) does everything but what is specific to the collective.
#include "common.h"

namespace {

// Every rank's buffers hold `count` elements (the default counts); in place is the same
// buffer. algbw counts the data once and busbw = algbw (nccl-tests: a pipelined chain
// moves each byte over each link once).
class Broadcast : public hperf::Collective {
 public:
  const char* name() const override { return "broadcast"; }
  bool hasRoot() const override { return true; }

  horaResult_t run(const hperf::TestCase& tc, const void* send, void* recv, horaComm_t comm) const override {
    return horaBroadcast(send, recv, tc.counts.param, tc.type, tc.root, comm, tc.stream);
  }
  // Only the root's sendbuff is read; the others' stay poisoned in place, so that a rank
  // the data never reached is counted wrong.
  void fillInput(const hperf::TestCase& tc, void* send) const override {
    if (tc.rank == tc.root) tc.pattern->fill(send, tc.counts.send, tc.root, 0);
  }
  size_t checkOutput(const hperf::TestCase& tc, const void* recv) const override {
    return tc.pattern->checkInput(recv, tc.counts.recv, tc.root, 0);
  }
};

}  // namespace

int main(int argc, char** argv) {
  Broadcast coll;
  return hperf::perfMain(argc, argv, coll);
}
