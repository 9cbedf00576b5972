// Tests of the executor (src/core) and of the collective programs beyond the sweeps of
// test_algorithms.cc, with the same machinery (unit_coll.h: all ranks in ONE
// core::Executor::run over the in-memory transport of unit_memtransport.h): determinism of
// float sums, send/recv, several calls per rank in one run, local-op dependencies, bad
// programs, abort, and mismatched calls across ranks, which must fail instead of hanging. A few
// of the same programs also run over real tcp::Connection objects on socket pairs, to show that
// what the in-memory transport finds happens on the wire too.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "coll/collective.h"
#include "core/executor.h"
#include "core/program.h"
#include "kernels/cpu/reduce.h"
#include "transports/tcp/connection.h"
#include "stub_stage.h"
#include "unit_coll.h"
#include "unit_net.h"

using namespace hora;
using namespace unit;
using coll::Kind;
using std::chrono::milliseconds;

// =================================================================================================
// The same programs over real TCP connections (socket pairs), whose sends complete only as far
// as the socket buffers absorb them (about 200 KiB here, less than one 512 KiB chunk)
// =================================================================================================

namespace {

struct TcpWorld {
  int n;
  std::vector<std::unique_ptr<tcp::Connection>> conns;  // [rank * n + peer]
  std::vector<std::vector<transport::Connection*>> table;
  explicit TcpWorld(int nranks) : n(nranks), conns(static_cast<size_t>(n * n)) {
    table.assign(static_cast<size_t>(n), std::vector<transport::Connection*>(static_cast<size_t>(n), nullptr));
    for (int r = 0; r < n; ++r)
      for (int p = r + 1; p < n; ++p) {
        auto sp = unit::socketPair();
        std::vector<Fd> a, b;
        a.push_back(std::move(sp.first));
        b.push_back(std::move(sp.second));
        auto& cr = conns[static_cast<size_t>(r * n + p)];
        auto& cp = conns[static_cast<size_t>(p * n + r)];
        cr = std::make_unique<tcp::Connection>(std::move(a), "rank " + std::to_string(p));
        cp = std::make_unique<tcp::Connection>(std::move(b), "rank " + std::to_string(r));
        table[static_cast<size_t>(r)][static_cast<size_t>(p)] = cr.get();
        table[static_cast<size_t>(p)][static_cast<size_t>(r)] = cp.get();
      }
  }
};

// Runs one int32 Sum collective on n ranks over socket pairs; "" or what went wrong.
std::string runOverTcp(Kind kind, int n, size_t count, milliseconds timeout = milliseconds(20000)) {
  TcpWorld w(n);
  const size_t sendLen = kind == Kind::ReduceScatter ? count * n : count;
  const size_t recvLen = kind == Kind::AllGather ? count * n : count;
  std::vector<std::vector<int32_t>> in(n), out(n);
  std::vector<core::Program> progs(n);
  std::vector<core::Job> jobs(n);
  auto& pool = scratchPool();
  for (int r = 0; r < n; ++r) {
    in[r].resize(sendLen);
    for (size_t i = 0; i < sendLen; ++i) in[r][i] = static_cast<int32_t>(mix(r * 1000003 + i));
    out[r].assign(recvLen, 0);
    coll::Args a;
    a.kind = kind;
    a.sendbuf = in[r].data();
    a.recvbuf = out[r].data();
    a.count = count;
    a.dtype = DataType::Int32;
    a.root = 1;
    pool[static_cast<size_t>(r)].reset();
    const coll::JobShape topo{r, n};
    coll::build(a, topo, planFor(a, topo, kDefault), pool[static_cast<size_t>(r)], progs[r]);
    jobs[r].program = &progs[r];
    jobs[r].conns = w.table[static_cast<size_t>(r)].data();
    jobs[r].nranks = n;
  }
  core::Executor ex;
  try {
    // A no-progress timeout: a correct run moves bytes continuously; only a deadlock sits still.
    ex.run(jobs, timeout);
  } catch (const Error& e) {
    return e.what();
  }
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < recvLen; ++i) {
      uint32_t expect = 0;
      switch (kind) {
        case Kind::AllReduce: case Kind::Reduce:
          for (int q = 0; q < n; ++q) expect += static_cast<uint32_t>(in[q][i]);
          if (kind == Kind::Reduce && r != 1) expect = 0;
          break;
        case Kind::ReduceScatter:
          for (int q = 0; q < n; ++q) expect += static_cast<uint32_t>(in[q][r * count + i]);
          break;
        case Kind::AllGather: expect = static_cast<uint32_t>(in[i / count][i % count]); break;
        case Kind::Broadcast: expect = static_cast<uint32_t>(in[1][i]); break;
        default: break;
      }
      if (static_cast<uint32_t>(out[r][i]) != expect)
        return "rank " + std::to_string(r) + ": wrong value at element " + std::to_string(i);
    }
  return "";
}

}  // namespace

TEST_CASE("tcp: collectives over socket pairs with 512 KiB chunks", "[coll][tcp]") {
  const int n = 4;
  const size_t chunkElems = kDefault.chunkBytes / 4;
  CHECK(runOverTcp(Kind::AllReduce, n, n * chunkElems * 2 + 3) == "");
  CHECK(runOverTcp(Kind::AllGather, n, chunkElems + 5) == "");
  CHECK(runOverTcp(Kind::Broadcast, n, chunkElems * 3) == "");
  CHECK(runOverTcp(Kind::Reduce, n, chunkElems * 3) == "");
}

// Regression: the ReduceScatter wait cycle of test_algorithms.cc ("collectives: ReduceScatter
// with rendezvous sends"; ring.cc: a slot's receive waited for the same slot's send) over the
// real TCP transport: with a chunk larger than what the socket buffers absorb, no send of
// the forwarding step can complete, no receive is posted, and the call hangs until the timeout
// ("timed out after 5000 ms without progress waiting for sending a message of 524288 bytes
// ..."). With n = 4 and one 512 KiB chunk per block.
TEST_CASE("tcp: ReduceScatter over socket pairs with 512 KiB chunks", "[coll][tcp]") {
  CHECK(runOverTcp(Kind::ReduceScatter, 4, kDefault.chunkBytes / 4, milliseconds(5000)) == "");
}

// =================================================================================================
// Determinism
// =================================================================================================

TEST_CASE("allreduce: float sums with non-integer inputs are bit-identical on every rank", "[coll]") {
  for (int n : {2, 3, 5, 8, 16})
    for (bool inPlace : {false, true})
      for (const coll::Plan& p : {kSmall, kOdd, kDefault}) {
        const size_t N = 3000;
        std::vector<std::vector<float>> send(n), recv(n);
        std::vector<std::vector<coll::Args>> calls(n);
        std::vector<double> exact(N, 0.0);
        for (int r = 0; r < n; ++r) {
          send[r].resize(N);
          for (size_t i = 0; i < N; ++i) {
            uint64_t h = mix(static_cast<uint64_t>(r) * 1000003 + i);
            send[r][i] = static_cast<float>(static_cast<double>(h % 2000001) / 1000.0 - 1000.0) * 1.0001f;
            exact[i] += send[r][i];
          }
          recv[r].assign(N, -1.0f);
          coll::Args a;
          a.kind = Kind::AllReduce;
          a.sendbuf = send[r].data();
          a.recvbuf = inPlace ? send[r].data() : recv[r].data();
          a.count = N;
          a.dtype = DataType::Float32;
          a.op = RedOp::Sum;
          calls[r].push_back(a);
        }
        unit::MemWorld w(n, 11, 0.5);
        runAll(w, calls, p);
        INFO("n=" << n << (inPlace ? " in-place " : " out-of-place ") << planText(p));
        const float* r0 = static_cast<const float*>(calls[0][0].recvbuf);
        for (int r = 1; r < n; ++r)
          CHECK(memcmp(r0, calls[r][0].recvbuf, N * sizeof(float)) == 0);
        size_t far = 0;
        for (size_t i = 0; i < N; ++i)
          if (std::fabs(r0[i] - exact[i]) > 1e-2 * n) ++far;
        CHECK(far == 0);
      }
}

// =================================================================================================
// Send / Recv
// =================================================================================================

TEST_CASE("send/recv: a ring and a pairwise exchange in one run", "[p2p]") {
  for (int n : {2, 3, 4, 5, 8, 16})
    for (const coll::Plan& p : {kSmall, kDefault})
      for (size_t count : {size_t(0), size_t(1), size_t(17), size_t(1000)}) {
        const size_t ringN = count, pairN = count + 5;  // different tags for the two calls
        std::vector<std::vector<int32_t>> ringOut(n), ringIn(n), pairOut(n), pairIn(n);
        std::vector<std::vector<coll::Args>> calls(n);
        for (int r = 0; r < n; ++r) {
          ringOut[r].resize(ringN);
          pairOut[r].resize(pairN);
          for (size_t i = 0; i < ringN; ++i) ringOut[r][i] = static_cast<int32_t>(mix(r * 7919 + i));
          for (size_t i = 0; i < pairN; ++i) pairOut[r][i] = static_cast<int32_t>(mix(r * 104729 + i + 1));
          ringIn[r].assign(ringN + 4, 0x5A5A5A5A);
          pairIn[r].assign(pairN + 4, 0x5A5A5A5A);
        }
        auto args = [](Kind k, const void* s, void* rb, size_t cnt, int peer) {
          coll::Args a;
          a.kind = k;
          a.sendbuf = s;
          a.recvbuf = rb;
          a.count = cnt;
          a.dtype = DataType::Int32;
          a.peer = peer;
          return a;
        };
        const int pairs = n / 2 * 2;  // with odd n the last rank sits the exchange out
        for (int r = 0; r < n; ++r) {
          const int next = (r + 1) % n, prev = (r + n - 1) % n, partner = r ^ 1;
          // Every rank lists ring before pairwise, sends before receives: the order of
          // messages on a link is then the same on both of its ends.
          calls[r].push_back(args(Kind::Send, ringOut[r].data(), nullptr, ringN, next));
          if (r < pairs) calls[r].push_back(args(Kind::Send, pairOut[r].data(), nullptr, pairN, partner));
          calls[r].push_back(args(Kind::Recv, nullptr, ringIn[r].data(), ringN, prev));
          if (r < pairs) calls[r].push_back(args(Kind::Recv, nullptr, pairIn[r].data(), pairN, partner));
        }
        unit::MemWorld w(n, 5, 0.5);
        runAll(w, calls, p);
        INFO("n=" << n << " count=" << count << " " << planText(p));
        for (int r = 0; r < n; ++r) {
          const int prev = (r + n - 1) % n;
          CHECK(std::equal(ringOut[prev].begin(), ringOut[prev].end(), ringIn[r].begin()));
          CHECK(std::all_of(ringIn[r].begin() + static_cast<long>(ringN), ringIn[r].end(),
                            [](int32_t v) { return v == 0x5A5A5A5A; }));
          if (r < pairs) {
            CHECK(std::equal(pairOut[r ^ 1].begin(), pairOut[r ^ 1].end(), pairIn[r].begin()));
            CHECK(std::all_of(pairIn[r].begin() + static_cast<long>(pairN), pairIn[r].end(),
                              [](int32_t v) { return v == 0x5A5A5A5A; }));
          }
        }
      }
}

TEST_CASE("send/recv: chunking of a large message", "[p2p]") {
  // With 64-byte chunks a 1000-element message is 63 messages on the link, in order.
  const int n = 2;
  std::vector<int32_t> out(1000), in(1000, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(i * 3 + 1);
  std::vector<std::vector<coll::Args>> calls(n);
  coll::Args s;
  s.kind = Kind::Send;
  s.sendbuf = out.data();
  s.count = out.size();
  s.dtype = DataType::Int32;
  s.peer = 1;
  coll::Args r = s;
  r.kind = Kind::Recv;
  r.sendbuf = nullptr;
  r.recvbuf = in.data();
  r.peer = 0;
  calls[0].push_back(s);
  calls[1].push_back(r);
  unit::MemWorld w(n, 3, 0.5);
  runAll(w, calls, kSmall);
  CHECK(in == out);
  CHECK(w.channel(0, 1)->matched == 63);
  CHECK(w.channel(1, 0)->matched == 0);
  CHECK(w.bytesMoved == 4000);
}

// =================================================================================================
// Groups: several calls per rank in one run
// =================================================================================================

TEST_CASE("executor: several collectives per rank in one run", "[exec]") {
  // Five calls per rank in one run (a group): their messages share the links, in call order.
  for (bool withReduceScatter : {false, true})
    for (int n : {2, 3, 5, 8}) {
      const size_t N = 257;
      std::vector<std::vector<int32_t>> arIn(n), arOut(n), agIn(n), agOut(n), bc(n), rsIn(n), rsOut(n), rdOut(n);
      std::vector<std::vector<coll::Args>> calls(n);
      const int root = n - 1;
      for (int r = 0; r < n; ++r) {
        arIn[r].resize(N);
        agIn[r].resize(N);
        rsIn[r].resize(N * n);
        for (size_t i = 0; i < N; ++i) arIn[r][i] = static_cast<int32_t>(mix(r * 31 + i));
        for (size_t i = 0; i < N; ++i) agIn[r][i] = static_cast<int32_t>(mix(r * 37 + i + 99));
        for (size_t i = 0; i < N * n; ++i) rsIn[r][i] = static_cast<int32_t>(mix(r * 41 + i + 7));
        arOut[r].assign(N, 0);
        agOut[r].assign(N * n, 0);
        rsOut[r].assign(N, 0);
        rdOut[r].assign(N, 0);
        bc[r].assign(N, -1);
        if (r == root)
          for (size_t i = 0; i < N; ++i) bc[r][i] = static_cast<int32_t>(i * i);
        coll::Args a;
        a.dtype = DataType::Int32;
        a.count = N;
        a.kind = Kind::AllReduce;
        a.sendbuf = arIn[r].data();
        a.recvbuf = arOut[r].data();
        calls[r].push_back(a);
        a.kind = Kind::Broadcast;
        a.sendbuf = a.recvbuf = bc[r].data();
        a.root = root;
        calls[r].push_back(a);
        a.kind = Kind::AllGather;
        a.sendbuf = agIn[r].data();
        a.recvbuf = agOut[r].data();
        calls[r].push_back(a);
        if (withReduceScatter) {
          a.kind = Kind::ReduceScatter;
          a.sendbuf = rsIn[r].data();
          a.recvbuf = rsOut[r].data();
          calls[r].push_back(a);
        }
        a.kind = Kind::Reduce;
        a.root = 0;
        a.sendbuf = arIn[r].data();
        a.recvbuf = rdOut[r].data();
        calls[r].push_back(a);
      }
      unit::MemWorld w(n, 17, 0.5);
      w.eager = withReduceScatter;  // one pass with each kind of send (unit_coll.h)
      for (const coll::Plan& p : {kSmall, kDefault}) {
        runAll(w, calls, p);
        INFO("n=" << n << " " << planText(p) << (withReduceScatter ? " with ReduceScatter" : ""));
        for (int r = 0; r < n; ++r) {
          size_t bad = 0;
          for (size_t i = 0; i < N; ++i) {
            uint32_t s = 0, t = 0;
            for (int q = 0; q < n; ++q) s += static_cast<uint32_t>(arIn[q][i]);
            for (int q = 0; q < n; ++q) t += static_cast<uint32_t>(rsIn[q][r * N + i]);
            if (arOut[r][i] != static_cast<int32_t>(s) || bc[r][i] != static_cast<int32_t>(i * i)) ++bad;
            if (withReduceScatter && rsOut[r][i] != static_cast<int32_t>(t)) ++bad;
            if (rdOut[r][i] != (r == 0 ? static_cast<int32_t>(s) : 0)) ++bad;
            for (int q = 0; q < n; ++q)
              if (agOut[r][q * N + i] != agIn[q][i]) ++bad;
          }
          CHECK(bad == 0);
        }
      }
    }
}

TEST_CASE("executor: local ops run after their dependencies", "[exec]") {
  // A hand-built chain a -> b -> c -> d of copies, added in reverse order, plus a sum of two
  // of them: only dependencies order them.
  std::vector<int32_t> a(100), b(100, 0), c(100, 0), d(100, 0), e(100, 0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(i + 1);
  kernels::ReduceSpec copy;
  copy.dtype = DataType::Int32;
  copy.op = RedOp::Sum;
  core::Program prog;
  core::ProgramBuilder pb(prog);
  // Indices: 0: e = c + d (after 1 and 2); 1: d = c (after 2); 2: c = b (after 3); 3: b = a.
  pb.local(core::reduceAction(e.data(), c.data(), d.data(), 100, copy), core::Deps{1, 2});
  pb.local(core::reduceAction(d.data(), c.data(), nullptr, 100, copy), core::Deps{2});
  pb.local(core::reduceAction(c.data(), b.data(), nullptr, 100, copy), core::Deps{3});
  pb.local(core::reduceAction(b.data(), a.data(), nullptr, 100, copy));
  std::vector<transport::Connection*> none(1, nullptr);
  core::Job j;
  j.program = &prog;
  j.conns = none.data();
  j.nranks = 1;
  core::Executor ex;
  ex.run({j}, kRunTimeout);
  CHECK(d == a);
  for (size_t i = 0; i < a.size(); ++i) CHECK(e[i] == 2 * a[i]);
  // An empty program finishes at once.
  core::Program empty;
  j.program = &empty;
  ex.run({j}, kRunTimeout);
}

TEST_CASE("executor: a program that addresses a rank without a connection", "[exec]") {
  unit::MemWorld w(2);
  int32_t x = 5;
  core::Program prog;
  core::ProgramBuilder pb(prog);
  pb.send(0, &x, 4);  // rank 0 sending to itself: no connection
  core::Job j;
  j.program = &prog;
  j.conns = w.table[0].data();
  j.nranks = 2;
  core::Executor ex;
  try {
    ex.run({j}, kRunTimeout);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::Internal);
  }
  core::Program prog2;
  core::ProgramBuilder pb2(prog2);
  pb2.recv(5, &x, 4);  // out of range
  j.program = &prog2;
  try {
    ex.run({j}, kRunTimeout);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::Internal);
  }
}

TEST_CASE("executor: an aborted communicator stops a wait", "[exec]") {
  unit::MemWorld w(2);
  int32_t x = 0;
  core::Program prog;
  core::ProgramBuilder pb(prog);
  pb.recv(1, &x, 4);  // nobody sends
  std::atomic<bool> abort{true};
  core::Job j;
  j.program = &prog;
  j.conns = w.table[0].data();
  j.nranks = 2;
  j.abortFlag = &abort;
  core::Executor ex;
  try {
    ex.run({j}, kRunTimeout);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::InvalidUsage);
    CHECK(std::string(e.what()).find("abort") != std::string::npos);
  }
}

// =================================================================================================
// Mismatched calls are caught, never misread, and never hang
// =================================================================================================

TEST_CASE("mismatched calls across ranks fail instead of hanging", "[mismatch]") {
  const int n = 2;
  std::vector<int32_t> s0(200, 1), r0(200, 0), s1(200, 2), r1(200, 0);
  auto make = [](Kind k, const void* s, void* r, size_t count) {
    coll::Args a;
    a.kind = k;
    a.sendbuf = s;
    a.recvbuf = r;
    a.count = count;
    a.dtype = DataType::Int32;
    return a;
  };
  std::vector<std::vector<coll::Args>> calls(n);
  std::string expectIn;
  Errc expectCode = Errc::Remote;

  SECTION("AllReduce counts 100 and 101") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 100));
    calls[1].push_back(make(Kind::AllReduce, s1.data(), r1.data(), 101));
  }
  SECTION("AllReduce and AllGather") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 50));
    calls[1].push_back(make(Kind::AllGather, s1.data(), r1.data(), 50));
  }
  SECTION("another datatype") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 50));
    coll::Args a = make(Kind::AllReduce, s1.data(), r1.data(), 50);
    a.dtype = DataType::Float32;
    calls[1].push_back(a);
  }
  SECTION("another op") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 50));
    coll::Args a = make(Kind::AllReduce, s1.data(), r1.data(), 50);
    a.op = RedOp::Max;
    calls[1].push_back(a);
  }
  SECTION("another root") {
    coll::Args a = make(Kind::Broadcast, s0.data(), r0.data(), 50);
    a.root = 0;
    calls[0].push_back(a);
    a = make(Kind::Broadcast, s1.data(), r1.data(), 50);
    a.root = 1;
    calls[1].push_back(a);
    // Both think they are the root (or both think the other is): the sends meet no receive,
    // or the receives no send.
    expectCode = Errc::Timeout;
  }
  SECTION("one rank does not call at all") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 100));
    expectCode = Errc::Timeout;
  }
  unit::MemWorld w(n, 1, 0.0);
  auto t0 = std::chrono::steady_clock::now();
  try {
    runAll(w, calls, kSmall, milliseconds(300));
    FAIL("the run succeeded");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == expectCode);
    if (expectCode == Errc::Remote) CHECK(std::string(e.what()).find("while waiting for") != std::string::npos);
    if (expectCode == Errc::Timeout) CHECK(std::string(e.what()).find("timed out") != std::string::npos);
  }
  // Only a guard against hangs (the timeout above is 300 ms).
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
}

// =================================================================================================
// Fetch: a stage member's published buffer, read where it lies
// =================================================================================================

namespace {
// A stage of two members whose reads and writes of a member's memory are plain copies in this
// process.
struct ReadingStage : test::StubStage {
  Access access = Access::Kernel;
  mutable int readsDone = 0, writesDone = 0;
  ReadingStage() : StubStage(2, 4096) { name = "rank 1 (test, pid 1)"; }
  Access memberAccess() const override { return access; }
  void readMember(int, uint64_t from, void* dst, size_t bytes) const override {
    memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(from)), bytes);
    ++readsDone;
  }
  void writeMember(int, uint64_t to, const void* src, size_t bytes) const override {
    memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(to)), src, bytes);
    ++writesDone;
  }
};

// Runs one Fetch (or Put) of `want` bytes at `offset` of chunk 7 of member 1, which published
// `pub`.
std::string fetchOnce(ReadingStage& st, const transport::SharedStage::Published& pub, void* dst, size_t want,
                      size_t offset = 0, bool put = false) {
  core::Program prog;
  core::ProgramBuilder pb(prog);
  const core::ProgramBuilder::Remote member{1, &pub, 7, offset, want};
  if (put) pb.put(member, dst, want - offset);
  else pb.fetch(member, dst, want - offset);
  std::vector<transport::Connection*> none(2, nullptr);
  core::Job j;
  j.program = &prog;
  j.conns = none.data();
  j.nranks = 2;
  j.stage = &st;
  core::Executor ex;
  try {
    ex.run({j}, kRunTimeout);
    return "";
  } catch (const Error& e) {
    return std::string(e.code() == Errc::Remote ? "remote: " : e.code() == Errc::Internal ? "internal: " : "other: ") +
           e.what();
  }
}
}  // namespace

TEST_CASE("executor: a Fetch reads what the member published, and refuses a word that does not match", "[exec]") {
  ReadingStage st;
  std::vector<uint8_t> theirs(1000), mine(1000, 0);
  for (size_t i = 0; i < theirs.size(); ++i) theirs[i] = static_cast<uint8_t>(i * 7 + 1);
  const uint64_t at = reinterpret_cast<uintptr_t>(theirs.data());
  SECTION("the published buffer is read into the result") {
    CHECK(fetchOnce(st, {7, at, 1000, 0}, mine.data(), 1000) == "");
    CHECK(mine == theirs);
    CHECK(st.readsDone == 1);
  }
  SECTION("less the tail the member puts itself") {
    CHECK(fetchOnce(st, {7, at, 1000, 400}, mine.data(), 1000) == "");
    CHECK(std::equal(mine.begin(), mine.begin() + 600, theirs.begin()));
    CHECK(std::all_of(mine.begin() + 600, mine.end(), [](uint8_t v) { return v == 0; }));
  }
  SECTION("a Put writes its part at its offset") {
    std::vector<uint8_t> part(300, 0xAB);
    CHECK(fetchOnce(st, {7, at, 1000, 0}, part.data(), 1000, 700, true) == "");
    CHECK(st.writesDone == 1);
    CHECK(std::all_of(theirs.begin() + 700, theirs.end(), [](uint8_t v) { return v == 0xAB; }));
    CHECK(theirs[699] == static_cast<uint8_t>(699 * 7 + 1));
  }
  SECTION("a Put writes at the member's result where it published one apart from its input") {
    std::vector<uint8_t> result(1000, 0), part(400, 0xCD);
    const uint64_t to = reinterpret_cast<uintptr_t>(result.data());
    CHECK(fetchOnce(st, {7, at, 1000, 0, to}, part.data(), 1000, 600, true) == "");
    CHECK(st.writesDone == 1);
    CHECK(std::all_of(result.begin(), result.begin() + 600, [](uint8_t v) { return v == 0; }));
    CHECK(std::all_of(result.begin() + 600, result.end(), [](uint8_t v) { return v == 0xCD; }));
    bool untouched = true;  // the input
    for (size_t i = 0; i < theirs.size(); ++i) untouched = untouched && theirs[i] == static_cast<uint8_t>(i * 7 + 1);
    CHECK(untouched);
    // and a Fetch still reads the input
    CHECK(fetchOnce(st, {7, at, 1000, 0, to}, mine.data(), 1000) == "");
    CHECK(mine == theirs);
  }
  SECTION("another length: rejected, nothing read") {
    const std::string e = fetchOnce(st, {7, at, 4000, 0}, mine.data(), 1000);
    CHECK(e.rfind("remote: ", 0) == 0);
    CHECK(e.find("rank 1 (test, pid 1) published 4000 bytes of chunk 7 for this rank to read") != std::string::npos);
    CHECK(e.find("where it expects 1000 bytes of chunk 7") != std::string::npos);
    CHECK(st.readsDone == 0);
  }
  SECTION("another chunk (a stale or rewritten word): rejected") {
    const std::string e = fetchOnce(st, {6, at, 1000, 0}, mine.data(), 1000);
    CHECK(e.find("published 1000 bytes of chunk 6") != std::string::npos);
    CHECK(st.readsDone == 0);
  }
  SECTION("a tail larger than the buffer: rejected") {
    const std::string e = fetchOnce(st, {7, at, 1000, 1001}, mine.data(), 1000);
    CHECK(e.rfind("remote: ", 0) == 0);
    CHECK(st.readsDone == 0);
  }
  SECTION("a stage that cannot reach its members: the program is refused") {
    st.access = transport::SharedStage::Access::None;
    const std::string e = fetchOnce(st, {7, at, 1000, 0}, mine.data(), 1000);
    CHECK(e.rfind("internal: ", 0) == 0);
    CHECK(st.readsDone == 0);
  }
}
