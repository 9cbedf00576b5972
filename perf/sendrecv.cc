// sendrecv_perf: the point-to-point benchmark, compatible with nccl-tests' sendrecv_perf:
// in one group, every rank sends to rank + 1 and receives from rank - 1 (a ring), so every
// link carries one message each way round. The harness (common.h) does everything else.
#include "common.h"

namespace {

// Every rank sends and receives `count` elements (the default counts); in place is the
// same buffer, as nccl-tests. busbw = algbw: each rank's bytes cross one link.
class SendRecv : public hperf::Collective {
 public:
  const char* name() const override { return "sendrecv"; }

  horaResult_t run(const hperf::TestCase& tc, const void* send, void* recv, horaComm_t comm) const override {
    horaResult_t r = horaGroupStart();
    if (r != horaSuccess) return r;
    const horaResult_t s = horaSend(send, tc.counts.param, tc.type, next(tc), comm, tc.stream);
    const horaResult_t v = horaRecv(recv, tc.counts.param, tc.type, prev(tc), comm, tc.stream);
    r = horaGroupEnd();  // always, so that a failed call leaves no group open
    return s != horaSuccess ? s : v != horaSuccess ? v : r;
  }
  void fillInput(const hperf::TestCase& tc, void* send) const override {
    tc.pattern->fill(send, tc.counts.send, tc.rank, 0);
  }
  size_t checkOutput(const hperf::TestCase& tc, const void* recv) const override {
    return tc.pattern->checkInput(recv, tc.counts.recv, prev(tc), 0);
  }

 private:
  static int next(const hperf::TestCase& tc) { return (tc.rank + 1) % tc.nranks; }
  static int prev(const hperf::TestCase& tc) { return (tc.rank + tc.nranks - 1) % tc.nranks; }
};

}  // namespace

int main(int argc, char** argv) {
  SendRecv coll;
  return hperf::perfMain(argc, argv, coll);
}
