// hora-tune: measures the planner's cost model (src/coll/cost.h) on this machine and writes it
// to a file that HORA_TUNE_FILE loads. Run it as the ranks of a job, as the library will run:
//
//   hora-run -n 2 hora-tune -o costs.txt                       # shared memory and the stage
//   HORA_TRANSPORTS=tcp hora-run -n 2 hora-tune -o costs.txt   # then TCP, into the same file
//
// Each run keeps what the file already holds and replaces what it measured: local memory
// bandwidth; the shared stage's flag latency and read bandwidth (when the ranks share one);
// the latency and bandwidth of the transport between ranks 0 and 1 (a ping-pong of 8 bytes,
// then 16 MiB one way); the fixed cost of recursive doubling, the ring and the slice algorithm
// (their time at 8 bytes less the waits the model already counts); then every algorithm that
// can run AllReduce, Broadcast and AllGather here, forced in turn at 64 B, 64 KiB and 4 MiB, and
// its fixed cost and bytes' factor for each collective fitted to those times (coll/fit.h). Every
// time is a median of repeated calls on rank 0. With more ranks than cores the numbers include
// scheduling; tune with at most one rank per core.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "coll/cost.h"
#include "coll/fit.h"
#include "comm/comm.h"
#include "comm/config.h"
#include "hora.h"

namespace {

using Clock = std::chrono::steady_clock;

const char kUsage[] =
    "usage: hora-run -n N hora-tune -o FILE [--fit]\n"
    "\n"
    "Measures the planner's costs on this machine (memory, the shared stage, the transport between\n"
    "ranks 0 and 1, the fixed cost of each algorithm) and writes them to FILE, keeping what FILE\n"
    "already holds for what this run does not measure. Load it with HORA_TUNE_FILE=FILE.\n"
    "--fit: also times every algorithm of AllReduce, Broadcast and AllGather at 64 B, 64 KiB and\n"
    "4 MiB and fits its fixed cost and bytes' factor per collective to those times, printing how\n"
    "far off each fit is.\n";

void check(horaResult_t r, horaComm_t comm) {
  if (r != horaSuccess) hora::fail(hora::Errc::Internal, "%s", horaGetLastError(comm));
}

// Median microseconds of one call of f, over `reps` rounds of `iters` calls each, with every rank
// in step at the start of each round.
template <typename F>
double medianUs(horaComm_t comm, int reps, int iters, F f) {
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    check(horaBarrier(comm, nullptr), comm);
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) f();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters);
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Median us of a collective of `bytes` (AllGather: the gathered buffer) with `algo` forced.
double collectiveUs(horaComm_t comm, hora::coll::Kind kind, hora::coll::Algo algo, size_t bytes, int iters) {
  using hora::coll::Kind;
  auto saved = comm->planner.forced;
  comm->planner.forced.fill(-1);
  comm->planner.forced[static_cast<size_t>(kind)] = static_cast<int>(algo);
  const size_t n = static_cast<size_t>(comm->self().nranks);
  const size_t count = std::max<size_t>(1, (kind == Kind::AllGather ? bytes / n : bytes) / 4);
  std::vector<float> in(count, 1.0f), out(kind == Kind::AllGather ? count * n : count, 0.0f);
  const double us = medianUs(comm, 7, iters, [&] {
    if (kind == Kind::AllReduce) check(horaAllReduce(in.data(), out.data(), count, horaFloat, horaSum, comm, nullptr), comm);
    if (kind == Kind::Broadcast) check(horaBroadcast(in.data(), out.data(), count, horaFloat, 0, comm, nullptr), comm);
    if (kind == Kind::AllGather) check(horaAllGather(in.data(), out.data(), count, horaFloat, comm, nullptr), comm);
  });
  comm->planner.forced = saved;
  return us;
}

double allReduceUs(horaComm_t comm, hora::coll::Algo algo, size_t bytes, int iters) {
  return collectiveUs(comm, hora::coll::Kind::AllReduce, algo, bytes, iters);
}

// Every algorithm that can run AllReduce, Broadcast and AllGather here, timed at a small, a
// middle and a large size, and the fixed costs and bytes' factors fitted to those times
// (coll/fit.h), one pair per algorithm and collective; returns the fitted costs.
hora::coll::Costs fitAlgorithms(horaComm_t comm, const hora::coll::Costs& c, bool print) {
  using namespace hora::coll;
  std::vector<Measured> m;
  for (Kind kind : {Kind::AllReduce, Kind::Broadcast, Kind::AllGather})
    for (const Algorithm* algo : algorithms()) {
      Args probe;
      probe.kind = kind;
      probe.dtype = hora::DataType::Float32;
      probe.count = 1024;
      if (!algo->implements(kind) || algo->unfit(probe, comm->shape, true)) continue;
      for (size_t bytes : {size_t(64), size_t(64) << 10, size_t(4) << 20}) {
        const int iters = bytes >= (size_t(1) << 20) ? 5 : 200;
        Args a = probe;
        a.count = std::max<size_t>(1, (kind == Kind::AllGather ? bytes / static_cast<size_t>(comm->self().nranks) : bytes) / 4);
        if (algo->unfit(a, comm->shape, true)) continue;
        m.push_back(Measured{a, algo->id(), collectiveUs(comm, kind, algo->id(), bytes, iters)});
      }
    }
  std::vector<Fitted> report;
  Costs out = fitCosts(c, comm->shape, m, &report);
  if (print)
    for (const Fitted& f : report)
      printf("hora-tune: %-24s base %8.2f us, bytes x %.3f (%zu sizes, worst %.0f%% off)\n", f.key.c_str(), f.baseUs,
             f.factor, f.samples, 100 * f.worst);
  return out;
}

int run(int argc, char** argv) {
  std::string out;
  bool fit = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
    else if (!strcmp(argv[i], "--fit")) fit = true;
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return fputs(kUsage, stdout), 0;
    else return fprintf(stderr, "hora-tune: unknown argument '%s'\n%s", argv[i], kUsage), 2;
  }
  if (out.empty()) return fputs(kUsage, stderr), 2;
  horaComm_t comm = nullptr;
  if (horaCommInitFromEnv(&comm) != horaSuccess) {
    fprintf(stderr, "hora-tune: %s\n", horaGetLastError(nullptr));
    return 1;
  }
  if (comm->self().nranks < 2) {
    fprintf(stderr, "hora-tune: run it as 2 or more ranks (hora-run -n 2 hora-tune -o FILE)\n");
    return 2;
  }
  hora::coll::Costs c;
  {
    std::ifstream in(out);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      c = hora::coll::parseCosts(text.str(), out);
    }
  }
  const hora::coll::JobShape shape = comm->shape;
  const int n = comm->self().nranks, rank = comm->self().rank;
  // Memory: a copy reads and writes its bytes.
  {
    std::vector<char> a(64 << 20, 1), b(64 << 20, 2);
    const double us = medianUs(comm, 5, 2, [&] { memcpy(b.data(), a.data(), a.size()); });
    c.memoryGBps = 2.0 * static_cast<double>(a.size()) / (us * 1000.0);
  }
  const double sharing = hora::coll::sharing(shape);
  if (sharing > 1 && rank == 0)
    fprintf(stderr, "hora-tune: %d ranks share %d CPUs on a host: the numbers include scheduling\n",
            shape.ranksPerHost, shape.coresPerHost);
  // The transport between ranks 0 and 1.
  const std::string link = comm->self().linkNames[rank == 0 ? 1 : 0];
  {
    std::vector<char> small(8), big(16 << 20);
    auto pingPong = [&] {
      if (rank == 0) {
        check(horaSend(small.data(), 8, horaChar, 1, comm, nullptr), comm);
        check(horaRecv(small.data(), 8, horaChar, 1, comm, nullptr), comm);
      } else if (rank == 1) {
        check(horaRecv(small.data(), 8, horaChar, 0, comm, nullptr), comm);
        check(horaSend(small.data(), 8, horaChar, 0, comm, nullptr), comm);
      }
    };
    const double latency = medianUs(comm, 7, 500, pingPong) / 2;
    const double oneWay = medianUs(comm, 5, 3, [&] {
      if (rank == 0) check(horaSend(big.data(), big.size(), horaChar, 1, comm, nullptr), comm);
      else if (rank == 1) check(horaRecv(big.data(), big.size(), horaChar, 0, comm, nullptr), comm);
      check(horaBarrier(comm, nullptr), comm);
    });
    c.links[link] = {latency, static_cast<double>(big.size()) / (std::max(oneWay - latency, 1.0) * 1000.0)};
  }
  const double wait = hora::coll::waitUs(c.link(link), shape, c) - c.link(link).latencyUs;  // scheduling only
  int steps = 0, p = 1;
  while (p * 2 <= n) p *= 2, ++steps;
  if (p != n) steps += 2;
  c.baseUs["rd"] = std::max(0.0, allReduceUs(comm, hora::coll::Algo::RecursiveDoubling, 8, 2000) -
                                     steps * (c.link(link).latencyUs + wait));
  c.baseUs["ring"] = std::max(0.0, allReduceUs(comm, hora::coll::Algo::Ring, 8, 1000) -
                                       2 * (n - 1) * (c.link(link).latencyUs + wait));
  if (comm->stage && comm->stage->size() == n) {
    // The stage: a lone flat AllReduce of 8 bytes is one flag; of 256 KiB, its bytes.
    const double flat8 = allReduceUs(comm, hora::coll::Algo::Flat, 8, 5000);
    c.stage.latencyUs = std::max(0.01, flat8 - wait);
    const double N = 256 << 10;
    const double flatN = allReduceUs(comm, hora::coll::Algo::Flat, static_cast<size_t>(N), 200);
    const double peersUs = (flatN - flat8) / c.factor("flat", hora::coll::Kind::AllReduce) / sharing - 4 * N / c.memoryGBps / 1000.0;
    if (peersUs > 0) c.stage.gbps = (n - 1) * N / (peersUs * 1000.0);
    c.baseUs["slice"] = std::max(0.0, allReduceUs(comm, hora::coll::Algo::Slice, 8, 2000) - 2 * flat8);
  }
  // Last, with --fit, every algorithm's fixed cost and bytes' factor per collective, fitted on
  // the costs above (a fitted key, "ring-allreduce", wins over the plain "ring" of the lines
  // above). Not by default: the model's shape does not follow every algorithm on every machine
  // (where ranks outnumber cores, a pipeline's depth overlaps less than it predicts), and a fit
  // off by tens of percent can choose worse than the built-in costs; the lines printed say how
  // far off each fit is.
  if (fit) c = fitAlgorithms(comm, c, rank == 0);
  if (rank == 0) {
    std::ofstream f(out, std::ios::trunc);
    f << hora::coll::formatCosts(c);
    if (!f.good()) hora::fail(hora::Errc::System, "writing %s failed", out.c_str());
    printf("hora-tune: %d ranks, link %s: wrote %s\n%s", n, link.c_str(), out.c_str(), hora::coll::formatCosts(c).c_str());
  }
  check(horaCommDestroy(comm), nullptr);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const hora::Error& e) {
    fprintf(stderr, "hora-tune: %s\n", e.what());
    return 1;
  }
}
