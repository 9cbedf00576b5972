// mpi_coll: Open MPI's side of the collectives that the anchors' MPI benchmark does not time
// (Reduce, ReduceScatter, Gather, Scatter), for perf/compare, in the anchors' rows:
//
//   # peer: mpi-<collective>  nranks: <n>
//   <size> <count> float <sum|none> <time us> <algbw GB/s> <busbw GB/s> <#wrong>
//
// size is the bytes Hora's tool of the same name reports for the call (the whole vector of n
// blocks for ReduceScatter, Gather and Scatter; the buffer for Reduce), count its elements;
// the time is the slowest rank's mean over the iterations, as the anchors take it; the roots are
// rank 0; every size's last call is checked exactly (small integers in float).
//
// Exits 1 where a result was wrong. Built by perf/compare with mpicxx (where libopenmpi-dev is),
// and by meson where it finds MPI (a test runs it on 3 ranks); run under mpirun:
//   mpi_coll -c reduce|reducescatter|gather|scatter [-b 8] [-e 64M] [-f 4] [-n 20] [-w 3]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string coll = "reduce";
  size_t minBytes = 8, maxBytes = size_t(64) << 20;
  int factor = 4, iters = 20, warmup = 3;
};

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const char* v = argv[i + 1];
    if (a == "-c") o.coll = v;
    else if (a == "-b") o.minBytes = parseSize(v);
    else if (a == "-e") o.maxBytes = parseSize(v);
    else if (a == "-f") o.factor = std::max(2, atoi(v));
    else if (a == "-n") o.iters = std::max(1, atoi(v));
    else if (a == "-w") o.warmup = std::max(0, atoi(v));
  }
  return o;
}

// As the anchors and Hora's tools with -S 1: more iterations for small calls, fewer for large.
int itersFor(const Options& o, size_t bytes) {
  int it = o.iters;
  if (bytes < (size_t(64) << 10)) it *= 50;
  if (bytes >= (size_t(16) << 20)) it = std::max(5, it / 4);
  if (bytes >= (size_t(128) << 20)) it = std::max(3, it / 8);
  return it;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Element j of rank r's input: a small integer, so that every sum is exact.
float input(int r, size_t j) { return static_cast<float>(r + 1 + static_cast<int>(j % 7)); }

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const Options o = parse(argc, argv);
  const bool reduce = o.coll == "reduce", reduceScatter = o.coll == "reducescatter", gather = o.coll == "gather",
             scatter = o.coll == "scatter";
  if (!reduce && !reduceScatter && !gather && !scatter) {
    if (rank == 0) fprintf(stderr, "mpi_coll: -c %s: reduce, reducescatter, gather or scatter\n", o.coll.c_str());
    MPI_Finalize();
    return 2;
  }
  const size_t un = static_cast<size_t>(n);
  bool anyWrong = false;  // the exit status: 1 where a result was wrong
  if (rank == 0) {
    printf("# peer: mpi-%s  nranks: %d\n", o.coll.c_str(), n);
    printf("# %10s %12s %6s %6s %12s %8s %8s %6s\n", "size", "count", "type", "redop", "time_us", "algbw", "busbw", "#wrong");
  }
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= static_cast<size_t>(o.factor)) {
    // Reduce: count elements; the others: n blocks of `block` (what Hora's tools take for this size).
    const size_t count = std::max<size_t>(1, bytes / sizeof(float));
    const size_t block = count / un;
    if (!reduce && block == 0) continue;  // Hora's tools move nothing at this size
    const size_t total = reduce ? count : block * un;
    std::vector<float> in(reduceScatter || (scatter && rank == 0) ? total : reduce ? count : block);
    std::vector<float> out(reduce ? count : (gather && rank == 0) ? total : block);
    for (size_t j = 0; j < in.size(); ++j) in[j] = input(rank, j);
    auto run = [&] {
      if (reduce) MPI_Reduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
      else if (reduceScatter)
        MPI_Reduce_scatter_block(in.data(), out.data(), static_cast<int>(block), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      else if (gather)
        MPI_Gather(in.data(), static_cast<int>(block), MPI_FLOAT, out.data(), static_cast<int>(block), MPI_FLOAT, 0,
                   MPI_COMM_WORLD);
      else
        MPI_Scatter(in.data(), static_cast<int>(block), MPI_FLOAT, out.data(), static_cast<int>(block), MPI_FLOAT, 0,
                    MPI_COMM_WORLD);
    };
    for (int w = 0; w < o.warmup; ++w) run();
    // By the bytes each rank sends, as Hora's tools count them.
    const int iters = itersFor(o, (gather ? block : total) * sizeof(float));
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now();
    for (int it = 0; it < iters; ++it) run();
    double dt = (now() - t0) / iters, slowest = 0;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    // The last call's result, exactly.
    std::fill(out.begin(), out.end(), -1.0f);
    run();
    long wrong = 0;
    const float ranksSum = static_cast<float>(n * (n + 1) / 2);
    if (reduce && rank == 0)
      for (size_t i = 0; i < count; ++i) wrong += out[i] != ranksSum + static_cast<float>(n * static_cast<int>(i % 7));
    if (reduceScatter)
      for (size_t i = 0; i < block; ++i) {
        const size_t j = static_cast<size_t>(rank) * block + i;
        wrong += out[i] != ranksSum + static_cast<float>(n * static_cast<int>(j % 7));
      }
    if (gather && rank == 0)
      for (size_t j = 0; j < total; ++j) wrong += out[j] != input(static_cast<int>(j / block), j % block);
    if (scatter)
      for (size_t i = 0; i < block; ++i) wrong += out[i] != input(0, static_cast<size_t>(rank) * block + i);
    long allWrong = 0;
    MPI_Allreduce(&wrong, &allWrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    anyWrong |= allWrong != 0;
    if (rank == 0) {
      const size_t size = total * sizeof(float);
      const double algbw = static_cast<double>(size) / slowest / 1e9;
      const double bus = reduce ? 1.0 : static_cast<double>(n - 1) / n;
      printf("  %10zu %12zu %6s %6s %12.2f %8.3f %8.3f %6ld\n", size, total, "float", reduce || reduceScatter ? "sum" : "none",
             slowest * 1e6, algbw, algbw * bus, allWrong);
      fflush(stdout);
    }
  }
  MPI_Finalize();
  return anyWrong ? 1 : 0;
}
