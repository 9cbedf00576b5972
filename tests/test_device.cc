// Device buffers and CUDA streams (comm/device.h), on whatever device gpu/cuda.h offers:
//   - HORA_CUDA=emulate (the multirank suite, every machine): the emulated GPU, so that bouncing,
//     stream order, the CUDA IPC stage and their failures run everywhere;
//   - otherwise (the gpu suite): the real GPU; without one the program prints why and exits 77
//     (skipped). One GPU hosts every rank.
// No test lets this process start CUDA before it forks its ranks (a child of a process that has
// started CUDA cannot use it): what needs CUDA here runs in a child of its own. The calls as
// kernels are test_device_kernels.cc's, the device stage and ranks as threads of one GPU
// test_device_stage.cc's; this file's main() runs them all.
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
#include "unit_device.h"
#include "unit_kernels.h"

using namespace hora::test;
namespace cu = hora::cuda;

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
