// What the flight recorder costs a call: 8-byte AllReduces (2 floats) at 2 ranks as processes,
// in batches that alternate, within one run and on one communicator, between the recorder kept
// as configured (HORA_TRACE_CALLS, 2000 by default) and one that records nothing (as with
// HORA_TRACE_CALLS=0), in the order on, off, off, on, ... so that a drift of the machine's speed
// weighs on both alike. Prints the median time per call of each and the difference, and what the
// recorder's clock thread (comm/trace_clock.h), which runs on both sides, cost over the batches.
//
//   trace_cost [-n CALLS_PER_BATCH] [-b BATCHES]     (defaults: 20000 and 40)
//
// The test 'trace cost' runs it small: it checks that it runs, not a speed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "comm/comm.h"
#include "comm/config.h"
#include "harness.h"

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 20000, batches = 40;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-n")) calls = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-b")) batches = atoi(argv[i + 1]);
  }
  if (calls < 1 || batches < 2) {
    fprintf(stderr, "usage: trace_cost [-n CALLS_PER_BATCH] [-b BATCHES (2 or more)]\n");
    return 2;
  }
  const int kept = hora::config().traceCalls;
  {
    // The recorder's own work per call, alone: one entry started and finished.
    hora::trace::Recorder r(kept > 0 ? kept : 2000, 0, 2, "");
    hora::coll::Args a;
    a.count = 2;
    const hora::coll::Plan p;
    const int n = 1000000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) r.finish(r.start(a, p, 1), true);
    printf("trace cost: the recorder alone, %.1f ns per call (an entry started and finished)\n",
           std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n);
  }
  auto results = hora::test::runProcesses(2, [&](horaComm_t comm, int rank, int nranks) -> std::string {
    if (!comm->trace->on()) return "the recorder is off (HORA_TRACE_CALLS=0): nothing to compare";
    auto off = std::make_unique<hora::trace::Recorder>(0, rank, nranks, "");
    float x[2] = {1, 2};
    for (int i = 0; i < calls; ++i)  // warm-up
      if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "allreduce failed";
    std::vector<double> on, without;
    uint64_t recorded = 0;
    // The clock thread runs on both sides (the communicator's recorder lives on while it is
    // swapped out): what it costs is counted apart, as a share of a core over the batches.
    const hora::trace::ClockCost clock0 = hora::trace::clockCost();
    const auto wall0 = std::chrono::steady_clock::now();
    for (int b = 0; b < batches; ++b) {
      const bool recording = (b % 4 == 0 || b % 4 == 3);  // on, off, off, on
      if (!recording) std::swap(comm->trace, off);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i)
        if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "allreduce failed";
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
      if (!recording) std::swap(comm->trace, off);
      (recording ? on : without).push_back(us);
      if (recording) recorded += static_cast<uint64_t>(calls);
    }
    const hora::trace::ClockCost clock1 = hora::trace::clockCost();
    const double wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    if (comm->trace->recorded() < recorded) return "the recorder did not record every call of its batches";
    if (off->recorded() != 0) return "the switched-off recorder recorded calls";
    if (rank == 0) {
      const double a = median(on), b = median(without);
      printf("trace cost: 8-byte AllReduce (2 float, sum), 2 ranks as processes, %d batches of %d calls\n", batches, calls);
      printf("  recorder on (%d calls kept): median %.3f us per call\n", kept, a);
      printf("  recorder off:                median %.3f us per call\n", b);
      printf("  cost: %+.1f ns per call (%+.2f%%)\n", (a - b) * 1000, b > 0 ? (a - b) / b * 100 : 0.0);
      const uint64_t wakes = clock1.wakeups - clock0.wakeups;
      const double cpuUs = static_cast<double>(clock1.cpuNs - clock0.cpuNs) / 1000;
      printf("  the clock thread, on both sides: %.0f wakeups a second, %.1f us of CPU each: %.2f%% of a core\n",
             wallS > 0 ? static_cast<double>(wakes) / wallS : 0.0, wakes ? cpuUs / static_cast<double>(wakes) : 0.0,
             wallS > 0 ? cpuUs / (wallS * 1e6) * 100 : 0.0);
      fflush(stdout);
    }
    return "";
  });
  for (const auto& r : results)
    if (!r.ok()) {
      fprintf(stderr, "trace_cost: %s\n", hora::test::describe(results).c_str());
      return 1;
    }
  return 0;
}
