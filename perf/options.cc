// The options of Hora's benchmark tools and their parsing (options.h).
#include "options.h"

#include <getopt.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common.h"

namespace hperf {

const char* gProgram = "perf";

void usage(FILE* out) {
  std::fprintf(out,
      "usage: %s [options]\n"
      "  -b, --minbytes <size>       smallest size in bytes, K/M/G suffixes (default 32M)\n"
      "  -e, --maxbytes <size>       largest size (default 32M)\n"
      "  -f, --stepfactor <n>        multiply the size by n between tests (default 2)\n"
      "  -i, --stepbytes <size>      add this many bytes instead (default 1M when used)\n"
      "  -n, --iters <n>             timed iterations per test (default 20)\n"
      "  -S, --scale_iters <0/1>     1: -n x 50 below 64 KiB, / 4 from 16 MiB, / 8 from 128 MiB\n"
      "                              (as ../shared/bench's Open MPI and Gloo harnesses do; default 0)\n"
      "  -w, --warmup_iters <n>      untimed iterations before each test (default 5)\n"
      "  -m, --agg_iters <n>         calls per iteration, in one group (default 1)\n"
      "  -c, --check <0/1>           check the results (default 1)\n"
      "  -o, --op <sum/prod/max/min/avg/all>          reduction op (default sum)\n"
      "  -d, --datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>\n"
      "                              data type (default float)\n"
      "  -r, --root <rank>           root of rooted collectives, -1 for each in turn (default 0)\n"
      "  -z, --blocking <0/1>        accepted for compatibility; no effect\n"
      "  -a, --average <0/1/2/3>     time reported: rank 0's, average, min or max over ranks (default 1)\n"
      "  -J, --output_file <file>    also write the results as JSON (schema hora-perf/1: perf/common.h)\n"
      "  -M, --memory <host/device>  the buffers: host memory, or device memory with the calls on a CUDA\n"
      "                              stream (default: device where there is a GPU, else host)\n"
      "  -N, --nranks <n>            run n ranks as threads of this process (horaCommInitAll);\n"
      "                              without it, ranks come from the launcher (mpirun, srun, hora-run),\n"
      "                              else 1 rank\n"
      "      --mpi <0/1>             0: do not use MPI even when mpirun started the ranks (they then need\n"
      "                              HORA_ROOT and HORA_SECRET); default 1: MPI's ranks when %s\n"
      "  -g, --ngpus 1, -t, --nthreads 1    accepted for compatibility (only 1)\n"
      "  -h, --help                  show this text\n",
      gProgram, kBuiltWithMpi ? "launched by MPI" : "built with MPI (this build is not)");
}

bool parseInt(const char* text, long lo, long hi, long* out) {
  if (!text || !*text) return false;
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

[[noreturn]] void badUsage(const char* fmt, const char* what) {
  std::fprintf(stderr, "%s: ", gProgram);
  std::fprintf(stderr, fmt, what);
  std::fprintf(stderr, "\n");
  usage(stderr);
  std::exit(2);
}

namespace {

int intOption(const char* text, long lo, long hi, const char* name) {
  long v;
  if (!parseInt(text, lo, hi, &v)) {
    std::string what = std::string(name) + " '" + text + "' (expected " + std::to_string(lo) + " to " + std::to_string(hi) + ")";
    badUsage("bad value for %s", what.c_str());
  }
  return static_cast<int>(v);
}

// A size (parseSize), or bad usage.
size_t sizeOption(const char* text, const char* name) {
  size_t v = 0;
  if (!parseSize(text, &v)) badUsage("bad size for %s", (std::string(name) + " '" + text + "'").c_str());
  return v;
}

const horaDataType_t kAllTypes[] = {horaInt8, horaUint8, horaInt32, horaUint32, horaInt64,
                                    horaUint64, horaFloat16, horaFloat32, horaFloat64, horaBfloat16};
const horaRedOp_t kAllOps[] = {horaSum, horaProd, horaMax, horaMin, horaAvg};

}  // namespace

Options parseOptions(int argc, char** argv) {
  Options o;
  constexpr int kMpiOption = 256;  // long only
  bool factorGiven = false, bytesGiven = false;
  static const option longOpts[] = {
      {"minbytes", required_argument, nullptr, 'b'}, {"maxbytes", required_argument, nullptr, 'e'},
      {"stepfactor", required_argument, nullptr, 'f'}, {"stepbytes", required_argument, nullptr, 'i'},
      {"iters", required_argument, nullptr, 'n'}, {"scale_iters", required_argument, nullptr, 'S'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"agg_iters", required_argument, nullptr, 'm'}, {"check", required_argument, nullptr, 'c'},
      {"op", required_argument, nullptr, 'o'}, {"datatype", required_argument, nullptr, 'd'},
      {"root", required_argument, nullptr, 'r'}, {"blocking", required_argument, nullptr, 'z'},
      {"average", required_argument, nullptr, 'a'}, {"output_file", required_argument, nullptr, 'J'},
      {"nranks", required_argument, nullptr, 'N'}, {"ngpus", required_argument, nullptr, 'g'},
      {"nthreads", required_argument, nullptr, 't'}, {"help", no_argument, nullptr, 'h'},
      {"mpi", required_argument, nullptr, kMpiOption}, {"memory", required_argument, nullptr, 'M'},
      {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":b:e:f:i:n:S:w:m:c:o:d:r:z:a:J:N:g:t:M:h", longOpts, nullptr)) != -1) {
    switch (c) {
      case 'b': o.minBytes = sizeOption(optarg, "-b"); break;
      case 'e': o.maxBytes = sizeOption(optarg, "-e"); break;
      case 'f': o.stepFactor = static_cast<size_t>(intOption(optarg, 1, 1 << 20, "-f")); factorGiven = true; break;
      case 'i': o.stepBytes = sizeOption(optarg, "-i"); bytesGiven = true; break;
      case 'n': o.iters = intOption(optarg, 1, 1 << 30, "-n"); break;
      case 'S': o.scaleIters = intOption(optarg, 0, 1, "-S"); break;
      case 'w': o.warmup = intOption(optarg, 0, 1 << 30, "-w"); break;
      case 'm': o.aggIters = intOption(optarg, 1, 1 << 20, "-m"); break;
      case 'c': o.check = intOption(optarg, 0, 1, "-c"); break;
      case 'z': o.blocking = intOption(optarg, 0, 1, "-z"); break;
      case 'a': o.average = intOption(optarg, 0, 3, "-a"); break;
      case 'r': o.root = intOption(optarg, -1, 1 << 20, "-r"); break;
      case 'N': o.threads = intOption(optarg, 1, 1024, "-N"); break;
      case 'g': intOption(optarg, 1, 1, "-g"); break;
      case 't': intOption(optarg, 1, 1, "-t"); break;
      case kMpiOption: o.mpi = intOption(optarg, 0, 1, "--mpi"); break;
      case 'M': {
        const std::string v = optarg;
        if (v != "host" && v != "device") badUsage("bad value for -M '%s' (expected host or device)", optarg);
        o.device = v == "device";
        break;
      }
      case 'J': o.json = optarg; if (o.json.empty()) badUsage("%s", "empty file name for -J"); break;
      case 'o': {
        std::string v = optarg;
        o.ops.clear();
        if (v == "all") o.ops.assign(std::begin(kAllOps), std::end(kAllOps));
        for (horaRedOp_t op : kAllOps)
          if (v == opName(op)) o.ops.push_back(op);
        if (o.ops.empty()) badUsage("unknown op '%s'", optarg);
        break;
      }
      case 'd': {
        std::string v = optarg;
        o.types.clear();
        if (v == "all") o.types.assign(std::begin(kAllTypes), std::end(kAllTypes));
        for (horaDataType_t t : kAllTypes)
          if (v == typeName(t)) o.types.push_back(t);
        if (o.types.empty()) badUsage("unknown datatype '%s'", optarg);
        break;
      }
      case 'h': usage(stdout); std::exit(0);
      case ':':
      default: {
        std::string name = optopt > 0 && optopt < 128 ? std::string("-") + static_cast<char>(optopt)
                                                      : std::string(argv[optind - 1]);
        badUsage(c == ':' ? "option %s needs a value" : "unknown option %s", name.c_str());
      }
    }
  }
  if (optind < argc) badUsage("unexpected argument '%s'", argv[optind]);
  if (o.minBytes > o.maxBytes) badUsage("%s", "minbytes (-b) is larger than maxbytes (-e)");
  o.increment = (bytesGiven && !(factorGiven && o.stepFactor > 1)) || o.stepFactor == 1;
  if (o.increment && o.stepBytes == 0 && o.minBytes < o.maxBytes) badUsage("%s", "stepbytes (-i) must be > 0");
  if (!o.increment && o.minBytes == 0 && o.maxBytes > 0) badUsage("%s", "a step factor never grows size 0: use -b > 0 or -i");
  for (size_t s = o.minBytes;;) {
    o.sizes.push_back(s);
    size_t next = o.increment ? s + o.stepBytes : s * o.stepFactor;
    if (next <= s || next > o.maxBytes) break;
    s = next;
  }
  return o;
}

}  // namespace hperf
