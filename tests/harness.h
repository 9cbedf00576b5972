// Helpers for multi-rank tests: ranks as threads of this process (horaCommInitAll) or as
// forked processes sharing one unique id, plus typed test data whose reductions are exact.
#pragma once
#include <hora.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hora::test {

// A rank's body: returns "" on success or a description of what went wrong.
using RankFn = std::function<std::string(horaComm_t comm, int rank, int nranks)>;

// Runs fn on n ranks as threads; returns the failures ("rank r: ...").
std::vector<std::string> runThreads(int n, const RankFn& fn);

struct ProcessResult {
  int rank;
  int status;          // as from waitpid
  std::string output;  // what fn returned (or why the child failed)
  bool ok() const;
};

// Sanitizers slow the ranks down (TSan 5 to 15 times, ASan about 3): guards against hangs, and
// the short timeouts of tests whose ranks must still get through init and their first calls
// within them, are multiplied by this.
#if defined(__SANITIZE_THREAD__)
constexpr int kSanitizerScale = 6;
#elif defined(__SANITIZE_ADDRESS__)
constexpr int kSanitizerScale = 3;
#else
constexpr int kSanitizerScale = 1;
#endif

struct ProcessOptions {
  int timeoutMs = 0;           // horaConfig_t.timeoutMs for every rank (0: default)
  int hangGuardSeconds = 120;  // the parent kills children still alive after this (x3 under ASan, x6 under TSan)
};

// Forks n ranks that share a unique id made here; each runs fn on its own communicator and
// exits. A child killed or stopped by the test itself shows in status.
std::vector<ProcessResult> runProcesses(int n, const RankFn& fn, const ProcessOptions& opts = {});
// Like runProcesses, but fn also gets to decide how to init (for tests of init failures).
using RawFn = std::function<std::string(const horaUniqueId& id, int rank, int nranks)>;
std::vector<ProcessResult> runRawProcesses(int n, const RawFn& fn, const ProcessOptions& opts = {});
// As runRawProcesses with an id made by the caller.
std::vector<ProcessResult> runRawProcessesWithId(const horaUniqueId& id, int n, const RawFn& fn,
                                                 const ProcessOptions& opts = {});
// A child stopped by SIGSTOP is SIGKILLed once every child that is not stopped has exited.

std::string describe(const std::vector<ProcessResult>& r);
// runThreads' failures, one per line.
std::string joinAll(const std::vector<std::string>& failures);
// Makes system call `nr` fail with EPERM in this process from now on (a seccomp filter, as a
// container's profile can set); false where the filter could not be installed.
bool forbidSyscall(uint32_t nr);

// ---- typed data -----------------------------------------------------------------------------

size_t typeSize(horaDataType_t t);
const char* typeName(horaDataType_t t);
const char* opName(horaRedOp_t op);
bool isFloat(horaDataType_t t);

// Input element i of rank r for a reduction with op, chosen so that every partial result of
// any reduction order is exactly representable in t. Returned as double; store() encodes it.
double inputValue(horaDataType_t t, horaRedOp_t op, int rank, size_t i);
// The PreMulSum scalar of rank r (exact in t).
double premulScalar(horaDataType_t t, int rank);

void store(horaDataType_t t, void* base, size_t i, double v);
double load(horaDataType_t t, const void* base, size_t i);

// The expected result element i of reducing inputValue over n ranks (PreMulSum: base op Sum
// with premulScalar), computed as the kernels define it (integers wrap, Avg truncates).
void expected(horaDataType_t t, horaRedOp_t op, bool premul, int n, size_t i, void* out);

// Compares count elements bit-exactly; returns "" or the first mismatch.
std::string compare(horaDataType_t t, const void* got, const void* want, size_t count, const std::string& what);

}  // namespace hora::test
