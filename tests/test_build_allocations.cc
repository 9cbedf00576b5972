// A call allocates nothing once warm. Building a call's program allocates nothing once the
// thread's program and the communicator's scratch have grown to it: every algorithm that runs
// over links (the stage's run without a program), every collective it implements, small to
// large, on one host and across two. A call over TCP had made 3 to 19 allocations a rank (the
// trees' lists of children, slots and dependencies, the ring's tables of op ids), at a few
// percent of a small call's time. And a whole call, on the thread that makes it, through the
// shared stage and over TCP.
//
// This file replaces the global operator new to count the allocations of the testing thread
// (and of each rank's thread).
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "coll/algorithm.h"
#include "coll/collective.h"
#include "coll/cost.h"
#include "core/program.h"
#include "harness.h"
#include "hora.h"

namespace {
thread_local bool tCounting = false;
thread_local size_t tAllocations = 0;
}  // namespace

void* operator new(size_t n) {
  if (tCounting) ++tAllocations;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace {

using namespace hora;
using coll::Kind;
using test::joinAll;
using test::runThreads;

TEST_CASE("the allocation counter counts this thread's allocations", "[build]") {
  tCounting = true;
  tAllocations = 0;
  std::vector<int>* v = new std::vector<int>(100);
  tCounting = false;
  CHECK(tAllocations == 2);  // the vector and its elements
  delete v;
}

TEST_CASE("building a call's program allocates nothing once warm", "[build]") {
  const Kind kinds[] = {Kind::AllReduce, Kind::Broadcast, Kind::Reduce,  Kind::AllGather, Kind::ReduceScatter,
                        Kind::AllToAll,  Kind::Barrier,   Kind::Gather,  Kind::Scatter,   Kind::Send,
                        Kind::Recv};
  std::vector<std::string> failures;
  size_t built = 0;
  for (int n : {2, 3, 4, 8}) {
    for (int hosts : {1, 2}) {
      if (hosts > 1 && n % hosts) continue;
      std::vector<int> labels;
      for (int r = 0; r < n; ++r) labels.push_back(r / (n / hosts));
      const coll::HostLayout layout = coll::HostLayout::fromLabels(labels);
      for (size_t count : {size_t(1), size_t(1000), size_t(300000)}) {
        std::vector<float> in(count * static_cast<size_t>(n)), out(count * static_cast<size_t>(n));
        for (const coll::Algorithm* algo : coll::algorithms())
          for (Kind kind : kinds) {
            if (!algo->implements(kind)) continue;
            for (int r = 0; r < n; ++r)
              for (bool inPlace : {false, true}) {
                coll::Args a;
                a.kind = kind;
                a.count = count;
                a.root = n - 1;
                a.peer = kind == Kind::Send ? (r + 1) % n : (r + n - 1) % n;
                a.recvbuf = out.data();
                a.sendbuf = inPlace ? out.data() : in.data();
                coll::JobShape t{r, n};
                if (hosts > 1) {
                  t.layout = &layout;
                  t.hosts = hosts;
                  t.ranksPerHost = n / hosts;
                }
                if (algo->unfit(a, t, true)) continue;
                coll::Plan p;
                p.algo = algo->id();
                algo->refine(a, t, coll::Costs(), p);
                core::Scratch scratch;
                core::Program program;
                size_t allocations = 0;
                for (int i = 0; i < 3; ++i) {
                  scratch.reset();
                  program.clear();
                  tAllocations = 0;
                  tCounting = i == 2;
                  coll::build(a, t, p, scratch, program);
                  tCounting = false;
                  allocations = tAllocations;
                }
                ++built;
                if (allocations)
                  failures.push_back(std::string(coll::kindName(kind)) + " by " + coll::algoName(p.algo) + ", " +
                                     std::to_string(count) + " floats, rank " + std::to_string(r) + " of " +
                                     std::to_string(n) + " on " + std::to_string(hosts) + " host(s)" +
                                     (inPlace ? " in place" : "") + ": " + std::to_string(allocations) +
                                     " allocations");
              }
          }
      }
    }
  }
  INFO(built << " calls built; the first failures:\n"
             << [&] {
                  std::string s;
                  for (size_t i = 0; i < failures.size() && i < 20; ++i) s += failures[i] + "\n";
                  return s;
                }());
  CHECK(built > 1000);
  CHECK(failures.empty());
}

// Each rank, on its own thread, makes every collective 20 times to warm up and then 100 times
// counting its allocations: through the shared stage (the default) and over TCP, small calls
// and calls of 64 KiB a rank (pipelined through the links, the single copy or the slots). The
// calls of different collectives and one size had shared a slot of the communicator's plan
// cache, so that each was planned again (5 allocations a call); the executor had freed the
// lists of the queues a call did not need (3 a call).
TEST_CASE("a call allocates nothing once warm", "[calls]") {
  constexpr size_t kGrowthMost = 100;
  const char* before = std::getenv("HORA_TRANSPORTS");
  const std::string saved = before ? before : "";
  for (const char* transports : {"", "tcp"}) {
    for (size_t count : {size_t(8), size_t(16384)}) {
      if (*transports) setenv("HORA_TRANSPORTS", transports, 1);
      else unsetenv("HORA_TRANSPORTS");
      const std::vector<std::string> failures = runThreads(4, [&](horaComm_t comm, int rank, int n) -> std::string {
        std::vector<float> in(count * static_cast<size_t>(n), 1.0f + static_cast<float>(rank));
        std::vector<float> out(count * static_cast<size_t>(n));
        auto calls = [&]() -> std::string {
          if (horaAllReduce(in.data(), out.data(), count, horaFloat32, horaSum, comm, nullptr) != horaSuccess ||
              horaBroadcast(in.data(), out.data(), count, horaFloat32, 1, comm, nullptr) != horaSuccess ||
              horaReduce(in.data(), out.data(), count, horaFloat32, horaSum, 0, comm, nullptr) != horaSuccess ||
              horaAllGather(in.data(), out.data(), count, horaFloat32, comm, nullptr) != horaSuccess ||
              horaReduceScatter(in.data(), out.data(), count, horaFloat32, horaSum, comm, nullptr) != horaSuccess)
            return horaGetLastError(comm);
          return "";
        };
        for (int i = 0; i < 20; ++i)
          if (std::string e = calls(); !e.empty()) return e;
        tAllocations = 0;
        tCounting = true;
        std::string e;
        for (int i = 0; i < 100 && e.empty(); ++i) e = calls();
        tCounting = false;
        if (!e.empty()) return e;
        // The last ReduceScatter's block: the sum of every rank's input.
        if (out[0] != static_cast<float>(n * (n + 1) / 2)) return "ReduceScatter gave " + std::to_string(out[0]);
        // None a call: a list that grows to its largest the first times a rank sleeps in a wait
        // (the descriptors it polls) or takes a call's completions may still grow, a few times in
        // all, as the scheduling has it; one allocation a call would be 500.
        return tAllocations >= kGrowthMost ? std::to_string(tAllocations) + " allocations in 500 calls" : "";
      });
      INFO((*transports ? transports : "the default transports") << ", " << count << " floats");
      CHECK(joinAll(failures) == "");
    }
  }
  if (before) setenv("HORA_TRANSPORTS", saved.c_str(), 1);
  else unsetenv("HORA_TRANSPORTS");
}

}  // namespace
