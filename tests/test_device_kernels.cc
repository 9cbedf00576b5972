// Device-initiated calls as kernels (gpu/protocol.h): send/recv and groups as one kernel (its
// P2p and Batch), collectives on several streams of one communicator, in the flight recorder and
// in a CUDA graph; on the device test_device.cc's main() finds (the emulated GPU or the real one).
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

// Writes this process's pid to `file` whole (through a rename), for awaitExitOf.
bool writePid(const std::string& file) {
  const std::string tmp = file + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  return f && fprintf(f, "%ld\n", static_cast<long>(getpid())) > 0 && fclose(f) == 0 && rename(tmp.c_str(), file.c_str()) == 0;
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
      if (!writePid(pidFile)) return "cannot write " + pidFile;
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

// A kernel's part done with a rank that then closes its communicator and exits, while its other
// part still waits on another rank: no failure. Rank 0 sends to 1 and receives from 2 in one
// group (one kernel that needs both); rank 1 receives and leaves; rank 2 sends only once rank
// 1's process is gone, and a while after, so that the watchdog looks while rank 0's kernel waits.
// (A ring among the three first: a pair's first message sets its path up, with both there.)
TEST_CASE("send/recv as kernels: a rank that leaves once a kernel has all it needs of it is no failure",
          "[device][kernels][p2p]") {
  if (processesShareGpu(3)) {
    WARN("rank processes share this GPU and take the worker's path: tested on the emulated GPU");
    return;
  }
  char dir[] = "/tmp/hora-left-XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string pidFile = std::string(dir) + "/pid";
  auto results = runProcesses(3, [&pidFile](horaComm_t comm, int rank, int) -> std::string {
    std::string e = setUpKernels(comm);
    if (!e.empty()) return e;
    void* stream = cu::streamCreate();
    horaStream_t s = static_cast<horaStream_t>(stream);
    // One chunk each way (the emulated GPU runs a kernel's blocks in turn: a send of several
    // chunks waits behind the receive on the block before).
    const size_t count = 1000;
    int32_t* out = deviceFilled(count, [&](size_t i) { return p2pValue(rank, rank == 0 ? 1 : 0, 4, i); });
    int32_t* in = deviceFilled(count, [](size_t) { return -1; });
    // First a ring among all three, which sets up the pairs' paths (0 to 1 and 2 to 0 among them).
    e = oneLaunch(comm, stream, [&] {
      horaGroupStart();
      horaSend(out, 1, horaInt32, (rank + 1) % 3, comm, s);
      horaRecv(in, 1, horaInt32, (rank + 2) % 3, comm, s);
      return horaGroupEnd();
    }, "the ring");
    if (!e.empty()) return e;
    if (rank == 2) {
      if (!(e = awaitExitOf(pidFile)).empty()) return e;
      usleep(50000);
    }
    e = oneLaunch(comm, stream, [&] {
      if (rank == 1) return horaRecv(in, count, horaInt32, 0, comm, s);
      if (rank == 2) return horaSend(out, count, horaInt32, 0, comm, s);
      horaGroupStart();
      horaSend(out, count, horaInt32, 1, comm, s);
      horaRecv(in, count, horaInt32, 2, comm, s);
      return horaGroupEnd();
    }, rank == 0 ? "the group" : "a lone send or receive");
    if (!e.empty()) return e;
    if (rank != 2 && !(e = deviceHolds(in, count, [&](size_t i) { return p2pValue(rank == 0 ? 2 : 0, rank, 4, i); },
                                       "the receive")).empty())
      return e;
    if (rank == 1) {
      if (!writePid(pidFile)) return "cannot write " + pidFile;
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
