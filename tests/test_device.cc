// Device buffers and CUDA streams (comm/device.h), on whatever device gpu/cuda.h offers:
//   - HORA_CUDA=emulate (the multirank suite, every machine): the emulated GPU, so that bouncing,
//     stream order, the CUDA IPC stage and their failures run everywhere;
//   - otherwise (the gpu suite): the real GPU; without one the program prints why and exits 77
//     (skipped). One GPU hosts every rank.
// No test lets this process start CUDA before it forks its ranks (a child of a process that has
// started CUDA cannot use it): what needs CUDA here runs in a child of its own.
#define CATCH_CONFIG_RUNNER
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
#include "unit_kernels.h"

using namespace hora::test;
namespace cu = hora::cuda;

namespace {

bool emulating() {
  const char* m = getenv("HORA_CUDA");
  return m && std::string(m) == "emulate";
}

// On a real GPU every rank is on device 0, so rank processes share it and take the worker's path
// (processes that share a GPU do not spin for each other); on the emulated GPU each process has
// one of its own.
bool processesShareGpu(int nranks) { return !emulating() && nranks > 1; }


// Every collective x dtype with a few ops and counts (0, 1, odd, several chunks of a small
// pipeline), in and out of place.
std::vector<Case> deviceSweep(int n) {
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

std::string runSweep(horaComm_t comm, int rank, int n, const std::vector<Case>& cases, const Memory& mem) {
  for (const Case& c : cases) {
    std::string e = runCase(comm, rank, n, c, mem);
    if (!e.empty()) return e;
  }
  return "";
}

// Runs fn in a child process (which may start CUDA), and returns what it returned.
std::string inChild(const std::function<std::string()>& fn) {
  auto r = runRawProcesses(1, [&](const horaUniqueId&, int, int) -> std::string {
    hora::config();
    return fn();
  });
  return r[0].ok() ? "" : describe(r);
}

// n ranks as threads of one child process: "" or their failures.
std::string onThreads(int n, const RankFn& fn) {
  return inChild([&] { return joinAll(runThreads(n, fn)); });
}

// The ranks of a test of the device-initiated kernels: processes on the emulated GPU; on a real
// one, threads of one child process (ranks as threads of one GPU run as kernels). "" or the
// failures.
std::string onKernelRanks(int n, const RankFn& fn) {
  if (emulating()) {
    auto results = runProcesses(n, fn);
    for (const auto& r : results)
      if (!r.ok()) return describe(results);
    return "";
  }
  return onThreads(n, fn);
}

}  // namespace

// Run twice by the suite: as it is, and with HORA_CUDA_IPC=0 HORA_TRANSPORTS=tcp (every call
// bounced through host memory, the links TCP).
TEST_CASE("device buffers without a stream: every collective at 1, 2, 3, 5 and 8 ranks", "[device][sweep]") {
  for (int n : {1, 2, 3, 5, 8}) {
    auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      int dev = -1;
      if (horaCommCuDevice(comm, &dev) != horaSuccess || dev != 0)
        return "horaCommCuDevice says " + std::to_string(dev) + ", not the current device 0";
      std::string e = runSweep(comm, rank, nranks, deviceSweep(nranks), Memory{true, nullptr});
      if (!e.empty()) return e;
      // Every rank on this host, every buffer on the device: the collectives were kernels of the
      // device-initiated protocol (one rank: a copy each), or, with HORA_CUDA_KERNELS=0 or
      // processes that share a GPU, the AllReduces went through the CUDA IPC stage (unless
      // HORA_CUDA_IPC=0 turns both off).
      horaComm* c = reinterpret_cast<horaComm*>(comm);
      const bool kernels = hora::device::kernelsActive(c), shared = processesShareGpu(nranks);
      if (kernels != (nranks > 1 && !shared && hora::config().cudaIpc && hora::config().cudaKernels))
        return kernels ? "device-initiated collectives at one rank, between processes of one GPU, or with "
                         "HORA_CUDA_IPC=0 or HORA_CUDA_KERNELS=0"
                       : "the device collectives were not kernels of the device-initiated protocol";
      const bool ipc = hora::device::ipcActive(c);
      if (nranks > 1 && (shared || !hora::config().cudaKernels) && ipc != hora::config().cudaIpc)
        return ipc ? "an IPC stage with HORA_CUDA_IPC=0" : "the device AllReduces did not go through the CUDA IPC stage";
      return "";
    });
    INFO("nranks " << n << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

TEST_CASE("CUDA streams: a kernel writes the input just before the call, another reads the result just after",
          "[device][stream]") {
  for (int n : {2, 3}) {
    auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      void* stream = cu::streamCreate();
      std::string e = runSweep(comm, rank, nranks, deviceSweep(nranks), Memory{true, stream});
      // Host buffers on a CUDA stream: ordered the same way.
      for (Coll c : {Coll::AllReduce, Coll::AllGather})
        if (e.empty()) e = runCase(comm, rank, nranks, Case{c, horaFloat32, horaSum, 4099, false, 0}, Memory{false, nullptr});
      cu::streamDestroy(stream);
      return e;
    });
    INFO("nranks " << n << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

TEST_CASE("a group over two CUDA streams waits for both and both wait for it", "[device][stream]") {
  auto results = runProcesses(3, [](horaComm_t comm, int rank, int nranks) -> std::string {
    const size_t count = 300001;
    void* s1 = cu::streamCreate();
    void* s2 = cu::streamCreate();
    std::vector<float> a(count), b(count);
    for (size_t i = 0; i < count; ++i) {
      a[i] = static_cast<float>(rank + 1);
      b[i] = static_cast<float>(i % 1000);
    }
    float* da = static_cast<float*>(cu::deviceAlloc(count * 4));
    float* db = static_cast<float*>(cu::deviceAlloc(count * 4));
    // Each input reaches the device on its own stream, just before the group.
    cu::copyAsync(da, a.data(), count * 4, s1);
    cu::copyAsync(db, rank == 0 ? b.data() : a.data(), count * 4, s2);
    horaGroupStart();
    horaAllReduce(da, da, count, horaFloat32, horaSum, comm, static_cast<horaStream_t>(s1));
    horaBroadcast(db, db, count, horaFloat32, 0, comm, static_cast<horaStream_t>(s2));
    if (horaGroupEnd() != horaSuccess) return std::string("horaGroupEnd: ") + horaGetLastError(comm);
    std::vector<float> ra(count), rb(count);
    cu::copyAsync(ra.data(), da, count * 4, s2);  // crosses: s2 reads what the group left on s1's behalf
    cu::copyAsync(rb.data(), db, count * 4, s1);
    if (horaStreamSynchronize(static_cast<horaStream_t>(s1)) != horaSuccess ||
        horaStreamSynchronize(static_cast<horaStream_t>(s2)) != horaSuccess)
      return std::string("horaStreamSynchronize: ") + horaGetLastError(nullptr);
    const float want = static_cast<float>(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < count; ++i) {
      if (ra[i] != want) return "AllReduce element " + std::to_string(i) + ": " + std::to_string(ra[i]);
      if (rb[i] != b[i]) return "Broadcast element " + std::to_string(i) + ": " + std::to_string(rb[i]);
    }
    cu::deviceFree(da);
    cu::deviceFree(db);
    cu::streamDestroy(s1);
    cu::streamDestroy(s2);
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("a group of 40 bounced collectives on a CUDA stream: each copied in chunks, every result exact",
          "[device][stream]") {
  // A group is bounced (no kernel runs a group): 40 AllReduces of 300 KiB each, every one's
  // copies ops of its program, 2 x 40 x up to 33 of them on the communicator's copy stream in
  // one run, with the events made beforehand in the caller's thread.
  auto results = runProcesses(3, [](horaComm_t comm, int rank, int nranks) -> std::string {
    const int calls = 40;
    const size_t count = 76801;
    void* s = cu::streamCreate();
    std::vector<float*> bufs;
    std::vector<float> host(count);
    for (int k = 0; k < calls; ++k) {
      for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>((rank + 1) * (k + 1) + static_cast<int>(i % 7));
      bufs.push_back(static_cast<float*>(cu::deviceAlloc(count * 4)));
      cu::copyAsync(bufs.back(), host.data(), count * 4, s);
      cu::streamSync(s);
    }
    horaGroupStart();
    for (int k = 0; k < calls; ++k) horaAllReduce(bufs[k], bufs[k], count, horaFloat32, horaSum, comm, static_cast<horaStream_t>(s));
    if (horaGroupEnd() != horaSuccess) return std::string("horaGroupEnd: ") + horaGetLastError(comm);
    std::string e;
    const float ranks = static_cast<float>(nranks * (nranks + 1) / 2);
    for (int k = 0; k < calls && e.empty(); ++k) {
      cu::copyAsync(host.data(), bufs[k], count * 4, s);
      if (horaStreamSynchronize(static_cast<horaStream_t>(s)) != horaSuccess)
        return std::string("horaStreamSynchronize: ") + horaGetLastError(nullptr);
      for (size_t i = 0; i < count; ++i) {
        const float want = ranks * static_cast<float>(k + 1) + static_cast<float>(nranks * static_cast<int>(i % 7));
        if (host[i] != want) {
          e = "call " + std::to_string(k) + " element " + std::to_string(i) + ": " + std::to_string(host[i]) +
              ", want " + std::to_string(want);
          break;
        }
      }
    }
    for (float* b : bufs) cu::deviceFree(b);
    cu::streamDestroy(s);
    return e;
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("a PreMulSum scalar in device memory is read in stream order, as each call runs", "[device][stream]") {
  auto results = runProcesses(3, [](horaComm_t comm, int rank, int nranks) -> std::string {
    const size_t count = 4099;
    void* s = cu::streamCreate();
    float* scalar = static_cast<float*>(cu::deviceAlloc(sizeof(float)));
    float* data = static_cast<float*>(cu::deviceAlloc(count * 4));
    horaRedOp_t op;
    if (horaRedOpCreatePreMulSum(&op, scalar, horaFloat32, horaScalarDevice, comm) != horaSuccess)
      return std::string("create: ") + horaGetLastError(comm);
    std::vector<float> ones(count, 1.0f), got(count);
    std::string e;
    // Each call's scalar is written on the stream just before it: a call that read it when it
    // was queued, or out of order, would see the other value.
    for (int k = 1; k <= 3 && e.empty(); ++k) {
      const float mine = static_cast<float>(k * (rank + 1));
      cu::copyAsync(scalar, &mine, sizeof mine, s);
      cu::copyAsync(data, ones.data(), count * 4, s);
      if (horaAllReduce(data, data, count, horaFloat32, op, comm, static_cast<horaStream_t>(s)) != horaSuccess)
        return std::string("AllReduce: ") + horaGetLastError(comm);
      cu::copyAsync(got.data(), data, count * 4, s);
      if (horaStreamSynchronize(static_cast<horaStream_t>(s)) != horaSuccess)
        return std::string("sync: ") + horaGetLastError(nullptr);
      const float want = static_cast<float>(k * nranks * (nranks + 1) / 2);
      for (size_t i = 0; i < count && e.empty(); ++i)
        if (got[i] != want) e = "call " + std::to_string(k) + " element " + std::to_string(i) + ": " + std::to_string(got[i]);
    }
    // Without a stream, the same op reads the scalar when the call runs.
    const float last = static_cast<float>(rank + 1) * 0.5f;
    cu::copyAsync(scalar, &last, sizeof last, nullptr);
    cu::copyAsync(data, ones.data(), count * 4, nullptr);
    if (e.empty() && horaAllReduce(data, data, count, horaFloat32, op, comm, nullptr) != horaSuccess)
      e = std::string("AllReduce without a stream: ") + horaGetLastError(comm);
    cu::copyAsync(got.data(), data, count * 4, nullptr);
    cu::streamSync(nullptr);
    if (e.empty() && got[count - 1] != 0.5f * static_cast<float>(nranks * (nranks + 1) / 2))
      e = "without a stream: " + std::to_string(got[count - 1]);
    horaRedOpDestroy(op, comm);
    cu::deviceFree(scalar);
    cu::deviceFree(data);
    cu::streamDestroy(s);
    return e;
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("one thread drives two ranks: a group over both communicators on their own streams", "[device][stream]") {
  // NCCL's pattern for several GPUs in one thread: the group's calls on each communicator must
  // all be under way before any can finish.
  const std::string e = inChild([]() -> std::string {
    horaComm_t comms[2];
    if (horaCommInitAll(comms, 2, nullptr) != horaSuccess) return std::string("init: ") + horaGetLastError(nullptr);
    const size_t count = (3u << 20) + 3;
    void* s[2];
    float* d[2];
    std::vector<float> host(count);
    for (int r = 0; r < 2; ++r) {
      s[r] = cu::streamCreate();
      d[r] = static_cast<float*>(cu::deviceAlloc(count * 4));
      for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>((i % 97) * (r + 1));
      cu::copyAsync(d[r], host.data(), count * 4, nullptr);
    }
    cu::streamSync(nullptr);
    for (int round = 0; round < 3; ++round) {  // queued behind one another on each stream
      horaGroupStart();
      for (int r = 0; r < 2; ++r)
        horaAllReduce(d[r], d[r], count, horaFloat32, horaMax, comms[r], static_cast<horaStream_t>(s[r]));
      if (horaGroupEnd() != horaSuccess) return std::string("horaGroupEnd: ") + horaGetLastError(nullptr);
    }
    for (int r = 0; r < 2; ++r) {
      if (horaStreamSynchronize(static_cast<horaStream_t>(s[r])) != horaSuccess)
        return std::string("horaStreamSynchronize: ") + horaGetLastError(nullptr);
      cu::copyAsync(host.data(), d[r], count * 4, nullptr);
      cu::streamSync(nullptr);
      for (size_t i = 0; i < count; ++i)
        if (host[i] != static_cast<float>((i % 97) * 2))
          return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": " + std::to_string(host[i]);
      cu::deviceFree(d[r]);
      cu::streamDestroy(s[r]);
      horaCommDestroy(comms[r]);
    }
    return "";
  });
  CHECK(e == "");
}

TEST_CASE("a rank killed mid-call: the others' streams go on and report it", "[device][fault]") {
  ProcessOptions o;
  o.timeoutMs = 20000;
  auto results = runProcesses(3, [](horaComm_t comm, int rank, int) -> std::string {
    const size_t count = 1 << 20;
    float* d = static_cast<float*>(cu::deviceAlloc(count * 4));
    void* stream = cu::streamCreate();
    // One AllReduce that works, so the IPC stage is up, then rank 2 dies.
    if (horaAllReduce(d, d, count, horaFloat32, horaSum, comm, nullptr) != horaSuccess)
      return std::string("first AllReduce: ") + horaGetLastError(comm);
    if (rank == 2) raise(SIGKILL);
    const horaResult_t r = horaAllReduce(d, d, count, horaFloat32, horaSum, comm, static_cast<horaStream_t>(stream));
    if (r != horaSuccess) return std::string("the call on a stream failed at once: ") + horaGetLastError(comm);
    const horaResult_t s = horaStreamSynchronize(static_cast<horaStream_t>(stream));  // returns: the stream went on
    const std::string streamText = horaGetLastError(nullptr);
    if (s == horaSuccess) return "horaStreamSynchronize succeeded after rank 2 died";
    if (streamText.find("rank 2") == std::string::npos) return "the stream's error does not name rank 2: " + streamText;
    horaResult_t async = horaSuccess;
    horaCommGetAsyncError(comm, &async);
    if (async == horaSuccess) return "no async error on the communicator";
    const std::string commText = horaGetLastError(comm);
    if (commText.find("rank 2") == std::string::npos) return "the communicator's error does not name rank 2: " + commText;
    // Synchronous device calls fail at once on the failed communicator.
    if (horaAllGather(d, d, 1, horaFloat32, comm, nullptr) == horaSuccess) return "a later call succeeded";
    return "";
  }, o);
  INFO(describe(results));
  REQUIRE(results.size() == 3);
  CHECK(results[0].ok());
  CHECK(results[1].ok());
  CHECK(WIFSIGNALED(results[2].status));
}

// The device-initiated collectives' failures: every kernel ends, on every rank, with an error that
// names the rank it waited for.
TEST_CASE("device-initiated collectives: a stopped rank times out naming it, on every size", "[device][fault][kernels]") {
  if (processesShareGpu(3)) {
    WARN("rank processes share this GPU and take the worker's path: a stopped rank's kernels are tested on the "
         "emulated GPU (a late rank of threads on one GPU: 'a rank of threads that does not come to a call')");
    return;
  }
  ProcessOptions o;
  o.timeoutMs = 1500;
  for (size_t count : {size_t(64), size_t(3) << 20}) {  // LL, and pipelined chunks
    auto results = runProcesses(3, [count](horaComm_t comm, int rank, int) -> std::string {
      float* d = static_cast<float*>(cu::deviceAlloc(count * 4));
      void* stream = cu::streamCreate();
      horaStream_t s = static_cast<horaStream_t>(stream);
      if (horaAllReduce(d, d, count, horaFloat32, horaSum, comm, s) != horaSuccess || horaStreamSynchronize(s) != horaSuccess)
        return std::string("first AllReduce: ") + horaGetLastError(comm);
      if (!hora::device::kernelsActive(reinterpret_cast<horaComm*>(comm))) return "no device-initiated collectives";
      if (rank == 2) raise(SIGSTOP);
      if (horaAllReduce(d, d, count, horaFloat32, horaSum, comm, s) != horaSuccess)
        return std::string("the call failed at once: ") + horaGetLastError(comm);
      if (horaStreamSynchronize(s) == horaSuccess) return "the stream's AllReduce succeeded without rank 2";
      const std::string text = horaGetLastError(nullptr);
      if (text.find("rank 2") == std::string::npos || text.find("stopped") == std::string::npos)
        return "the stream's error does not name rank 2 as stopped: " + text;
      horaResult_t async = horaSuccess;
      horaCommGetAsyncError(comm, &async);
      if (async != horaTimeout && async != horaRemoteError) return "the communicator's error is " + std::to_string(async);
      return "";
    }, o);
    INFO("count " << count << "\n" << describe(results));
    REQUIRE(results.size() == 3);
    CHECK(results[0].ok());
    CHECK(results[1].ok());
    CHECK(WIFSIGNALED(results[2].status));
  }
}

TEST_CASE("device-initiated collectives: horaCommAbort ends a kernel that waits for a rank", "[device][fault][kernels]") {
  // Rank 2 stays in its communicator, making no call, until ranks 0 and 1 have aborted theirs
  // and their streams went on (each writes a byte here then).
  int done[2];
  REQUIRE(pipe(done) == 0);
  auto results = runProcesses(3, [&done](horaComm_t comm, int rank, int) -> std::string {
    const size_t count = 1 << 20;
    float* d = static_cast<float*>(cu::deviceAlloc(count * 4));
    void* stream = cu::streamCreate();
    horaStream_t s = static_cast<horaStream_t>(stream);
    if (horaAllReduce(d, d, count, horaFloat32, horaSum, comm, s) != horaSuccess || horaStreamSynchronize(s) != horaSuccess)
      return std::string("first AllReduce: ") + horaGetLastError(comm);
    // The others' kernels wait for rank 2 until they are aborted (the default timeout is ten
    // minutes: only the abort ends them within the test's guard).
    if (rank != 2) {
      // (The other of ranks 0 and 1 may have aborted already: then the call fails at once.)
      if (horaAllReduce(d, d, count, horaFloat32, horaSum, comm, s) != horaSuccess &&
          std::string(horaGetLastError(comm)).find("aborted") == std::string::npos)
        return std::string("the call failed at once: ") + horaGetLastError(comm);
      if (horaCommAbort(comm) != horaSuccess) return "horaCommAbort failed";
      horaStreamSynchronize(s);  // returns: the kernel ended
      const char byte = 1;
      if (write(done[1], &byte, 1) != 1) return "writing to the pipe failed";
      return "";
    }
    char bytes[2];
    for (size_t got = 0; got < 2;) {
      const ssize_t r = read(done[0], bytes + got, 2 - got);
      if (r <= 0) return "reading the pipe failed";
      got += static_cast<size_t>(r);
    }
    horaCommAbort(comm);
    return "";
  });
  close(done[0]);
  close(done[1]);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("device-initiated collectives: mismatched calls are an error on every rank", "[device][fault][kernels]") {
  ProcessOptions o;
  o.timeoutMs = 3000;
  for (size_t count : {size_t(100), size_t(1) << 20}) {
    auto results = runProcesses(2, [count](horaComm_t comm, int rank, int) -> std::string {
      uint8_t* d = static_cast<uint8_t*>(cu::deviceAlloc(count * 2 * 4));
      void* stream = cu::streamCreate();
      horaStream_t s = static_cast<horaStream_t>(stream);
      if (horaAllReduce(d, d, count, horaFloat32, horaSum, comm, s) != horaSuccess || horaStreamSynchronize(s) != horaSuccess)
        return std::string("first AllReduce: ") + horaGetLastError(comm);
      // Rank 1 calls Broadcast where rank 0 calls AllReduce, on as many bytes.
      horaResult_t r = rank == 0 ? horaAllReduce(d, d, count, horaFloat32, horaSum, comm, s)
                                 : horaBroadcast(d, d, count, horaFloat32, 0, comm, s);
      if (r != horaSuccess) return std::string("the call failed at once: ") + horaGetLastError(comm);
      if (horaStreamSynchronize(s) == horaSuccess) return "mismatched calls succeeded";
      const std::string text = horaGetLastError(nullptr);
      if (text.find("mismatched") == std::string::npos && text.find("Timed out") == std::string::npos)
        return "the error says neither a mismatch nor a timeout: " + text;
      return "";
    }, o);
    INFO("count " << count << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

// ---- send/recv and groups as one kernel (gpu/protocol.h's P2p and Batch) ----
namespace {

// Value i of the message from `from` to `to` (its `tagged`-th of that pair in the test).
int32_t p2pValue(int from, int to, int tagged, size_t i) {
  return static_cast<int32_t>((from * 131 + to * 17 + tagged * 7919) ^ static_cast<int32_t>(i * 2654435761u));
}

int32_t* deviceFilled(size_t count, const std::function<int32_t(size_t)>& value) {
  std::vector<int32_t> host(count);
  for (size_t i = 0; i < count; ++i) host[i] = value(i);
  int32_t* d = static_cast<int32_t*>(cu::deviceAlloc(std::max<size_t>(count, 1) * 4));
  cu::copyAsync(d, host.data(), count * 4, nullptr);
  cu::streamSync(nullptr);
  return d;
}

// "" where the device buffer holds value(i) at every i.
std::string deviceHolds(const int32_t* d, size_t count, const std::function<int32_t(size_t)>& value, const std::string& what) {
  std::vector<int32_t> host(count);
  cu::copyAsync(host.data(), d, count * 4, nullptr);
  cu::streamSync(nullptr);
  for (size_t i = 0; i < count; ++i)
    if (host[i] != value(i))
      return what + ": element " + std::to_string(i) + " is " + std::to_string(host[i]) + ", not " + std::to_string(value(i));
  return "";
}

// Runs `issue` (the calls of one group, or a lone call) on `stream` (null: synchronous), then
// checks it went as one kernel: "" or what went wrong.
std::string oneLaunch(horaComm_t comm, void* stream, const std::function<horaResult_t()>& issue, const std::string& what) {
  horaComm* c = reinterpret_cast<horaComm*>(comm);
  const uint64_t before = hora::device::kernelLaunches(c);
  if (issue() != horaSuccess) return what + ": " + horaGetLastError(comm);
  if (stream && horaStreamSynchronize(static_cast<horaStream_t>(stream)) != horaSuccess)
    return what + " on a stream: " + horaGetLastError(nullptr);
  const uint64_t after = hora::device::kernelLaunches(c);
  if (after != before + 1)
    return what + ": " + std::to_string(after - before) + " kernels launched, not one";
  return "";
}

// A first AllReduce on device buffers: sets the kernels up.
std::string setUpKernels(horaComm_t comm) {
  int32_t* d = deviceFilled(16, [](size_t) { return 1; });
  if (horaAllReduce(d, d, 16, horaInt32, horaSum, comm, nullptr) != horaSuccess)
    return std::string("the first AllReduce: ") + horaGetLastError(comm);
  cu::deviceFree(d);
  if (!hora::device::kernelsActive(reinterpret_cast<horaComm*>(comm))) return "no device-initiated collectives";
  return "";
}

}  // namespace

TEST_CASE("send/recv as kernels: a ring in a group, one launch, every size", "[device][kernels][p2p]") {
  if (processesShareGpu(2)) {
    WARN("rank processes share this GPU and take the worker's path: send/recv as kernels are tested on the emulated "
         "GPU (and groups of collectives between ranks as threads: 'groups of collectives as one kernel')");
    return;
  }
  for (int n : {2, 3, 5}) {
    auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      std::string e = setUpKernels(comm);
      if (!e.empty()) return e;
      const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
      void* stream = cu::streamCreate();
      int tagged = 0;
      // One element, past one p2p chunk (64 KiB on the emulated GPU), many chunks over both blocks.
      for (size_t count : {size_t(1), size_t(1000), size_t(16385), size_t(300001)})
        for (void* s : {stream, static_cast<void*>(nullptr)}) {
          ++tagged;
          int32_t* out = deviceFilled(count, [&](size_t i) { return p2pValue(rank, next, tagged, i); });
          int32_t* in = deviceFilled(count, [](size_t) { return -1; });
          const std::string what = "count " + std::to_string(count) + (s ? " on a stream" : " synchronous");
          // The receive first on even ranks, the send first on odd ones: a group's order is free.
          e = oneLaunch(comm, s, [&] {
            horaGroupStart();
            if (rank % 2 == 0) horaRecv(in, count, horaInt32, prev, comm, static_cast<horaStream_t>(s));
            horaSend(out, count, horaInt32, next, comm, static_cast<horaStream_t>(s));
            if (rank % 2 == 1) horaRecv(in, count, horaInt32, prev, comm, static_cast<horaStream_t>(s));
            return horaGroupEnd();
          }, what);
          if (!e.empty()) return e;
          e = deviceHolds(in, count, [&](size_t i) { return p2pValue(prev, rank, tagged, i); }, what);
          if (!e.empty()) return e;
          cu::deviceFree(out);
          cu::deviceFree(in);
        }
      return "";
    });
    INFO("nranks " << n << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

TEST_CASE("send/recv as kernels: an all-to-all, self included, two messages per pair in order", "[device][kernels][p2p]") {
  if (processesShareGpu(2)) {
    WARN("rank processes share this GPU and take the worker's path: send/recv as kernels are tested on the emulated "
         "GPU (and groups of collectives between ranks as threads: 'groups of collectives as one kernel')");
    return;
  }
  auto results = runProcesses(4, [](horaComm_t comm, int rank, int nranks) -> std::string {
    std::string e = setUpKernels(comm);
    if (!e.empty()) return e;
    void* stream = cu::streamCreate();
    horaStream_t s = static_cast<horaStream_t>(stream);
    const size_t count = 20000;  // a few chunks each
    std::vector<int32_t*> outs, ins;
    for (int j = 0; j < nranks; ++j)
      for (int m = 0; m < 2; ++m) {
        outs.push_back(deviceFilled(count, [&](size_t i) { return p2pValue(rank, j, m, i); }));
        ins.push_back(deviceFilled(count, [](size_t) { return -1; }));
      }
    // 16 calls: the most one kernel takes. The two messages to each peer go in order; the
    // receives are posted before the sends on half the pairs.
    e = oneLaunch(comm, stream, [&] {
      horaGroupStart();
      for (int j = 0; j < nranks; ++j) {
        const bool recvFirst = (rank + j) % 2 == 0;
        for (int m = 0; m < 2; ++m) {
          if (recvFirst) horaRecv(ins[static_cast<size_t>(j * 2 + m)], count, horaInt32, j, comm, s);
          horaSend(outs[static_cast<size_t>(j * 2 + m)], count, horaInt32, j, comm, s);
          if (!recvFirst) horaRecv(ins[static_cast<size_t>(j * 2 + m)], count, horaInt32, j, comm, s);
        }
      }
      return horaGroupEnd();
    }, "the all-to-all");
    if (!e.empty()) return e;
    for (int j = 0; j < nranks; ++j)
      for (int m = 0; m < 2; ++m) {
        e = deviceHolds(ins[static_cast<size_t>(j * 2 + m)], count, [&](size_t i) { return p2pValue(j, rank, m, i); },
                        "message " + std::to_string(m) + " from rank " + std::to_string(j));
        if (!e.empty()) return e;
      }
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// Until the process that wrote its pid to `file` has exited (and been reaped): "" or why not.
std::string awaitExitOf(const std::string& file) {
  for (int i = 0; i < 60000; ++i) {
    FILE* f = fopen(file.c_str(), "r");
    long pid = 0;
    const bool read = f && fscanf(f, "%ld", &pid) == 1;
    if (f) fclose(f);
    if (read && pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return "";
    usleep(1000);
  }
  return "the rank that left did not exit";
}

TEST_CASE("groups as one kernel: collectives and send/recv together, then lone sends after a rank has left",
          "[device][kernels][p2p]") {
  if (processesShareGpu(2)) {
    WARN("rank processes share this GPU and take the worker's path: send/recv as kernels are tested on the emulated "
         "GPU (and groups of collectives between ranks as threads: 'groups of collectives as one kernel')");
    return;
  }
  // Rank 2 closes its communicator and exits after the group; ranks 0 and 1 then send to each
  // other: a rank gone that their kernels do not wait on is no failure of theirs.
  char dir[] = "/tmp/hora-left-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string pidFile = std::string(dir) + "/pid";
  auto results = runProcesses(3, [&pidFile](horaComm_t comm, int rank, int nranks) -> std::string {
    std::string e = setUpKernels(comm);
    if (!e.empty()) return e;
    void* stream = cu::streamCreate();
    horaStream_t s = static_cast<horaStream_t>(stream);
    const size_t count = 70000;  // pipelined chunks
    int32_t* a = deviceFilled(count, [&](size_t i) { return static_cast<int32_t>(i) + rank; });
    int32_t* g = deviceFilled(count * static_cast<size_t>(nranks), [](size_t) { return -1; });
    int32_t* small = deviceFilled(10, [&](size_t i) { return static_cast<int32_t>(i) * (rank + 1); });
    const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    int32_t* out = deviceFilled(count, [&](size_t i) { return p2pValue(rank, next, 9, i); });
    int32_t* in = deviceFilled(count, [](size_t) { return -1; });
    e = oneLaunch(comm, stream, [&] {
      horaGroupStart();
      horaAllReduce(a, a, count, horaInt32, horaSum, comm, s);
      horaSend(out, count, horaInt32, next, comm, s);
      horaAllGather(a, g, count, horaInt32, comm, s);
      horaRecv(in, count, horaInt32, prev, comm, s);
      horaAllReduce(small, small, 10, horaInt32, horaSum, comm, s);  // LL
      return horaGroupEnd();
    }, "the group");
    if (!e.empty()) return e;
    const int32_t ranks = nranks, sumRanks = nranks * (nranks - 1) / 2;
    const auto reduced = [&](size_t i) { return static_cast<int32_t>(i) * ranks + sumRanks; };
    if (!(e = deviceHolds(a, count, reduced, "the AllReduce")).empty()) return e;
    if (!(e = deviceHolds(g, count * static_cast<size_t>(nranks), [&](size_t i) { return reduced(i % count); },
                          "the AllGather (of the AllReduce's result: in order)")).empty())
      return e;
    if (!(e = deviceHolds(small, 10, [&](size_t i) { return static_cast<int32_t>(i) * (ranks * (ranks + 1) / 2); },
                          "the small AllReduce")).empty())
      return e;
    if (!(e = deviceHolds(in, count, [&](size_t i) { return p2pValue(prev, rank, 9, i); }, "the receive")).empty()) return e;
    // Lone sends and receives, each a kernel of its own: rank 0 to 1, then back, once rank 2
    // has gone (each receiver's kernel waits a while for its sender: the watchdog looks).
    if (rank == 2) {
      const std::string tmp = pidFile + ".tmp";
      FILE* f = fopen(tmp.c_str(), "w");
      if (!f || fprintf(f, "%ld\n", static_cast<long>(getpid())) <= 0 || fclose(f) != 0 ||
          rename(tmp.c_str(), pidFile.c_str()) != 0)
        return "cannot write " + pidFile;
    } else {
      if (!(e = awaitExitOf(pidFile)).empty()) return e;
      int32_t* msg = deviceFilled(5000, [&](size_t i) { return p2pValue(rank, 1 - rank, 3, i); });
      int32_t* got = deviceFilled(5000, [](size_t) { return 0; });
      for (int from : {0, 1}) {
        if (rank == from) usleep(50000);
        e = oneLaunch(comm, stream, [&] {
          return rank == from ? horaSend(msg, 5000, horaInt32, 1 - rank, comm, s)
                              : horaRecv(got, 5000, horaInt32, from, comm, s);
        }, "a lone send or receive");
        if (!e.empty()) return e;
      }
      if (!(e = deviceHolds(got, 5000, [&](size_t i) { return p2pValue(1 - rank, rank, 3, i); }, "the lone receive")).empty())
        return e;
    }
    return "";
  });
  unlink(pidFile.c_str());
  rmdir(dir);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("send/recv as kernels: a size mismatch and a dead sender are errors naming the peer", "[device][fault][kernels][p2p]") {
  if (processesShareGpu(2)) {
    WARN("rank processes share this GPU and take the worker's path: send/recv as kernels are tested on the emulated "
         "GPU (and groups of collectives between ranks as threads: 'groups of collectives as one kernel')");
    return;
  }
  ProcessOptions o;
  o.timeoutMs = 1500;
  // Rank 1 receives 999 elements where rank 0 sends 1000 (past one chunk: 70000).
  for (size_t count : {size_t(1000), size_t(70000)}) {
    auto results = runProcesses(2, [count](horaComm_t comm, int rank, int) -> std::string {
      std::string e = setUpKernels(comm);
      if (!e.empty()) return e;
      void* stream = cu::streamCreate();
      horaStream_t s = static_cast<horaStream_t>(stream);
      int32_t* d = deviceFilled(count, [](size_t i) { return static_cast<int32_t>(i); });
      const horaResult_t r = rank == 0 ? horaSend(d, count, horaInt32, 1, comm, s) : horaRecv(d, count - 1, horaInt32, 0, comm, s);
      if (r != horaSuccess) return std::string("the call failed at once: ") + horaGetLastError(comm);
      const horaResult_t done = horaStreamSynchronize(s);
      if (rank == 1) {
        if (done == horaSuccess) return "a receive of another size succeeded";
        const std::string text = horaGetLastError(nullptr);
        if (text.find("mismatched send/recv") == std::string::npos || text.find("rank 0") == std::string::npos ||
            text.find(std::to_string(count * 4) + " bytes") == std::string::npos)
          return "the receiver's error does not name the sender and its size: " + text;
        return "";
      }
      // The sender hears of the receiver's failure at its next call at the latest.
      int32_t* x = deviceFilled(1, [](size_t) { return 1; });
      if (done == horaSuccess && horaAllReduce(x, x, 1, horaInt32, horaSum, comm, s) == horaSuccess &&
          horaStreamSynchronize(s) == horaSuccess)
        return "the sender went on as if nothing had failed";
      return "";
    }, o);
    INFO("count " << count << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
  // Rank 0 stops before it sends: rank 1's receive times out naming it.
  auto results = runProcesses(2, [](horaComm_t comm, int rank, int) -> std::string {
    std::string e = setUpKernels(comm);
    if (!e.empty()) return e;
    void* stream = cu::streamCreate();
    horaStream_t s = static_cast<horaStream_t>(stream);
    int32_t* d = deviceFilled(100000, [](size_t) { return 0; });
    if (rank == 0) raise(SIGSTOP);
    if (horaRecv(d, 100000, horaInt32, 0, comm, s) != horaSuccess) return std::string("the call failed at once: ") + horaGetLastError(comm);
    if (horaStreamSynchronize(s) == horaSuccess) return "a receive from a stopped rank succeeded";
    const std::string text = horaGetLastError(nullptr);
    if (text.find("rank 0") == std::string::npos || text.find("stopped") == std::string::npos ||
        text.find("send/recv") == std::string::npos)
      return "the error does not name rank 0 as stopped in a send/recv: " + text;
    return "";
  }, o);
  INFO(describe(results));
  REQUIRE(results.size() == 2);
  CHECK(WIFSIGNALED(results[0].status));
  CHECK(results[1].ok());
}

TEST_CASE("send/recv as kernels: horaCommAbort ends a receive that waits for its sender", "[device][fault][kernels][p2p]") {
  if (processesShareGpu(2)) {
    WARN("rank processes share this GPU and take the worker's path: send/recv as kernels are tested on the emulated GPU");
    return;
  }
  // Rank 0 never sends; it stays in its communicator until rank 1 has aborted its own and its
  // stream went on (rank 1 writes a byte here then).
  int done[2];
  REQUIRE(pipe(done) == 0);
  auto results = runProcesses(2, [&done](horaComm_t comm, int rank, int) -> std::string {
    std::string e = setUpKernels(comm);
    if (!e.empty()) return e;
    if (rank == 0) {
      char byte;
      if (read(done[0], &byte, 1) != 1) return "reading the pipe failed";
      horaCommAbort(comm);
      return "";
    }
    void* stream = cu::streamCreate();
    horaStream_t s = static_cast<horaStream_t>(stream);
    int32_t* d = deviceFilled(100000, [](size_t) { return 0; });
    // (The default timeout is ten minutes: only the abort ends the kernel within the test's guard.)
    if (horaRecv(d, 100000, horaInt32, 0, comm, s) != horaSuccess) return std::string("the call failed at once: ") + horaGetLastError(comm);
    if (horaCommAbort(comm) != horaSuccess) return "horaCommAbort failed";
    horaStreamSynchronize(s);  // returns: the kernel ended
    const char byte = 1;
    if (write(done[1], &byte, 1) != 1) return "writing to the pipe failed";
    return "";
  });
  close(done[0]);
  close(done[1]);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// Between ranks as threads of one GPU too (on a GPU: the ranks of the gpu suite's kernels), a
// group of collectives is one kernel, its calls in order.
TEST_CASE("groups of collectives as one kernel, on a stream and without", "[device][kernels][group]") {
  const RankFn group = [](horaComm_t comm, int rank, int nranks) -> std::string {
    std::string e = setUpKernels(comm);
    if (!e.empty()) return e;
    void* stream = cu::streamCreate();
    for (void* s : {stream, static_cast<void*>(nullptr)})
      for (size_t count : {size_t(100), size_t(300001)}) {  // LL; chunks or direct
        int32_t* a = deviceFilled(count, [&](size_t i) { return static_cast<int32_t>(i % 1000) + rank; });
        int32_t* b = deviceFilled(count, [&](size_t i) { return static_cast<int32_t>(i % 7) * (rank + 1); });
        int32_t* g = deviceFilled(count * static_cast<size_t>(nranks), [](size_t) { return -1; });
        horaStream_t hs = static_cast<horaStream_t>(s);
        const std::string what = "count " + std::to_string(count) + (s ? " on a stream" : " synchronous");
        e = oneLaunch(comm, s, [&] {
          horaGroupStart();
          horaAllReduce(a, a, count, horaInt32, horaSum, comm, hs);
          horaAllReduce(b, b, count, horaInt32, horaSum, comm, hs);
          horaAllGather(a, g, count, horaInt32, comm, hs);  // of the first AllReduce's result
          horaBroadcast(b, b, count, horaInt32, nranks - 1, comm, hs);
          return horaGroupEnd();
        }, what);
        if (!e.empty()) return e;
        const int32_t ranks = nranks, sumRanks = nranks * (nranks - 1) / 2;
        const auto ra = [&](size_t i) { return static_cast<int32_t>(i % 1000) * ranks + sumRanks; };
        const auto rb = [&](size_t i) { return static_cast<int32_t>(i % 7) * (ranks * (ranks + 1) / 2); };
        if (!(e = deviceHolds(a, count, ra, what + ", the first AllReduce")).empty()) return e;
        if (!(e = deviceHolds(b, count, rb, what + ", the second AllReduce and the Broadcast")).empty()) return e;
        if (!(e = deviceHolds(g, count * static_cast<size_t>(nranks), [&](size_t i) { return ra(i % count); },
                              what + ", the AllGather")).empty())
          return e;
        for (int32_t* p : {a, b, g}) cu::deviceFree(p);
      }
    return "";
  };
  for (int n : {2, 3}) {
    INFO("nranks " << n);
    CHECK(onKernelRanks(n, group) == "");
    // Ranks as threads of one GPU (on the emulated one too): they meet before each launch.
    if (emulating()) CHECK(onThreads(n, group) == "");
  }
}

// A communicator's kernels run in the order they were queued, whatever streams they are on:
// calls alternate between two streams and the legacy default stream with no synchronisation
// between them, and every result is exact.
TEST_CASE("device-initiated collectives on several streams of one communicator run in call order", "[device][kernels]") {
  auto results = runProcesses(3, [](horaComm_t comm, int rank, int nranks) -> std::string {
    const size_t count = 70000;  // chunks, two blocks on the emulated GPU
    void* streams[2] = {cu::streamCreate(), cu::streamCreate()};
    std::vector<int32_t*> bufs;
    int32_t* pinned = static_cast<int32_t*>(cu::hostAlloc(count * 4));
    for (int i = 0; i < 6; ++i) {
      int32_t* d = static_cast<int32_t*>(cu::deviceAlloc(count * 4));
      for (size_t e = 0; e < count; ++e) pinned[e] = static_cast<int32_t>(rank * 1000 + i * 10 + static_cast<int>(e % 7));
      cu::copyAsync(d, pinned, count * 4, nullptr);
      cu::streamSync(nullptr);  // (before pinned is refilled: on a GPU the copy is still to come)
      bufs.push_back(d);
    }
    for (int i = 0; i < 6; ++i) {
      // stream 0, stream 1, the legacy stream (synchronous), and again
      horaStream_t s = i % 3 == 2 ? nullptr : static_cast<horaStream_t>(streams[i % 3]);
      if (horaAllReduce(bufs[static_cast<size_t>(i)], bufs[static_cast<size_t>(i)], count, horaInt32, horaSum, comm, s) != horaSuccess)
        return "call " + std::to_string(i) + ": " + horaGetLastError(comm);
    }
    for (void* st : streams)
      if (horaStreamSynchronize(static_cast<horaStream_t>(st)) != horaSuccess) return std::string("sync: ") + horaGetLastError(nullptr);
    for (int i = 0; i < 6; ++i) {
      cu::copyAsync(pinned, bufs[static_cast<size_t>(i)], count * 4, nullptr);
      cu::streamSync(nullptr);
      for (size_t e = 0; e < count; e += 997) {
        int32_t want = 0;
        for (int r = 0; r < nranks; ++r) want += r * 1000 + i * 10 + static_cast<int>(e % 7);
        if (pinned[e] != want)
          return "call " + std::to_string(i) + " element " + std::to_string(e) + " is " + std::to_string(pinned[e]) +
                 ", not " + std::to_string(want);
      }
    }
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// The flight recorder sees a device-initiated collective: started as it is queued, done once its
// kernel has returned (a stream's synchronisation settles it).
TEST_CASE("device-initiated collectives are in the flight recorder's dump", "[device][kernels][trace]") {
  const std::string e = onKernelRanks(2, [](horaComm_t comm, int rank, int) -> std::string {
    float* d = static_cast<float*>(cu::deviceAlloc(4096 * 4));
    void* stream = cu::streamCreate();
    horaStream_t s = static_cast<horaStream_t>(stream);
    for (int i = 0; i < 2; ++i)
      if (horaAllReduce(d, d, 4096, horaFloat32, horaSum, comm, s) != horaSuccess || horaStreamSynchronize(s) != horaSuccess)
        return std::string("AllReduce: ") + horaGetLastError(comm);
    if (!hora::device::kernelsActive(reinterpret_cast<horaComm*>(comm))) return "no device-initiated collectives";
    char path[128];
    snprintf(path, sizeof path, "/tmp/hora-test-device-dump.%d.%d.json", static_cast<int>(getpid()), rank);
    if (horaCommDump(comm, path) != horaSuccess) return std::string("horaCommDump: ") + horaGetLastError(comm);
    FILE* f = fopen(path, "r");
    if (!f) return "no dump written";
    std::string text;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    fclose(f);
    unlink(path);
    size_t at = text.rfind("\"algorithm\": \"device kernel\"");
    if (at == std::string::npos) return "the dump has no device kernel: " + text.substr(0, 600);
    const size_t line = text.find("\"state\": ", at);
    const std::string done = "\"state\": \"done\"";
    if (line == std::string::npos || text.compare(line, done.size(), done) != 0)
      return "the device kernel's entry is not done: " + text.substr(at, 300);
    return "";
  });
  CHECK(e == "");
}

// CUDA graphs: a device-initiated collective captured on a stream replays correctly, again and
// again (each replay takes its numbers from the device, not from the capture); a call that
// needs the worker is refused while capturing, and the communicator goes on.
TEST_CASE("device-initiated collectives captured in a CUDA graph replay correctly", "[device][graph][kernels]") {
  for (int n : {2, 3}) {
    const std::string e = onKernelRanks(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      const size_t small = 37, large = (size_t(1) << 20) + 3;  // LL, and chunks
      int32_t* in = static_cast<int32_t*>(cu::deviceAlloc(large * 4));
      int32_t* sum = static_cast<int32_t*>(cu::deviceAlloc(small * 4));
      int32_t* all = static_cast<int32_t*>(cu::deviceAlloc(large * 4 * static_cast<size_t>(nranks)));
      int32_t* pinned = static_cast<int32_t*>(cu::hostAlloc(large * 4 * static_cast<size_t>(nranks)));
      void* stream = cu::streamCreate();
      horaStream_t s = static_cast<horaStream_t>(stream);
      const auto value = [](int r, int round, size_t i) { return static_cast<int32_t>(r * 1000003 + round * 7919 + static_cast<int>(i % 9973)); };
      const auto fill = [&](int round) {
        for (size_t i = 0; i < large; ++i) pinned[i] = value(rank, round, i);
        cu::copyAsync(in, pinned, large * 4, stream);
      };
      // The set-up call, before any capture.
      fill(0);
      if (horaAllReduce(in, sum, small, horaInt32, horaSum, comm, s) != horaSuccess || horaStreamSynchronize(s) != horaSuccess)
        return std::string("the first call: ") + horaGetLastError(comm);
      cu::streamBeginCapture(stream);
      if (!cu::isCapturing(stream)) return "the stream does not say it is capturing";
      if (horaAllReduce(in, sum, small, horaInt32, horaSum, comm, s) != horaSuccess)
        return std::string("captured AllReduce: ") + horaGetLastError(comm);
      if (horaAllGather(in, all, large, horaInt32, comm, s) != horaSuccess)
        return std::string("captured AllGather: ") + horaGetLastError(comm);
      // AllToAll goes through the worker: refused while capturing.
      if (horaAllToAll(in, all, 1, horaInt32, comm, s) != horaInvalidUsage) return "an AllToAll was captured";
      if (std::string(horaGetLastError(comm)).find("graph") == std::string::npos)
        return std::string("the refusal does not say why: ") + horaGetLastError(comm);
      void* graph = cu::streamEndCapture(stream);
      for (int round = 1; round <= 4; ++round) {
        fill(round);
        cu::graphLaunch(graph, stream);
        std::vector<int32_t> got(small);
        cu::copyAsync(pinned, sum, small * 4, stream);
        if (horaStreamSynchronize(s) != horaSuccess) return std::string("a replay failed: ") + horaGetLastError(nullptr);
        for (size_t i = 0; i < small; ++i) {
          int32_t want = 0;
          for (int r = 0; r < nranks; ++r) want = static_cast<int32_t>(static_cast<uint32_t>(want) + static_cast<uint32_t>(value(r, round, i)));
          if (pinned[i] != want)
            return "replay " + std::to_string(round) + ": AllReduce element " + std::to_string(i) + " is " +
                   std::to_string(pinned[i]) + ", not " + std::to_string(want);
        }
        cu::copyAsync(pinned, all, large * 4 * static_cast<size_t>(nranks), stream);
        cu::streamSync(stream);
        for (int r = 0; r < nranks; ++r)
          for (size_t i = 0; i < large; i += 4099)
            if (pinned[static_cast<size_t>(r) * large + i] != value(r, round, i))
              return "replay " + std::to_string(round) + ": AllGather block " + std::to_string(r) + " element " +
                     std::to_string(i) + " is wrong";
      }
      cu::graphDestroy(graph);
      // Not captured, after the replays: the numbers went on.
      fill(9);
      if (horaAllReduce(in, sum, small, horaInt32, horaSum, comm, s) != horaSuccess || horaStreamSynchronize(s) != horaSuccess)
        return std::string("a call after the replays: ") + horaGetLastError(comm);
      return "";
    });
    INFO("nranks " << n);
    CHECK(e == "");
  }
}

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

TEST_CASE("stream and buffer errors are arguments' errors, and the communicator stays usable", "[device][args]") {
  auto results = runProcesses(2, [](horaComm_t comm, int, int) -> std::string {
    float x[4] = {1, 2, 3, 4};
    int bogus = 0;
    // A pointer that is no stream: told apart on the emulated GPU; the CUDA runtime can only
    // probe a handle (cudaStreamGetFlags), which is undefined on anything but a stream.
    if (emulating()) {
      if (horaAllReduce(x, x, 4, horaFloat32, horaSum, comm, reinterpret_cast<horaStream_t>(&bogus)) != horaInvalidArgument)
        return "a stream that is none was accepted";
      if (std::string(horaGetLastError(comm)).find("neither a live host stream") == std::string::npos)
        return std::string("unclear text: ") + horaGetLastError(comm);
    }
    void* s = cu::streamCreate();
    horaGroupStart();
    horaAllReduce(x, x, 4, horaFloat32, horaSum, comm, static_cast<horaStream_t>(s));
    const horaResult_t mixed = horaAllReduce(x, x, 4, horaFloat32, horaSum, comm, nullptr);
    horaGroupEnd();
    if (mixed != horaInvalidUsage) return "a group mixing a CUDA stream and none was accepted";
    cu::streamSync(s);
    // Still usable.
    if (horaAllReduce(x, x, 4, horaFloat32, horaSum, comm, static_cast<horaStream_t>(s)) != horaSuccess ||
        horaStreamSynchronize(static_cast<horaStream_t>(s)) != horaSuccess)
      return std::string("after the errors: ") + horaGetLastError(comm);
    cu::streamDestroy(s);
    return x[0] == 4 ? "" : "wrong result " + std::to_string(x[0]);  // 1+1 twice (the group ran once)
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("the reduction kernels on the device give the CPU kernels' bits, aligned or not", "[device][kernels]") {
  const std::string e = inChild([]() -> std::string {
    std::mt19937_64 rng(7);
    const size_t count = 100003;
    for (int t = 0; t < hora::kNumDataTypes; ++t) {
      const auto dt = static_cast<hora::DataType>(t);
      const size_t esz = hora::dataTypeSize(dt);
      for (hora::RedOp op : {hora::RedOp::Sum, hora::RedOp::Prod, hora::RedOp::Max, hora::RedOp::Min, hora::RedOp::Avg,
                             hora::RedOp::PreMulSum})
        for (int nsrc : {1, 2, 5, 16})
          // Every pointer at `at` bytes past a 256-byte boundary, plus k*`step` for source k:
          // the 16-byte path (0, 0); with a head and a tail (esz, 0); one element at a time
          // (0, esz: the sources disagree mod 16); bytewise (1, 0: not element-aligned).
          for (auto [at, step] : {std::pair<size_t, size_t>{0, 0}, {esz, 0}, {0, esz}, {1, 0}}) {
            hora::kernels::ReduceSpec s;
            s.dtype = dt;
            s.op = op;
            if (op == hora::RedOp::PreMulSum) {
              s.premulFirst = true;
              if (hora::isFloating(dt)) s.scalar.f = 1.5;
              else s.scalar.i = 3;
            }
            if (op == hora::RedOp::Avg) {
              s.divide = true;
              s.divisor = 3;
            }
            const size_t bytes = count * esz;
            std::vector<std::vector<uint8_t>> in(static_cast<size_t>(nsrc), std::vector<uint8_t>(bytes));
            std::vector<const void*> hs, ds;
            std::vector<uint8_t*> allocs;
            for (int k = 0; k < nsrc; ++k) {
              for (auto& byte : in[static_cast<size_t>(k)]) byte = static_cast<uint8_t>(rng());
              hs.push_back(in[static_cast<size_t>(k)].data());
              uint8_t* d = static_cast<uint8_t*>(cu::deviceAlloc(bytes + 512));
              allocs.push_back(d);
              uint8_t* place = d + at + (static_cast<size_t>(k) * step) % 128;
              cu::copyAsync(place, hs.back(), bytes, nullptr);
              ds.push_back(place);
            }
            const size_t span = (bytes + 255) / 256 * 256;
            uint8_t* dout = static_cast<uint8_t*>(cu::deviceAlloc(2 * span + 512));
            allocs.push_back(dout);
            void* dd[2] = {dout + at, dout + span + at};
            const int ndst = nsrc % 2 ? 1 : 2;
            cu::streamSync(nullptr);
            cu::reduceAsync(dd, ndst, ds.data(), nsrc, count, s, nullptr);
            std::vector<uint8_t> want(bytes), got(bytes), got2(bytes);
            void* w[1] = {want.data()};
            hora::kernels::reduce(w, 1, hs.data(), nsrc, count, s);
            cu::copyAsync(got.data(), dd[0], bytes, nullptr);
            cu::copyAsync(got2.data(), dd[1], bytes, nullptr);
            cu::streamSync(nullptr);
            for (uint8_t* p : allocs) cu::deviceFree(p);
            for (size_t i = 0; i < count; ++i)
              if (!unit::sameElement(dt, got.data(), want.data(), i) ||
                  (ndst == 2 && !unit::sameElement(dt, got2.data(), want.data(), i)))
                return std::string(hora::dataTypeName(dt)) + " " + hora::redOpName(op) + " nsrc " + std::to_string(nsrc) +
                       " at " + std::to_string(at) + " step " + std::to_string(step) + " element " +
                       std::to_string(i) + ": device " +
                       unit::elementHex(dt, got.data(), i) + ", CPU " + unit::elementHex(dt, want.data(), i);
          }
    }
    return "";
  });
  CHECK(e == "");
}

int main(int argc, char** argv) {
  if (!emulating()) {
    // Ask a child whether there is a GPU: this process must not start CUDA before it forks.
    int fds[2];
    if (pipe(fds) != 0) return 1;
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      std::string why;
      try {
        hora::config();
        why = cu::usable() ? "" : cu::unusableWhy();
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (write(fds[1], why.data(), why.size()) < 0) _exit(2);
      _exit(why.empty() ? 0 : 1);
    }
    close(fds[1]);
    char buf[512];
    const ssize_t got = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("SKIP: no GPU for the device tests: %s\n", got > 0 ? std::string(buf, static_cast<size_t>(got)).c_str() : "?");
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}

// What the kernels' watchdog looks at (comm/device_state.h): the members of the kernels still in
// flight, kept in a ring of fixed size that never forgets a member of a kernel not yet finished.
TEST_CASE("the kernels' needed members: those of the kernels in flight, the ring never losing one", "[device][unit]") {
  using Kernels = hora::device::CommState::Kernels;
  Kernels::Needs n;
  CHECK(n.inFlight(0) == 0);
  n.add(2, 0b01);  // a send to member 0: blocks 1-2
  n.add(4, 0b01);  // another: joins it
  n.add(6, 0b10);  // a receive from member 1: blocks 5-6
  CHECK(n.count == 2);
  CHECK(n.inFlight(0) == 0b11);
  CHECK(n.inFlight(4) == 0b10);  // the sends have finished
  CHECK(n.inFlight(6) == 0);
  // Past the ring's size, alternating members: the last entry takes them all in.
  for (uint64_t i = 0; i < 100; ++i) n.add(7 + i, i % 2 ? 0b100 : 0b1000);
  CHECK(n.count == n.ring.size());
  CHECK(n.inFlight(6) == 0b1100);
  CHECK(n.inFlight(105) == 0b1100);  // the last kernel (block 106) holds both
  CHECK(n.inFlight(106) == 0);
  n.add(200, Kernels::kAllMembers);
  CHECK(n.inFlight(106) == Kernels::kAllMembers);
}
