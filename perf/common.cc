// The harness of Hora's benchmark tools: communicators, buffers, the timing loop, checking,
// the nccl-tests table and the JSON file (see common.h); the options are options.cc's.
#include "common.h"
#include "device.h"
#include "options.h"

#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#ifdef HORA_PERF_MPI
#include <mpi.h>
#endif

namespace hperf {

bool parseSize(const char* text, size_t* out) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text, &end);
  double unit = 1;
  if (end != text && *end) {
    switch (*end) {
      case 'k': case 'K': unit = 1024.0; break;
      case 'm': case 'M': unit = 1024.0 * 1024; break;
      case 'g': case 'G': unit = 1024.0 * 1024 * 1024; break;
      default: unit = 0; break;
    }
    ++end;
  }
  v *= unit;
  if (end == text || *end || errno != 0 || !std::isfinite(v) || v < 0 || v > std::ldexp(1.0, 48) || unit == 0)
    return false;
  *out = static_cast<size_t>(v);
  return true;
}

namespace {

// ---- one rank ----------------------------------------------------------------------

struct Result {
  double timeUs = 0, algBw = 0, busBw = 0;
  double wrong = -1;  // -1: not checked
};

struct Row {
  size_t size = 0, count = 0;
  horaDataType_t type = horaFloat;
  const char* op = "none";
  int root = -1;
  Result res[2];  // out of place, in place
};

struct Rank {
  const Options& opt;
  const Collective& coll;
  horaComm_t comm = nullptr;
  int rank = 0, nranks = 1;
  bool threads = false;
  const std::string& from;  // where the ranks came from, for the header
  char* sendBuf = nullptr;  // the calls' buffers (device memory with -M device)
  char* recvBuf = nullptr;
  bool device = false;
  horaStream_t stream = nullptr;  // with device buffers
  char* sendHost = nullptr;       // the host side of the check: sendBuf itself, or its copy
  char* recvHost = nullptr;
  size_t sendBytes = 0, recvBytes = 0;
  uint32_t seed = 0;
  std::vector<Row> rows;  // rank 0 only
  double wrongTotal = 0, bwSum = 0;
  int bwCount = 0;

  Rank(const Options& o, const Collective& c, horaComm_t cm, bool th, const std::string& fr)
      : opt(o), coll(c), comm(cm), threads(th), from(fr) {}

  bool printer() const { return rank == 0; }

  [[noreturn]] void die(const char* what, horaResult_t r) const {
    const char* text = comm ? horaGetLastError(comm) : "";
    if (!*text) text = horaGetLastError(nullptr);
    std::fprintf(stderr, "%s: rank %d: %s failed: %s (%d): %s\n", gProgram, rank, what,
                 horaGetErrorString(r), static_cast<int>(r), text);
    std::fflush(nullptr);
    _exit(1);
  }
  void check(horaResult_t r, const char* what) const {
    if (r != horaSuccess) die(what, r);
  }

  void allocate() {
    size_t sendMax = 0, recvMax = 0;
    for (horaDataType_t t : opt.types) {
      const size_t ts = typeSize(t);
      Counts c = coll.counts(opt.maxBytes / ts, nranks);
      // In place, both buffers of the call lie in recvBuf at the rank's offsets (the whole
      // send buffer of a reduce-scatter), as nccl-tests.
      const size_t last = static_cast<size_t>(nranks - 1);
      const size_t inPlaceEnd = std::max(c.sendInplaceOffset * last + c.send, c.recvInplaceOffset * last + c.recv);
      sendMax = std::max(sendMax, c.send * ts);
      recvMax = std::max(recvMax, std::max(c.recv, inPlaceEnd) * ts);
    }
    device = opt.device == 1 || (opt.device == -1 && dev::gpus() > 0);
    if (device && dev::gpus() == 0) {
      std::fprintf(stderr, "%s: rank %d: -M device: no GPU here (%s)\n", gProgram, rank, dev::why().c_str());
      std::fflush(nullptr);
      _exit(2);
    }
    sendBytes = std::max<size_t>(sendMax, 64);
    recvBytes = std::max<size_t>(recvMax, 64);
    for (auto [buf, bytes] : {std::pair<char**, size_t>{&sendHost, sendMax}, {&recvHost, recvMax}}) {
      void* p = nullptr;
      if (posix_memalign(&p, 4096, std::max<size_t>(bytes, 64)) != 0) {
        std::fprintf(stderr, "%s: rank %d: cannot allocate %zu bytes\n", gProgram, rank, bytes);
        std::fflush(nullptr);
        _exit(1);
      }
      std::memset(p, 0, std::max<size_t>(bytes, 64));  // first touch, by the thread that uses it
      *buf = static_cast<char*>(p);
    }
    sendBuf = sendHost;
    recvBuf = recvHost;
    if (device) {
      sendBuf = static_cast<char*>(dev::alloc(sendBytes));
      recvBuf = static_cast<char*>(dev::alloc(recvBytes));
      stream = dev::newStream();
    }
  }

  // The host side of a buffer pointer: itself, or its place in the host copy.
  char* hostOf(char* p) const {
    if (!device) return p;
    if (p >= sendBuf && p < sendBuf + sendBytes) return sendHost + (p - sendBuf);
    return recvHost + (p - recvBuf);
  }

  // Everyone's pid and host, for the header.
  void printRanks() {
    struct Who {
      int32_t pid;
      char host[60];
    } me{}, *all = nullptr;
    me.pid = static_cast<int32_t>(getpid());
    gethostname(me.host, sizeof me.host - 1);
    std::vector<Who> v(static_cast<size_t>(nranks));
    all = v.data();
    check(horaAllGather(&me, all, sizeof me, horaUint8, comm, nullptr), "horaAllGather (rank list)");
    if (!printer()) return;
    std::printf("#\n# Using ranks\n");
    for (int r = 0; r < nranks; ++r) {
      all[r].host[sizeof all[r].host - 1] = '\0';
      std::printf("#  Rank %2d Pid %6d on %10s\n", r, static_cast<int>(all[r].pid), all[r].host);
    }
  }

  void printHeader() {
    if (!printer()) return;
    int version = 0;
    horaGetVersion(&version);
    std::printf("# %s: Hora %d.%d.%d, %d rank%s as %s\n", gProgram, version / 10000, version / 100 % 100,
                version % 100, nranks, nranks == 1 ? "" : "s",
                threads ? "threads of one process" : "processes");
    std::printf("# Ranks from %s\n", from.c_str());
    if (opt.increment)
      std::printf("# minBytes %zu maxBytes %zu step: %zu(bytes)", opt.minBytes, opt.maxBytes, opt.stepBytes);
    else
      std::printf("# minBytes %zu maxBytes %zu step: %zu(factor)", opt.minBytes, opt.maxBytes, opt.stepFactor);
    std::printf(" warmup iters: %d iters: %d agg iters: %d validation: %d average: %d\n", opt.warmup,
                opt.iters, opt.aggIters, opt.check, opt.average);
    std::printf("# nranks %d\n", nranks);
    std::printf("# buffers in %s\n", device ? "device memory, calls on a CUDA stream" : "host memory");
  }

  void printTableHeader() {
    if (!printer()) return;
    std::printf("#\n");
    std::printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
                "", "", "", "", "");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type",
                "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "",
                "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    std::fflush(stdout);
  }

  // One iteration: aggIters calls, in one group when more than one.
  void call(const TestCase& tc, const void* send, void* recv, int aggIters) {
    if (aggIters > 1) check(horaGroupStart(), "horaGroupStart");
    for (int a = 0; a < aggIters; ++a) {
      horaResult_t r = coll.run(tc, send, recv, comm);
      if (r != horaSuccess) {
        char what[160];
        std::snprintf(what, sizeof what, "%s (count %zu, %s, %s, %s)", coll.name(), tc.counts.param,
                      typeName(tc.type), coll.hasOp() ? opName(tc.op) : "no op",
                      send == sendBuf ? "out of place" : "in place");
        die(what, r);
      }
    }
    if (aggIters > 1) check(horaGroupEnd(), "horaGroupEnd");
  }

  // By the bytes each rank sends, as the peers' harnesses count them.
  int itersFor(size_t bytes) const {
    int it = opt.iters;
    if (!opt.scaleIters) return it;
    if (bytes < (size_t{64} << 10)) it *= 50;
    if (bytes >= (size_t{16} << 20)) it = std::max(5, it / 4);
    if (bytes >= (size_t{128} << 20)) it = std::max(3, it / 8);
    return it;
  }

  Result bench(TestCase& tc, bool inPlace) {
    const size_t ts = typeSize(tc.type);
    const Counts& c = tc.counts;
    const size_t r = static_cast<size_t>(rank);
    char* send = inPlace ? recvBuf + c.sendInplaceOffset * r * ts : sendBuf;
    char* recv = inPlace ? recvBuf + c.recvInplaceOffset * r * ts : recvBuf;
    tc.stream = stream;
    for (int i = 0; i < opt.warmup; ++i) call(tc, send, recv, opt.aggIters);
    if (device) dev::sync(stream);
    const int iters = itersFor(c.send * ts);
    // Every rank starts timing together, as nccl-tests and the peers' harnesses do (a barrier
    // before the timed calls): without it a rank that returns early from the last test (rank 0
    // prints its row) starts late, and a rank whose calls run ahead of it (a Reduce's senders)
    // counts the wait for it in its own time.
    if (nranks > 1) check(horaBarrier(comm, device ? stream : nullptr), "horaBarrier");
    if (device) dev::sync(stream);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) call(tc, send, recv, opt.aggIters);
    if (device) dev::sync(stream);
    auto t1 = std::chrono::steady_clock::now();
    double sec = std::chrono::duration<double>(t1 - t0).count() / (static_cast<double>(iters) * opt.aggIters);
    if (opt.average != 0) {
      const horaRedOp_t op = opt.average == 2 ? horaMin : opt.average == 3 ? horaMax : horaSum;
      check(horaAllReduce(&sec, &sec, 1, horaFloat64, op, comm, nullptr), "horaAllReduce (time)");
      if (opt.average == 1) sec /= nranks;
    }
    Result res;
    res.timeUs = sec * 1e6;
    const double base = sec > 0 ? coll.algBytes(c, ts, nranks) / 1e9 / sec : 0;
    res.algBw = base;
    res.busBw = base * coll.busBwFactor(nranks);
    if (opt.check) {
      Pattern pattern(tc.type, tc.op, nranks, ++seed);
      tc.pattern = &pattern;
      poison(hostOf(recv), c.recv, tc.type);
      coll.fillInput(tc, hostOf(send));
      if (device) {
        dev::toDevice(sendBuf, sendHost, sendBytes);
        dev::toDevice(recvBuf, recvHost, recvBytes);
      }
      call(tc, send, recv, 1);  // a single call, so that in place means one reduction
      if (device) {
        dev::sync(stream);
        dev::toHost(recvHost, recvBuf, recvBytes);
      }
      uint64_t wrong = coll.checkOutput(tc, hostOf(recv));
      tc.pattern = nullptr;
      check(horaAllReduce(&wrong, &wrong, 1, horaUint64, horaSum, comm, nullptr), "horaAllReduce (#wrong)");
      res.wrong = static_cast<double>(wrong);
      wrongTotal += res.wrong;
    }
    bwSum += res.busBw;
    ++bwCount;
    return res;
  }

  static void printResult(const Result& r) {
    char t[32];
    const char* fmt = r.timeUs >= 10000.0 ? "%7.0f" : r.timeUs >= 100.0 ? "%7.1f" : "%7.2f";
    std::snprintf(t, sizeof t, fmt, r.timeUs);
    if (r.wrong >= 0)
      std::printf("  %7s  %6.2f  %6.2f  %5g", t, r.algBw, r.busBw, r.wrong);
    else
      std::printf("  %7s  %6.2f  %6.2f  %5s", t, r.algBw, r.busBw, "N/A");
  }

  // One line of the table: the sizes of tc's call, then out of place and in place.
  void runRow(TestCase& tc, size_t size) {
    const size_t ts = typeSize(tc.type);
    tc.counts = coll.counts(size / ts, nranks);
    Row row;
    row.size = std::max(tc.counts.send, tc.counts.recv) * ts;
    row.count = tc.counts.param;
    row.type = tc.type;
    row.op = coll.hasOp() ? opName(tc.op) : "none";
    row.root = coll.hasRoot() ? tc.root : -1;
    if (printer()) {
      std::printf("%12zu  %12zu  %8s  %6s  %6d", row.size, row.count, typeName(tc.type), row.op, row.root);
      std::fflush(stdout);
    }
    for (int inPlace = 0; inPlace < 2; ++inPlace) {
      row.res[inPlace] = bench(tc, inPlace != 0);
      if (printer()) {
        printResult(row.res[inPlace]);
        std::fflush(stdout);
      }
    }
    if (printer()) {
      std::printf("\n");
      std::fflush(stdout);
      rows.push_back(row);
    }
  }

  // As nccl-tests: types, then ops, then roots (-r -1: each in turn), then sizes.
  void runAll() {
    const bool allRoots = coll.hasRoot() && opt.root < 0;
    const int rootBegin = allRoots ? 0 : coll.hasRoot() ? opt.root : 0;
    const int rootEnd = allRoots ? nranks - 1 : rootBegin;
    for (horaDataType_t type : opt.types) {
      for (size_t o = 0; o < (coll.hasOp() ? opt.ops.size() : 1); ++o) {
        for (int root = rootBegin; root <= rootEnd; ++root) {
          for (size_t size : opt.sizes) {
            TestCase tc;
            tc.type = type;
            tc.op = coll.hasOp() ? opt.ops[o] : horaSum;
            tc.root = root;
            tc.rank = rank;
            tc.nranks = nranks;
            runRow(tc, size);
          }
        }
      }
    }
  }

  double avgBusBw() const { return bwCount ? bwSum / bwCount : 0; }
  void printSummary() {
    if (!printer()) return;
    std::printf("# Out of bounds values : %.0f %s\n", wrongTotal, wrongTotal > 0 ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g \n#\n", avgBusBw());
    std::fflush(stdout);
  }

  void writeJson(FILE* f) const;
  int main(FILE* json);
};

// JSON (the schema is in common.h). Written by hand: the harness links nothing but hora.
void jsonNumber(FILE* f, const char* name, double v, const char* before = ", ") {
  if (std::isfinite(v))
    std::fprintf(f, "%s\"%s\": %.10g", before, name, v);
  else
    std::fprintf(f, "%s\"%s\": null", before, name);
}

// The names of a list (types or ops) joined by ",", as the top-level "dtype" and "op".
template <class T, class Name>
std::string joinNames(const std::vector<T>& items, Name name) {
  std::string out;
  for (const T& item : items) out += (out.empty() ? "" : ",") + std::string(name(item));
  return out;
}

void Rank::writeJson(FILE* f) const {
  int version = 0;
  horaGetVersion(&version);
  const std::string ops = coll.hasOp() ? joinNames(opt.ops, opName) : "none";
  std::fprintf(f, "{\n  \"schema\": \"hora-perf/1\", \"tool\": \"%s\", \"collective\": \"%s\", \"library\": \"hora\",\n",
               gProgram, coll.name());
  std::fprintf(f, "  \"version\": \"%d.%d.%d\", \"nranks\": %d, \"mode\": \"%s\",\n", version / 10000,
               version / 100 % 100, version % 100, nranks, threads ? "threads" : "processes");
  std::fprintf(f, "  \"dtype\": \"%s\", \"op\": \"%s\", \"root\": %d,\n", joinNames(opt.types, typeName).c_str(),
               ops.c_str(), coll.hasRoot() ? opt.root : -1);
  std::fprintf(f, "  \"params\": {\"minbytes\": %zu, \"maxbytes\": %zu, \"%s\": %zu, ", opt.minBytes, opt.maxBytes,
               opt.increment ? "stepbytes" : "stepfactor", opt.increment ? opt.stepBytes : opt.stepFactor);
  std::fprintf(f, "\"iters\": %d, \"scale_iters\": %d, \"warmup_iters\": %d, \"agg_iters\": %d, \"check\": %d, \"average\": %d},\n",
               opt.iters, opt.scaleIters, opt.warmup, opt.aggIters, opt.check, opt.average);
  std::fprintf(f, "  \"rows\": [");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f, "%s\n    {\"size\": %zu, \"count\": %zu, \"dtype\": \"%s\", \"op\": \"%s\", \"root\": %d,\n     ",
                 i ? "," : "", r.size, r.count, typeName(r.type), r.op, r.root);
    for (int p = 0; p < 2; ++p) {
      const std::string pre = p ? "inplace_" : "";
      const Result& res = r.res[p];
      jsonNumber(f, (pre + "time_us").c_str(), res.timeUs, p ? ",\n     " : "");
      jsonNumber(f, (pre + "algbw").c_str(), res.algBw);
      jsonNumber(f, (pre + "busbw").c_str(), res.busBw);
      jsonNumber(f, (pre + "wrong").c_str(), res.wrong >= 0 ? res.wrong : std::nan(""));  // null: unchecked
    }
    std::fprintf(f, "}");
  }
  std::fprintf(f, "\n  ],\n  ");
  jsonNumber(f, "wrong_total", opt.check ? wrongTotal : std::nan(""), "");  // null: unchecked
  jsonNumber(f, "avg_busbw", avgBusBw());
  std::fprintf(f, "\n}\n");
}

int Rank::main(FILE* json) {
  check(horaCommUserRank(comm, &rank), "horaCommUserRank");
  check(horaCommCount(comm, &nranks), "horaCommCount");
  if (coll.hasRoot() && opt.root >= nranks) {  // -1 (every root) is always in range
    if (printer()) std::fprintf(stderr, "%s: root %d is out of range for %d ranks\n", gProgram, opt.root, nranks);
    return 2;
  }
  allocate();
  printHeader();
  printRanks();
  printTableHeader();
  runAll();
  printSummary();
  if (printer() && json) {
    writeJson(json);
    if (std::fclose(json) != 0) {
      std::fprintf(stderr, "%s: cannot write %s: %s\n", gProgram, opt.json.c_str(), std::strerror(errno));
      return 1;
    }
  }
  if (device) {
    dev::release(sendBuf);
    dev::release(recvBuf);
    dev::destroyStream(stream);
  }
  std::free(sendHost);
  std::free(recvHost);
  check(horaCommDestroy(comm), "horaCommDestroy");
  comm = nullptr;
  return wrongTotal > 0 ? 1 : 0;
}

FILE* openJson(const Options& opt) {
  if (opt.json.empty()) return nullptr;
  FILE* f = std::fopen(opt.json.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "%s: cannot open %s: %s\n", gProgram, opt.json.c_str(), std::strerror(errno));
    std::fflush(nullptr);
    _exit(2);
  }
  return f;
}

}  // namespace

namespace {

// One rank of a job whose launcher set the environment: horaCommInitFromEnv finds rank,
// size and rendezvous there (HORA_ID from hora-run, or HORA_ROOT with HORA_SECRET).
int runFromEnv(const Options& opt, const Collective& coll, const Launcher& l) {
  horaComm_t comm = nullptr;
  horaResult_t r = horaCommInitFromEnv(&comm);
  if (r != horaSuccess) {
    std::fprintf(stderr, "%s: rank %s: horaCommInitFromEnv failed: %s: %s\n", gProgram, l.rank(),
                 horaGetErrorString(r), horaGetLastError(nullptr));
    // Started by a launcher that is not Hora's and without Hora's rendezvous: say how to run
    // (once, on rank 0, where the rank is known).
    const bool first = std::strcmp(l.rank(), "0") == 0 || std::strcmp(l.rank(), "?") == 0;
    if (first && !l.hora() && !envValue("HORA_ID") && !envValue("HORA_ROOT") && !envValue("MASTER_ADDR")) {
      std::string instead;
      if (l.mpi)
        instead = kBuiltWithMpi ? "run without --mpi 0 (this build takes its ranks from MPI), or "
                                : "rebuild the perf tools with MPI (Debian: apt-get install libopenmpi-dev; "
                                  "meson setup --reconfigure -Dmpi=enabled build), or ";
      else if (l.slurm())
        instead = kBuiltWithMpi ? "run srun --mpi=pmix (or pmi2, as this MPI supports), or "
                                : "build the perf tools with MPI and run srun --mpi=pmix, or ";
      std::fprintf(stderr,
                   "%s: %s=%d says this is one of %d ranks started by %s, but %s; %sgive every rank Hora's "
                   "own rendezvous: HORA_ROOT=<rank 0's host>:<port> and HORA_SECRET=<64 hex digits, "
                   "e.g. from openssl rand -hex 32>%s\n",
                   gProgram, l.sizeVar, l.size, l.size, l.name,
                   !l.mpi ? "Hora has no rendezvous to meet the others at"
                   : kBuiltWithMpi ? "--mpi 0 keeps MPI out, and Hora has no rendezvous to meet the others at"
                                   : "this build of the perf tools has no MPI to meet the others through",
                   instead.c_str(), l.mpi ? " (mpirun -x HORA_ROOT -x HORA_SECRET)" : "");
    }
    return 1;
  }
  int rank = 0;
  horaCommUserRank(comm, &rank);
  FILE* json = rank == 0 ? openJson(opt) : nullptr;
  const std::string from = l.describe();
  Rank me(opt, coll, comm, false, from);
  return me.main(json);
}

#ifdef HORA_PERF_MPI
// Started by an MPI launcher: MPI_Init would find its job (PMIx, as Open MPI 5 and srun
// --mpi=pmix, says the rank but not the size).
bool launchedByMpi() {
  return envValue("OMPI_COMM_WORLD_SIZE") || envValue("PMI_SIZE") || envValue("PMIX_RANK");
}

// The ranks of MPI_COMM_WORLD, as nccl-tests built with MPI=1: rank 0 makes Hora's unique
// id, MPI_Bcast hands it to the others, and each joins with horaCommInitRank. MPI carries
// nothing else: timing, the check's counts and the table go through Hora, as under
// hora-run. A failure after MPI_Init exits without MPI_Finalize, so that mpirun reports
// it and stops the other ranks.
int runMpi(int argc, char** argv, const Options& opt, const Collective& coll) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "%s: MPI_Init failed\n", gProgram);
    return 1;
  }
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  struct {
    horaUniqueId id;
    int32_t ok;
  } root{};
  if (rank == 0) {
    horaResult_t r = horaGetUniqueId(&root.id);
    root.ok = r == horaSuccess;
    if (!root.ok)
      std::fprintf(stderr, "%s: rank 0: horaGetUniqueId failed: %s: %s\n", gProgram, horaGetErrorString(r),
                   horaGetLastError(nullptr));
  }
  if (MPI_Bcast(&root, static_cast<int>(sizeof root), MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
    std::fprintf(stderr, "%s: rank %d: MPI_Bcast of the unique id failed\n", gProgram, rank);
    return 1;
  }
  if (!root.ok) return 1;
  horaComm_t comm = nullptr;
  horaResult_t r = horaCommInitRank(&comm, size, root.id, rank);
  if (r != horaSuccess) {
    std::fprintf(stderr, "%s: rank %d of %d (MPI): horaCommInitRank failed: %s: %s\n", gProgram, rank, size,
                 horaGetErrorString(r), horaGetLastError(nullptr));
    return 1;
  }
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_Get_library_version(version, &length);
  std::string library(version, static_cast<size_t>(std::max(length, 0)));
  library = library.substr(0, library.find_first_of(",\n"));  // "Open MPI v4.1.4", "MPICH Version:\t4.0"
  std::replace(library.begin(), library.end(), '\t', ' ');
  const std::string from = "MPI (" + library + ", " + std::to_string(size) + " rank" + (size == 1 ? "" : "s") + ")";
  FILE* json = rank == 0 ? openJson(opt) : nullptr;
  Rank me(opt, coll, comm, false, from);
  const int status = me.main(json);
  MPI_Finalize();
  return status;
}
#endif

}  // namespace

int perfMain(int argc, char** argv, const Collective& coll) {
  if (argc > 0 && argv[0]) {
    const char* slash = std::strrchr(argv[0], '/');
    gProgram = slash ? slash + 1 : argv[0];
  }
  Options opt = parseOptions(argc, argv);
  // Never one lone rank where a launcher says there are more: MPI's ranks, or the
  // launcher's through horaCommInitFromEnv, which fails saying why without a rendezvous.
  const Launcher launcher = findLauncher();
  const bool launched = launcher.hora() || launcher.size > 1;
  if (launched && opt.threads > 0)
    badUsage("%s", ("-N runs ranks as threads; it cannot be combined with a launcher (" + launcher.describe() +
                    ")").c_str());
  if (opt.threads == 0) {
#ifdef HORA_PERF_MPI
    if (!launcher.hora() && opt.mpi && launchedByMpi()) return runMpi(argc, argv, opt, coll);
#endif
    if (launched) return runFromEnv(opt, coll, launcher);
  }

  const int n = opt.threads > 0 ? opt.threads : 1;
  const std::string from = opt.threads > 0 ? "threads (-N " + std::to_string(n) + ")"
                           : launcher.sizeVar ? "one process, of " + launcher.describe()
                                              : "one process (no launcher)";
  FILE* json = openJson(opt);
  std::vector<horaComm_t> comms(static_cast<size_t>(n), nullptr);
  horaResult_t r = horaCommInitAll(comms.data(), n, nullptr);
  if (r != horaSuccess) {
    std::fprintf(stderr, "%s: horaCommInitAll(%d) failed: %s: %s\n", gProgram, n, horaGetErrorString(r),
                 horaGetLastError(nullptr));
    return 1;
  }
  std::vector<int> status(static_cast<size_t>(n), 0);
  std::vector<std::thread> workers;
  for (int i = 0; i < n; ++i) {
    workers.emplace_back([&, i] {
      Rank me(opt, coll, comms[static_cast<size_t>(i)], true, from);
      status[static_cast<size_t>(i)] = me.main(json);  // only rank 0 writes it
    });
  }
  for (auto& w : workers) w.join();
  return *std::max_element(status.begin(), status.end());
}

}  // namespace hperf
