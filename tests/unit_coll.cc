// The functions of unit_coll.h that are not templates.
#include "unit_coll.h"

#include <catch2/catch.hpp>

#include "core/executor.h"

namespace unit {

std::vector<core::Scratch>& scratchPool() {
  static std::vector<core::Scratch> pool(32);  // reused across runs: stale bytes included
  return pool;
}

// Builds every rank's programs (calls[r] in order) and runs them all in one executor run.
void runAll(MemWorld& w, const std::vector<std::vector<coll::Args>>& calls, const coll::Plan& plan,
            milliseconds timeout, const std::vector<int>& hosts) {
  const int n = w.n;
  coll::HostLayout layout;
  if (!hosts.empty()) layout = coll::HostLayout::fromLabels(hosts);
  auto& pool = scratchPool();
  for (int r = 0; r < n; ++r) pool[static_cast<size_t>(r)].reset();
  std::vector<core::Program> progs;
  std::vector<int> owner;
  for (int r = 0; r < n; ++r)
    for (const coll::Args& a : calls[static_cast<size_t>(r)]) {
      progs.emplace_back();
      coll::JobShape topo{r, n};
      if (layout.hosts.size() > 1) {
        topo.layout = &layout;
        topo.hosts = static_cast<int>(layout.hosts.size());
        topo.ranksPerHost = static_cast<int>(layout.hosts[0].size());
      }
      coll::build(a, topo, planFor(a, topo, plan), pool[static_cast<size_t>(r)], progs.back());
      owner.push_back(r);
    }
  std::vector<core::Job> jobs(progs.size());
  for (size_t k = 0; k < progs.size(); ++k) {
    jobs[k].program = &progs[k];
    jobs[k].conns = w.table[static_cast<size_t>(owner[k])].data();
    jobs[k].nranks = n;
  }
  core::Executor ex;
  ex.run(jobs, timeout);
  std::string why;
  if (!w.quiet(&why)) FAIL("after the run: " << why);
}

std::string planText(const coll::Plan& p) {
  return "chunk " + std::to_string(p.chunkBytes) + " B, " + std::to_string(p.slots) + " slots";
}

const char* kindText(Kind k) { return coll::kindName(k); }

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

const char* opText(RedOp op) {
  switch (op) {
    case RedOp::Sum: return "Sum";
    case RedOp::Prod: return "Prod";
    case RedOp::Max: return "Max";
    case RedOp::Min: return "Min";
    case RedOp::Avg: return "Avg";
    case RedOp::PreMulSum: return "PreMulSum";
  }
  return "?";
}

bool isCanary(const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (b[i] != kCanary) return false;
  return true;
}

std::string caseText(const Case& c) {
  std::ostringstream s;
  s << kindText(c.kind) << " n=" << c.n << " count=" << c.count << (c.inPlace ? " in-place" : " out-of-place")
    << " op=" << opText(c.op) << " root=" << c.root << " " << planText(c.plan) << " seed=" << c.seed
    << " defer=" << c.deferP << (c.eager ? " eager sends" : " rendezvous sends");
  if (!c.hosts.empty()) {
    s << " hosts=";
    for (int h : c.hosts) s << h;
    s << " inner=" << coll::algoName(c.plan.inner);
  }
  return s.str();
}

coll::Plan plan(size_t chunkBytes, int slots) {
  coll::Plan p;
  p.chunkBytes = chunkBytes;
  p.slots = slots;
  return p;
}

}  // namespace unit
