// Every collective x dtype x op x count x in-place, on 1 to 8 ranks as threads of this process
// (horaCommInitAll), plus groups: send/recv rings, sends to self, several collectives and
// several communicators in one group.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstring>
#include <thread>

#include "collective_check.h"
#include "harness.h"

using namespace hora::test;

TEST_CASE("collectives as threads: full sweep on 1..8 ranks", "[threads]") {
  for (int n = 1; n <= 8; ++n) {
    auto failures = runThreads(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      for (const Case& c : sweep(nranks, nranks == 3 || nranks == 8)) {
        std::string e = runCase(comm, rank, nranks, c);
        if (!e.empty()) return e;
      }
      return "";
    });
    INFO("nranks " << n << "\n" << joinAll(failures));
    CHECK(failures.empty());
  }
}

TEST_CASE("every root of the rooted collectives", "[threads]") {
  const int n = 5;
  auto failures = runThreads(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
    for (int root = 0; root < nranks; ++root)
      for (Coll c : {Coll::Broadcast, Coll::Reduce, Coll::Gather, Coll::Scatter})
        for (bool inPlace : {false, true}) {
          std::string e = runCase(comm, rank, nranks, Case{c, horaInt32, horaSum, 777, inPlace, root});
          if (!e.empty()) return e;
        }
    return "";
  });
  INFO(joinAll(failures));
  CHECK(failures.empty());
}

TEST_CASE("results are bit-identical on every rank", "[threads]") {
  const int n = 6;
  for (size_t count : {size_t(1003), size_t(100003)}) {  // the direct and the ring algorithm
    std::vector<std::vector<float>> results(n);
    auto failures = runThreads(n, [&](horaComm_t comm, int rank, int) -> std::string {
      std::vector<float> in(count), out(count);
      for (size_t i = 0; i < count; ++i) in[i] = 1.0f / static_cast<float>(i % 97 + rank + 1) + 1e-3f * rank;
      if (horaAllReduce(in.data(), out.data(), count, horaFloat, horaSum, comm, nullptr) != horaSuccess)
        return horaGetLastError(comm);
      results[static_cast<size_t>(rank)] = out;
      return "";
    });
    REQUIRE(failures.empty());
    for (int r = 1; r < n; ++r)
      CHECK(memcmp(results[0].data(), results[static_cast<size_t>(r)].data(), count * 4) == 0);
  }
}

// A Broadcast moves bytes: every bit pattern of a type arrives as it left, NaNs with their sign
// and payload included. The narrow floating types are where a copy through a conversion would
// show (a reduction of one source keeps a NaN but not its bits), in every way a Broadcast runs:
// through the cells, pipelined through the root's slots (above a cell, and in a group), out of
// place (the root's own result written in the same pass as its slot) and in place.
TEST_CASE("a Broadcast moves every bit pattern of the narrow types unchanged", "[threads]") {
  for (horaDataType_t dtype : {horaFloat8e4m3, horaFloat8e5m2, horaFloat16, horaBfloat16}) {
    const size_t esize = dtype == horaFloat8e4m3 || dtype == horaFloat8e5m2 ? 1 : 2;
    for (int n : {2, 3, 5}) {
      for (size_t bytes : {size_t(4) << 10, size_t(96) << 10, size_t(1) << 20}) {
        INFO("dtype " << dtype << ", " << n << " ranks, " << bytes << " bytes");
        const size_t count = bytes / esize;
        auto failures = runThreads(n, [&](horaComm_t comm, int rank, int nranks) -> std::string {
          // Every byte value, shifted by the root, so that each call's data differs.
          auto pattern = [&](int root, size_t i) { return static_cast<uint8_t>((i * 7 + static_cast<size_t>(root)) & 0xff); };
          std::vector<uint8_t> in(bytes), out(bytes), other(bytes), otherOut(bytes);
          for (int root = 0; root < nranks; ++root) {
            for (size_t i = 0; i < bytes; ++i) in[i] = other[i] = rank == root ? pattern(root, i) : 0x55;
            std::fill(out.begin(), out.end(), 0);
            if (horaBroadcast(in.data(), out.data(), count, dtype, root, comm, nullptr) != horaSuccess)
              return std::string("out of place: ") + horaGetLastError(comm);
            if (horaBroadcast(in.data(), in.data(), count, dtype, root, comm, nullptr) != horaSuccess)
              return std::string("in place: ") + horaGetLastError(comm);
            // In a group of two (a program, whatever the size).
            horaGroupStart();
            horaBroadcast(other.data(), otherOut.data(), count, dtype, root, comm, nullptr);
            horaBroadcast(other.data(), other.data(), count, dtype, root, comm, nullptr);
            if (horaGroupEnd() != horaSuccess) return std::string("group: ") + horaGetLastError(comm);
            for (size_t i = 0; i < bytes; ++i)
              if (out[i] != pattern(root, i) || in[i] != pattern(root, i) || otherOut[i] != pattern(root, i) ||
                  other[i] != pattern(root, i))
                return "root " + std::to_string(root) + ", byte " + std::to_string(i) + ": want " +
                       std::to_string(pattern(root, i)) + ", got " + std::to_string(out[i]) + " (out of place), " +
                       std::to_string(in[i]) + " (in place), " + std::to_string(otherOut[i]) + " and " +
                       std::to_string(other[i]) + " (in a group)";
          }
          return "";
        });
        CHECK(joinAll(failures) == "");
      }
    }
  }
}

TEST_CASE("send/recv: rings, pairs and self inside groups", "[threads][p2p]") {
  for (int n : {1, 2, 3, 8}) {
    auto failures = runThreads(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      for (size_t count : {size_t(0), size_t(1), size_t(4097), size_t(3u << 20)}) {
        std::vector<int32_t> out(count), in(count, -1), self(count, -1);
        for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(rank * 1000003 + i);
        const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
        horaGroupStart();
        horaSend(out.data(), count, horaInt32, next, comm, nullptr);
        horaRecv(in.data(), count, horaInt32, prev, comm, nullptr);
        horaSend(out.data(), count, horaInt32, rank, comm, nullptr);
        horaRecv(self.data(), count, horaInt32, rank, comm, nullptr);
        if (horaGroupEnd() != horaSuccess) return std::string("ring: ") + horaGetLastError(comm);
        for (size_t i = 0; i < count; ++i) {
          if (in[i] != static_cast<int32_t>(prev * 1000003 + i)) return "ring: wrong data from rank " + std::to_string(prev);
          if (self[i] != out[i]) return "self: wrong data";
        }
        // In place: one buffer sent to next and received from prev in the same group.
        std::vector<int32_t> same(out);
        horaGroupStart();
        horaSend(same.data(), count, horaInt32, next, comm, nullptr);
        horaRecv(same.data(), count, horaInt32, prev, comm, nullptr);
        if (horaGroupEnd() != horaSuccess) return std::string("in-place ring: ") + horaGetLastError(comm);
        for (size_t i = 0; i < count; ++i)
          if (same[i] != static_cast<int32_t>(prev * 1000003 + i)) return "in-place ring: wrong data at " + std::to_string(i);
      }
      // Pairs exchange with blocking calls outside a group: the lower rank sends first.
      if (nranks >= 2) {
        const int peer = rank ^ 1;
        if (peer < nranks) {
          int64_t mine = rank, theirs = -1;
          horaResult_t a, b;
          if (rank < peer) {
            a = horaSend(&mine, 1, horaInt64, peer, comm, nullptr);
            b = horaRecv(&theirs, 1, horaInt64, peer, comm, nullptr);
          } else {
            b = horaRecv(&theirs, 1, horaInt64, peer, comm, nullptr);
            a = horaSend(&mine, 1, horaInt64, peer, comm, nullptr);
          }
          if (a != horaSuccess || b != horaSuccess) return std::string("pair: ") + horaGetLastError(comm);
          if (theirs != peer) return "pair: wrong value";
        }
      }
      return "";
    });
    INFO("nranks " << n << "\n" << joinAll(failures));
    CHECK(failures.empty());
  }
}

TEST_CASE("several collectives in one group", "[threads][group]") {
  const int n = 4;
  auto failures = runThreads(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
    const size_t count = 100000;
    std::vector<float> a(count, static_cast<float>(rank)), b(count * nranks), c(count, 1.0f);
    std::vector<double> d(10, rank == 2 ? 42.0 : 0.0);
    // A Gather to rank 1 and a Scatter from rank 3 (the others pass NULL for the root's buffer).
    const size_t k = 7, uk = k * static_cast<size_t>(nranks);
    std::vector<int32_t> mine(k), gathered(rank == 1 ? uk : 0, -1), scattered(rank == 3 ? uk : 0), got(k, -1);
    for (size_t i = 0; i < k; ++i) mine[i] = rank * 10 + static_cast<int32_t>(i);
    for (size_t i = 0; i < scattered.size(); ++i) scattered[i] = static_cast<int32_t>(i / k * 100 + i % k);
    horaGroupStart();
    horaAllReduce(a.data(), a.data(), count, horaFloat, horaMax, comm, nullptr);
    horaAllGather(c.data(), b.data(), count, horaFloat, comm, nullptr);
    horaGroupStart();  // groups nest
    horaBroadcast(d.data(), d.data(), 10, horaDouble, 2, comm, nullptr);
    horaGather(mine.data(), rank == 1 ? gathered.data() : nullptr, k, horaInt32, 1, comm, nullptr);
    horaScatter(rank == 3 ? scattered.data() : nullptr, got.data(), k, horaInt32, 3, comm, nullptr);
    horaGroupEnd();
    if (horaGroupEnd() != horaSuccess) return horaGetLastError(comm);
    for (size_t i = 0; i < gathered.size(); ++i)
      if (gathered[i] != static_cast<int32_t>(i / k * 10 + i % k)) return "gather in group: wrong";
    for (size_t i = 0; i < k; ++i)
      if (got[i] != rank * 100 + static_cast<int32_t>(i)) return "scatter in group: wrong";
    for (size_t i = 0; i < count; ++i)
      if (a[i] != static_cast<float>(nranks - 1)) return "allreduce in group: wrong";
    for (float x : b)
      if (x != 1.0f) return "allgather in group: wrong";
    for (double x : d)
      if (x != 42.0) return "broadcast in group: wrong";
    return "";
  });
  INFO(joinAll(failures));
  CHECK(failures.empty());
}

TEST_CASE("one thread drives every communicator of a clique in one group", "[threads][group]") {
  const int n = 4;
  std::vector<horaComm_t> comms(n);
  REQUIRE(horaCommInitAll(comms.data(), n, nullptr) == horaSuccess);
  const size_t count = 200001;
  std::vector<std::vector<int64_t>> bufs(n, std::vector<int64_t>(count));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) bufs[static_cast<size_t>(r)][i] = static_cast<int64_t>(i) * (r + 1);
  REQUIRE(horaGroupStart() == horaSuccess);
  for (int r = 0; r < n; ++r)
    REQUIRE(horaAllReduce(bufs[static_cast<size_t>(r)].data(), bufs[static_cast<size_t>(r)].data(), count, horaInt64,
                          horaSum, comms[static_cast<size_t>(r)], nullptr) == horaSuccess);
  REQUIRE(horaGroupEnd() == horaSuccess);
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; i += 997) CHECK(bufs[static_cast<size_t>(r)][i] == static_cast<int64_t>(i) * 10);
  for (auto c : comms) CHECK(horaCommDestroy(c) == horaSuccess);
}

TEST_CASE("communicator queries", "[threads]") {
  const int n = 3;
  std::vector<horaComm_t> comms(n);
  const int devs[3] = {7, 8, 9};
  REQUIRE(horaCommInitAll(comms.data(), n, devs) == horaSuccess);
  for (int r = 0; r < n; ++r) {
    int v = -1;
    CHECK(horaCommCount(comms[r], &v) == horaSuccess);
    CHECK(v == n);
    CHECK(horaCommUserRank(comms[r], &v) == horaSuccess);
    CHECK(v == r);
    CHECK(horaCommCuDevice(comms[r], &v) == horaSuccess);
    CHECK(v == devs[r]);
    horaResult_t async = horaInternalError;
    CHECK(horaCommGetAsyncError(comms[r], &async) == horaSuccess);
    CHECK(async == horaSuccess);
    CHECK(horaCommFinalize(comms[r]) == horaSuccess);
  }
  for (auto c : comms) CHECK(horaCommDestroy(c) == horaSuccess);
  int version = 0;
  CHECK(horaGetVersion(&version) == horaSuccess);
  CHECK(version == HORA_VERSION_CODE);
}

TEST_CASE("barrier: no rank leaves before every rank has arrived", "[threads][barrier]") {
  for (int n : {2, 3, 5, 8}) {
    std::atomic<int> arrived{0};
    auto failures = runThreads(n, [&](horaComm_t comm, int rank, int nranks) -> std::string {
      for (int round = 1; round <= 40; ++round) {
        // Arrive in a different order each round: a few yields per rank and round.
        for (int i = 0; i < (rank * 7 + round * 3) % 11; ++i) std::this_thread::yield();
        arrived.fetch_add(1);
        if (horaBarrier(comm, nullptr) != horaSuccess) return horaGetLastError(comm);
        const int seen = arrived.load();
        if (seen < round * nranks)
          return "round " + std::to_string(round) + ": left the barrier after only " + std::to_string(seen) +
                 " arrivals of " + std::to_string(round * nranks);
        // Second barrier: nobody may start the next round's arrival before all have checked.
        if (horaBarrier(comm, nullptr) != horaSuccess) return horaGetLastError(comm);
      }
      return "";
    });
    INFO("nranks " << n << "\n" << joinAll(failures));
    CHECK(failures.empty());
  }
}

TEST_CASE("alltoall inside a group with other collectives", "[threads][group]") {
  const int n = 4;
  auto failures = runThreads(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
    const size_t N = 300;
    std::vector<int32_t> send(N * nranks), recv(N * nranks, -1), sum(N), mine(N, rank + 1);
    for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<int32_t>(rank * 100000 + i);
    horaGroupStart();
    horaAllToAll(send.data(), recv.data(), N, horaInt32, comm, nullptr);
    horaAllReduce(mine.data(), sum.data(), N, horaInt32, horaSum, comm, nullptr);
    horaBarrier(comm, nullptr);
    if (horaGroupEnd() != horaSuccess) return horaGetLastError(comm);
    for (int q = 0; q < nranks; ++q)
      for (size_t i = 0; i < N; ++i)
        if (recv[q * N + i] != static_cast<int32_t>(q * 100000 + rank * N + i))
          return "alltoall block " + std::to_string(q) + " element " + std::to_string(i) + " wrong";
    for (size_t i = 0; i < N; ++i)
      if (sum[i] != nranks * (nranks + 1) / 2) return "allreduce wrong";
    return "";
  });
  INFO(joinAll(failures));
  CHECK(failures.empty());
}

TEST_CASE("split: colors, key order, no color, and collectives on the new communicators", "[threads][split]") {
  for (int n : {1, 3, 8}) {
    auto failures = runThreads(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      // Ranks r % 3 == 2 stay out; the others split by r % 3, ranked by descending r.
      const int color = rank % 3 == 2 ? HORA_SPLIT_NOCOLOR : rank % 3;
      horaComm_t sub = reinterpret_cast<horaComm_t>(0x1);
      if (horaCommSplit(comm, color, nranks - rank, &sub, nullptr) != horaSuccess)
        return std::string("horaCommSplit: ") + horaGetLastError(comm);
      if (color == HORA_SPLIT_NOCOLOR) {
        if (sub != nullptr) return "a rank without a color got a communicator";
        std::string e = runCase(comm, rank, nranks, Case{Coll::AllReduce, horaFloat32, horaSum, 999, false, 0});
        return e.empty() ? "" : "on the parent after the split: " + e;
      }
      if (!sub) return "no communicator for color " + std::to_string(color);
      std::vector<int> members;
      for (int r = nranks - 1; r >= 0; --r)
        if (r % 3 == color) members.push_back(r);
      int subRank = -1, subCount = -1;
      horaCommUserRank(sub, &subRank);
      horaCommCount(sub, &subCount);
      if (subCount != static_cast<int>(members.size())) return "wrong size " + std::to_string(subCount);
      if (members[static_cast<size_t>(subRank)] != rank) return "wrong rank " + std::to_string(subRank);
      // The new communicator works, and independently of the parent.
      for (const Case& c : {Case{Coll::AllReduce, horaInt32, horaSum, 1001, false, 0},
                            Case{Coll::AllToAll, horaFloat32, horaSum, 77, true, 0},
                            Case{Coll::Broadcast, horaFloat64, horaSum, 5000, false, subCount - 1},
                            Case{Coll::Barrier, horaUint8, horaSum, 0, false, 0}}) {
        std::string e = runCase(sub, subRank, subCount, c);
        if (!e.empty()) return "on the split communicator: " + e;
      }
      std::string e = runCase(comm, rank, nranks, Case{Coll::AllReduce, horaFloat32, horaSum, 999, false, 0});
      if (!e.empty()) return "on the parent after the split: " + e;
      // A split of the split.
      horaComm_t subsub = nullptr;
      if (horaCommSplit(sub, subRank % 2, 0, &subsub, nullptr) != horaSuccess)
        return std::string("second split: ") + horaGetLastError(sub);
      int ssCount = 0, ssRank = 0;
      horaCommCount(subsub, &ssCount);
      horaCommUserRank(subsub, &ssRank);
      e = runCase(subsub, ssRank, ssCount, Case{Coll::AllGather, horaUint8, horaSum, 33, false, 0});
      horaCommDestroy(subsub);
      horaCommDestroy(sub);
      return e.empty() ? "" : "on the split of the split: " + e;
    });
    INFO("nranks " << n << "\n" << joinAll(failures));
    CHECK(failures.empty());
  }
}
