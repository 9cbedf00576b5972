// The collective sweep with ranks as separate processes (fork), each with its own
// communicator made from one unique id, as an application written against hora.h would.
#include <catch2/catch.hpp>
#include <sched.h>

#include "collective_check.h"
#include "harness.h"

using namespace hora::test;

TEST_CASE("collectives as processes: sweep on 1, 2, 3, 5 and 8 ranks", "[processes]") {
  for (int n : {1, 2, 3, 5, 8}) {
    auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      for (const Case& c : sweep(nranks, nranks == 2 || nranks == 5)) {
        std::string e = runCase(comm, rank, nranks, c);
        if (!e.empty()) return e;
      }
      return "";
    });
    INFO("nranks " << n << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

TEST_CASE("p2p between processes: every pair exchanges in one group", "[processes][p2p]") {
  const int n = 6;
  auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
    const size_t count = 50001;
    std::vector<std::vector<uint16_t>> in(static_cast<size_t>(nranks), std::vector<uint16_t>(count));
    std::vector<uint16_t> out(count);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<uint16_t>(rank * 7 + i);
    horaGroupStart();
    for (int p = 0; p < nranks; ++p) {
      horaSend(out.data(), count, horaFloat16, p, comm, nullptr);
      horaRecv(in[static_cast<size_t>(p)].data(), count, horaFloat16, p, comm, nullptr);
    }
    if (horaGroupEnd() != horaSuccess) return horaGetLastError(comm);
    for (int p = 0; p < nranks; ++p)
      for (size_t i = 0; i < count; ++i)
        if (in[static_cast<size_t>(p)][i] != static_cast<uint16_t>(p * 7 + i)) return "wrong data from rank " + std::to_string(p);
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("more ranks than cores: 8 ranks pinned to one core finish every collective", "[processes][oversubscribed]") {
  // Every rank on the CPU this test started on: a wait that spun instead of backing off would
  // hold the core its peers need, and the sweep would crawl or time out.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
  auto results = runProcesses(8, [&one](horaComm_t comm, int rank, int nranks) -> std::string {
    if (sched_setaffinity(0, sizeof one, &one) != 0) return "sched_setaffinity failed";
    for (size_t count : {size_t(3), size_t(5000), size_t(300001)})  // flat, slice and many chunks
      for (Coll c : allColls()) {
        std::string e = runCase(comm, rank, nranks, Case{c, horaFloat, horaSum, count, false, 3});
        if (!e.empty()) return e;
      }
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("split between processes: halves, then the sweep's collectives on each", "[processes][split]") {
  const int n = 5;
  auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
    horaComm_t half = nullptr;
    if (horaCommSplit(comm, rank < 2 ? 7 : 3, rank, &half, nullptr) != horaSuccess)
      return std::string("horaCommSplit: ") + horaGetLastError(comm);
    int hr = -1, hn = -1;
    horaCommUserRank(half, &hr);
    horaCommCount(half, &hn);
    if (hn != (rank < 2 ? 2 : 3) || hr != (rank < 2 ? rank : rank - 2)) return "wrong rank or size in the split";
    for (const Case& c : {Case{Coll::AllReduce, horaFloat32, horaAvg, 100003, false, 0},
                          Case{Coll::AllToAll, horaInt64, horaSum, 4001, true, 0},
                          Case{Coll::ReduceScatter, horaBfloat16, horaMax, 777, false, 0},
                          Case{Coll::Barrier, horaUint8, horaSum, 0, false, 0}}) {
      std::string e = runCase(half, hr, hn, c);
      if (!e.empty()) return e;
    }
    horaCommDestroy(half);
    return runCase(comm, rank, nranks, Case{Coll::AllGather, horaInt32, horaSum, 1000, true, 0});
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// A group of one collective plus a send/recv between only some of the ranks: every rank must
// plan the collective alike (it once was planned by the size of each rank's group: the pair's
// ranks chose ring, the others the shared stage, and the job hung until its timeout).
TEST_CASE("a collective grouped with a send/recv of some ranks plans alike everywhere", "[processes][p2p]") {
  ProcessOptions opts;
  opts.timeoutMs = 20000;  // a bound on the old hang, not a timing
  for (int kind = 0; kind < 3; ++kind) {
    INFO("collective " << kind);
    auto results = runProcesses(3, [kind](horaComm_t comm, int rank, int nranks) -> std::string {
      for (int round = 0; round < 3; ++round) {
        std::vector<int8_t> in(18 * static_cast<size_t>(nranks)), out(18 * static_cast<size_t>(nranks), 0);
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int8_t>(rank + 1 + static_cast<int>(i % 5));
        uint16_t pairOut = static_cast<uint16_t>(0x1234 + round), pairIn = 0;
        horaGroupStart();
        if (kind == 0) horaReduceScatter(in.data(), out.data(), 18, horaInt8, horaSum, comm, nullptr);
        if (kind == 1) horaAllReduce(in.data(), out.data(), 18, horaInt8, horaSum, comm, nullptr);
        if (kind == 2) horaBroadcast(in.data(), out.data(), 18, horaInt8, 0, comm, nullptr);
        if (rank == 2) horaSend(&pairOut, 1, horaFloat16, 1, comm, nullptr);
        if (rank == 1) horaRecv(&pairIn, 1, horaFloat16, 2, comm, nullptr);
        if (horaGroupEnd() != horaSuccess) return std::string("group: ") + horaGetLastError(nullptr);
        for (size_t i = 0; i < 18; ++i) {
          const size_t at = kind == 0 ? static_cast<size_t>(rank) * 18 + i : i;
          int want = 0;
          if (kind == 2) want = 1 + static_cast<int>(i % 5);  // rank 0's
          else
            for (int r = 0; r < nranks; ++r) want += r + 1 + static_cast<int>(at % 5);
          if (out[i] != static_cast<int8_t>(want)) return "wrong element " + std::to_string(i);
        }
        if (rank == 1 && pairIn != pairOut) return "the pair's message is wrong";
      }
      return "";
    }, opts);
    INFO(describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

// Small rooted calls through the shared stage's cells: a rank that only gives runs ahead of its
// readers (up to a cell per call), so many calls are in flight at once. Every result is checked:
// Broadcasts, Reduces, Gathers and Scatters with the root moving, sizes from 1 element to a whole
// cell and beyond (the slots), AllReduces between them (the slots and the cells in turn), and a
// finalize at the end that compares the last calls.
TEST_CASE("small rooted calls run ahead through the cells, every result right", "[processes][cells]") {
  for (int n : {2, 3, 5}) {
    auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      const size_t sizes[] = {1, 7, 256, 8192, 9000};  // 9000 floats: more than a cell
      std::vector<float> send, recv;
      for (int k = 0; k < 400; ++k) {
        const size_t count = sizes[static_cast<size_t>(k) % 5];
        const int root = (k / 3) % nranks;
        auto value = [&](int who, size_t i) { return static_cast<float>((k * 31 + who * 7 + static_cast<int>(i % 97)) % 1000); };
        horaResult_t r = horaSuccess;
        std::string what;
        switch (k % 4) {
          case 0: {  // Broadcast, in place on the readers
            recv.assign(count, -1.0f);
            if (rank == root)
              for (size_t i = 0; i < count; ++i) recv[i] = value(root, i);
            r = horaBroadcast(recv.data(), recv.data(), count, horaFloat, root, comm, nullptr);
            for (size_t i = 0; i < count && what.empty(); ++i)
              if (recv[i] != value(root, i)) what = "Broadcast element " + std::to_string(i);
            break;
          }
          case 1: {  // Reduce
            send.resize(count);
            for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
            recv.assign(count, -1.0f);
            r = horaReduce(send.data(), recv.data(), count, horaFloat, horaSum, root, comm, nullptr);
            for (size_t i = 0; rank == root && i < count && what.empty(); ++i) {
              float want = 0;
              for (int p = 0; p < nranks; ++p) want += value(p, i);
              if (recv[i] != want) what = "Reduce element " + std::to_string(i);
            }
            break;
          }
          case 2: {  // Scatter, then an AllReduce of what each got
            send.resize(count * static_cast<size_t>(nranks));
            for (size_t i = 0; i < send.size(); ++i) send[i] = value(root, i);
            recv.assign(count, -1.0f);
            r = horaScatter(send.data(), recv.data(), count, horaFloat, root, comm, nullptr);
            for (size_t i = 0; i < count && what.empty(); ++i)
              if (recv[i] != value(root, static_cast<size_t>(rank) * count + i)) what = "Scatter element " + std::to_string(i);
            float one = 1.0f, total = 0;
            if (r == horaSuccess && what.empty()) r = horaAllReduce(&one, &total, 1, horaFloat, horaSum, comm, nullptr);
            if (r == horaSuccess && total != static_cast<float>(nranks)) what = "AllReduce after a Scatter";
            break;
          }
          default: {  // Gather
            send.resize(count);
            for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
            recv.assign(rank == root ? count * static_cast<size_t>(nranks) : 0, -1.0f);
            r = horaGather(send.data(), rank == root ? recv.data() : nullptr, count, horaFloat, root, comm, nullptr);
            for (size_t i = 0; rank == root && i < recv.size() && what.empty(); ++i)
              if (recv[i] != value(static_cast<int>(i / count), i % count)) what = "Gather element " + std::to_string(i);
            break;
          }
        }
        if (r != horaSuccess) return "call " + std::to_string(k) + " failed: " + horaGetLastError(comm);
        if (!what.empty()) return "call " + std::to_string(k) + " (count " + std::to_string(count) + ", root " +
                                  std::to_string(root) + "): wrong " + what;
      }
      if (horaCommFinalize(comm) != horaSuccess) return std::string("finalize failed: ") + horaGetLastError(comm);
      return "";
    });
    INFO("nranks " << n << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}
