// The single copy, between processes of one host (src/coll/stage.cc): a large Broadcast's readers
// read the root's buffer where it lies, an AllGather's ranks each other's blocks, a 2-rank
// Reduce's ranks each other's inputs; every result checked, with the root or a rank that may
// not read the others' memory, and a root killed inside a call.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "comm/comm.h"
#include "harness.h"

using namespace hora::test;

namespace {
using Access = hora::transport::SharedStage::Access;

// Broadcasts of `count` bytes from every root, in place and out of place, each result checked;
// `chunks`, where not 0, is how many chunks of the stage's sequence each call must take (1: the
// single copy, which reads the root's buffer where it lies, whatever its size; more: the root's
// slots, a chunk per slot of 512 KiB).
std::string broadcastsTake(horaComm_t comm, int rank, int nranks, size_t count, uint64_t chunks) {
  std::vector<uint8_t> send(count), recv(count);
  for (int root = 0; root < nranks; ++root)
    for (bool inPlace : {true, false}) {
      auto value = [&](size_t i) { return static_cast<uint8_t>((i * 13 + static_cast<size_t>(root) * 5 + count) % 251); };
      for (size_t i = 0; i < count; ++i) send[i] = rank == root ? value(i) : 0xEE;
      std::fill(recv.begin(), recv.end(), 0xDD);
      uint8_t* buf = inPlace ? send.data() : recv.data();
      const uint64_t before = comm->seq.stageSeq;
      if (horaBroadcast(send.data(), buf, count, horaUint8, root, comm, nullptr) != horaSuccess)
        return std::string("Broadcast failed: ") + horaGetLastError(comm);
      const std::string where = " (" + std::to_string(count) + " bytes, root " + std::to_string(root) +
                                (inPlace ? ", in place)" : ", out of place)");
      if (chunks && comm->seq.stageSeq - before != chunks)
        return "took " + std::to_string(comm->seq.stageSeq - before) + " chunks of the stage, not " + std::to_string(chunks) + where;
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != value(i)) return "wrong byte " + std::to_string(i) + where;
      if (rank == root && !inPlace)
        for (size_t i = 0; i < count; ++i)
          if (send[i] != value(i)) return "the root's input changed" + where;
    }
  return "";
}

// A process that may not read another's memory: process_vm_readv fails with EPERM.
bool forbidCrossMemoryReads() { return forbidSyscall(SYS_process_vm_readv); }
}  // namespace

// Two processes: a Broadcast through the single copy reads the root's buffer where it lies (one
// chunk of the stage's sequence, whatever its size: 9 MiB would take 18 slots), every result
// right, by the planner's choice at 1 MiB (tests/test_planner.cc) and forced at other sizes; 1000
// bytes go through the cells. At 4 ranks, processes go through the root's slots (2 chunks of
// 512 KiB for 1 MiB); threads of one process read the root's buffer from 64 KiB, by the
// planner's own choice.
TEST_CASE("a large Broadcast reads the root's buffer where it lies, every result right", "[processes][singlecopy]") {
  auto results = runProcesses(2, [](horaComm_t comm, int rank, int nranks) -> std::string {
    if (comm->stage->memberAccess() != Access::Kernel) return "the ranks may not read each other's memory";
    std::string e = broadcastsTake(comm, rank, nranks, size_t(1) << 20, 1);  // the planner's choice
    const auto chosen = comm->planner.forced;
    comm->planner.forced = hora::coll::parseForced("broadcast:single");
    for (size_t count : {(size_t(64) << 10) + 1, (size_t(1) << 20) + 3, size_t(9) << 20})
      if (e.empty()) e = broadcastsTake(comm, rank, nranks, count, 1);
    comm->planner.forced = chosen;
    return e.empty() ? broadcastsTake(comm, rank, nranks, 1000, 0) : e;  // the cells
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());

  results = runProcesses(4, [](horaComm_t comm, int rank, int nranks) -> std::string {
    if (comm->stage->memberAccess() != Access::Kernel) return "the ranks may not read each other's memory";
    return broadcastsTake(comm, rank, nranks, size_t(1) << 20, 2);
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());

  auto failures = hora::test::runThreads(4, [](horaComm_t comm, int rank, int nranks) -> std::string {
    if (comm->stage->memberAccess() != Access::Direct) return "threads do not read each other's memory directly";
    std::string e = broadcastsTake(comm, rank, nranks, (size_t(1) << 20) + 5, 1);
    return e.empty() ? broadcastsTake(comm, rank, nranks, size_t(32) << 10, 0) : e;
  });
  CHECK(joinAll(failures) == "");
}

namespace {
// AllGathers of `count` bytes a rank, in place and out of place, each result checked; `chunks`
// as broadcastsTake's (1: the single copy, whatever the size).
std::string allGathersTake(horaComm_t comm, int rank, int nranks, size_t count, uint64_t chunks) {
  std::vector<uint8_t> send(count), recv(count * static_cast<size_t>(nranks));
  auto value = [&](int r, size_t i) { return static_cast<uint8_t>((i * 7 + static_cast<size_t>(r) * 31 + count) % 253); };
  for (bool inPlace : {true, false}) {
    std::fill(recv.begin(), recv.end(), 0xDD);
    uint8_t* mine = inPlace ? recv.data() + static_cast<size_t>(rank) * count : send.data();
    for (size_t i = 0; i < count; ++i) mine[i] = value(rank, i);
    const uint64_t before = comm->seq.stageSeq;
    if (horaAllGather(mine, recv.data(), count, horaUint8, comm, nullptr) != horaSuccess)
      return std::string("AllGather failed: ") + horaGetLastError(comm);
    const std::string where = " (" + std::to_string(count) + " bytes a rank" + (inPlace ? ", in place)" : ", out of place)");
    if (chunks && comm->seq.stageSeq - before != chunks)
      return "took " + std::to_string(comm->seq.stageSeq - before) + " chunks of the stage, not " + std::to_string(chunks) + where;
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < count; ++i)
        if (recv[static_cast<size_t>(r) * count + i] != value(r, i))
          return "wrong byte " + std::to_string(i) + " of rank " + std::to_string(r) + "'s block" + where;
    if (!inPlace)
      for (size_t i = 0; i < count; ++i)
        if (send[i] != value(rank, i)) return "the input changed" + where;
  }
  return "";
}
}  // namespace

// An AllGather through the single copy reads every other rank's block where it lies (one chunk
// of the stage's sequence, whatever its size), every result right: 2 processes by the
// planner's choice from 16 KiB a rank (tests/test_planner.cc) and forced at odd sizes; 4
// processes and 4 threads by the planner's choice. 16 KiB a rank and less between processes:
// not the single copy.
TEST_CASE("a large AllGather reads each rank's block where it lies, every result right", "[processes][singlecopy]") {
  auto results = runProcesses(2, [](horaComm_t comm, int rank, int nranks) -> std::string {
    if (comm->stage->memberAccess() != Access::Kernel) return "the ranks may not read each other's memory";
    std::string e = allGathersTake(comm, rank, nranks, size_t(1) << 20, 1);  // the planner's choice
    if (e.empty()) e = allGathersTake(comm, rank, nranks, (size_t(16) << 10) + 1, 1);
    const auto chosen = comm->planner.forced;
    comm->planner.forced = hora::coll::parseForced("allgather:single");
    for (size_t count : {(size_t(64) << 10) + 3, size_t(9) << 20})
      if (e.empty()) e = allGathersTake(comm, rank, nranks, count, 1);
    comm->planner.forced = chosen;
    if (e.empty() && allGathersTake(comm, rank, nranks, size_t(16) << 10, 1).empty())
      return "16 KiB a rank took the single copy";
    return e.empty() ? allGathersTake(comm, rank, nranks, 1000, 0) : e;
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());

  results = runProcesses(4, [](horaComm_t comm, int rank, int nranks) -> std::string {
    if (comm->stage->memberAccess() != Access::Kernel) return "the ranks may not read each other's memory";
    return allGathersTake(comm, rank, nranks, (size_t(256) << 10) + 1, 1);
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());

  auto failures = hora::test::runThreads(4, [](horaComm_t comm, int rank, int nranks) -> std::string {
    if (comm->stage->memberAccess() != Access::Direct) return "threads do not read each other's memory directly";
    return allGathersTake(comm, rank, nranks, (size_t(256) << 10) + 5, 1);
  });
  CHECK(joinAll(failures) == "");
}

namespace {
// Reduces of `count` elements of T to every root, in place and out of place, with `op` (Sum,
// Max or Avg, on values whose sums are exact), each result checked: the root's result, the
// inputs unchanged out of place, a sender's result buffer never written; `chunks` as
// broadcastsTake's.
template <class T>
std::string reducesTake(horaComm_t comm, int rank, int nranks, size_t count, horaDataType_t dtype, horaRedOp_t op,
                        uint64_t chunks) {
  auto value = [&](int r, size_t i) { return static_cast<T>(static_cast<int>((i * 7 + static_cast<size_t>(r) * 29 + count) % 101) - 50); };
  auto want = [&](size_t i) {
    T x = value(0, i);
    for (int r = 1; r < nranks; ++r) x = op == horaMax ? std::max(x, value(r, i)) : static_cast<T>(x + value(r, i));
    return op == horaAvg ? static_cast<T>(x / nranks) : x;
  };
  std::vector<T> send(count), recv(count);
  for (int root = 0; root < nranks; ++root)
    for (bool inPlace : {true, false}) {
      for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
      std::fill(recv.begin(), recv.end(), static_cast<T>(77));
      T* out = inPlace && rank == root ? send.data() : recv.data();
      const uint64_t before = comm->seq.stageSeq;
      if (horaReduce(send.data(), out, count, dtype, op, root, comm, nullptr) != horaSuccess)
        return std::string("Reduce failed: ") + horaGetLastError(comm);
      const std::string where = " (" + std::to_string(count) + " elements, root " + std::to_string(root) +
                                (inPlace ? ", in place)" : ", out of place)");
      if (chunks && comm->seq.stageSeq - before != chunks)
        return "took " + std::to_string(comm->seq.stageSeq - before) + " chunks of the stage, not " + std::to_string(chunks) + where;
      for (size_t i = 0; i < count; ++i) {
        if (rank == root && out[i] != want(i)) return "wrong element " + std::to_string(i) + " of the result" + where;
        if (rank != root && recv[i] != static_cast<T>(77)) return "a sender's result buffer was written" + where;
        if (out != send.data() && send[i] != value(rank, i)) return "the input changed" + where;
      }
    }
  return "";
}
}  // namespace

// Two processes: a Reduce through the single copy, each rank reading the other's input where it
// lies (one chunk of the stage's sequence, whatever its size), the root making its share of the
// result and the sender the rest: every result right for either root, in place and out of
// place, by the planner's choice from 128 KiB (tests/test_planner.cc) and forced at odd sizes,
// a chunk's size and one element; and 1000 floats, the small calls' way.
TEST_CASE("a 2-rank Reduce reads each rank's input where it lies, every result right", "[processes][singlecopy]") {
  auto results = runProcesses(2, [](horaComm_t comm, int rank, int nranks) -> std::string {
    if (comm->stage->memberAccess() != Access::Kernel) return "the ranks may not read each other's memory";
    std::string e = reducesTake<float>(comm, rank, nranks, size_t(1) << 18, horaFloat, horaSum, 1);  // the planner's
    if (e.empty()) e = reducesTake<double>(comm, rank, nranks, (size_t(1) << 17) + 1, horaDouble, horaAvg, 1);
    const auto chosen = comm->planner.forced;
    comm->planner.forced = hora::coll::parseForced("reduce:single");
    for (size_t count : {size_t(1), size_t(5), size_t(65536), (size_t(65536) * 5) + 3, size_t(3) << 20})
      if (e.empty()) e = reducesTake<int32_t>(comm, rank, nranks, count, horaInt32, horaMax, 1);
    if (e.empty()) e = reducesTake<float>(comm, rank, nranks, (size_t(1) << 20) + 7, horaFloat, horaSum, 1);
    comm->planner.forced = chosen;
    return e.empty() ? reducesTake<float>(comm, rank, nranks, 1000, horaFloat, horaSum, 0) : e;
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// A rank that may not read the others' memory says so at init, and every rank goes without the
// single copy: the same protocol everywhere, so every result is right.
TEST_CASE("a rank that may not read the others' memory turns the single copy off on every rank",
          "[processes][singlecopy]") {
  auto results = runRawProcesses(3, [](const horaUniqueId& id, int rank, int nranks) -> std::string {
    if (rank == 1 && !forbidCrossMemoryReads()) return std::string("seccomp: ") + strerror(errno);
    horaComm_t comm = nullptr;
    if (horaCommInitRank(&comm, nranks, id, rank) != horaSuccess) return "init failed";
    std::string e = comm->stage->memberAccess() == Access::None ? "" : "the single copy is on";
    if (e.empty()) e = broadcastsTake(comm, rank, nranks, size_t(1) << 20, 2);
    horaCommDestroy(comm);
    return e;
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// A rank killed inside a single-copy call: the root of Broadcasts, and either rank of 2-rank
// Reduces (the root reads the sender's input, the sender writes the root's result). The other
// rank, in its read or write of the dead one's memory or waiting for it, fails with its death,
// named.
TEST_CASE("a rank killed during single-copy calls: the other fails naming it", "[processes][singlecopy][faults]") {
  struct Case {
    const char* forced;
    int victim;
  };
  for (Case c : {Case{"broadcast:single", 0}, Case{"reduce:single", 0}, Case{"reduce:single", 1}}) {
    ProcessOptions opts;
    opts.timeoutMs = 600000;  // only the dead process can end this quickly
    auto results = runProcesses(2, [c](horaComm_t comm, int rank, int) -> std::string {
      comm->planner.forced = hora::coll::parseForced(c.forced);  // (a Broadcast's planner takes the slots)
      const bool reduce = std::string(c.forced) == "reduce:single";
      std::vector<float> buf(size_t(8) << 20, static_cast<float>(rank));
      if (rank == c.victim)
        std::thread([comm] {
          while (comm->seq.calls < 6 || !comm->busy.load()) usleep(20);
          kill(getpid(), SIGKILL);
        }).detach();
      for (int i = 0; i < 100000; ++i) {
        const horaResult_t r = reduce ? horaReduce(buf.data(), buf.data(), buf.size(), horaFloat, horaMax, 0, comm, nullptr)
                                      : horaBroadcast(buf.data(), buf.data(), buf.size(), horaFloat, 0, comm, nullptr);
        if (r == horaSuccess) continue;
        const std::string text = horaGetLastError(comm);
        horaResult_t async = horaSuccess;
        horaCommGetAsyncError(comm, &async);
        if (async != horaRemoteError) return "not a remote error: " + text;
        const std::string victim = "rank " + std::to_string(c.victim) + " (";
        if (text.find(victim) == std::string::npos || text.find("pid") == std::string::npos)
          return "the text does not name " + victim + "...) and its pid: " + text;
        return "";
      }
      return "no call failed";
    }, opts);
    INFO(c.forced << ", rank " << c.victim << " killed\n" << describe(results));
    for (const auto& r : results) {
      if (r.rank == c.victim) CHECK((WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL));
      else CHECK(r.ok());
    }
  }
}
