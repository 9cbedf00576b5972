// Host streams: order, overlap with the caller, errors, and destroying streams and
// communicators while work is queued.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "harness.h"

using namespace hora::test;

namespace {

std::string err(const char* what, horaComm_t comm) { return std::string(what) + ": " + horaGetLastError(comm); }
}  // namespace

TEST_CASE("stream: work runs in order, and a call without a stream waits for it", "[streams]") {
  for (int n : {1, 2, 3, 8}) {
    auto failures = runThreads(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      horaStream_t s = nullptr;
      if (horaStreamCreate(&s) != horaSuccess) return "horaStreamCreate failed";
      // A chain: each allreduce reads what the one before wrote. Run out of order, a step
      // would read the poison.
      const int K = 12;
      const size_t N = 5000;
      std::vector<std::vector<int64_t>> bufs(K + 1, std::vector<int64_t>(N, -777));
      for (size_t i = 0; i < N; ++i) bufs[0][i] = rank + 1 + static_cast<int64_t>(i % 5);
      for (int k = 0; k < K; ++k)
        if (horaAllReduce(bufs[k].data(), bufs[k + 1].data(), N, horaInt64, horaSum, comm, s) != horaSuccess)
          return err("enqueueing", comm);
      // A group on the stream: alltoall of the chain's end, and a barrier.
      std::vector<int64_t> a2a(N * nranks, -1), mixed(N * nranks);
      for (size_t i = 0; i < mixed.size(); ++i) mixed[i] = rank * 1000003 + static_cast<int64_t>(i);
      horaGroupStart();
      horaAllToAll(mixed.data(), a2a.data(), N, horaInt64, comm, s);
      horaBarrier(comm, s);
      if (horaGroupEnd() != horaSuccess) return err("group on a stream", comm);
      // Without a stream: must see the chain's result, so it waits for the stream's work.
      std::vector<int64_t> last(N);
      if (horaAllReduce(bufs[K].data(), last.data(), N, horaInt64, horaMax, comm, nullptr) != horaSuccess)
        return err("a call without a stream", comm);
      if (horaStreamSynchronize(s) != horaSuccess) return err("horaStreamSynchronize", comm);
      if (horaStreamQuery(s) != horaSuccess) return "horaStreamQuery after a synchronize is not success";
      int64_t scale = 1;
      for (int k = 1; k <= K; ++k) {
        for (size_t i = 0; i < N; ++i) {
          const int64_t base = static_cast<int64_t>(nranks) * (nranks + 1) / 2 + static_cast<int64_t>(nranks) * static_cast<int64_t>(i % 5);
          if (bufs[k][i] != base * scale) return "step " + std::to_string(k) + " element " + std::to_string(i) + " wrong";
        }
        scale *= nranks;
      }
      if (last != bufs[K]) return "the call without a stream ran before the stream's work";
      for (int q = 0; q < nranks; ++q)
        for (size_t i = 0; i < N; ++i)
          if (a2a[q * N + i] != q * 1000003 + static_cast<int64_t>(rank * N + i)) return "alltoall on the stream wrong";
      return horaStreamDestroy(s) == horaSuccess ? "" : "horaStreamDestroy failed";
    });
    INFO("nranks " << n << "\n" << joinAll(failures));
    CHECK(failures.empty());
  }
}

TEST_CASE("stream: the caller goes on while a collective waits for its peer", "[streams]") {
  std::atomic<bool> go{false};
  auto failures = runThreads(2, [&](horaComm_t comm, int rank, int) -> std::string {
    const size_t N = 1 << 22;
    std::vector<float> in(N, static_cast<float>(rank + 1)), out(N, 0.0f);
    if (rank == 1) {
      // Rank 1 joins only when rank 0 has seen its call pending: no timing involved.
      while (!go.load()) std::this_thread::yield();
      if (horaAllReduce(in.data(), out.data(), N, horaFloat, horaSum, comm, nullptr) != horaSuccess)
        return err("rank 1", comm);
    } else {
      horaStream_t s = nullptr;
      horaStreamCreate(&s);
      if (horaAllReduce(in.data(), out.data(), N, horaFloat, horaSum, comm, s) != horaSuccess)
        return err("enqueueing", comm);
      // The call returned, and cannot have finished: rank 1 has not started.
      if (horaStreamQuery(s) != horaInProgress) return "horaStreamQuery did not say in progress";
      double work = 0;  // the caller's own work meanwhile
      for (size_t i = 0; i < N; i += 7) work += in[i];
      go.store(true);
      if (horaStreamSynchronize(s) != horaSuccess) return err("horaStreamSynchronize", comm);
      if (work <= 0) return "no work";
      horaStreamDestroy(s);
    }
    for (size_t i = 0; i < N; i += 4099)
      if (out[i] != 3.0f) return "wrong result at " + std::to_string(i);
    return "";
  });
  INFO(joinAll(failures));
  CHECK(failures.empty());
}

TEST_CASE("stream: destroying a stream or a communicator while work is queued", "[streams]") {
  auto failures = runThreads(4, [](horaComm_t comm, int rank, int nranks) -> std::string {
    const size_t N = 1 << 20;
    std::vector<std::vector<float>> bufs(3, std::vector<float>(N, static_cast<float>(rank)));
    horaStream_t s = nullptr;
    horaStreamCreate(&s);
    for (auto& b : bufs)
      if (horaAllReduce(b.data(), b.data(), N, horaFloat, horaSum, comm, s) != horaSuccess) return err("enqueue", comm);
    // Destroy waits for the queued work, which completes.
    if (horaStreamDestroy(s) != horaSuccess) return std::string("horaStreamDestroy: ") + horaGetLastError(nullptr);
    const float want = static_cast<float>(nranks * (nranks - 1) / 2);
    for (auto& b : bufs)
      if (b[0] != want || b[N - 1] != want) return "wrong result after destroying the stream";
    if (horaStreamSynchronize(s) != horaInvalidArgument) return "a destroyed stream is still accepted";
    // Work queued, then the communicator destroyed: destroy waits for it to finish.
    horaStreamCreate(&s);
    horaComm_t sub = nullptr;
    if (horaCommSplit(comm, 0, rank, &sub, nullptr) != horaSuccess) return err("split", comm);
    std::vector<int32_t> x(N, rank + 1);
    if (horaAllReduce(x.data(), x.data(), N, horaInt32, horaSum, sub, s) != horaSuccess) return err("enqueue", sub);
    if (horaCommDestroy(sub) != horaSuccess) return std::string("horaCommDestroy: ") + horaGetLastError(nullptr);
    if (x[N / 2] != nranks * (nranks + 1) / 2) return "the communicator was destroyed before its queued work ran";
    return horaStreamDestroy(s) == horaSuccess ? "" : "horaStreamDestroy failed";
  });
  INFO(joinAll(failures));
  CHECK(failures.empty());
}

TEST_CASE("stream: destroy while the queued work waits for a peer returns after that work", "[streams]") {
  std::atomic<bool> destroying{false}, destroyed{false}, go{false};
  auto failures = runThreads(2, [&](horaComm_t comm, int rank, int) -> std::string {
    const size_t N = 1 << 20;
    std::vector<double> x(N, rank + 1.0);
    if (rank == 1) {
      while (!go.load()) std::this_thread::yield();  // joins only once rank 0 is inside destroy
      if (horaAllReduce(x.data(), x.data(), N, horaDouble, horaSum, comm, nullptr) != horaSuccess)
        return err("rank 1", comm);
      return x[N - 1] == 3.0 ? "" : "rank 1: wrong result";
    }
    struct Release {  // rank 1 waits for go: every way out of here gives it
      std::atomic<bool>& go;
      ~Release() { go = true; }
    } release{go};
    horaStream_t s = nullptr;
    if (horaStreamCreate(&s) != horaSuccess) return err("horaStreamCreate", nullptr);
    if (horaAllReduce(x.data(), x.data(), N, horaDouble, horaSum, comm, s) != horaSuccess) return err("enqueue", comm);
    if (horaStreamQuery(s) != horaInProgress) return "the queued work was not in progress";
    horaResult_t destroyResult = horaInternalError;
    std::thread t([&] {
      destroying = true;
      destroyResult = horaStreamDestroy(s);
      destroyed = true;
    });
    while (!destroying.load()) std::this_thread::yield();
    usleep(20000);  // lets destroy start waiting; the check below holds however long this is
    // The allreduce cannot finish without rank 1, so destroy cannot have returned.
    const bool early = destroyed.load();
    go = true;
    t.join();
    if (early) return "horaStreamDestroy returned while its work still waited for a peer";
    if (destroyResult != horaSuccess) return std::string("horaStreamDestroy: ") + horaGetLastError(nullptr);
    if (x[0] != 3.0 || x[N - 1] != 3.0) return "wrong result after destroy";
    return "";
  });
  INFO(joinAll(failures));
  CHECK(failures.empty());
}

TEST_CASE("stream: two streams on two communicators from one thread overlap", "[streams]") {
  auto failures = runThreads(3, [](horaComm_t comm, int rank, int nranks) -> std::string {
    horaComm_t other = nullptr;
    if (horaCommSplit(comm, 0, rank, &other, nullptr) != horaSuccess) return err("split", comm);
    horaStream_t s1 = nullptr, s2 = nullptr;
    horaStreamCreate(&s1);
    horaStreamCreate(&s2);
    const size_t N = 300000;
    std::vector<double> a(N, rank + 1.0), b(N, 2.0 * (rank + 1)), ra(N), rb(N);
    // Overlap, shown without a clock: rank 0 queues the allreduce on s1 first, which cannot
    // finish before the other ranks join it, and they join it only once the allreduce on s2
    // has finished everywhere. So rank 0's s2 work must run while its s1 work waits: streams
    // run one after the other would never finish (the test would fail at its timeout).
    for (int i = 0; i < 3; ++i) {
      if (rank == 0) {
        if (horaAllReduce(a.data(), ra.data(), N, horaDouble, horaSum, comm, s1) != horaSuccess) return err("a", comm);
        if (horaAllReduce(b.data(), rb.data(), N, horaDouble, horaMax, other, s2) != horaSuccess) return err("b", other);
      } else {
        if (horaAllReduce(b.data(), rb.data(), N, horaDouble, horaMax, other, s2) != horaSuccess) return err("b", other);
        if (horaStreamSynchronize(s2) != horaSuccess) return std::string("synchronize s2: ") + horaGetLastError(nullptr);
        if (horaAllReduce(a.data(), ra.data(), N, horaDouble, horaSum, comm, s1) != horaSuccess) return err("a", comm);
      }
    }
    if (horaStreamSynchronize(s1) != horaSuccess || horaStreamSynchronize(s2) != horaSuccess)
      return std::string("synchronize: ") + horaGetLastError(nullptr);
    if (ra[N - 1] != nranks * (nranks + 1) / 2.0 || rb[7] != 2.0 * nranks) return "wrong results";
    horaStreamDestroy(s1);
    horaStreamDestroy(s2);
    horaCommDestroy(other);
    return "";
  });
  INFO(joinAll(failures));
  CHECK(failures.empty());
}

TEST_CASE("stream: bad arguments", "[streams]") {
  auto failures = runThreads(2, [](horaComm_t comm, int, int) -> std::string {
    std::string f;
    float x[4] = {0};
    if (horaStreamCreate(nullptr) != horaInvalidArgument) f += "create(NULL)\n";
    if (horaStreamSynchronize(nullptr) != horaInvalidArgument) f += "synchronize(NULL)\n";
    if (horaStreamQuery(nullptr) != horaInvalidArgument) f += "query(NULL)\n";
    auto bogus = reinterpret_cast<horaStream_t>(x);
    if (horaStreamSynchronize(bogus) != horaInvalidArgument) f += "synchronize(bogus)\n";
    if (horaStreamDestroy(bogus) != horaInvalidArgument) f += "destroy(bogus)\n";
    if (horaAllReduce(x, x, 4, horaFloat, horaSum, comm, bogus) != horaInvalidArgument) f += "allreduce on a bogus stream\n";
    if (!*horaGetLastError(comm)) f += "no last-error text\n";
    horaStream_t s1 = nullptr, s2 = nullptr;
    horaStreamCreate(&s1);
    horaStreamCreate(&s2);
    horaGroupStart();
    horaAllReduce(x, x, 4, horaFloat, horaSum, comm, s1);
    if (horaAllReduce(x, x, 4, horaFloat, horaSum, comm, s2) != horaInvalidUsage) f += "a group over two streams\n";
    if (horaAllReduce(x, x, 4, horaFloat, horaSum, comm, nullptr) != horaInvalidUsage) f += "a group over a stream and NULL\n";
    horaGroupEnd();
    // A bad argument on a stream is reported at once and queues nothing.
    if (horaAllReduce(x, x, 4, static_cast<horaDataType_t>(77), horaSum, comm, s1) != horaInvalidArgument) f += "bad dtype on a stream\n";
    if (horaStreamSynchronize(s1) != horaSuccess) f += std::string("the group on s1 failed: ") + horaGetLastError(comm) + "\n";
    horaStreamDestroy(s1);
    horaStreamDestroy(s2);
    return f;
  });
  INFO(joinAll(failures));
  CHECK(failures.empty());
}

TEST_CASE("stream: a failed peer's error reaches query, synchronize, destroy and the async error", "[streams][faults]") {
  ProcessOptions o;
  o.timeoutMs = 20000;
  // Rank 3 leaves. Rank 0 learns of it by polling horaStreamQuery, rank 1 by
  // horaStreamSynchronize, rank 2 by horaStreamDestroy alone; each error is reported once and
  // stays in the communicator's async error.
  auto results = runProcesses(4, [](horaComm_t comm, int rank, int) -> std::string {
    std::vector<float> x(1 << 16, 1.0f);
    if (horaAllReduce(x.data(), x.data(), x.size(), horaFloat, horaSum, comm, nullptr) != horaSuccess)
      return err("first allreduce", comm);
    if (rank == 3) {
      horaCommAbort(comm);  // leaves; stays alive so that only the closed links can tell
      sleep(1);
      _exit(0);
    }
    horaStream_t s = nullptr;
    horaStreamCreate(&s);
    if (horaAllReduce(x.data(), x.data(), x.size(), horaFloat, horaSum, comm, s) != horaSuccess)
      return err("enqueueing", comm);
    horaResult_t r;
    const char* how = rank == 0 ? "horaStreamQuery" : rank == 1 ? "horaStreamSynchronize" : "horaStreamDestroy";
    if (rank == 0) {
      while ((r = horaStreamQuery(s)) == horaInProgress) usleep(1000);
    } else if (rank == 1) {
      r = horaStreamSynchronize(s);
    } else {
      r = horaStreamDestroy(s);
    }
    if (r == horaSuccess || r == horaInProgress) return std::string(how) + " did not report the failure of a peer";
    const std::string text = horaGetLastError(comm);
    if (text.find("on a stream") == std::string::npos) return "the last error does not say it ran on a stream: " + text;
    horaResult_t async = horaSuccess;
    horaCommGetAsyncError(comm, &async);
    if (async == horaSuccess) return std::string("horaCommGetAsyncError says success after ") + how;
    if (rank == 2) return horaStreamQuery(s) == horaInvalidArgument ? "" : "the stream outlived its destroy";
    // Later work on the failed communicator is refused when it is enqueued.
    if (horaAllReduce(x.data(), x.data(), x.size(), horaFloat, horaSum, comm, s) == horaSuccess)
      return "work after the failure was accepted";
    if (horaStreamSynchronize(s) != horaSuccess) return "the error was reported twice";
    if (horaStreamDestroy(s) != horaSuccess) return "destroying the stream failed";
    return "";
  }, o);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}
