// The peer of init_perf (perf/init.cc): MPI_Init and one 8-byte MPI_Allreduce (a float sum,
// checked), timed and printed as init_perf prints them. perf/init-compare builds it with mpicxx.
#include <mpi.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

static double realUs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

int main(int argc, char** argv) {
  const double mainUs = realUs();
  const char* t0 = getenv("INIT_T0_NS");
  const double launch = t0 ? static_cast<double>(strtoull(t0, nullptr, 10)) / 1e3 : 0;
  MPI_Init(&argc, &argv);
  const double inited = realUs();
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  float x[2] = {static_cast<float>(rank + 1), static_cast<float>(rank + 1)}, y[2];
  const double a = realUs();
  MPI_Allreduce(x, y, 2, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const double end = realUs();
  const float want = static_cast<float>(n) * static_cast<float>(n + 1) / 2;
  if (y[0] != want || y[1] != want) {
    fprintf(stderr, "mpi_init: rank %d: MPI_Allreduce gave %g, want %g\n", rank, y[0], want);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (launch > 0)
    printf("init rank %d of %d: main %.0f us, init %.0f us, first allreduce %.1f us, from launch %.0f us\n", rank, n,
           mainUs - launch, inited - mainUs, end - a, end - launch);
  else
    printf("init rank %d of %d: init %.0f us, first allreduce %.1f us\n", rank, n, inited - mainUs, end - a);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
