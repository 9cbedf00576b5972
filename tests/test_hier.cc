// Tests of the collectives across hosts, without sockets: ranks laid out on hosts (JobShape::layout)
// and run together over the in-memory transport (unit_coll.h), results compared bit for bit with
// the reference. The hierarchical algorithm with every algorithm that can run its phase between
// hosts, every layout shape (hosts of consecutive ranks or interleaved), every root; the ring and
// the chain in host order; the layouts themselves; and the planner's choice across hosts.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "coll/algorithm.h"
#include "coll/collective.h"
#include "coll/planner.h"
#include "unit_coll.h"

using namespace hora;
using namespace unit;
using coll::Algo;
using coll::Kind;

namespace {

// Each rank's host: hosts x ranks, consecutive (0 0 1 1) or interleaved (0 1 0 1).
std::vector<int> layoutOf(int hosts, int perHost, bool interleaved) {
  std::vector<int> v;
  for (int r = 0; r < hosts * perHost; ++r) v.push_back(interleaved ? r % hosts : r / perHost);
  return v;
}

std::string labels(const std::vector<int>& v) {
  std::string s;
  for (int h : v) s += std::to_string(h);
  return s;
}

// The algorithms that can run the phase between hosts of a `kind` call on `hosts` ranks.
std::vector<Algo> innerAlgorithms(Kind kind, int hosts) {
  std::vector<Algo> v;
  coll::Args a;
  a.kind = kind;
  a.count = 64;
  coll::JobShape t{0, hosts};
  for (const coll::Algorithm* algo : coll::algorithms())
    if (algo->id() != Algo::Hier && algo->id() != Algo::P2P && algo->implements(kind) && !algo->unfit(a, t, false))
      v.push_back(algo->id());
  return v;
}

const Kind kHierKinds[] = {Kind::AllReduce, Kind::Broadcast, Kind::Reduce, Kind::AllGather, Kind::ReduceScatter};

}  // namespace

TEST_CASE("hosts: a layout from each rank's host", "[hier]") {
  coll::HostLayout l = coll::HostLayout::fromLabels({7, 3, 7, 3, 9, 9});
  REQUIRE(l.hosts.size() == 3);
  CHECK(l.hosts[0] == std::vector<int>{0, 2});
  CHECK(l.hosts[1] == std::vector<int>{1, 3});
  CHECK(l.hosts[2] == std::vector<int>{4, 5});
  CHECK(l.hostOf == std::vector<int>{0, 1, 0, 1, 2, 2});
  CHECK(l.localIndex == std::vector<int>{0, 0, 1, 1, 0, 1});
  CHECK(l.uniform());
  CHECK_FALSE(l.consecutive());
  CHECK(l.hostOrder() == std::vector<int>{0, 2, 1, 3, 4, 5});
  CHECK(coll::HostLayout::fromLabels({0, 0, 1, 1}).consecutive());
  CHECK_FALSE(coll::HostLayout::fromLabels({0, 0, 1}).uniform());
}

TEST_CASE("hosts: hier with every inner algorithm, every layout, every collective", "[hier]") {
  uint32_t seed = 900000;
  const struct {
    int hosts, perHost;
  } shapes[] = {{2, 1}, {2, 2}, {3, 2}, {2, 3}, {4, 2}, {3, 1}};
  for (const auto& sh : shapes)
    for (bool interleaved : {false, true}) {
      if (interleaved && sh.perHost == 1) continue;
      const int n = sh.hosts * sh.perHost;
      const std::vector<int> hosts = layoutOf(sh.hosts, sh.perHost, interleaved);
      for (Kind kind : kHierKinds)
        for (Algo inner : innerAlgorithms(kind, sh.hosts))
          for (size_t count : {size_t(0), size_t(1), static_cast<size_t>(n + 1), size_t(301)})
            for (bool inPlace : {false, true}) {
              INFO("hosts " << labels(hosts) << ", inner " << coll::algoName(inner));
              Case c;
              c.kind = kind;
              c.n = n;
              c.count = count;
              c.inPlace = inPlace;
              c.plan = kSmall;
              c.plan.algo = Algo::Hier;
              c.plan.inner = inner;
              c.hosts = hosts;
              const bool rooted = kind == Kind::Broadcast || kind == Kind::Reduce;
              const bool reducing = kind != Kind::Broadcast && kind != Kind::AllGather;
              for (RedOp op : {RedOp::Sum, RedOp::Avg, RedOp::PreMulSum, RedOp::Max}) {
                if (!reducing && op != RedOp::Sum) continue;
                c.op = op;
                for (int root = 0; root < (rooted ? n : 1); ++root) {
                  if (rooted && op != RedOp::Sum && root != 0 && root != n - 1) continue;
                  c.root = root;
                  c.seed = seed++;
                  check<int32_t>(c);
                }
              }
            }
    }
}

TEST_CASE("hosts: hier with large buffers and floats", "[hier]") {
  uint32_t seed = 910000;
  for (bool interleaved : {false, true})
    for (Kind kind : kHierKinds) {
      Case c;
      c.kind = kind;
      c.n = 4;
      c.count = 70001;
      c.plan = kDefault;
      c.plan.algo = Algo::Hier;
      c.hosts = layoutOf(2, 2, interleaved);
      c.root = 3;
      c.op = kind == Kind::Broadcast || kind == Kind::AllGather ? RedOp::Sum : RedOp::Avg;
      for (bool inPlace : {false, true}) {
        c.inPlace = inPlace;
        c.seed = seed++;
        check<float>(c);
        check<double>(c);
        check<int8_t>(c);
      }
    }
}

TEST_CASE("hosts: rings and chains over interleaved hosts run in host order", "[hier]") {
  uint32_t seed = 920000;
  for (int hosts : {2, 3})
    for (Kind kind : {Kind::AllReduce, Kind::Broadcast, Kind::Reduce, Kind::AllGather, Kind::ReduceScatter}) {
      Case c;
      c.kind = kind;
      c.n = hosts * 2;
      c.hosts = layoutOf(hosts, 2, true);
      c.plan = kSmall;
      c.plan.algo = kind == Kind::Broadcast || kind == Kind::Reduce ? Algo::Chain : Algo::Ring;
      for (size_t count : {size_t(1), size_t(7), size_t(1000)})
        for (bool inPlace : {false, true})
          for (int root : {0, 1, c.n - 1}) {
            c.count = count;
            c.inPlace = inPlace;
            c.root = root;
            c.op = RedOp::Avg;
            c.seed = seed++;
            check<int32_t>(c);
          }
    }
}

namespace {
coll::JobShape acrossHosts(int hosts, int perHost, const coll::HostLayout& l) {
  coll::JobShape t{0, hosts * perHost};
  t.layout = &l;
  t.hosts = hosts;
  t.ranksPerHost = perHost;
  t.coresPerHost = 16;
  t.local = coll::LinkCost{0.56, 20};
  t.slowest = coll::LinkCost{20, 1.2};  // a network between hosts
  return t;
}
coll::Args call(Kind k, size_t bytes) {
  coll::Args a;
  a.kind = k;
  a.count = bytes / 4;
  return a;
}
}  // namespace

TEST_CASE("hosts: hier is unfit on one host and on uneven hosts, and HORA_ALGO=hier says why", "[hier]") {
  coll::PlannerSettings s;
  s.forced = coll::parseForced("hier");
  coll::JobShape one{0, 4};
  try {
    coll::plan(call(Kind::AllReduce, 1 << 20), one, s, true);
    FAIL("hier on one host was accepted");
  } catch (const Error& e) {
    const std::string w = e.what();
    CHECK(w.find("hier") != std::string::npos);
    CHECK(w.find("every rank is on one host") != std::string::npos);
    CHECK(w.find("ring") != std::string::npos);  // what could
  }
  const coll::HostLayout uneven = coll::HostLayout::fromLabels({0, 0, 1});
  coll::JobShape t = acrossHosts(2, 2, uneven);
  t.nranks = 3;
  CHECK(std::string(coll::algorithm(Algo::Hier).unfit(call(Kind::AllReduce, 64), t, true)) ==
        "its hosts have different numbers of ranks");
}

TEST_CASE("hosts: the planner prefers hier for large calls across hosts, and picks its inner algorithm", "[hier]") {
  const coll::HostLayout l = coll::HostLayout::fromLabels(layoutOf(4, 4, false));
  const coll::JobShape t = acrossHosts(4, 4, l);
  coll::PlannerSettings s;
  for (Kind k : {Kind::AllReduce, Kind::Broadcast, Kind::AllGather}) {
    coll::Choice why;
    const coll::Plan p = coll::plan(call(k, 64 << 20), t, s, false, &why);
    INFO(coll::kindName(k) << ": " << coll::explain(call(k, 64 << 20), t, p, why));
    CHECK(p.algo == Algo::Hier);
    CHECK(coll::algorithm(p.inner).implements(k));
    CHECK(p.inner != Algo::Hier);
  }
}
