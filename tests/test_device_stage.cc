// The device stage (the CUDA IPC stage provider over the host's), processes sharing one GPU, and
// ranks as threads of one GPU; on the device test_device.cc's main() finds (the emulated GPU or
// the real one).
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <random>
#include <utility>

#include "gpu/cuda.h"
#include "collective_check.h"
#include "comm/comm.h"
#include "comm/config.h"
#include "comm/device.h"
#include "comm/device_state.h"
#include "harness.h"
#include "kernels/cpu/reduce.h"
#include "transports/registry.h"
#include "unit_device.h"
#include "unit_kernels.h"

using namespace hora::test;
namespace cu = hora::cuda;

// Processes that share one GPU (HORA_CUDA=emulate-shared: one emulated GPU for the host's
// processes) take the worker's path, whose streams wait on memory rather than in spinning
// kernels; ranks as threads of one process on it still run as kernels. Hidden: its own test run.
TEST_CASE("processes sharing a GPU are detected and take a path that does not spin", "[.shared-gpu]") {
  const char* mode = getenv("HORA_CUDA");
  REQUIRE(mode != nullptr);
  REQUIRE(std::string(mode) == "emulate-shared");
  auto results = runProcesses(3, [](horaComm_t comm, int rank, int nranks) -> std::string {
    void* stream = cu::streamCreate();
    for (Coll c : {Coll::AllReduce, Coll::Broadcast, Coll::AllGather})
      for (size_t count : {size_t(5), size_t(300000)}) {
        std::string e = runCase(comm, rank, nranks, Case{c, horaFloat32, horaSum, count, false, 1}, Memory{true, stream});
        if (!e.empty()) return e;
      }
    cu::streamDestroy(stream);
    if (hora::device::kernelsActive(reinterpret_cast<horaComm*>(comm)))
      return "processes sharing one GPU run spinning kernels";
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
  const std::string e = onThreads(2, [](horaComm_t comm, int rank, int nranks) -> std::string {
    std::string e = runCase(comm, rank, nranks, Case{Coll::AllReduce, horaFloat32, horaSum, 1000, false, 0}, Memory{true, nullptr});
    if (!e.empty()) return e;
    if (!hora::device::kernelsActive(reinterpret_cast<horaComm*>(comm))) return "threads on one GPU did not run kernels";
    return "";
  });
  CHECK(e == "");
}

namespace {

// Asks every stage provider (transports/registry.h) for a device stage over comm's host stage,
// this rank ready or not; the exchange and agreement through the public API (with `scribble`,
// this rank spoils what rank 0 sent it: its mapping of rank 0's region fails, here alone). Then,
// where one came: each rank writes its mark into its own region, and reads every other's mark
// through the stage's mapping of that rank's region. "" or what went wrong.
std::string provideStage(horaComm_t comm, int rank, int nranks, bool ready, bool scribble = false) {
  horaComm* c = reinterpret_cast<horaComm*>(comm);
  if (!c->stage || c->stage->size() != nranks) return "no host stage over every rank";
  hora::transport::StageRequest r;
  r.host = c->stage;
  r.device = 0;
  r.ready = ready;
  r.why = ready ? "" : "rank " + std::to_string(rank) + " is not ready";
  std::string failed;
  r.exchange = [&](const void* mine, void* all, size_t bytes) {
    if (horaAllGather(mine, all, bytes, horaUint8, comm, nullptr) != horaSuccess) failed = "the exchange failed";
    if (scribble) memset(all, 0xa5, std::min<size_t>(bytes, 64));
  };
  r.everyRank = [&](bool ok) {
    int32_t mine = ok, all = 0;
    if (horaAllReduce(&mine, &all, 1, horaInt32, horaMin, comm, nullptr) != horaSuccess) failed = "the agreement failed";
    return all != 0;
  };
  const auto& providers = hora::transport::stageProviders();
  if (providers.empty()) return "no stage provider registered";
  std::string why;
  std::shared_ptr<hora::transport::SharedStage> st = providers[0].provide(r, &why);
  if (!failed.empty()) return failed;
  // Every rank the same: a stage on all, or on none.
  int32_t got = st != nullptr, least = 0, most = 0;
  horaAllReduce(&got, &least, 1, horaInt32, horaMin, comm, nullptr);
  horaAllReduce(&got, &most, 1, horaInt32, horaMax, comm, nullptr);
  if (least != most) return "a stage on some ranks only";
  if (!st) return "none: " + why;
  if (st->size() != nranks || st->regionBytes() < sizeof(uint64_t) || st->slotBytes() * 4 != st->regionBytes())
    return "a stage of the wrong shape";
  const uint64_t mark = 0x5157000000000000ull + static_cast<uint64_t>(rank);
  cu::copyAsync(st->region(st->index()), &mark, sizeof mark, nullptr);
  cu::streamSync(nullptr);
  horaBarrier(comm, nullptr);
  for (int j = 0; j < nranks; ++j) {
    uint64_t seen = 0;
    cu::copyAsync(&seen, st->region(j), sizeof seen, nullptr);
    cu::streamSync(nullptr);
    if (seen != 0x5157000000000000ull + static_cast<uint64_t>(j))
      return "rank " + std::to_string(j) + "'s region, as this rank maps it, does not hold its mark";
  }
  horaBarrier(comm, nullptr);  // every rank done reading before the regions go
  return "";
}

}  // namespace

// The CUDA IPC stage is a stage provider: set up collectively over the host stage, the same
// answer on every rank; its regions are each rank's device memory, mapped by the others.
TEST_CASE("the device stage: every rank maps every region, or none has a stage", "[device][stage]") {
  for (int n : {2, 3}) {
    // Processes: through CUDA IPC.
    auto all = runProcesses(n, [](horaComm_t comm, int rank, int nranks) { return provideStage(comm, rank, nranks, true); });
    INFO("processes, every rank ready: " << describe(all));
    for (const auto& r : all) CHECK(r.ok());
    auto one = runProcesses(n, [](horaComm_t comm, int rank, int nranks) {
      const std::string e = provideStage(comm, rank, nranks, rank != 1);
      // Rank 1 says why; the others only that none came.
      if (e.rfind("none: ", 0) != 0) return "a stage where rank 1 was not ready (" + e + ")";
      if (rank == 1 && e.find("rank 1 is not ready") == std::string::npos) return "rank 1's reason is lost: " + e;
      return std::string();
    });
    INFO("processes, rank 1 not ready: " << describe(one));
    for (const auto& r : one) CHECK(r.ok());
    // Rank 1 alone cannot map a region: the agreement turns the stage off on every rank.
    auto spoilt = runProcesses(n, [](horaComm_t comm, int rank, int nranks) {
      const std::string e = provideStage(comm, rank, nranks, true, rank == 1);
      if (e.rfind("none: ", 0) != 0) return "a stage where rank 1 could not map rank 0's region (" + e + ")";
      if (rank == 1 && e.find("mapping rank 0's region") == std::string::npos) return "rank 1's reason is lost: " + e;
      return std::string();
    });
    INFO("processes, rank 1 cannot map rank 0's region: " << describe(spoilt));
    for (const auto& r : spoilt) CHECK(r.ok());
  }
  // Threads of one process: each other's very pointers, counted.
  CHECK(onThreads(3, [](horaComm_t comm, int rank, int nranks) { return provideStage(comm, rank, nranks, true); }) == "");
}

TEST_CASE("ranks as threads of one process share one device", "[device][threads]") {
  const std::string e = onThreads(4, [](horaComm_t comm, int rank, int nranks) -> std::string {
    std::string e = runSweep(comm, rank, nranks, deviceSweep(nranks), Memory{true, nullptr});
    if (!e.empty()) return e;
    if (!hora::device::kernelsActive(reinterpret_cast<horaComm*>(comm))) return "no device-initiated collectives between threads";
    return "";
  });
  CHECK(e == "");
}

// A rank's kernel for call n waits on the GPU for the other rank's kernel for call n (and a call
// through the worker makes its stream wait for the worker, which waits for the other ranks). A
// thread that waits for the whole device before it makes call n (cudaDeviceSynchronize, as
// nccl-tests' check does between calls) must not find the other's call n queued and waiting.
TEST_CASE("ranks as threads of one GPU: one waits for the whole device between its calls", "[device][threads]") {
  const std::string e = onThreads(2, [](horaComm_t comm, int rank, int) -> std::string {
    const size_t count = 1000;
    float* d = static_cast<float*>(cu::deviceAlloc(count * 4));
    float* host = static_cast<float*>(cu::hostAlloc(count * 4));
    for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(rank + 1);
    void* stream = cu::streamCreate();
    horaStream_t s = static_cast<horaStream_t>(stream);
    cu::copyAsync(d, host, count * 4, stream);
    for (int i = 0; i < 20; ++i) {
      if (rank == 0) cu::deviceSync();
      if (horaAllReduce(d, d, count, horaFloat32, horaSum, comm, s) != horaSuccess)
        return "AllReduce " + std::to_string(i) + ": " + horaGetLastError(comm);
      // A call of no elements goes through the worker: its stream waits for it on the GPU.
      if (rank == 0) cu::deviceSync();
      if (horaAllReduce(d, d, 0, horaFloat32, horaSum, comm, s) != horaSuccess)
        return "AllReduce of 0 elements " + std::to_string(i) + ": " + horaGetLastError(comm);
    }
    cu::copyAsync(host, d, count * 4, stream);
    if (horaStreamSynchronize(s) != horaSuccess) return std::string("the stream: ") + horaGetLastError(comm);
    if (!hora::device::kernelsActive(reinterpret_cast<horaComm*>(comm))) return "no device-initiated collectives";
    const float want = 3.0f * static_cast<float>(1 << 19);  // 1 + 2, doubled by each of the 19 after
    for (size_t i = 0; i < count; ++i)
      if (host[i] != want) return "element " + std::to_string(i) + " is " + std::to_string(host[i]);
    return "";
  });
  CHECK(e == "");
}

// Ranks as threads of one GPU with two communicators: a group over both, which one rank lists in
// the other order (as NCCL allows), passes both communicators' meetings before a call.
TEST_CASE("ranks as threads of one GPU: a group over two communicators in either order", "[device][threads]") {
  const std::string e = onThreads(2, [](horaComm_t comm, int rank, int) -> std::string {
    horaComm_t other = nullptr;
    if (horaCommSplit(comm, 0, rank, &other, nullptr) != horaSuccess) return std::string("split: ") + horaGetLastError(comm);
    const size_t count = 4096;
    float* host = static_cast<float*>(cu::hostAlloc(count * 4));
    float* a = static_cast<float*>(cu::deviceAlloc(count * 4));
    float* b = static_cast<float*>(cu::deviceAlloc(count * 4));
    void* stream = cu::streamCreate();
    horaStream_t s = static_cast<horaStream_t>(stream);
    for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>(rank + 1);
    cu::copyAsync(a, host, count * 4, stream);
    cu::copyAsync(b, host, count * 4, stream);
    // One call on each alone first (each sets up its kernels and its clique).
    if (horaAllReduce(a, a, count, horaFloat32, horaSum, comm, s) != horaSuccess ||
        horaAllReduce(b, b, count, horaFloat32, horaSum, other, s) != horaSuccess)
      return std::string("alone: ") + horaGetLastError(comm);
    for (int round = 0; round < 5; ++round) {
      horaGroupStart();
      if (rank == 0) {
        horaAllReduce(a, a, count, horaFloat32, horaSum, comm, s);
        horaAllReduce(b, b, count, horaFloat32, horaSum, other, s);
      } else {
        horaAllReduce(b, b, count, horaFloat32, horaSum, other, s);
        horaAllReduce(a, a, count, horaFloat32, horaSum, comm, s);
      }
      if (horaGroupEnd() != horaSuccess) return "group " + std::to_string(round) + ": " + horaGetLastError(comm);
    }
    if (horaStreamSynchronize(s) != horaSuccess) return std::string("the stream: ") + horaGetLastError(comm);
    const float want = 3.0f * 32.0f;  // 1 + 2, doubled by each of the 5 groups
    for (float* d : {a, b}) {
      cu::copyAsync(host, d, count * 4, stream);
      cu::streamSync(stream);
      for (size_t i = 0; i < count; ++i)
        if (host[i] != want) return "element " + std::to_string(i) + " is " + std::to_string(host[i]);
    }
    horaCommDestroy(other);
    return "";
  });
  CHECK(e == "");
}
