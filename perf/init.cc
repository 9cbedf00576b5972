// init_perf: what it costs to start. Each rank makes its communicator and runs one 8-byte
// AllReduce (a float sum, checked), then prints one line:
//
//   init rank R of N: main S us, init I us, first allreduce A us, from launch L us
//
// main: from the launch to main() (where INIT_T0_NS holds the launch's CLOCK_REALTIME in
// nanoseconds, as perf/init-compare sets it; else 0 and "from launch" is not printed); init:
// horaCommInitFromEnv (or horaCommInitRank); first allreduce: that call; from launch: from the
// launch to the end of the first AllReduce, the job's time to its first completed collective.
//
//   hora-run -n 8 init_perf            ranks as processes, started by a launcher
//   init_perf -N 64                    ranks as threads of this process, each joining with
//                                      horaCommInitRank on one unique id; also prints the
//                                      slowest and the median thread's init
//
// Exit status 1 if an init or the AllReduce fails or its result is wrong.
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "hora.h"

namespace {

double realUs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

double launchUs() {
  const char* t0 = getenv("INIT_T0_NS");
  return t0 ? static_cast<double>(strtoull(t0, nullptr, 10)) / 1e3 : 0;
}

struct Times {
  double init = 0, first = 0, end = 0;  // end: realUs() after the first AllReduce
  bool ok = false;
  char why[256] = {0};
};

// The first AllReduce on comm, checked: every rank gives rank + 1.
void firstAllReduce(horaComm_t comm, int rank, int n, Times& t) {
  const double a = realUs();
  float x[2] = {static_cast<float>(rank + 1), static_cast<float>(rank + 1)};
  horaResult_t r = horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr);
  t.end = realUs();
  t.first = t.end - a;
  const float want = static_cast<float>(n) * static_cast<float>(n + 1) / 2;
  if (r != horaSuccess) snprintf(t.why, sizeof t.why, "AllReduce failed: %s", horaGetLastError(comm));
  else if (x[0] != want || x[1] != want) snprintf(t.why, sizeof t.why, "AllReduce gave %g, want %g", x[0], want);
  else t.ok = true;
}

void print(int rank, int n, double mainUs, double launch, const Times& t) {
  if (launch > 0)
    printf("init rank %d of %d: main %.0f us, init %.0f us, first allreduce %.1f us, from launch %.0f us\n", rank, n,
           mainUs - launch, t.init, t.first, t.end - launch);
  else
    printf("init rank %d of %d: init %.0f us, first allreduce %.1f us\n", rank, n, t.init, t.first);
  fflush(stdout);
}

int threads(int n, double mainUs, double launch) {
  horaUniqueId id;
  if (horaGetUniqueId(&id) != horaSuccess) {
    fprintf(stderr, "init_perf: horaGetUniqueId failed\n");
    return 1;
  }
  std::vector<Times> times(static_cast<size_t>(n));
  std::vector<horaComm_t> comms(static_cast<size_t>(n), nullptr);
  std::vector<std::thread> ts;
  const double start = realUs();
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      Times& t = times[static_cast<size_t>(r)];
      const double a = realUs();
      if (horaCommInitRank(&comms[static_cast<size_t>(r)], n, id, r) != horaSuccess) {
        snprintf(t.why, sizeof t.why, "horaCommInitRank failed: %s", horaGetLastError(nullptr));
        return;
      }
      t.init = realUs() - a;
      firstAllReduce(comms[static_cast<size_t>(r)], r, n, t);
    });
  for (std::thread& t : ts) t.join();
  const double all = realUs() - start;
  int bad = 0;
  std::vector<double> inits;
  for (int r = 0; r < n; ++r) {
    const Times& t = times[static_cast<size_t>(r)];
    if (!t.ok) {
      fprintf(stderr, "init_perf: rank %d: %s\n", r, t.why[0] ? t.why : "init failed");
      ++bad;
    }
    inits.push_back(t.init);
    if (r == 0) print(r, n, mainUs, launch, t);
  }
  std::sort(inits.begin(), inits.end());
  printf("init %d ranks as threads: horaCommInitRank %.0f us at the slowest, %.0f us the median; all joined and "
         "through the first allreduce in %.0f us\n",
         n, inits.back(), inits[inits.size() / 2], all);
  for (horaComm_t c : comms)
    if (c) horaCommDestroy(c);  // (a finalize waits for every rank: one thread cannot do it for all)
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const double mainUs = realUs(), launch = launchUs();
  int n = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-N") && i + 1 < argc) {
      n = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: init_perf [-N RANKS_AS_THREADS]   (or under a launcher: hora-run -n N init_perf)\n");
      return 2;
    }
  }
  if (n > 0) return threads(n, mainUs, launch);
  horaComm_t comm = nullptr;
  Times t;
  const double a = realUs();
  if (horaCommInitFromEnv(&comm) != horaSuccess) {
    fprintf(stderr, "init_perf: horaCommInitFromEnv failed: %s\n", horaGetLastError(nullptr));
    return 1;
  }
  t.init = realUs() - a;
  int rank = 0, size = 0;
  horaCommUserRank(comm, &rank);
  horaCommCount(comm, &size);
  firstAllReduce(comm, rank, size, t);
  if (!t.ok) {
    fprintf(stderr, "init_perf: rank %d: %s\n", rank, t.why);
    return 1;
  }
  print(rank, size, mainUs, launch, t);
  horaCommFinalize(comm);
  horaCommDestroy(comm);
  return 0;
}
