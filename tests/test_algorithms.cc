// Tests of the collective algorithms (src/coll) without sockets: sweeps of every collective over
// rank counts, element counts, ops, element types and plans. Every rank's program is built with
// coll::build and all ranks run together in ONE core::Executor::run over the in-memory
// transport of unit_memtransport.h (which poisons receive buffers, checks that in-flight send
// buffers are left alone, and defers matches at random). Results are compared bit for bit with
// an independent reference computed in unit_coll.h. The executor itself, send/recv, the same
// programs over real TCP connections and mismatched calls are in test_executor.cc.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "coll/collective.h"
#include "coll/planner.h"
#include "kernels/cpu/reduce.h"
#include "unit_coll.h"

using namespace hora;
using namespace unit;
using coll::Kind;

namespace {

std::vector<size_t> countsFor(int n, size_t many) {
  std::vector<size_t> v = {0, 1, 2, static_cast<size_t>(n - 1), static_cast<size_t>(n), static_cast<size_t>(n + 1),
                           1000, many};
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

const int kRankCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16};
const RedOp kAllOps[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg, RedOp::PreMulSum};

// The collectives that move data without reducing it: one op is enough.
bool moves(Kind k) {
  return k == Kind::Broadcast || k == Kind::AllGather || k == Kind::Gather || k == Kind::Scatter;
}
bool rooted(Kind k) { return k == Kind::Broadcast || k == Kind::Reduce || k == Kind::Gather || k == Kind::Scatter; }

// The int32 sweep of one kind (every root of the rooted ones): every op, every rank count of kRankCounts, counts 0, 1, 2, n-1,
// n, n+1, 1000 and one of many chunks (4099 elements in 64-byte chunks), in and out of place.
void int32Sweep(Kind kind, uint32_t seed, const coll::Plan& thePlan = kSmall) {
  for (int n : kRankCounts)
    for (size_t count : countsFor(n, 4099))
      for (bool inPlace : {false, true})
        for (RedOp op : kAllOps) {
          Case c;
          c.kind = kind;
          c.n = n;
          c.count = count;
          c.inPlace = inPlace;
          c.op = op;
          c.plan = thePlan;
          c.seed = seed++;
          c.eager = eagerFor(c.seed);
          if (moves(kind) && op != RedOp::Sum) continue;
          if (!rooted(kind)) {
            check<int32_t>(c);
            continue;
          }
          // Every root for Sum; the ends and the middle for the other ops.
          for (int root = 0; root < n; ++root) {
            if (op != RedOp::Sum && root != 0 && root != n - 1 && root != n / 2) continue;
            c.root = root;
            check<int32_t>(c);
          }
        }
}

coll::Plan forced(coll::Algo algo, coll::Plan p = kSmall) {
  p.algo = algo;
  return p;
}

// A forced algorithm over the plans that stress its pipeline and staging (one slot, 3-element
// chunks, the default), on rank counts that are and are not powers of two, every op that the
// collective has, and float inputs (exact: every partial result is a small integer).
void plansAndFloats(Kind kind, coll::Algo algo, uint32_t seed) {
  for (const coll::Plan& p : {kOneSlot, kOdd, kDefault})
    for (int n : {2, 3, 5, 6, 8, 11})
      for (size_t count : {size_t(1), static_cast<size_t>(n - 1), static_cast<size_t>(2 * n + 1), size_t(257)})
        for (bool inPlace : {false, true})
          for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::PreMulSum}) {
            if (moves(kind) && op != RedOp::Sum) continue;
            Case c;
            c.kind = kind;
            c.n = n;
            c.count = count;
            c.inPlace = inPlace;
            c.op = op;
            c.plan = forced(algo, p);
            c.seed = seed++;
            c.root = static_cast<int>(seed % static_cast<uint32_t>(n));
            INFO(planText(c.plan));
            check<int32_t>(c);
            check<float>(c);
          }
  for (int n : {3, 4, 7, 16})
    for (RedOp op : kAllOps) {
      if (moves(kind) && op != RedOp::Sum) continue;
      Case c;
      c.kind = kind;
      c.n = n;
      c.count = 1000;
      c.op = op;
      c.plan = forced(algo);
      c.seed = seed++;
      c.root = n - 1;
      check<float>(c);
      check<double>(c);
    }
}

}  // namespace

// =================================================================================================
// The sweep
// =================================================================================================

TEST_CASE("collectives: AllReduce int32 sweep", "[coll]") { int32Sweep(Kind::AllReduce, 1); }
TEST_CASE("collectives: direct AllReduce int32 sweep", "[coll]") {
  coll::Plan direct = kSmall;
  direct.algo = coll::Algo::Direct;
  int32Sweep(Kind::AllReduce, 300000, direct);
}
TEST_CASE("collectives: recursive-doubling AllReduce int32 sweep", "[coll]") {
  coll::Plan rd = kSmall;
  rd.algo = coll::Algo::RecursiveDoubling;
  int32Sweep(Kind::AllReduce, 400000, rd);
}
TEST_CASE("collectives: double-binary-tree AllReduce int32 sweep", "[coll]") {
  int32Sweep(Kind::AllReduce, 800000, forced(coll::Algo::Tree));
}
TEST_CASE("collectives: binary-tree Broadcast and Reduce int32 sweep (every root)", "[coll]") {
  int32Sweep(Kind::Broadcast, 810000, forced(coll::Algo::Tree));
  int32Sweep(Kind::Reduce, 820000, forced(coll::Algo::Tree));
}
TEST_CASE("collectives: binomial Broadcast and Reduce int32 sweep (every root)", "[coll]") {
  int32Sweep(Kind::Broadcast, 830000, forced(coll::Algo::Binomial));
  int32Sweep(Kind::Reduce, 840000, forced(coll::Algo::Binomial));
}
TEST_CASE("collectives: Rabenseifner AllReduce int32 sweep", "[coll]") {
  int32Sweep(Kind::AllReduce, 850000, forced(coll::Algo::Rabenseifner));
}
TEST_CASE("collectives: recursive-doubling and Bruck AllGather int32 sweep", "[coll]") {
  int32Sweep(Kind::AllGather, 860000, forced(coll::Algo::RecursiveDoubling));
  int32Sweep(Kind::AllGather, 870000, forced(coll::Algo::Bruck));
}
TEST_CASE("collectives: direct and binomial Gather and Scatter int32 sweep (every root)", "[coll]") {
  int32Sweep(Kind::Gather, 880000, forced(coll::Algo::Direct));
  int32Sweep(Kind::Scatter, 885000, forced(coll::Algo::Direct));
  int32Sweep(Kind::Gather, 890000, forced(coll::Algo::Binomial));
  int32Sweep(Kind::Scatter, 895000, forced(coll::Algo::Binomial));
}
// The planner's choice for Gather and Scatter, one rank a host over TCP: the binomial tree's
// log2 n waits for small blocks, the linear algorithm's fewer bytes for large ones; and the names
// HORA_ALGO takes for them.
TEST_CASE("Gather and Scatter: the planner chooses by size, and HORA_ALGO names them", "[coll]") {
  for (int n : {4, 8, 16})
    for (Kind k : {Kind::Gather, Kind::Scatter}) {
      coll::JobShape t;
      t.nranks = n;
      t.hosts = n;
      t.coresPerHost = 2;
      t.slowest = coll::Costs().link("tcp");
      coll::Args a;
      a.kind = k;
      a.dtype = DataType::Uint8;
      INFO(n << " ranks, " << coll::kindName(k));
      a.count = 8;
      CHECK(coll::plan(a, t, coll::PlannerSettings(), true).algo == coll::Algo::Binomial);
      a.count = 4 << 20;
      CHECK(coll::plan(a, t, coll::PlannerSettings(), true).algo == coll::Algo::Direct);
    }
  const auto f = coll::parseForced("gather:binomial,scatter:direct");
  CHECK(f[static_cast<size_t>(Kind::Gather)] == static_cast<int>(coll::Algo::Binomial));
  CHECK(f[static_cast<size_t>(Kind::Scatter)] == static_cast<int>(coll::Algo::Direct));
  CHECK(coll::parseForced("binomial")[static_cast<size_t>(Kind::Scatter)] == static_cast<int>(coll::Algo::Binomial));
  CHECK_THROWS_WITH(coll::parseForced("scatter:ring"), Catch::Contains("does not implement"));
  coll::Args g;
  g.kind = Kind::Gather;
  g.count = 5;
  g.dtype = DataType::Int32;
  g.root = 3;
  CHECK(coll::describeTag(coll::makeTag(g)) == "Gather(count 5, int32, root 3)");
}

TEST_CASE("collectives: trees, Rabenseifner, recursive doubling and Bruck over plans and floats", "[coll]") {
  SECTION("tree AllReduce") { plansAndFloats(Kind::AllReduce, coll::Algo::Tree, 900000); }
  SECTION("tree Broadcast") { plansAndFloats(Kind::Broadcast, coll::Algo::Tree, 910000); }
  SECTION("tree Reduce") { plansAndFloats(Kind::Reduce, coll::Algo::Tree, 920000); }
  SECTION("binomial Broadcast") { plansAndFloats(Kind::Broadcast, coll::Algo::Binomial, 930000); }
  SECTION("binomial Reduce") { plansAndFloats(Kind::Reduce, coll::Algo::Binomial, 940000); }
  SECTION("rabenseifner AllReduce") { plansAndFloats(Kind::AllReduce, coll::Algo::Rabenseifner, 950000); }
  SECTION("rd AllGather") { plansAndFloats(Kind::AllGather, coll::Algo::RecursiveDoubling, 960000); }
  SECTION("bruck AllGather") { plansAndFloats(Kind::AllGather, coll::Algo::Bruck, 970000); }
  SECTION("direct Gather") { plansAndFloats(Kind::Gather, coll::Algo::Direct, 980000); }
  SECTION("direct Scatter") { plansAndFloats(Kind::Scatter, coll::Algo::Direct, 981000); }
  SECTION("binomial Gather") { plansAndFloats(Kind::Gather, coll::Algo::Binomial, 982000); }
  SECTION("binomial Scatter") { plansAndFloats(Kind::Scatter, coll::Algo::Binomial, 983000); }
}
TEST_CASE("collectives: Reduce int32 sweep (every root)", "[coll]") { int32Sweep(Kind::Reduce, 100000); }
TEST_CASE("collectives: ReduceScatter int32 sweep", "[coll]") {
  int32Sweep(Kind::ReduceScatter, 200000);
}

TEST_CASE("collectives: AllGather and Broadcast (every root)", "[coll]") {
  uint32_t seed = 300000;
  for (int n : kRankCounts)
    for (size_t count : countsFor(n, 4099))
      for (bool inPlace : {false, true}) {
        Case c;
        c.n = n;
        c.count = count;
        c.inPlace = inPlace;
        c.plan = kSmall;
        c.seed = seed++;
        c.kind = Kind::AllGather;
        check<int32_t>(c);
        c.kind = Kind::Broadcast;
        for (int root = 0; root < n; ++root) {
          c.root = root;
          check<int32_t>(c);
        }
      }
}

TEST_CASE("collectives: every plan (chunk sizes and slot counts)", "[coll]") {
  uint32_t seed = 400000;
  for (const coll::Plan& p : {kOneSlot, kOdd, kDefault, plan(4, 1), plan(4096, 3)})
    for (int n : {2, 3, 4, 7, 16})
      for (size_t count : {size_t(1), static_cast<size_t>(n + 1), size_t(257), size_t(1000), size_t(3001)})
        for (bool inPlace : {false, true}) {
          // One-element chunks: enough with the smaller counts (the executor's cost per round
          // grows with the number of pending local ops, so these get slow).
          if (p.chunkBytes < 12 && count > 257) continue;
          if (p.chunkBytes == 12 && count > 1000) continue;
          INFO(planText(p));
          Case c;
          c.n = n;
          c.count = count;
          c.inPlace = inPlace;
          c.plan = p;
          c.seed = seed++;
          for (RedOp op : {RedOp::Sum, RedOp::PreMulSum, RedOp::Avg}) {
            c.op = op;
            for (Kind k : {Kind::AllReduce, Kind::ReduceScatter}) {
              c.kind = k;
              c.eager = eagerFor(c.seed);
              check<int32_t>(c);
            }
            c.kind = Kind::Reduce;
            c.eager = false;
            for (int root : {0, n - 1, n / 2}) {
              c.root = root;
              check<int32_t>(c);
            }
          }
          c.op = RedOp::Sum;
          c.kind = Kind::AllGather;
          check<int32_t>(c);
          c.kind = Kind::Broadcast;
          for (int root : {0, 1 % n, n - 1}) {
            c.root = root;
            check<int32_t>(c);
          }
          // Gather and Scatter, linear (what the plan's ring falls back to) and binomial.
          for (Kind k : {Kind::Gather, Kind::Scatter})
            for (coll::Algo algo : {coll::Algo::Direct, coll::Algo::Binomial}) {
              c.kind = k;
              c.plan.algo = algo;
              for (int root : {0, 1 % n, n - 1}) {
                c.root = root;
                c.eager = eagerFor(c.seed + static_cast<uint32_t>(root));
                check<int32_t>(c);
              }
            }
          c.plan.algo = p.algo;
        }
}

TEST_CASE("collectives: large buffers with the default plan (several 512 KiB chunks)", "[coll]") {
  uint32_t seed = 500000;
  const size_t count = 300007;  // > 2 chunks of 131072 int32 per ring segment with n = 2
  for (int n : {2, 3})
    for (bool inPlace : {false, true}) {
      Case c;
      c.n = n;
      c.count = count;
      c.inPlace = inPlace;
      c.plan = kDefault;
      c.seed = seed++;
      c.deferP = 0.3;
      for (Kind k : {Kind::AllReduce, Kind::ReduceScatter, Kind::AllGather, Kind::Broadcast, Kind::Reduce, Kind::Gather,
                     Kind::Scatter}) {
        c.kind = k;
        c.eager = eagerFor(c.seed);
        c.root = n - 1;
        c.plan.algo = kDefault.algo;
        check<int32_t>(c);
        if (k == Kind::Gather || k == Kind::Scatter) {  // (the default's is the direct one)
          c.plan.algo = coll::Algo::Binomial;
          check<int32_t>(c);
        }
      }
    }
}

TEST_CASE("collectives: float every op exact with small integer inputs", "[coll]") {
  uint32_t seed = 600000;
  for (int n : {1, 2, 3, 5, 8, 16})
    for (size_t count : countsFor(n, 2051))
      for (bool inPlace : {false, true})
        for (RedOp op : kAllOps) {
          Case c;
          c.n = n;
          c.count = count;
          c.inPlace = inPlace;
          c.op = op;
          c.plan = kSmall;
          c.seed = seed++;
          for (Kind k : {Kind::AllReduce, Kind::ReduceScatter, Kind::Reduce}) {
            c.kind = k;
            c.eager = eagerFor(c.seed);
            c.root = static_cast<int>(seed % static_cast<uint32_t>(n));
            check<float>(c);
          }
        }
}

TEST_CASE("collectives: other element sizes and signedness", "[coll]") {
  uint32_t seed = 700000;
  for (int n : {2, 3, 5})
    for (size_t count : {size_t(1), size_t(7), size_t(1000)})
      for (bool inPlace : {false, true})
        for (RedOp op : kAllOps) {
          Case c;
          c.n = n;
          c.count = count;
          c.inPlace = inPlace;
          c.op = op;
          c.plan = kSmall;
          c.seed = seed++;
          c.root = n - 1;
          for (Kind k : {Kind::AllReduce, Kind::ReduceScatter, Kind::Reduce, Kind::AllGather, Kind::Gather, Kind::Scatter}) {
            if ((k == Kind::Gather || k == Kind::Scatter) && op != RedOp::Sum) continue;
            c.kind = k;
            c.eager = eagerFor(c.seed);
            check<int8_t>(c);
            check<uint8_t>(c);
            check<uint32_t>(c);
            check<int64_t>(c);
            check<uint64_t>(c);
            check<double>(c);
          }
        }
}

TEST_CASE("collectives: half-precision spot check", "[coll]") {
  // Float16 and bfloat16 sums of small integers are exact at every step.
  for (DataType dt : {DataType::Float16, DataType::Bfloat16})
    for (bool inPlace : {false, true})
      for (Kind kind : {Kind::AllReduce, Kind::ReduceScatter, Kind::Reduce}) {
        const int n = 4, root = 2;
        const size_t N = 1000, sendLen = kind == Kind::ReduceScatter ? N * n : N;
        auto toBits = [&](float f) { return dt == DataType::Float16 ? kernels::floatToHalf(f) : kernels::floatToBfloat16(f); };
        auto toFloat = [&](uint16_t b) { return dt == DataType::Float16 ? kernels::halfToFloat(b) : kernels::bfloat16ToFloat(b); };
        std::vector<std::vector<uint16_t>> send(n), recv(n);
        std::vector<std::vector<coll::Args>> calls(n);
        for (int r = 0; r < n; ++r) {
          send[r].resize(sendLen);
          for (size_t i = 0; i < sendLen; ++i) send[r][i] = toBits(static_cast<float>(static_cast<int>((i * 7 + r * 3) % 19) - 9));
          recv[r].assign(N, 0xFFFF);
          coll::Args a;
          a.kind = kind;
          a.sendbuf = send[r].data();
          a.recvbuf = inPlace ? (kind == Kind::ReduceScatter ? send[r].data() + r * N : send[r].data()) : recv[r].data();
          a.count = N;
          a.dtype = dt;
          a.op = RedOp::Sum;
          a.root = root;
          calls[r].push_back(a);
        }
        std::vector<std::vector<uint16_t>> orig = send;
        unit::MemWorld w(n, 7, 0.5);
        w.eager = inPlace;  // one pass with each kind of send (unit_coll.h)
        runAll(w, calls, kSmall);
        for (int r = 0; r < n; ++r) {
          if (kind == Kind::Reduce && r != root) continue;
          const uint16_t* got = static_cast<const uint16_t*>(calls[r][0].recvbuf);
          size_t bad = N;
          for (size_t i = 0; i < N && bad == N; ++i) {
            size_t idx = kind == Kind::ReduceScatter ? r * N + i : i;
            float expect = 0;
            for (int q = 0; q < n; ++q) expect += toFloat(orig[q][idx]);
            if (toFloat(got[i]) != expect) bad = i;
          }
          INFO(dataTypeName(dt) << " " << kindText(kind) << (inPlace ? " in-place" : "") << " rank " << r);
          CHECK(bad == N);
        }
      }
}

// Regression: ringReduceScatter (src/coll/ring.cc) once made the receive into a staging slot wait for the
// send out of that slot at the same step (Deps{lastUse[i]}, the send just added). Every rank
// does the same, so rank r's receive waits for its send, which waits for rank r+1's receive,
// ... around the ring back to rank r: a wait cycle that only a transport buffering a whole
// chunk per link can break. The transport contract does not promise that (a TCP send cannot
// complete once the socket buffers are full and the peer is not reading: see the tcp test in
// test_executor.cc), so ReduceScatter hangs until the timeout: out of place from 4 ranks (2
// steps that forward a partial sum), in place from 3 ranks (the last step receives into a
// slot), and in place with PreMulSum from 2 ranks (step 0 sends the scaled input out of the
// same slot).
TEST_CASE("collectives: ReduceScatter with rendezvous sends", "[coll]") {
  Case c;
  c.kind = Kind::ReduceScatter;
  c.plan = kSmall;
  c.deferP = 0;
  c.eager = false;
  SECTION("4 ranks out of place") {
    c.n = 4;
    c.count = 64;
  }
  SECTION("3 ranks in place") {
    c.n = 3;
    c.count = 64;
    c.inPlace = true;
  }
  SECTION("2 ranks in place with PreMulSum") {
    c.n = 2;
    c.count = 1;
    c.inPlace = true;
    c.op = RedOp::PreMulSum;
  }
  std::string failure;
  try {
    failure = runCase<int32_t>(c);
  } catch (const Error& e) {
    failure = e.what();
  }
  INFO(caseText(c));
  CHECK(failure == "");
}
