// The planner: every algorithm's constraints and predictions, the choice they make on the shapes
// the defaults were measured on (the crossovers quoted in coll/cost.h), HORA_ALGO's forcing, the
// explanation logged at INFO, and tune files.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "coll/fit.h"
#include "coll/planner.h"
#include "stub_stage.h"

using namespace hora;
using namespace hora::coll;

namespace {

// A shared stage that is only a shape: the planner reads its size and region.
using ShapeOnlyStage = test::StubStage;

JobShape oneHost(int n, const ShapeOnlyStage& st) {
  JobShape t;
  t.nranks = n;
  t.stage = &st;
  t.ranksPerHost = n;
  t.coresPerHost = 2;
  t.slowest = Costs().link("shm");
  return t;
}

JobShape overTcp(int n) {
  JobShape t;
  t.nranks = n;
  t.hosts = n;
  t.ranksPerHost = 1;
  t.coresPerHost = 2;
  t.slowest = Costs().link("tcp");
  return t;
}

Args allReduce(size_t bytes) {
  Args a;
  a.kind = Kind::AllReduce;
  a.dtype = DataType::Uint8;
  a.count = bytes;
  return a;
}

// A Broadcast of `bytes`, in place or out of place (the planner looks only at whether the two
// buffers are one).
Args broadcastOf(size_t bytes, bool inPlace) {
  static uint8_t in, out;
  Args a = allReduce(bytes);
  a.kind = Kind::Broadcast;
  a.sendbuf = &in;
  a.recvbuf = inPlace ? &in : &out;
  return a;
}

std::string chosen(const Args& a, const JobShape& t, bool alone = true) {
  return algoName(plan(a, t, PlannerSettings(), alone).algo);
}

}  // namespace

TEST_CASE("planner: the registry's names are one table", "[planner]") {
  CHECK(algorithmNames() ==
        "flat, slice, rd, ring, direct, chain, pairwise, dissemination, p2p, tree, binomial, rabenseifner, bruck, hier, single");
  for (const Algorithm* a : algorithms()) {
    CHECK(findAlgorithm(a->name()) == a);
    CHECK(&algorithm(a->id()) == a);
  }
  const Kind bc = Kind::Broadcast;
  CHECK(algorithmNames(&bc) == "flat, chain, tree, binomial, hier, single");
  const Kind ag = Kind::AllGather;
  CHECK(algorithmNames(&ag) == "flat, rd, ring, bruck, hier, single");
  const Kind rd = Kind::Reduce;
  CHECK(algorithmNames(&rd) == "flat, chain, tree, binomial, hier, single");
  // HORA_ALGO takes the new names, alone and per collective.
  const auto f = parseForced("allreduce:tree,broadcast:binomial,reduce:tree,allgather:bruck");
  CHECK(f[static_cast<size_t>(Kind::AllReduce)] == static_cast<int>(Algo::Tree));
  CHECK(f[static_cast<size_t>(Kind::Broadcast)] == static_cast<int>(Algo::Binomial));
  CHECK(f[static_cast<size_t>(Kind::Reduce)] == static_cast<int>(Algo::Tree));
  CHECK(f[static_cast<size_t>(Kind::AllGather)] == static_cast<int>(Algo::Bruck));
  CHECK(parseForced("rabenseifner")[static_cast<size_t>(Kind::AllReduce)] == static_cast<int>(Algo::Rabenseifner));
  CHECK(parseForced("allgather:rd")[static_cast<size_t>(Kind::AllGather)] == static_cast<int>(Algo::RecursiveDoubling));
  CHECK_THROWS_WITH(parseForced("allgather:tree"), Catch::Contains("does not implement"));
}

TEST_CASE("planner: AllReduce on one host of 2 cores takes the algorithms measured fastest", "[planner]") {
  // 2 ranks: flat up to a few KiB, then recursive doubling, then the ring; from 3 ranks (4 and 8
  // share the 2 cores) flat up to a few tens of KiB, then the slice algorithm at every size.
  ShapeOnlyStage s2(2), s4(4), s8(8);
  CHECK(chosen(allReduce(8), oneHost(2, s2)) == "flat");
  CHECK(chosen(allReduce(2048), oneHost(2, s2)) == "flat");
  CHECK(chosen(allReduce(32 << 10), oneHost(2, s2)) == "rd");
  CHECK(chosen(allReduce(2 << 20), oneHost(2, s2)) == "ring");
  CHECK(chosen(allReduce(256 << 20), oneHost(2, s2)) == "ring");
  for (ShapeOnlyStage* s : {&s4, &s8}) {
    INFO(s->n << " ranks");
    CHECK(chosen(allReduce(8), oneHost(s->n, *s)) == "flat");
    CHECK(chosen(allReduce(8 << 10), oneHost(s->n, *s)) == "flat");
    CHECK(chosen(allReduce(2 << 20), oneHost(s->n, *s)) == "slice");
    CHECK(chosen(allReduce(256 << 20), oneHost(s->n, *s)) == "slice");
  }
}

TEST_CASE("planner: across hosts, recursive doubling for small buffers and the ring above", "[planner]") {
  for (int n : {2, 3, 4, 8}) {
    INFO(n << " ranks");
    CHECK(chosen(allReduce(8), overTcp(n)) == "rd");
    CHECK(chosen(allReduce(4 << 10), overTcp(n)) == "rd");
    CHECK(chosen(allReduce(4 << 20), overTcp(n)) == "ring");
    // The shared-stage algorithms need a stage.
    CHECK(algorithm(Algo::Flat).unfit(allReduce(8), overTcp(n), true) != nullptr);
  }
}

// Across hosts with many ranks, the ring's and the chain's n-1 waits per phase cost more than
// the log2 n of the trees, Rabenseifner's and the logarithmic AllGathers, until the bytes
// dominate; what follows holds with margins of 30% or more in the model.
TEST_CASE("planner: across hosts with many ranks, the logarithmic algorithms where waits dominate", "[planner]") {
  const Costs c;
  auto us = [&](Algo algo, const Args& a, const JobShape& t) { return algorithm(algo).predictUs(a, t, c); };
  for (int n : {16, 32, 64}) {
    INFO(n << " ranks");
    // AllReduce: recursive doubling for small buffers, Rabenseifner's for tens of KiB, the ring
    // for MiBs; the double binary tree beats the ring for small buffers.
    CHECK(chosen(allReduce(1 << 10), overTcp(n)) == "rd");
    CHECK(chosen(allReduce(64 << 10), overTcp(n)) == "rabenseifner");
    CHECK(chosen(allReduce(256 << 10), overTcp(n)) == "rabenseifner");
    CHECK(chosen(allReduce(64 << 20), overTcp(n)) != "tree");
    for (size_t bytes : {size_t(8), size_t(8) << 10}) CHECK(us(Algo::Tree, allReduce(bytes), overTcp(n)) < 0.7 * us(Algo::Ring, allReduce(bytes), overTcp(n)));
    // Broadcast and Reduce: a tree up to a MiB, the chain for large buffers.
    for (Kind k : {Kind::Broadcast, Kind::Reduce}) {
      Args a = allReduce(8);
      a.kind = k;
      const std::string small = chosen(a, overTcp(n));
      CHECK((small == "tree" || small == "binomial"));
      a.count = 64 << 10;
      CHECK(chosen(a, overTcp(n)) == "binomial");
      a.count = 64 << 20;
      CHECK(chosen(a, overTcp(n)) == "chain");
    }
  }
  // AllGather of 8 bytes a rank: recursive doubling for powers of two, Bruck's otherwise (it
  // needs no fold). With a rank per host, rd moves the ring's bytes in fewer waits at every size
  // (4 ranks over TCP: 1.3-1.6x faster than the ring from 64 KiB to 4 MiB); where a host's ranks
  // share its link, rd's and Bruck's steps between hosts send theirs over it at once, the ring
  // (in host order) one, and the ring takes the MiBs (measured across 4 hosts of 2, below).
  for (int n : {8, 16, 32}) {
    Args a = allReduce(8);
    a.kind = Kind::AllGather;
    INFO(n << " ranks");
    CHECK(chosen(a, overTcp(n)) == "rd");
    CHECK(chosen(a, overTcp(n + 4)) == "bruck");
    CHECK(us(Algo::Bruck, a, overTcp(n)) < 0.7 * us(Algo::Ring, a, overTcp(n)));
    a.count = 64 << 10;
    CHECK(chosen(a, overTcp(n)) == "rd");
    std::vector<int> labels;
    for (int r = 0; r < n; ++r) labels.push_back(r / 2);
    const HostLayout pairs = HostLayout::fromLabels(labels);
    CHECK(pairs.crossingAtOnce(n, [](int r) { return r ^ 1; }) == 1);
    CHECK(pairs.crossingAtOnce(n, [](int r) { return r ^ 2; }) == 2);
    JobShape shared = overTcp(n);
    shared.hosts = n / 2;
    shared.ranksPerHost = 2;
    shared.layout = &pairs;
    CHECK(us(Algo::RecursiveDoubling, a, shared) > us(Algo::RecursiveDoubling, a, overTcp(n)));
    a.count = 1 << 20;
    CHECK(chosen(a, shared) == "ring");
    a.count = 8;
    CHECK(chosen(a, shared) == "rd");
  }
}

// A Broadcast over links among up to 8 ranks is predicted in a sequence of calls, where the
// chain's depth is paid once (src/coll/chain.cc): measured faster than the trees at every size
// at 3, 4 and 8 ranks over TCP on one host, and across 4 hosts of 2. Beyond 8 ranks a lone
// call's n-1 waits count, and the trees keep the small ones (the case above).
TEST_CASE("planner: a Broadcast over links among up to 8 ranks takes the chain", "[planner]") {
  const Costs c;
  for (int n : {3, 4, 8}) {
    for (size_t bytes : {size_t(8), size_t(4) << 10, size_t(256) << 10, size_t(16) << 20}) {
      Args a = allReduce(bytes);
      a.kind = Kind::Broadcast;
      JobShape oneHostTcp = overTcp(n);
      oneHostTcp.hosts = 1;
      oneHostTcp.ranksPerHost = n;
      INFO(n << " ranks, " << bytes << " bytes");
      CHECK(chosen(a, oneHostTcp) == "chain");
      CHECK(chosen(a, overTcp(n)) == "chain");
      // The depth still counts where the prediction is of a lone call: a Reduce.
      a.kind = Kind::Reduce;
      if (bytes == 8) CHECK(chosen(a, overTcp(n)) != "chain");
    }
  }
  // Beyond 8 ranks the chain pays its depth.
  Args a = allReduce(8);
  a.kind = Kind::Broadcast;
  const double at8 = algorithm(Algo::Chain).predictUs(a, overTcp(8), c);
  const double at9 = algorithm(Algo::Chain).predictUs(a, overTcp(9), c);
  CHECK(at9 > 4 * at8);
}

TEST_CASE("planner: the other collectives, alone and in a group", "[planner]") {
  ShapeOnlyStage s4(4);
  Args a = allReduce(1024);
  a.kind = Kind::AllGather;
  CHECK(chosen(a, oneHost(4, s4), true) == "flat");
  CHECK(chosen(a, oneHost(4, s4), false) == "ring");  // flat runs a lone call only
  a.count = 1 << 20;
  CHECK(chosen(a, oneHost(4, s4), true) == "ring");
  a.kind = Kind::Broadcast;
  CHECK(chosen(a, overTcp(4)) == "chain");
  // On one host a large Broadcast goes through the root's slots, pipelined (stageBroadcast): the
  // root's data crosses memory once per reader, where the chain moves it twice per hop. At 2
  // ranks the chain stays for a slot or less (no pipeline to fill), as measured.
  ShapeOnlyStage s2(2), s8(8);
  for (size_t bytes : {size_t(4) << 20, size_t(64) << 20}) {
    a.count = bytes / 4;
    CHECK(chosen(a, oneHost(2, s2), true) == "flat");
    CHECK(chosen(a, oneHost(4, s4), true) == "flat");
    CHECK(chosen(a, oneHost(8, s8), false) == "flat");  // in a group too
  }
  a.count = (64 << 10) / 4;
  CHECK(chosen(a, oneHost(8, s8), true) == "flat");
  CHECK(chosen(a, oneHost(2, s2), true) == "chain");
  a.kind = Kind::AllToAll;
  CHECK(chosen(a, overTcp(4)) == "pairwise");
  a.kind = Kind::Barrier;
  CHECK(chosen(a, oneHost(4, s4)) == "flat");
  CHECK(chosen(a, overTcp(4)) == "dissemination");
}

// The single copy of a Broadcast (src/coll/stage.cc): readers read the root's buffer where it
// lies. Threads read it at memory speed and take it from 64 KiB (4 MiB at 4 threads on 2 cores
// in 164-261 us against 247-277 through the root's slots); processes read it through the
// kernel, which costs a system call and the pinning of the pages per call. A Broadcast is
// planned as the root's call in place on every rank (only the root knows whether it is), where
// at 2 processes the root writes half of the reader's result while it reads the other half: the
// planner takes it from 64 KiB (one 2-core VM: the slots 1.0-1.6x faster from 1 MiB; another:
// the single copy 3-10x faster from 1 MiB, coll/cost.h). Beyond 2 processes the single copy
// does not run.
TEST_CASE("planner: the single copy of a Broadcast for threads and 2 processes, else the root's slots", "[planner]") {
  using Access = transport::SharedStage::Access;
  for (int n : {2, 4, 8}) {
    ShapeOnlyStage st(n);
    st.access = Access::Direct;
    for (size_t bytes : {size_t(64) << 10, size_t(1) << 20, size_t(16) << 20}) {
      Args a = broadcastOf(bytes, false);
      INFO(n << " threads, " << bytes << " bytes");
      CHECK(chosen(a, oneHost(n, st), true) == "single");
      CHECK(chosen(broadcastOf(bytes, true), oneHost(n, st), true) == "single");
    }
  }
  ShapeOnlyStage s2(2), s4(4);
  s2.access = s4.access = Access::Kernel;
  for (size_t bytes : {size_t(64) << 10, size_t(256) << 10, size_t(1) << 20, size_t(4) << 20, size_t(16) << 20,
                       size_t(64) << 20}) {
    INFO("processes, " << bytes << " bytes");
    // (Planned as the root's call in place on every rank, out of place too: only the root knows.)
    CHECK(chosen(broadcastOf(bytes, true), oneHost(2, s2), true) == "single");
    CHECK(chosen(broadcastOf(bytes, false), oneHost(2, s2), true) == "single");
    for (bool inPlace : {false, true}) CHECK(chosen(broadcastOf(bytes, inPlace), oneHost(4, s4), true) == "flat");
    const Args a = broadcastOf(bytes, false);
    CHECK(algorithm(Algo::SingleCopy).unfit(a, oneHost(4, s4), true) != nullptr);
    CHECK(algorithm(Algo::SingleCopy).unfit(a, oneHost(2, s2), true) == nullptr);
  }
  // Where the ranks may not reach each other's memory, it does not run, and says why.
  ShapeOnlyStage none(2);
  const Args a = broadcastOf(1 << 20, false);
  CHECK(std::string(algorithm(Algo::SingleCopy).unfit(a, oneHost(2, none), true)).find("may not read") != std::string::npos);
}

// The single copy of an AllGather: each rank reads the other blocks where they lie. Threads
// from where the flat one stops; processes (through the kernel) above 16 KiB a rank, where it
// beat the ring (2 processes, in place: 256 KiB in 13.2 us against the ring's 25.9 and Open
// MPI's 18.2, 1 MiB in 44.5 against 101 and 88), and where the built-in costs put it beside the
// flat one at more processes (4 processes: from 128 KiB a rank; 32 KiB goes flat).
TEST_CASE("planner: the single copy of an AllGather for threads and processes above 16 KiB a rank", "[planner]") {
  using Access = transport::SharedStage::Access;
  auto allGatherOf = [](size_t perRank) {
    Args a = allReduce(perRank);
    a.kind = Kind::AllGather;
    return a;
  };
  ShapeOnlyStage s2(2), s4(4), t4(4);
  s2.access = s4.access = Access::Kernel;
  t4.access = Access::Direct;
  for (size_t bytes : {size_t(32) << 10, size_t(128) << 10, size_t(1) << 20, size_t(8) << 20}) {
    INFO(bytes << " bytes a rank");
    CHECK(chosen(allGatherOf(bytes), oneHost(2, s2), true) == "single");
    CHECK(chosen(allGatherOf(bytes), oneHost(4, t4), true) == "single");
    CHECK(chosen(allGatherOf(bytes), oneHost(4, s4), true) == (bytes > (size_t(32) << 10) ? "single" : "flat"));
  }
  for (size_t bytes : {size_t(4) << 10, size_t(16) << 10}) {
    INFO(bytes << " bytes a rank");
    CHECK(chosen(allGatherOf(bytes), oneHost(2, s2), true) != "single");
    CHECK(std::string(algorithm(Algo::SingleCopy).unfit(allGatherOf(bytes), oneHost(2, s2), true)).find("16 KiB") !=
          std::string::npos);
  }
}

// The single copy of a Reduce: at 2 processes each reads the other's input where it lies and
// both reduce, the root its share, the sender the rest into the root's result. The planner takes
// it from 128 KiB, where it beat the chain (2 processes, in place: 1 MiB in 158-184 us against
// 342, 4 MiB in 922-1067 against 1738); up to 64 KiB the chain is as fast, and a system call
// per chunk makes the single copy slower below. Not between threads, not beyond 2 ranks, not for
// PreMulSum (each rank scales its own input).
TEST_CASE("planner: the single copy of a Reduce at 2 processes from 128 KiB", "[planner]") {
  using Access = transport::SharedStage::Access;
  auto reduceOf = [](size_t bytes, bool inPlace) {
    Args a = broadcastOf(bytes, inPlace);
    a.kind = Kind::Reduce;
    a.dtype = DataType::Float32;
    a.count = bytes / 4;
    return a;
  };
  ShapeOnlyStage s2(2), s4(4), t2(2), none(2);
  s2.access = s4.access = Access::Kernel;
  t2.access = Access::Direct;
  const Algorithm& single = algorithm(Algo::SingleCopy);
  for (size_t bytes : {size_t(128) << 10, size_t(1) << 20, size_t(16) << 20, size_t(256) << 20})
    for (bool inPlace : {true, false}) {
      INFO(bytes << " bytes, " << (inPlace ? "in place" : "out of place"));
      CHECK(chosen(reduceOf(bytes, inPlace), oneHost(2, s2), true) == "single");
      CHECK(chosen(reduceOf(bytes, inPlace), oneHost(4, s4), true) != "single");
      CHECK(std::string(single.unfit(reduceOf(bytes, inPlace), oneHost(4, s4), true)).find("2 ranks only") != std::string::npos);
      CHECK(std::string(single.unfit(reduceOf(bytes, inPlace), oneHost(2, t2), true)).find("threads") != std::string::npos);
      CHECK(std::string(single.unfit(reduceOf(bytes, inPlace), oneHost(2, none), true)).find("may not read") != std::string::npos);
      Args scaled = reduceOf(bytes, inPlace);
      scaled.op = RedOp::PreMulSum;
      CHECK(std::string(single.unfit(scaled, oneHost(2, s2), true)).find("PreMulSum") != std::string::npos);
      CHECK(chosen(scaled, oneHost(2, s2), true) == "chain");
    }
  for (size_t bytes : {size_t(8) << 10, size_t(32) << 10, size_t(64) << 10}) {
    INFO(bytes << " bytes");
    CHECK(chosen(reduceOf(bytes, true), oneHost(2, s2), true) != "single");
    CHECK(single.unfit(reduceOf(bytes, true), oneHost(2, s2), true) == nullptr);  // runs where forced
  }
}

TEST_CASE("planner: HORA_ALGO forces, and a forced algorithm that cannot run is an error saying why", "[planner]") {
  PlannerSettings s;
  s.forced = parseForced("allreduce:ring");
  ShapeOnlyStage s4(4);
  CHECK(plan(allReduce(8), oneHost(4, s4), s, true).algo == Algo::Ring);
  s.forced = parseForced("flat");
  CHECK(plan(allReduce(64 << 20), oneHost(4, s4), s, true).algo == Algo::Flat);
  try {
    plan(allReduce(8), overTcp(4), s, true);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string w = e.what();
    INFO(w);
    CHECK(e.code() == Errc::InvalidUsage);
    CHECK(w.find("HORA_ALGO forces flat for AllReduce") != std::string::npos);
    CHECK(w.find("shared stage") != std::string::npos);
    CHECK(w.find("what could: ") != std::string::npos);
    CHECK(w.find("ring") != std::string::npos);
  }
  // One rank: every algorithm is a copy, so forcing is moot.
  JobShape one = overTcp(1);
  CHECK_NOTHROW(plan(allReduce(8), one, s, true));
}

TEST_CASE("planner: the choice explains itself with its predictions", "[planner]") {
  ShapeOnlyStage s4(4);
  Choice why;
  Args a = allReduce(1 << 20);
  a.dtype = DataType::Float32;
  a.count = (1 << 20) / 4;
  const Plan p = plan(a, oneHost(4, s4), PlannerSettings(), true, &why);
  const std::string text = explain(a, oneHost(4, s4), p, why);
  INFO(text);
  CHECK(text.rfind("AllReduce 1 MiB float, 4 ranks on 1 host: chose slice (predicted ", 0) == 0);
  for (const char* other : {"flat ", "rd ", "ring ", "direct "}) CHECK(text.find(other) != std::string::npos);
  CHECK(why.predictedUs > 0);
  for (const auto& [id, us] : why.others) CHECK(us >= why.predictedUs);
}

TEST_CASE("planner: tune files", "[planner]") {
  Costs c;
  c.links["tcp"] = {9.5, 1.25};
  c.baseUs["ring"] = 7;
  c.baseUs["ring-allgather"] = 3;
  c.byteFactor["tree-broadcast"] = 0.5;
  c.kernelCopy = {4.5, 11};
  const Costs back = parseCosts(formatCosts(c), "test");
  CHECK(back.kernelCopy.latencyUs == Approx(4.5));
  CHECK(back.kernelCopy.gbps == Approx(11));
  CHECK(back.link("tcp").latencyUs == Approx(9.5));
  CHECK(back.link("tcp").gbps == Approx(1.25));
  // An algorithm's costs for one collective, else its own, else none.
  CHECK(back.base("ring", Kind::AllReduce) == Approx(7));
  CHECK(back.base("ring", Kind::AllGather) == Approx(3));
  CHECK(back.base("tree", Kind::AllGather) == Approx(0));
  CHECK(back.factor("tree", Kind::Broadcast) == Approx(0.5));
  CHECK(back.factor("tree", Kind::AllReduce) == Approx(1));
  CHECK(back.factor("flat", Kind::AllReduce) == Approx(1.75));
  CHECK(back.stage.latencyUs == Approx(c.stage.latencyUs));
  // Slow TCP links move the crossover from recursive doubling to the ring up.
  PlannerSettings s;
  s.costs = parseCosts("link tcp 100 5\n", "test");
  JobShape slow = overTcp(4);
  slow.slowest = s.costs.link("tcp");
  CHECK(algoName(plan(allReduce(256 << 10), slow, s, true).algo) == std::string("rd"));
  CHECK(algoName(plan(allReduce(256 << 10), overTcp(4), s, true).algo) == std::string("ring"));
  for (const char* bad : {"stage 1\n", "link tcp x 1\n", "wat 1 2\n", "memory -3\n", "bytes flat 0\n", "kernelcopy 3\n",
                          "kernelcopy 3 0\n"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parseCosts(std::string("# ok\n") + bad, "FILE"), Catch::Contains("FILE, line 2"));
  }
}

namespace {

// Measured across 4 network-namespace hosts of 2 ranks on a 2-core machine (docs/perf/hosts/,
// `perf/compare --hosts 4x2 ... --algos`: medians of 3 rounds, us per call, each algorithm
// forced), by buffer size (AllGather: the gathered buffer).
struct Row {
  Kind kind;
  const char* algo;
  double us[8];  // at 8 B, 64 B, 512 B, 4 KiB, 32 KiB, 256 KiB, 2 MiB, 16 MiB
};
const size_t kSizes[8] = {8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 2 << 20, 16 << 20};
const Row kHosts4x2[] = {
    {Kind::AllReduce, "hier", {251, 237, 252, 310, 398, 1205, 10652, 88725}},
    {Kind::AllReduce, "rabenseifner", {354, 416, 451, 501, 608, 1479, 11968, 103664}},
    {Kind::AllReduce, "rd", {225, 209, 202, 284, 381, 1801, 23965, 204766}},
    {Kind::AllReduce, "ring", {392, 552, 561, 661, 749, 1880, 11527, 88578}},
    {Kind::AllReduce, "tree", {354, 386, 353, 407, 572, 1608, 12231, 96654}},
    {Kind::Broadcast, "binomial", {31, 54, 64, 68, 83, 533, 5113, 40903}},
    {Kind::Broadcast, "chain", {31, 35, 38, 48, 67, 419, 4121, 37032}},
    {Kind::Broadcast, "hier", {124, 117, 144, 118, 153, 477, 4358, 38189}},
    {Kind::Broadcast, "tree", {48, 66, 74, 74, 121, 672, 5551, 43662}},
    {Kind::AllGather, "bruck", {0, 262, 278, 300, 388, 1015, 9082, 76395}},
    {Kind::AllGather, "hier", {0, 245, 229, 243, 337, 864, 8294, 58804}},
    {Kind::AllGather, "rd", {0, 203, 206, 211, 275, 566, 5195, 46980}},
    {Kind::AllGather, "ring", {0, 313, 334, 387, 384, 628, 4836, 38551}},
};

Args callOf(Kind k, size_t bytes, int n) {
  Args a;
  a.kind = k;
  a.dtype = DataType::Float32;
  a.count = (k == Kind::AllGather ? bytes / static_cast<size_t>(n) : bytes) / 4;
  return a;
}

}  // namespace

// The planner's choices against the crossovers measured across hosts: at every size of every
// collective, the algorithm it chooses (among those measured) with the model fitted to these
// times (coll/fit.h, what `hora-tune --fit` does with its own), and with the built-in costs,
// against the fastest measured.
TEST_CASE("planner: across 4 hosts, the choice against the measured crossovers, fitted and built-in", "[planner][fit]") {
  const HostLayout layout = HostLayout::fromLabels({0, 0, 1, 1, 2, 2, 3, 3});
  const ShapeOnlyStage hostStage(2);
  JobShape t;
  t.nranks = 8;
  t.hosts = 4;
  t.ranksPerHost = 2;
  t.coresPerHost = 2;
  t.ranksPerMachine = 8;
  t.layout = &layout;
  t.hostStage = &hostStage;
  t.local = Costs().link("shm");
  t.slowest = Costs().link("tcp");
  std::vector<Measured> m;
  for (const Row& r : kHosts4x2)
    for (size_t i = 0; i < 8; ++i)
      if (r.us[i] > 0) m.push_back(Measured{callOf(r.kind, kSizes[i], 8), findAlgorithm(r.algo)->id(), r.us[i]});
  std::vector<Fitted> report;
  PlannerSettings fitted;
  fitted.costs = fitCosts(Costs(), t, m, &report);
  std::string fit;
  for (const Fitted& f : report)
    fit += f.key + ": base " + std::to_string(f.baseUs) + " us, factor " + std::to_string(f.factor) + ", worst " +
           std::to_string(f.worst) + "\n";
  if (getenv("FIT_SHOW"))
    for (const Measured& x : m)
      printf("%s %s %zu: measured %.0f predicted %.0f\n", kindName(x.args.kind), algoName(x.algo),
             x.args.count * 4, x.us, algorithm(x.algo).predictUs(x.args, t, fitted.costs));
  INFO("fitted:\n" << fit);
  int before = 0, within = 0, cells = 0;
  for (Kind k : {Kind::AllReduce, Kind::Broadcast, Kind::AllGather})
    for (size_t i = 0; i < 8; ++i) {
      double best = 1e30;
      for (const Row& r : kHosts4x2)
        if (r.kind == k && r.us[i] > 0) best = std::min(best, r.us[i]);
      if (best >= 1e30) continue;
      // The planner's rule (the least predicted time) among the algorithms measured: hora-tune
      // measures every one that can run, these runs did not (direct, for one).
      auto measured = [&](const PlannerSettings& s) {
        std::pair<std::string, double> chose{"", 1e30};
        double least = 1e30;
        for (const Row& r : kHosts4x2) {
          if (r.kind != k || r.us[i] <= 0) continue;
          const double predicted = findAlgorithm(r.algo)->predictUs(callOf(k, kSizes[i], 8), t, s.costs);
          if (predicted < least) least = predicted, chose = {r.algo, r.us[i]};
        }
        return chose;
      };
      const auto [name, us] = measured(fitted);
      INFO(kindName(k) << " of " << kSizes[i] << " bytes: chose " << name << ", measured " << us << " us; fastest "
                       << best << " us");
      // Where the model's shape cannot follow the measured times, a known miss, held to how far
      // it misses now: from 2 MiB the pipelined tree's depth, which the model overlaps, hardly
      // overlaps with 8 ranks on 2 cores (measured 12.2 ms at 2 MiB and 96.7 at 16 MiB, 7.9x;
      // its prediction grows 3x), so no factor fits both and the tree is chosen where the hier
      // AllReduce and the chain Broadcast were faster.
      const bool knownMiss = name == std::string("tree") && kSizes[i] >= (size_t(2) << 20) &&
                             (k == Kind::AllReduce || k == Kind::Broadcast);
      CHECK(us <= (knownMiss ? 1.40 : 1.10) * best);
      within += us <= 1.10 * best;
      cells += 1;
      // The built-in costs: within 15% everywhere (their miss: the 256 KiB AllGather by the
      // ring, 11% behind rd).
      const auto builtIn = measured(PlannerSettings());
      CHECK(builtIn.second <= 1.15 * best);
      if (getenv("FIT_SHOW"))
        printf("%s %zu: fitted %s %.0f, built-in %s %.0f, best %.0f\n", kindName(k), kSizes[i], name.c_str(), us,
               builtIn.first.c_str(), builtIn.second, best);
      before += builtIn.second <= 1.10 * best;
    }
  // Fitted, 20 of the 23 cells are within 10% (the built-in costs' miss among them); the
  // built-in costs, fitted by hand to the crossovers (hier's Broadcast from these times), 22.
  INFO("cells within 10%: fitted " << within << ", built-in " << before << ", of " << cells);
  CHECK(cells == 23);
  CHECK(within >= 20);
  CHECK(before >= 22);
}
