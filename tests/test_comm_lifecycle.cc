// The ways a communicator comes and goes beyond horaCommInitRank: inits held by a group (one
// thread making several ranks), non-blocking inits (horaInProgress, a pending communicator
// refusing calls, an abort or a failure while pending), horaCommInitRankScalable and the release
// of its other rendezvous, horaCommShrink of a healthy communicator and of one whose rank was
// killed, and horaGroupSimulateEnd.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "comm/bootstrap.h"
#include "harness.h"

using namespace hora::test;

namespace {

std::string lastError(horaComm_t c) { return horaGetLastError(c); }

// Polls until the communicator is no longer in progress; returns what it became.
horaResult_t settle(horaComm_t c) {
  horaResult_t st = horaInProgress;
  while (st == horaInProgress) {
    if (horaCommGetAsyncError(c, &st) != horaSuccess) return horaInternalError;
    if (st == horaInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return st;
}

std::string allReduceCheck(horaComm_t c, int expectSum) {
  int rank = -1, n = 0;
  horaCommUserRank(c, &rank);
  horaCommCount(c, &n);
  int32_t in = rank + 1, out = 0;
  if (horaAllReduce(&in, &out, 1, horaInt32, horaSum, c, nullptr) != horaSuccess) return "AllReduce: " + lastError(c);
  if (out != expectSum) return "AllReduce gave " + std::to_string(out) + ", not " + std::to_string(expectSum);
  return "";
}

}  // namespace

TEST_CASE("inits held by a group: one thread makes every rank, then drives them in one group", "[lifecycle]") {
  for (int n : {1, 2, 3, 5}) {
    horaUniqueId id;
    REQUIRE(horaGetUniqueId(&id) == horaSuccess);
    std::vector<horaComm_t> comms(static_cast<size_t>(n), nullptr);
    REQUIRE(horaGroupStart() == horaSuccess);
    for (int r = 0; r < n; ++r) REQUIRE(horaCommInitRank(&comms[static_cast<size_t>(r)], n, id, r) == horaSuccess);
    // Held: not usable before the group ends.
    int32_t x = 0;
    CHECK(horaAllReduce(&x, &x, 1, horaInt32, horaSum, comms[0], nullptr) == horaInvalidUsage);
    REQUIRE(horaGroupEnd() == horaSuccess);
    // Small (through the shared stage, at once) and large (programs) calls, every rank in one group.
    for (size_t count : {size_t(1), size_t(1) << 16}) {
      std::vector<std::vector<int32_t>> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
      REQUIRE(horaGroupStart() == horaSuccess);
      for (int r = 0; r < n; ++r) {
        in[static_cast<size_t>(r)].assign(count, r + 1);
        out[static_cast<size_t>(r)].assign(count, 0);
        REQUIRE(horaAllReduce(in[static_cast<size_t>(r)].data(), out[static_cast<size_t>(r)].data(), count, horaInt32,
                              horaSum, comms[static_cast<size_t>(r)], nullptr) == horaSuccess);
      }
      REQUIRE(horaGroupEnd() == horaSuccess);
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; i += 997) REQUIRE(out[static_cast<size_t>(r)][i] == n * (n + 1) / 2);
    }
    for (horaComm_t c : comms) CHECK(horaCommDestroy(c) == horaSuccess);
  }
}

TEST_CASE("a non-blocking init returns horaInProgress, refuses calls until done, then works", "[lifecycle]") {
  const int n = 3;
  horaUniqueId id;
  REQUIRE(horaGetUniqueId(&id) == horaSuccess);
  horaConfig_t cfg = HORA_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  std::vector<horaComm_t> comms(n, nullptr);
  // Rank 0 first, alone: its init cannot finish before the others join, so it is pending.
  REQUIRE(horaCommInitRankConfig(&comms[0], n, id, 0, &cfg) == horaInProgress);
  REQUIRE(comms[0] != nullptr);
  horaResult_t st = horaSuccess;
  REQUIRE(horaCommGetAsyncError(comms[0], &st) == horaSuccess);
  CHECK(st == horaInProgress);
  int32_t x = 1;
  CHECK(horaAllReduce(&x, &x, 1, horaInt32, horaSum, comms[0], nullptr) == horaInvalidUsage);
  CHECK(lastError(comms[0]).find("in progress") != std::string::npos);
  int count = 0, rank = -1;
  CHECK(horaCommCount(comms[0], &count) == horaSuccess);
  CHECK(horaCommUserRank(comms[0], &rank) == horaSuccess);
  CHECK((count == n && rank == 0));
  for (int r = 1; r < n; ++r) REQUIRE(horaCommInitRankConfig(&comms[r], n, id, r, &cfg) == horaInProgress);
  for (horaComm_t c : comms) REQUIRE(settle(c) == horaSuccess);
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { failures[r] = allReduceCheck(comms[r], 6); });
  for (auto& t : threads) t.join();
  for (const std::string& f : failures) CHECK(f == "");
  // Finalize in the background too, then destroy.
  for (horaComm_t c : comms) {
    const horaResult_t f = horaCommFinalize(c);
    CHECK((f == horaInProgress || f == horaSuccess));
    CHECK(settle(c) == horaSuccess);
    CHECK(horaCommDestroy(c) == horaSuccess);
  }
}

TEST_CASE("a pending init aborted, and one that fails in the background", "[lifecycle]") {
  horaConfig_t cfg = HORA_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.timeoutMs = 60000;
  SECTION("aborted while its peers never come: returns at once") {
    horaUniqueId id;
    REQUIRE(horaGetUniqueId(&id) == horaSuccess);
    horaComm_t c = nullptr;
    REQUIRE(horaCommInitRankConfig(&c, 2, id, 0, &cfg) == horaInProgress);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(horaCommAbort(c) == horaSuccess);
    // Not a timing assertion of the library's speed: the peer never comes, so an abort that
    // waited for the init would take the whole 60 s timeout.
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
  }
  SECTION("a peer that never joins: the timeout becomes the communicator's error") {
    horaUniqueId id;
    REQUIRE(horaGetUniqueId(&id) == horaSuccess);
    cfg.timeoutMs = 1500;
    horaComm_t c = nullptr;
    REQUIRE(horaCommInitRankConfig(&c, 2, id, 0, &cfg) == horaInProgress);
    const horaResult_t st = settle(c);
    CHECK(st == horaTimeout);
    CHECK(lastError(c).find("rank 1") != std::string::npos);
    int32_t x = 0;
    CHECK(horaAllReduce(&x, &x, 1, horaInt32, horaSum, c, nullptr) == horaTimeout);
    CHECK(horaCommDestroy(c) == horaSuccess);
  }
  SECTION("bad blocking values are argument errors") {
    horaUniqueId id;
    REQUIRE(horaGetUniqueId(&id) == horaSuccess);
    horaComm_t c = reinterpret_cast<horaComm_t>(0x1);
    cfg.blocking = 2;
    CHECK(horaCommInitRankConfig(&c, 1, id, 0, &cfg) == horaInvalidArgument);
    CHECK(c == nullptr);
  }
}

TEST_CASE("horaCommInitRankScalable forms on the first id and releases the others", "[lifecycle]") {
  const int n = 4;
  // The second id's rendezvous runs here, with an end that says when it has stopped.
  hora::Secret secret;
  for (size_t i = 0; i < hora::kSecretBytes; ++i) secret.bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  auto end = std::make_shared<hora::RendezvousEnd>();
  hora::UniqueId second =
      hora::startRendezvous(hora::SockAddr::parse("127.0.0.1:0"), secret, hora::milliseconds(600000), end, n);
  horaUniqueId ids[2];
  REQUIRE(horaGetUniqueId(&ids[0]) == horaSuccess);
  second.encode(reinterpret_cast<uint8_t*>(ids[1].internal));
  std::vector<horaComm_t> comms(n, nullptr);
  std::vector<std::string> failures(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      if (horaCommInitRankScalable(&comms[r], n, r, 2, ids, nullptr) != horaSuccess) {
        failures[r] = "init: " + lastError(nullptr);
        return;
      }
      failures[r] = allReduceCheck(comms[r], 10);
    });
  for (auto& t : threads) t.join();
  for (const std::string& f : failures) CHECK(f == "");
  // Released by the rank that would have led it (rank 2 of 4 for the second of 2 ids).
  CHECK(end->awaitFinished(hora::milliseconds(30000)));
  for (horaComm_t c : comms) CHECK(horaCommDestroy(c) == horaSuccess);
  horaComm_t c = nullptr;
  CHECK(horaCommInitRankScalable(&c, n, 0, 0, ids, nullptr) == horaInvalidArgument);
  CHECK(horaCommInitRankScalable(&c, n, 0, 2, nullptr, nullptr) == horaInvalidArgument);
  horaUniqueId garbage[2];
  memcpy(&garbage[0], &ids[0], sizeof ids[0]);
  memset(&garbage[1], 0x5a, sizeof garbage[1]);
  CHECK(horaCommInitRankScalable(&c, n, 0, 2, garbage, nullptr) == horaInvalidArgument);
}

TEST_CASE("horaCommShrink of a healthy communicator: the others go on without a rank", "[lifecycle]") {
  const int n = 4;
  auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
    int excluded[1] = {1};
    if (rank == 1) return "";  // the excluded rank calls nothing
    // Argument errors first: the communicator is not harmed.
    horaComm_t bad = nullptr;
    int self[1] = {rank};
    if (horaCommShrink(comm, self, 1, &bad, nullptr, HORA_SHRINK_DEFAULT) != horaInvalidUsage) return "self excluded";
    int twice[2] = {1, 1};
    if (horaCommShrink(comm, twice, 2, &bad, nullptr, HORA_SHRINK_DEFAULT) != horaInvalidArgument) return "twice";
    int out[1] = {nranks};
    if (horaCommShrink(comm, out, 1, &bad, nullptr, HORA_SHRINK_DEFAULT) != horaInvalidArgument) return "range";
    if (horaCommShrink(comm, excluded, 1, &bad, nullptr, 7) != horaInvalidArgument) return "flags";
    horaComm_t child = nullptr;
    if (horaCommShrink(comm, excluded, 1, &child, nullptr, HORA_SHRINK_DEFAULT) != horaSuccess)
      return "shrink: " + lastError(comm);
    int m = 0, me = -1;
    horaCommCount(child, &m);
    horaCommUserRank(child, &me);
    const int want = rank < 1 ? rank : rank - 1;
    if (m != nranks - 1 || me != want) return "child rank " + std::to_string(me) + " of " + std::to_string(m);
    std::string f = allReduceCheck(child, (nranks - 1) * nranks / 2);
    // The parent, healthy, still works among the ranks that remain... but rank 1 left it: only
    // the child is used from here. A second shrink of the same parent gets a rendezvous of its own.
    horaComm_t child2 = nullptr;
    int both[2] = {1, 3};
    if (rank != 3) {
      if (horaCommShrink(comm, both, 2, &child2, nullptr, HORA_SHRINK_DEFAULT) != horaSuccess)
        return "second shrink: " + lastError(comm);
      f += allReduceCheck(child2, 3);
      horaCommDestroy(child2);
    }
    horaCommDestroy(child);
    return f;
  });
  INFO(describe(results));
  for (const ProcessResult& r : results) CHECK(r.ok());
}

TEST_CASE("horaCommShrink after a rank was killed: every survivor fails, shrinks it away and goes on", "[lifecycle]") {
  const int n = 4, victim = 2;
  ProcessOptions opts;
  opts.timeoutMs = 20000;
  auto results = runProcesses(
      n,
      [](horaComm_t comm, int rank, int nranks) -> std::string {
        if (std::string f = allReduceCheck(comm, nranks * (nranks + 1) / 2); !f.empty()) return "before: " + f;
        if (rank == victim) raise(SIGKILL);
        int32_t x = 1;
        const horaResult_t r = horaAllReduce(&x, &x, 1, horaInt32, horaSum, comm, nullptr);
        if (r != horaRemoteError && r != horaTimeout) return std::string("after the kill: ") + horaGetErrorString(r);
        if (lastError(comm).find("rank 2") == std::string::npos) return "the error does not name rank 2: " + lastError(comm);
        int excluded[1] = {victim};
        horaComm_t child = nullptr;
        // Without ABORT, a failed communicator refuses to be shrunk.
        if (horaCommShrink(comm, excluded, 1, &child, nullptr, HORA_SHRINK_DEFAULT) != horaInvalidUsage)
          return "a default shrink of a failed communicator";
        if (horaCommShrink(comm, excluded, 1, &child, nullptr, HORA_SHRINK_ABORT) != horaSuccess)
          return "shrink: " + lastError(comm);
        std::string f = allReduceCheck(child, (nranks - 1) * nranks / 2);
        horaCommDestroy(child);
        horaCommAbort(comm);
        return f;
      },
      opts);
  INFO(describe(results));
  for (const ProcessResult& r : results) {
    if (r.rank == victim) CHECK((WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL));
    else CHECK(r.ok());
  }
}

TEST_CASE("horaGroupSimulateEnd predicts and runs nothing", "[lifecycle]") {
  auto failures = runThreads(3, [](horaComm_t comm, int rank, int) -> std::string {
    std::vector<float> in(1 << 18, static_cast<float>(rank)), out(1 << 18, -1.0f);
    horaSimInfo_t small = HORA_SIM_INFO_INITIALIZER, large = HORA_SIM_INFO_INITIALIZER;
    horaGroupStart();
    horaAllReduce(in.data(), out.data(), 16, horaFloat, horaSum, comm, nullptr);
    if (horaGroupSimulateEnd(&small) != horaSuccess) return "simulate: " + lastError(nullptr);
    horaGroupStart();
    horaAllReduce(in.data(), out.data(), in.size(), horaFloat, horaSum, comm, nullptr);
    if (horaGroupSimulateEnd(&large) != horaSuccess) return "simulate: " + lastError(nullptr);
    if (!(small.estimatedTime > 0 && large.estimatedTime > small.estimatedTime))
      return "estimates " + std::to_string(small.estimatedTime) + " and " + std::to_string(large.estimatedTime);
    for (float v : out)
      if (v != -1.0f) return "a simulated call ran";
    horaSimInfo_t bad = HORA_SIM_INFO_INITIALIZER;
    bad.magic = 0;
    horaGroupStart();
    if (horaGroupSimulateEnd(&bad) != horaInvalidArgument) return "a bad simInfo";
    horaGroupEnd();
    if (horaGroupSimulateEnd(&small) != horaInvalidUsage) return "simulate without a group";
    // The communicator goes on.
    return allReduceCheck(comm, 6);
  });
  CHECK(joinAll(failures) == "");
}
