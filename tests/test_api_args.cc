// Bad arguments: every entry point returns horaInvalidArgument (or horaInvalidUsage) with a
// readable horaGetLastError text, never crashes, and leaves the communicator usable.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "harness.h"

using namespace hora::test;

namespace {

struct Check {
  std::string failures;
  void expect(horaResult_t got, horaResult_t want, horaComm_t comm, const char* what) {
    if (got != want) {
      failures += std::string(what) + ": returned " + horaGetErrorString(got) + "\n";
      return;
    }
    const char* text = horaGetLastError(comm);
    const char* mine = horaGetLastError(nullptr);
    if (!text || !*text || !mine || !*mine) failures += std::string(what) + ": no last-error text\n";
  }
};

std::string badCalls(horaComm_t comm, int rank, int n) {
  Check c;
  float buf[64] = {0}, out[64 * 8] = {0};
  const horaResult_t IA = horaInvalidArgument;
  // A null or destroyed communicator.
  c.expect(horaAllReduce(buf, out, 4, horaFloat, horaSum, nullptr, nullptr), IA, nullptr, "null comm");
  c.expect(horaCommCount(nullptr, nullptr), IA, nullptr, "count of null comm");
  int dummy;
  c.expect(horaCommCount(comm, nullptr), IA, comm, "null count pointer");
  c.expect(horaCommUserRank(comm, nullptr), IA, comm, "null rank pointer");
  c.expect(horaCommCuDevice(comm, nullptr), IA, comm, "null device pointer");
  c.expect(horaCommGetAsyncError(comm, nullptr), IA, comm, "null async pointer");
  c.expect(horaGetVersion(nullptr), IA, nullptr, "null version pointer");
  (void)dummy;
  // Datatypes and ops.
  for (int t : {-1, 12, 99, 1 << 30})
    c.expect(horaAllReduce(buf, out, 4, static_cast<horaDataType_t>(t), horaSum, comm, nullptr), IA, comm, "bad dtype");
  for (int op : {-1, 5, 6, 99, 1 << 30})
    c.expect(horaAllReduce(buf, out, 4, horaFloat, static_cast<horaRedOp_t>(op), comm, nullptr), IA, comm, "bad op");
  c.expect(horaReduceScatter(buf, out, 4, horaFloat, static_cast<horaRedOp_t>(77), comm, nullptr), IA, comm, "bad op (rs)");
  // Roots and peers.
  for (int root : {-1, n, n + 100}) {
    c.expect(horaBroadcast(buf, buf, 4, horaFloat, root, comm, nullptr), IA, comm, "bad root (bcast)");
    c.expect(horaReduce(buf, out, 4, horaFloat, horaSum, root, comm, nullptr), IA, comm, "bad root (reduce)");
    c.expect(horaSend(buf, 4, horaFloat, root, comm, nullptr), IA, comm, "bad peer (send)");
    c.expect(horaRecv(buf, 4, horaFloat, root, comm, nullptr), IA, comm, "bad peer (recv)");
  }
  // Null buffers with a count.
  c.expect(horaAllReduce(nullptr, out, 4, horaFloat, horaSum, comm, nullptr), IA, comm, "null sendbuff");
  c.expect(horaAllReduce(buf, nullptr, 4, horaFloat, horaSum, comm, nullptr), IA, comm, "null recvbuff");
  c.expect(horaAllGather(buf, nullptr, 4, horaFloat, comm, nullptr), IA, comm, "null allgather recvbuff");
  c.expect(horaReduceScatter(nullptr, out, 4, horaFloat, horaSum, comm, nullptr), IA, comm, "null rs sendbuff");
  c.expect(horaBroadcast(buf, nullptr, 4, horaFloat, 0, comm, nullptr), IA, comm, "null bcast recvbuff");
  c.expect(horaSend(nullptr, 4, horaFloat, 0, comm, nullptr), IA, comm, "null send buffer");
  c.expect(horaRecv(nullptr, 4, horaFloat, 0, comm, nullptr), IA, comm, "null recv buffer");
  // A stream in a host-only build, an overflowing count, partially overlapping buffers.
  c.expect(horaAllReduce(buf, out, 4, horaFloat, horaSum, comm, reinterpret_cast<horaStream_t>(0x1000)), IA, comm,
           "non-null stream");
  c.expect(horaAllReduce(buf, out, SIZE_MAX / 2, horaFloat, horaSum, comm, nullptr), IA, comm, "overflowing count");
  c.expect(horaAllReduce(buf, buf + 1, 8, horaFloat, horaSum, comm, nullptr), IA, comm, "overlapping buffers");
  c.expect(horaAllGather(out + 1, out, 8, horaFloat, comm, nullptr), IA, comm, "overlapping allgather");
  // AllToAll, Barrier and Split.
  c.expect(horaAllToAll(nullptr, out, 4, horaFloat, comm, nullptr), IA, comm, "null alltoall sendbuff");
  c.expect(horaAllToAll(buf, nullptr, 4, horaFloat, comm, nullptr), IA, comm, "null alltoall recvbuff");
  c.expect(horaAllToAll(out, out + 1, 4, horaFloat, comm, nullptr), IA, comm, "overlapping alltoall");
  c.expect(horaAllToAll(buf, out, 4, static_cast<horaDataType_t>(42), comm, nullptr), IA, comm, "bad alltoall dtype");
  c.expect(horaAllToAll(buf, out, SIZE_MAX / 4, horaFloat, comm, nullptr), IA, comm, "overflowing alltoall count");
  c.expect(horaBarrier(nullptr, nullptr), IA, nullptr, "barrier on a null comm");
  // Gather and Scatter: the root's big buffer (n blocks) is required there, and only there.
  for (int root : {-1, n, n + 100}) {
    c.expect(horaGather(buf, out, 4, horaFloat, root, comm, nullptr), IA, comm, "bad root (gather)");
    c.expect(horaScatter(out, buf, 4, horaFloat, root, comm, nullptr), IA, comm, "bad root (scatter)");
  }
  c.expect(horaGather(buf, out, 4, horaFloat, 0, nullptr, nullptr), IA, nullptr, "gather on a null comm");
  c.expect(horaScatter(out, buf, 4, horaFloat, 0, nullptr, nullptr), IA, nullptr, "scatter on a null comm");
  c.expect(horaGather(buf, out, 4, static_cast<horaDataType_t>(42), 0, comm, nullptr), IA, comm, "bad gather dtype");
  c.expect(horaScatter(out, buf, 4, static_cast<horaDataType_t>(-1), 0, comm, nullptr), IA, comm, "bad scatter dtype");
  c.expect(horaGather(nullptr, out, 4, horaFloat, 0, comm, nullptr), IA, comm, "null gather sendbuff");
  c.expect(horaScatter(out, nullptr, 4, horaFloat, 0, comm, nullptr), IA, comm, "null scatter recvbuff");
  c.expect(horaGather(buf, out, SIZE_MAX / 4, horaFloat, 0, comm, nullptr), IA, comm, "overflowing gather count");
  c.expect(horaScatter(out, buf, SIZE_MAX / 4, horaFloat, 0, comm, nullptr), IA, comm, "overflowing scatter count");
  // A count whose block fits but whose n blocks do not (every rank: they must all refuse it).
  if (n > 1) {
    const size_t huge = static_cast<size_t>(PTRDIFF_MAX) / 4 / static_cast<size_t>(n) + 1;
    c.expect(horaGather(buf, out, huge, horaFloat, 0, comm, nullptr), IA, comm, "overflowing gather total");
    c.expect(horaScatter(out, buf, huge, horaFloat, 0, comm, nullptr), IA, comm, "overflowing scatter total");
  }
  if (rank == 0) {  // the root
    c.expect(horaGather(buf, nullptr, 4, horaFloat, 0, comm, nullptr), IA, comm, "null gather recvbuff on the root");
    c.expect(horaScatter(nullptr, buf, 4, horaFloat, 0, comm, nullptr), IA, comm, "null scatter sendbuff on the root");
    // Overlapping, but not in place (the root's block is at 0 here).
    c.expect(horaGather(out + 1, out, 4, horaFloat, 0, comm, nullptr), IA, comm, "overlapping gather");
    c.expect(horaScatter(out, out + 1, 4, horaFloat, 0, comm, nullptr), IA, comm, "overlapping scatter");
  }
  horaComm_t sub = nullptr;
  c.expect(horaCommSplit(comm, -2, 0, &sub, nullptr), IA, comm, "split with color -2");
  c.expect(horaCommSplit(comm, 0, 0, nullptr, nullptr), IA, comm, "split with a null newcomm");
  c.expect(horaCommSplit(nullptr, 0, 0, &sub, nullptr), IA, nullptr, "split of a null comm");
  horaGroupStart();
  c.expect(horaCommSplit(comm, 0, 0, &sub, nullptr), horaInvalidUsage, comm, "split inside a group");
  horaGroupEnd();
  // Reduction ops: device scalars, null scalar, foreign or destroyed ops, wrong dtype.
  horaRedOp_t op;
  float two = 2.0f;
  c.expect(horaRedOpCreatePreMulSum(&op, &two, horaFloat, static_cast<horaScalarResidence_t>(7), comm), IA, comm, "bad residence");
  c.expect(horaRedOpCreatePreMulSum(&op, nullptr, horaFloat, horaScalarHostImmediate, comm), IA, comm, "null scalar");
  c.expect(horaRedOpCreatePreMulSum(nullptr, &two, horaFloat, horaScalarHostImmediate, comm), IA, comm, "null op");
  c.expect(horaRedOpDestroy(horaSum, comm), IA, comm, "destroying a built-in op");
  if (horaRedOpCreatePreMulSum(&op, &two, horaFloat, horaScalarHostImmediate, comm) != horaSuccess)
    return "creating a premulsum op failed";
  c.expect(horaAllReduce(buf, out, 4, horaDouble, op, comm, nullptr), IA, comm, "premulsum op with another dtype");
  if (horaRedOpDestroy(op, comm) != horaSuccess) c.failures += "destroying a premulsum op failed\n";
  c.expect(horaRedOpDestroy(op, comm), IA, comm, "destroying an op twice");
  c.expect(horaAllReduce(buf, out, 4, horaFloat, op, comm, nullptr), IA, comm, "using a destroyed op");
  // Usage errors.
  c.expect(horaGroupEnd(), horaInvalidUsage, nullptr, "horaGroupEnd without start");
  c.expect(horaSend(buf, 1, horaFloat, rank, comm, nullptr), horaInvalidUsage, comm, "send to self outside a group");
  horaComm_t fresh = nullptr;
  horaUniqueId id;
  memset(&id, 0, sizeof id);
  c.expect(horaCommInitRank(&fresh, 2, id, 0), IA, nullptr, "init with a zeroed id");
  c.expect(horaCommInitRank(nullptr, 2, id, 0), IA, nullptr, "init with a null comm pointer");
  horaConfig_t cfg;
  memset(&cfg, 0, sizeof cfg);
  c.expect(horaCommInitRankConfig(&fresh, 2, id, 0, &cfg), IA, nullptr, "init with an uninitialised config");
  c.expect(horaCommInitAll(nullptr, 2, nullptr), IA, nullptr, "initall with a null array");
  c.expect(horaCommInitAll(&fresh, 0, nullptr), IA, nullptr, "initall with 0 ranks");
  c.expect(horaGetUniqueId(nullptr), IA, nullptr, "null unique id");
  // The communicator is still usable and exact.
  horaResult_t async = horaInternalError;
  if (horaCommGetAsyncError(comm, &async) != horaSuccess || async != horaSuccess)
    c.failures += "the communicator is in an error state after bad arguments\n";
  int64_t x = rank + 1;
  if (horaAllReduce(&x, &x, 1, horaInt64, horaSum, comm, nullptr) != horaSuccess ||
      x != static_cast<int64_t>(n) * (n + 1) / 2)
    c.failures += std::string("a good call after bad ones failed: ") + horaGetLastError(comm) + "\n";
  // Count 0 with null buffers is legal and does nothing.
  if (horaAllReduce(nullptr, nullptr, 0, horaFloat, horaSum, comm, nullptr) != horaSuccess)
    c.failures += "count 0 with null buffers failed\n";
  if (horaGather(nullptr, nullptr, 0, horaFloat, n - 1, comm, nullptr) != horaSuccess ||
      horaScatter(nullptr, nullptr, 0, horaFloat, n - 1, comm, nullptr) != horaSuccess)
    c.failures += "gather or scatter of count 0 with null buffers failed\n";
  return c.failures;
}

}  // namespace

TEST_CASE("bad arguments return errors and leave the communicator usable (threads)", "[api]") {
  for (int n : {1, 3}) {
    auto failures = runThreads(n, badCalls);
    std::string all;
    for (auto& f : failures) all += f;
    INFO("nranks " << n << "\n" << all);
    CHECK(failures.empty());
  }
}

TEST_CASE("bad arguments across processes", "[api][processes]") {
  auto results = runProcesses(2, badCalls);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("error strings and destroy/abort of NULL", "[api]") {
  // Every code has its own text, and a value that is no code says so.
  std::set<std::string> texts;
  for (int r = 0; r < horaNumResults; ++r) {
    const std::string t = horaGetErrorString(static_cast<horaResult_t>(r));
    INFO("code " << r << ": '" << t << "'");
    CHECK(t != "unknown result code");
    CHECK(texts.insert(t).second);
  }
  CHECK(std::string(horaGetErrorString(horaSuccess)) == "no error");
  CHECK(std::string(horaGetErrorString(static_cast<horaResult_t>(horaNumResults))) == "unknown result code");
  CHECK(std::string(horaGetErrorString(static_cast<horaResult_t>(-1))) == "unknown result code");
  CHECK(horaCommDestroy(nullptr) == horaSuccess);
  CHECK(horaCommAbort(nullptr) == horaSuccess);
  // The last error is this thread's latest failure, named by its entry point.
  CHECK(horaCommCount(nullptr, nullptr) == horaInvalidArgument);
  CHECK(std::string(horaGetLastError(nullptr)) == "horaCommCount: comm is NULL");
  CHECK(horaGetVersion(nullptr) == horaInvalidArgument);
  CHECK(std::string(horaGetLastError(nullptr)).rfind("horaGetVersion: ", 0) == 0);
}

// A handle that is not a live communicator (a wild pointer, readable memory that is not a
// communicator, one destroyed before) is an error in every entry point that takes one, never a
// crash: handles are checked against the live communicators before they are touched.
TEST_CASE("wild and destroyed communicator handles are errors, not crashes", "[api]") {
  horaComm_t real = nullptr;
  REQUIRE(horaCommInitAll(&real, 1, nullptr) == horaSuccess);
  horaComm_t dead = nullptr;
  REQUIRE(horaCommInitAll(&dead, 1, nullptr) == horaSuccess);
  REQUIRE(horaCommDestroy(dead) == horaSuccess);
  alignas(64) static unsigned char garbage[4096];
  memset(garbage, 0xa5, sizeof garbage);
  const horaComm_t wild[] = {reinterpret_cast<horaComm_t>(0x10), reinterpret_cast<horaComm_t>(garbage), dead,
                             reinterpret_cast<horaComm_t>(reinterpret_cast<char*>(real) + 8)};
  const horaResult_t IA = horaInvalidArgument;
  float buf[8] = {0}, out[8] = {0};
  int v = 0;
  horaResult_t async = horaSuccess;
  horaRedOp_t op;
  float scalar = 2;
  for (horaComm_t w : wild) {
    INFO("handle " << static_cast<void*>(w));
    CHECK(horaCommCount(w, &v) == IA);
    CHECK(std::string(horaGetLastError(nullptr)).find("is not a live communicator") != std::string::npos);
    CHECK(horaCommUserRank(w, &v) == IA);
    CHECK(horaCommCuDevice(w, &v) == IA);
    CHECK(horaCommGetAsyncError(w, &async) == IA);
    CHECK(horaCommFinalize(w) == IA);
    CHECK(horaAllReduce(buf, out, 8, horaFloat, horaSum, w, nullptr) == IA);
    CHECK(horaBroadcast(buf, out, 8, horaFloat, 0, w, nullptr) == IA);
    CHECK(horaReduce(buf, out, 8, horaFloat, horaSum, 0, w, nullptr) == IA);
    CHECK(horaAllGather(buf, out, 1, horaFloat, w, nullptr) == IA);
    CHECK(horaReduceScatter(buf, out, 1, horaFloat, horaSum, w, nullptr) == IA);
    CHECK(horaAllToAll(buf, out, 1, horaFloat, w, nullptr) == IA);
    CHECK(horaBarrier(w, nullptr) == IA);
    CHECK(horaGather(buf, out, 1, horaFloat, 0, w, nullptr) == IA);
    CHECK(horaScatter(buf, out, 1, horaFloat, 0, w, nullptr) == IA);
    CHECK(horaSend(buf, 1, horaFloat, 0, w, nullptr) == IA);
    CHECK(horaRecv(buf, 1, horaFloat, 0, w, nullptr) == IA);
    horaComm_t sub = nullptr;
    CHECK(horaCommSplit(w, 0, 0, &sub, nullptr) == IA);
    CHECK(horaRedOpCreatePreMulSum(&op, &scalar, horaFloat, horaScalarHostImmediate, w) == IA);
    CHECK(horaRedOpDestroy(static_cast<horaRedOp_t>(5), w) == IA);
    CHECK(std::strlen(horaGetLastError(w)) > 0);
    CHECK(horaCommDestroy(w) == IA);
    CHECK(horaCommAbort(w) == IA);
  }
  // The real one was never disturbed.
  CHECK(horaCommCount(real, &v) == horaSuccess);
  CHECK(v == 1);
  CHECK(horaAllReduce(buf, out, 8, horaFloat, horaSum, real, nullptr) == horaSuccess);
  CHECK(horaCommDestroy(real) == horaSuccess);
}
