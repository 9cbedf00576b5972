// The shared harness of Hora's benchmark tools (allreduce_perf, ...), compatible with
// NVIDIA's nccl-tests in flags and output. A tool describes its collective by deriving
// from hperf::Collective and calls hperf::perfMain(); everything else (options, buffers,
// data, timing, checking, printing, JSON) lives in common.cc. Only the public hora.h is
// used, so a tool is what any user of the library could write.
#pragma once
#include <cstddef>
#include <cstdint>
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
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual const char* name() const = 0;  // "allreduce": titles and JSON
  virtual bool hasOp() const = 0;        // loops over -o; prints the op, else "none"
  virtual bool hasRoot() const = 0;      // uses -r; prints the root, else -1
  virtual Counts counts(size_t count, int nranks) const = 0;
  // algbw = algBytes / time; busbw = algbw * busBwFactor.
  virtual double algBytes(const Counts& c, size_t typeSize, int nranks) const = 0;
  virtual double busBwFactor(int nranks) const = 0;
  // One call. send and recv are this rank's buffers (in place: the offset pointers).
  virtual horaResult_t run(const TestCase& tc, const void* send, void* recv, horaComm_t comm) const = 0;
  // Writes this rank's input (tc.counts.send elements) for the check.
  virtual void fillInput(const TestCase& tc, void* send) const = 0;
  // The number of wrong elements in this rank's output after the call.
  virtual size_t checkOutput(const TestCase& tc, const void* recv) const = 0;
};

// Parses the command line, creates the communicator(s), runs the benchmark and returns
// the process exit status: 0, 1 if a check failed or an error occurred, 2 on bad usage.
int perfMain(int argc, char** argv, const Collective& coll);

}  // namespace hperf
