// Mismatched calls: ranks that disagree on a call (its root, count, collective or type) fail
// with the mismatch on every rank, the ones that only give included, within the call check's
// window, never with a wrong result or a hang; and groups whose ranks order a send and a
// collective differently still run. The rest of the failures are in test_faults.cc.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "harness.h"
#include "transports/tcp/connection.h"

using namespace hora::test;

namespace {

// n ranks call kCalls small Broadcasts (call(comm, rank, k, data), which makes call kBad differ
// on some rank): every rank must fail with the mismatch, within a window of calls of it.
template <class Call>
std::string mismatchHeardInWindow(int n, Call call) {
  constexpr int kBad = 10, kWindow = static_cast<int>(hora::tcp::Connection::kUnreadMost) + 16, kCalls = kWindow + 200;
  auto failures = runThreads(n, [&call](horaComm_t comm, int rank, int) -> std::string {
    std::vector<float> a(64, 1.0f);
    for (int k = 0; k < kCalls; ++k) {
      const horaResult_t r = call(comm, rank, k == kBad, a);
      if (r == horaSuccess) continue;
      const std::string text = horaGetLastError(comm);
      const std::string at = "call " + std::to_string(k) + " returned " + horaGetErrorString(r) + ": " + text;
      if (k < kBad) return "a call before the mismatch failed: " + at;
      if (r != horaInvalidUsage || text.find("mismatched") == std::string::npos) return at;
      if (k > kBad + kWindow) return "heard of the mismatch too late: " + at;
      return "";
    }
    return "no call failed after the mismatched one";
  });
  return joinAll(failures);
}

}  // namespace

TEST_CASE("mismatched calls across ranks are reported, not misread", "[faults]") {
  auto failures = runThreads(2, [](horaComm_t comm, int rank, int) -> std::string {
    std::vector<float> a(1000, 1.0f), b(2000);
    horaResult_t r = rank == 0 ? horaAllReduce(a.data(), a.data(), 1000, horaFloat, horaSum, comm, nullptr)
                               : horaAllGather(a.data(), b.data(), 1000, horaFloat, comm, nullptr);
    if (r == horaSuccess) return "a mismatched call succeeded";
    std::string text = horaGetLastError(comm);
    // One code for the cause, whichever rank found it and over whichever transport.
    if (r != horaInvalidUsage) return std::string("a mismatch returned ") + horaGetErrorString(r) + ": " + text;
    if (text.find("mismatched") == std::string::npos) return "unhelpful error: " + text;
    return "";
  });
  std::string all;
  for (auto& f : failures) all += f + "\n";
  INFO(all);
  CHECK(failures.empty());

  // Inside a group: horaGroupEnd fails, and each communicator's last error says why.
  failures = runThreads(2, [](horaComm_t comm, int rank, int) -> std::string {
    std::vector<int32_t> a(1001, 1);
    horaGroupStart();
    horaAllReduce(a.data(), a.data(), rank == 0 ? 1000 : 1001, horaInt32, horaSum, comm, nullptr);
    horaResult_t r = horaGroupEnd();
    if (r != horaInvalidUsage) return std::string("a mismatched group returned ") + horaGetErrorString(r);
    const std::string text = horaGetLastError(comm);
    if (text.rfind("horaGroupEnd: ", 0) != 0 || text.find("mismatched") == std::string::npos)
      return "the communicator's last error does not say why its group failed: '" + text + "'";
    return "";
  });
  all.clear();
  for (auto& f : failures) all += f + "\n";
  INFO(all);
  CHECK(failures.empty());

  failures = runThreads(2, [](horaComm_t comm, int rank, int) -> std::string {
    std::vector<int32_t> a(1001, 1);
    horaResult_t r = horaAllReduce(a.data(), a.data(), rank == 0 ? 1000 : 1001, horaInt32, horaSum, comm, nullptr);
    if (r == horaSuccess) return "mismatched counts succeeded";
    if (r != horaInvalidUsage)
      return std::string("mismatched counts returned ") + horaGetErrorString(r) + ": " + horaGetLastError(comm);
    return "";
  });
  all.clear();
  for (auto& f : failures) all += f + "\n";
  INFO(all);
  CHECK(failures.empty());
}

// Every rank of a mismatched call fails, those whose own part has nothing to compare too: a
// Broadcast's root (which only gives), the ranks of a Reduce that only send, a call with nothing
// to move. Before, these returned success while the others failed (over shared memory a
// Broadcast whose ranks disagreed on the root succeeded everywhere). A small rooted call through
// the shared stage's cells lets a rank whose part needs no peer return at once and compare its
// call with its neighbour's later: such a rank's call may succeed (its own buffers are right: it
// only gave), and then its next call fails with the mismatch, or its finalize (which waits until
// every rank has compared its calls).
TEST_CASE("a mismatched call fails on every rank, the root and count 0 included", "[faults]") {
  struct Case {
    const char* name;
    int nranks;
    std::function<horaResult_t(horaComm_t, int, std::vector<float>&, std::vector<float>&)> call;
  };
  const std::vector<Case> cases = {
      {"Broadcast, ranks disagree on the root", 2,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>&) {
         return horaBroadcast(a.data(), a.data(), 64, horaFloat, r, c, nullptr);  // each its own root
       }},
      {"Broadcast, one rank names another root", 3,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>&) {
         return horaBroadcast(a.data(), a.data(), 64, horaFloat, r == 2 ? 1 : 0, c, nullptr);
       }},
      {"Reduce, one rank names another root", 3,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>& b) {
         return horaReduce(a.data(), b.data(), 64, horaFloat, horaSum, r == 1 ? 2 : 0, c, nullptr);
       }},
      {"large Broadcast, one rank names another root", 3,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>&) {
         return horaBroadcast(a.data(), a.data(), a.size(), horaFloat, r == 1 ? 2 : 0, c, nullptr);
       }},
      {"count 0 against count 5", 2,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>& b) {
         return horaAllReduce(a.data(), b.data(), r == 0 ? 0 : 5, horaFloat, horaSum, c, nullptr);
       }},
      {"count 0, AllReduce against AllGather", 3,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>& b) {
         return r == 2 ? horaAllGather(a.data(), b.data(), 0, horaFloat, c, nullptr)
                       : horaAllReduce(a.data(), b.data(), 0, horaFloat, horaSum, c, nullptr);
       }},
      // Calls that fit the stage's notes (40 bytes) against one that does not, and two that fit
      // with other counts: the notes carry the call's tag, so each is compared.
      {"AllReduce of 5 floats against 16", 2,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>& b) {
         return horaAllReduce(a.data(), b.data(), r == 0 ? 5 : 16, horaFloat, horaSum, c, nullptr);
       }},
      {"AllGather of 2 floats against 3", 3,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>& b) {
         return horaAllGather(a.data(), b.data(), r == 1 ? 3 : 2, horaFloat, c, nullptr);
       }},
      {"Broadcast of 2 floats, one rank names another root", 3,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>&) {
         return horaBroadcast(a.data(), a.data(), 2, horaFloat, r == 2 ? 1 : 0, c, nullptr);
       }},
      {"count 0 Reduce, another root", 2,
       [](horaComm_t c, int r, std::vector<float>& a, std::vector<float>& b) {
         return horaReduce(a.data(), b.data(), 0, horaFloat, horaSum, r, c, nullptr);
       }},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    auto failures = runThreads(k.nranks, [&](horaComm_t comm, int rank, int) -> std::string {
      std::vector<float> a(1 << 20, 1.0f), b(1 << 20, 0.0f);
      // A good call first: the mismatch is not the communicator's first message.
      if (horaAllReduce(a.data(), b.data(), 16, horaFloat, horaSum, comm, nullptr) != horaSuccess)
        return std::string("the good call failed: ") + horaGetLastError(comm);
      horaResult_t r = k.call(comm, rank, a, b);
      std::string text = horaGetLastError(comm);
      const char* next = "";
      if (r == horaSuccess) {
        // It heard from no rank that disagrees: the next step says so, a call or a finalize.
        const bool finalize = rank % 2;
        next = finalize ? " (at its finalize)" : " (at its next call)";
        r = finalize ? horaCommFinalize(comm) : horaAllReduce(a.data(), b.data(), 16, horaFloat, horaSum, comm, nullptr);
        text = horaGetLastError(comm);
        if (r == horaSuccess) return "the mismatched call and the step after it succeeded";
      }
      if (r != horaInvalidUsage)
        return std::string("returned ") + horaGetErrorString(r) + " instead of horaInvalidUsage" + next + ": " + text;
      if (text.find("mismatched") == std::string::npos) return "the text does not say mismatched" + std::string(next) + ": " + text;
      return "";
    });
    CHECK(joinAll(failures) == "");
  }
}

// A Broadcast's root returns once its data and its call check are out (src/comm/call_check.h):
// when another rank's call differs, the root hears of it at a later call, within the call
// check's window (tcp::Connection::kUnreadMost calls over TCP, 48 through the stage's cells), and so does every rank:
// each fails with the mismatch, none with a timeout.
TEST_CASE("a root that only gives hears of a mismatch within a window of calls", "[faults]") {
  CHECK(mismatchHeardInWindow(3, [](horaComm_t comm, int rank, bool bad, std::vector<float>& a) {
          return horaBroadcast(a.data(), a.data(), bad && rank == 2 ? 63 : 64, horaFloat, 0, comm, nullptr);
        }) == "");
}

// Two ranks that each take themselves for the root at one call: both only give, nobody reads,
// and only the later comparison finds it (in batches of 32 where both ranks have a core, as in
// CI's two, else of 8): both fail within the window, with the mismatch.
TEST_CASE("two ranks that both give at a call hear of the mismatch within a window of calls", "[faults]") {
  CHECK(mismatchHeardInWindow(2, [](horaComm_t comm, int rank, bool bad, std::vector<float>& a) {
          return horaBroadcast(a.data(), a.data(), a.size(), horaFloat, bad && rank == 1 ? 1 : 0, comm, nullptr);
        }) == "");
}

namespace {
// One group of 2 ranks: rank 0 makes `collective` then receives msg from rank 1; rank 1 sends
// msg first, then makes the collective (the links' messages in different orders on the two
// ranks). "" once the group ran and the message arrived (7.0), else what went wrong.
std::string sendBesideCollective(horaComm_t comm, int rank, std::vector<float>& msg,
                                 const std::function<horaResult_t()>& collective) {
  horaGroupStart();
  if (rank == 0) {
    collective();
    horaRecv(msg.data(), msg.size(), horaFloat, 1, comm, nullptr);
  } else {
    horaSend(msg.data(), msg.size(), horaFloat, 0, comm, nullptr);
    collective();
  }
  if (horaGroupEnd() != horaSuccess) return std::string("the group failed: ") + horaGetLastError(comm);
  if (rank == 0 && msg[0] != 7.0f) return "the message did not arrive";
  return "";
}
}  // namespace

// The agreement of a Broadcast or a Reduce runs after the communicator's other jobs of the
// group, so a group that holds a send/recv before the collective on one rank and after it on
// the other (each link's messages are matched in order) still runs, with the right data.
TEST_CASE("groups that order a send and a rooted or empty collective differently still run", "[faults]") {
  for (int variant = 0; variant < 3; ++variant) {
    INFO("variant " << variant);
    auto failures = runThreads(2, [variant](horaComm_t comm, int rank, int) -> std::string {
      std::vector<float> data(64, rank == 0 ? 3.0f : 0.0f), msg(8, rank == 1 ? 7.0f : 0.0f), sum(64, 0.0f);
      auto collective = [&] {
        if (variant == 0) return horaBroadcast(data.data(), data.data(), data.size(), horaFloat, 0, comm, nullptr);
        // Root 1: the reduction's data goes 0 -> 1, against the message's 1 -> 0.
        if (variant == 1) return horaReduce(data.data(), sum.data(), data.size(), horaFloat, horaSum, 1, comm, nullptr);
        return horaAllReduce(data.data(), sum.data(), 0, horaFloat, horaSum, comm, nullptr);  // nothing to move
      };
      std::string e = sendBesideCollective(comm, rank, msg, collective);
      if (!e.empty()) return e;
      if (variant == 0 && data[63] != 3.0f) return "the broadcast did not arrive";
      if (variant == 1 && rank == 1 && sum[63] != 3.0f) return "the reduction is wrong";
      return "";
    });
    CHECK(joinAll(failures) == "");
  }
}

// Point-to-point and collective traffic are kept apart on every link (as NCCL's channels do), so
// a group may hold a send before a collective on one rank and after it on the other, whatever
// the collective moves, each in either direction; over TCP this was a "mismatched" failure.
TEST_CASE("groups that order a send and a collective's data messages differently still run", "[faults]") {
  for (int variant = 0; variant < 4; ++variant) {
    INFO("variant " << variant);
    auto failures = runThreads(2, [variant](horaComm_t comm, int rank, int) -> std::string {
      std::vector<float> data(4096, float(rank + 1)), out(8192, 0.0f), msg(8, rank == 1 ? 7.0f : 0.0f);
      auto collective = [&] {
        if (variant == 0) return horaAllReduce(data.data(), out.data(), data.size(), horaFloat, horaSum, comm, nullptr);
        if (variant == 1) return horaAllGather(data.data(), out.data(), data.size(), horaFloat, comm, nullptr);
        if (variant == 2) return horaReduceScatter(data.data(), out.data(), data.size() / 2, horaFloat, horaSum, comm, nullptr);
        return horaAllToAll(data.data(), out.data(), data.size() / 2, horaFloat, comm, nullptr);
      };
      std::string e = sendBesideCollective(comm, rank, msg, collective);
      if (!e.empty()) return e;
      const float want = variant == 0 || variant == 2 ? 3.0f : 2.0f;  // AllGather, AllToAll: rank 1's block
      const size_t at = variant == 1 ? 8191 : variant == 3 ? 4095 : 2047;
      if (out[at] != want) return "the collective is wrong: " + std::to_string(out[at]) + " for " + std::to_string(want);
      return "";
    });
    CHECK(joinAll(failures) == "");
  }
}

// Two collectives whose messages never meet: the ring's ReduceScatter sends to rank r+1 and
// waits on r-1, Bruck's AllGather sends to r-1 and waits on r+1, so no receive ever reads the
// other call's message and every rank would wait for the timeout (ten minutes here). A rank
// that is stuck looks at the messages that wait where it expects none: one with this call's
// number and another collective's tag is a mismatch, on every rank.
TEST_CASE("collectives whose messages never meet fail as a mismatch, not a hang", "[faults]") {
  setenv("HORA_ALGO", "allgather:bruck,reducescatter:ring", 1);
  auto failures = runThreads(4, [](horaComm_t comm, int rank, int n) -> std::string {
    std::vector<float> a(256 * n, 1.0f), b(256 * n, 0.0f);
    if (horaAllReduce(a.data(), b.data(), 16, horaFloat, horaSum, comm, nullptr) != horaSuccess)
      return std::string("the good call failed: ") + horaGetLastError(comm);
    horaResult_t r = rank == 2 ? horaAllGather(a.data(), b.data(), 256, horaFloat, comm, nullptr)
                               : horaReduceScatter(a.data(), b.data(), 256, horaFloat, horaSum, comm, nullptr);
    const std::string text = horaGetLastError(comm);
    if (r != horaInvalidUsage) return std::string("returned ") + horaGetErrorString(r) + ": " + text;
    if (text.find("mismatched") == std::string::npos) return "the text does not say mismatched: " + text;
    return "";
  });
  unsetenv("HORA_ALGO");
  CHECK(joinAll(failures) == "");
}
