// The options of Hora's benchmark tools (nccl-tests' flags and Hora's own) and their parsing:
// the part of the harness (common.cc) that reads the command line.
#pragma once
#include <hora.h>

#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace hperf {

// The tool's name for its messages (set by perfMain).
extern const char* gProgram;

struct Options {
  size_t minBytes = size_t{32} << 20;
  size_t maxBytes = size_t{32} << 20;
  size_t stepFactor = 2;
  size_t stepBytes = size_t{1} << 20;
  bool increment = false;  // step by stepBytes instead of stepFactor
  int iters = 20;
  int scaleIters = 0;  // -S 1: more iterations for small sizes, fewer for huge ones
  int warmup = 5;
  int aggIters = 1;
  int check = 1;
  int average = 1;  // 0 rank 0, 1 average, 2 min, 3 max
  int blocking = 0;
  int root = 0;
  int threads = 0;  // -N: ranks as threads of this process
  int mpi = 1;      // --mpi 0: not MPI's ranks even when an MPI launcher started us
  std::vector<horaDataType_t> types{horaFloat};
  std::vector<horaRedOp_t> ops{horaSum};
  std::string json;
  std::vector<size_t> sizes;
  int device = -1;  // -M: 1 device buffers on a CUDA stream, 0 host; -1 device where there is a GPU
};

#ifdef HORA_PERF_MPI
constexpr bool kBuiltWithMpi = true;
#else
constexpr bool kBuiltWithMpi = false;
#endif

// Prints the options' text.
void usage(FILE* out);
// Says what is wrong (fmt with one %s, what), prints the usage text and exits with status 2.
[[noreturn]] void badUsage(const char* fmt, const char* what);
// A number within [lo, hi] (false where the text is not one).
bool parseInt(const char* text, long lo, long hi, long* out);
// The command line, checked: exits with status 2 and the usage text on anything wrong.
Options parseOptions(int argc, char** argv);

}  // namespace hperf
