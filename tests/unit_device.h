// What the device tests (test_device.cc, test_device_kernels.cc, test_device_stage.cc) share:
// whether the GPU is the emulated one, where their ranks run (this process must not start CUDA
// before it forks), and the sweep of every collective on device buffers.
#pragma once
#include <cstdlib>
#include <functional>
#include <string>

#include "collective_check.h"
#include "comm/config.h"
#include "harness.h"

namespace hora::test {

inline bool emulating() {
  const char* m = getenv("HORA_CUDA");
  return m && std::string(m) == "emulate";
}

// On a real GPU every rank is on device 0, so rank processes share it and take the worker's path
// (processes that share a GPU do not spin for each other); on the emulated GPU each process has
// one of its own.
inline bool processesShareGpu(int nranks) { return !emulating() && nranks > 1; }

// Runs fn in a child process (which may start CUDA), and returns what it returned.
inline std::string inChild(const std::function<std::string()>& fn) {
  auto r = runRawProcesses(1, [&](const horaUniqueId&, int, int) -> std::string {
    hora::config();
    return fn();
  });
  return r[0].ok() ? "" : describe(r);
}

// n ranks as threads of one child process: "" or their failures.
inline std::string onThreads(int n, const RankFn& fn) {
  return inChild([&] { return joinAll(runThreads(n, fn)); });
}

// The ranks of a test of the device-initiated kernels: processes on the emulated GPU; on a real
// one, threads of one child process (ranks as threads of one GPU run as kernels). "" or the
// failures.
inline std::string onKernelRanks(int n, const RankFn& fn) {
  if (emulating()) {
    auto results = runProcesses(n, fn);
    for (const auto& r : results)
      if (!r.ok()) return describe(results);
    return "";
  }
  return onThreads(n, fn);
}

// Every collective x dtype with a few ops and counts (0, 1, odd, several chunks of a small
// pipeline), in and out of place.
inline std::vector<Case> deviceSweep(int n) {
  const std::vector<horaDataType_t>& types = allTypes();
  std::vector<Case> out;
  out.push_back(Case{Coll::Barrier, horaUint8, horaSum, 0, false, 0});
  for (Coll c : allColls()) {
    if (c == Coll::Barrier) continue;
    const bool reduces = c == Coll::AllReduce || c == Coll::Reduce || c == Coll::ReduceScatter;
    const bool rooted = rootedColl(c);
    for (horaDataType_t t : types)
      for (horaRedOp_t op : {horaSum, horaMax, horaAvg, horaNumOps}) {
        if (!reduces && op != horaSum) continue;
        for (size_t count : {size_t(0), size_t(1), size_t(1000) + static_cast<size_t>(n)})
          for (bool inPlace : {false, true}) out.push_back(Case{c, t, op, count, inPlace, rooted ? (n - 1) / 2 : 0});
      }
  }
  // Large: several 8 MiB slots of the IPC stage, and several bouncing blocks.
  out.push_back(Case{Coll::AllReduce, horaFloat32, horaSum, (5u << 20) + 3, false, 0});
  out.push_back(Case{Coll::AllReduce, horaInt64, horaMax, 4097, true, 0});  // past LL, one block
  out.push_back(Case{Coll::Broadcast, horaFloat64, horaSum, 300001, false, (n - 1) / 2});
  out.push_back(Case{Coll::Reduce, horaInt32, horaSum, 300001, true, (n - 1) / 2});
  out.push_back(Case{Coll::AllReduce, horaBfloat16, horaNumOps, (3u << 20) + 1, true, 0});
  out.push_back(Case{Coll::AllGather, horaFloat32, horaSum, (1u << 20) + 7, false, 0});
  out.push_back(Case{Coll::ReduceScatter, horaInt32, horaMax, (1u << 20) + 5, true, 0});
  return out;
}

inline std::string runSweep(horaComm_t comm, int rank, int n, const std::vector<Case>& cases, const Memory& mem) {
  for (const Case& c : cases) {
    std::string e = runCase(comm, rank, n, c, mem);
    if (!e.empty()) return e;
  }
  return "";
}

}  // namespace hora::test
