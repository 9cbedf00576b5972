// The shared harness of Hora's benchmark tools (allreduce_perf, ...), compatible with
// NVIDIA's nccl-tests in flags and output. A tool describes its collective by deriving
// from hperf::Collective and calls hperf::perfMain(); everything else (options, buffers,
// data, timing, checking, printing, JSON) lives in common.cc. Only the public hora.h is
// used, so a tool is what any user of the library could write. The JSON it writes with -J
// is described at the end of this file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hora.h"

namespace hperf {

// ---- data types --------------------------------------------------------------------

size_t typeSize(horaDataType_t type);
const char* typeName(horaDataType_t type);
const char* opName(horaRedOp_t op);
bool isFloatType(horaDataType_t type);   // half, float, double, bfloat16
bool isSignedType(horaDataType_t type);  // signed integers and floating types

// IEEE half and bfloat16 <-> float, rounding to nearest even.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);
float bf16ToFloat(uint16_t b);
uint16_t floatToBf16(float f);

// ---- test data ---------------------------------------------------------------------

// The input data of one check. Element i of rank r's input is a small integer (a function
// of r, i and a seed) chosen so that every reduction over all ranks with `op` is exactly
// representable in `type`: sums stay within the type's exact integer range, and so do
// products (of factors 1, 2, 3 and signs, the non-trivial ones rationed when ranks are many). Only avg on floating types may round (the
// division by nranks, or a pre-scaling), so it is compared with a tolerance.
// Collectives without an op use the data of sum. Indices are "global": element i of the
// whole logical vector, so that a block of rank r starting at element s is filled with
// fill(buf, n, r, s).
class Pattern {
 public:
  Pattern(horaDataType_t type, horaRedOp_t op, int nranks, uint32_t seed);

  double value(int rank, size_t index) const;  // rank's input element
  double reduced(size_t index) const;          // op over all ranks' inputs

  // Writes count elements of rank's input, global indices start.. start+count-1.
  void fill(void* buf, size_t count, int rank, size_t start) const;
  // Number of elements of buf that differ from rank's input (a broadcast, gather...).
  size_t checkInput(const void* buf, size_t count, int rank, size_t start) const;
  // Number of elements of buf that differ from the reduction over all ranks.
  size_t checkReduced(const void* buf, size_t count, size_t start) const;

 private:
  static constexpr uint32_t kPeriod = 10007;  // a prime, so no power-of-two chunk aligns
  uint32_t phase(size_t index) const { return static_cast<uint32_t>((index + offset_) % kPeriod); }
  double valueAt(int rank, uint32_t j) const;
  double reduceAt(uint32_t j) const;
  bool matches(double got, double want) const;

  horaDataType_t type_;
  horaRedOp_t op_;
  int nranks_;
  uint32_t seed_;
  size_t offset_;
  int64_t magnitude_ = 1;  // sum/max/min/avg: values in [-m, m] (or [0, m] if unsigned)
  uint32_t sparse_ = 1;    // > 1: only ranks with (j + rank) % sparse == 0 are non-zero
  uint32_t factorEvery_ = 1;  // prod: a factor 2 or 3 only where (j + rank) % factorEvery == 0
  double tolerance_ = 0;   // avg on floating types only
  mutable std::vector<double> table_;  // reduceAt(j) for every j, built on first use
};

// Sets count elements to a value no correct result has (NaN, or the type's extreme).
void poison(void* buf, size_t count, horaDataType_t type);

// ---- collectives -------------------------------------------------------------------

// Element counts of one test, as nccl-tests' getCollByteCount: for a test of `count`
// elements (size / type size), how many elements sendbuff and recvbuff hold, the count
// passed to the call, and where the in-place buffers sit inside recvbuff: the in-place
// sendbuff is recvbuff + sendInplaceOffset * rank, the in-place recvbuff is
// recvbuff + recvInplaceOffset * rank (elements).
struct Counts {
  size_t send = 0;
  size_t recv = 0;
  size_t param = 0;
  size_t sendInplaceOffset = 0;
  size_t recvInplaceOffset = 0;
};

// Everything a collective needs to know about one call.
struct TestCase {
  horaDataType_t type = horaFloat;
  horaRedOp_t op = horaSum;  // horaSum for collectives without an op
  int root = 0;              // 0 for collectives without a root
  int rank = 0;
  int nranks = 1;
  Counts counts;
  const Pattern* pattern = nullptr;
  horaStream_t stream = nullptr;  // -M device: the CUDA stream of the calls
};

// A collective as a tool sees it. The defaults describe the simplest shape (every rank
// sends and receives `count` elements, algbw counts them once, busbw = algbw, no op, no
// root), so that a tool overrides only what differs.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual const char* name() const = 0;  // "allreduce": titles and JSON
  virtual bool hasOp() const { return false; }    // loops over -o; prints the op, else "none"
  virtual bool hasRoot() const { return false; }  // uses -r; prints the root, else -1
  virtual Counts counts(size_t count, int /*nranks*/) const {
    Counts c;
    c.send = c.recv = c.param = count;
    return c;
  }
  // algbw = algBytes / time; busbw = algbw * busBwFactor.
  virtual double algBytes(const Counts& c, size_t typeSize, int /*nranks*/) const {
    return static_cast<double>(c.param) * static_cast<double>(typeSize);
  }
  virtual double busBwFactor(int /*nranks*/) const { return 1.0; }
  // One call. send and recv are this rank's buffers (in place: the offset pointers).
  virtual horaResult_t run(const TestCase& tc, const void* send, void* recv, horaComm_t comm) const = 0;
  // Writes this rank's input (tc.counts.send elements) for the check.
  virtual void fillInput(const TestCase& tc, void* send) const = 0;
  // The number of wrong elements in this rank's output after the call.
  virtual size_t checkOutput(const TestCase& tc, const void* recv) const = 0;
};

// The shape of allgather and reducescatter: a test of `count` elements is the whole
// (gathered or scattered) vector, n blocks of count / n elements (nccl-tests rounds down).
// One buffer is the whole vector, the other one block, the count passed; in place the
// block sits at rank * block in the vector. algbw counts the whole vector, and busbw =
// algbw x (n-1)/n: each rank moves the n - 1 blocks that are not its own.
class BlockCollective : public Collective {
 public:
  explicit BlockCollective(bool sendIsBlock) : sendIsBlock_(sendIsBlock) {}
  Counts counts(size_t count, int nranks) const override {
    const size_t block = count / static_cast<size_t>(nranks);
    Counts c;
    c.param = block;
    (sendIsBlock_ ? c.sendInplaceOffset : c.recvInplaceOffset) = block;
    c.send = sendIsBlock_ ? block : block * static_cast<size_t>(nranks);
    c.recv = sendIsBlock_ ? block * static_cast<size_t>(nranks) : block;
    return c;
  }
  double algBytes(const Counts& c, size_t typeSize, int nranks) const override {
    return static_cast<double>(c.param) * static_cast<double>(typeSize) * nranks;
  }
  double busBwFactor(int nranks) const override {
    return nranks > 0 ? static_cast<double>(nranks - 1) / nranks : 0.0;
  }

 private:
  bool sendIsBlock_;  // allgather; reducescatter's block is the received one
};

// ---- options -----------------------------------------------------------------------

// A size in bytes: a number, optionally fractional, with an optional K, M or G (powers of
// 1024), at most 2^48. False when text is not one.
bool parseSize(const char* text, size_t* out);

// ---- where the ranks come from -----------------------------------------------------

// The value of an environment variable, nullptr when unset or empty.
const char* envValue(const char* name);

// What a launcher's environment says of this process (also used by tools/hora_soak.cc).
struct Launcher {
  const char* sizeVar = nullptr;  // nullptr: none
  const char* rankVar = nullptr;
  const char* name = "";
  int size = 0;      // 0: HORA_SIZE that is not a number
  bool mpi = false;  // MPI_Init would take its ranks from this launcher

  bool hora() const;   // hora-run's variables (or HORA_ROOT set by hand)
  bool slurm() const;
  const char* rank() const;     // the rank variable's value, "?" if unset
  std::string describe() const; // "Open MPI's mpirun (OMPI_COMM_WORLD_SIZE=4)"
};

// The launcher that started this process: hora-run (HORA_SIZE), Open MPI's mpirun, a PMI
// launcher, srun (in a step), torchrun; sizeVar == nullptr when none.
Launcher findLauncher();

// Parses the command line, creates the communicator(s), runs the benchmark and returns
// the process exit status: 0, 1 if a check failed or an error occurred, 2 on bad usage.
int perfMain(int argc, char** argv, const Collective& coll);

// ---- JSON (-J FILE) ----------------------------------------------------------------
//
// The tools, perf/anchors2json (the peers of ../shared/bench/anchors.sh) and perf/compare
// (medians over rounds) all write one schema, which perf/plot and perf/compare read.
// It is stable: fields are only ever added, never renamed or given another meaning; a
// reader ignores fields it does not know. Numbers that are not finite are null.
//
// {
//   "schema": "hora-perf/1",
//   "tool": "allreduce_perf",      the program ("mpi_bench", "gloo_bench" for the peers)
//   "collective": "allreduce",     allreduce broadcast reduce allgather reducescatter sendrecv
//                                  gather scatter
//   "library": "hora",             or the peer: "ompi-vader", "ompi-tcp", "gloo-ring", ...
//   "version": "0.1.0",            the library's version, null where unknown
//   "nranks": 4,
//   "mode": "threads",             "threads" (-N) or "processes" (hora-run, mpirun, ...)
//   "dtype": "float",              the type of the rows; several (-d all): names joined by ","
//   "op": "sum",                   likewise for -o; "none" for a collective without an op
//   "root": 0,                     -r; -1 for every root in turn, and without a root
//   "params": {"minbytes": 8, "maxbytes": 1048576, "stepfactor": 2 (or "stepbytes"),
//              "iters": 20, "scale_iters": 0, "warmup_iters": 5, "agg_iters": 1, "check": 1, "average": 1},
//                                  what is known of the run's options ({} for the peers)
//   "rows": [{
//     "size": 4096,                bytes, as nccl-tests prints it: the larger of one rank's
//                                  send and receive buffers (allgather: the received total,
//                                  reducescatter: the sent total; gather and scatter: the
//                                  root's whole vector)
//     "count": 1024,               the count passed to the call
//     "dtype": "float", "op": "sum", "root": -1,          this row's
//     "time_us": 12.5,             out of place: microseconds per call (see -a)
//     "algbw": 0.33, "busbw": 0.49,     GB/s (1e9 bytes/s); busbw = algbw x the bus factor
//     "wrong": 0,                  elements that differ from the expected result over all
//                                  ranks; null when not checked (-c 0)
//     "inplace_time_us", "inplace_algbw", "inplace_busbw", "inplace_wrong":  the same, in
//                                  place; absent where the tool measures one way only (peers)
//   }, ...],
//   "wrong_total": 0,              the sum of every "wrong" and "inplace_wrong" (null: none
//                                  was checked)
//   "avg_busbw": 0.41              the mean busbw over all measurements, as the text summary
// }
//
// Optional fields that files made by other programs may carry: "label" (perf/plot's legend
// instead of "library, N ranks"), "rounds" (perf/compare: each number is a median over that
// many runs), "transports" (the HORA_TRANSPORTS of the run), "source" (the files merged).

}  // namespace hperf
