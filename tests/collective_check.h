// One collective call on one rank, checked: inputs from harness.h's inputValue, the result
// compared bit-exactly with the reference, the send buffer unchanged out of place, and guard
// bytes around every buffer untouched.
#pragma once
#include <hora.h>

#include <string>
#include <vector>

namespace hora::test {

enum class Coll { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Barrier, Gather, Scatter };
const char* collName(Coll c);
inline const std::vector<Coll>& allColls() {
  static const std::vector<Coll> v{Coll::AllReduce, Coll::Broadcast, Coll::Reduce,  Coll::AllGather, Coll::ReduceScatter,
                                   Coll::AllToAll,  Coll::Barrier,   Coll::Gather, Coll::Scatter};
  return v;
}
// The collectives with a root (Case::root).
inline bool rootedColl(Coll c) {
  return c == Coll::Broadcast || c == Coll::Reduce || c == Coll::Gather || c == Coll::Scatter;
}

// Every data type, in the ABI's order.
const std::vector<horaDataType_t>& allTypes();

struct Case {
  Coll coll;
  horaDataType_t dtype;
  horaRedOp_t op;  // horaNumOps means PreMulSum (an op created for the call)
  size_t count;
  bool inPlace;
  int root;
};
std::string describe(const Case& c);

// Where a case's buffers are: host memory (the default), or device memory (gpu/cuda.h: a GPU,
// or the emulated one), with the call on `stream` (null: synchronous). On a stream, a kernel
// writes the inputs just before the call and another reads the results just after it, all on
// the same stream, and the host looks only after synchronizing the stream.
struct Memory {
  bool device = false;
  void* stream = nullptr;
};

// Runs c on this rank; returns "" or what went wrong.
std::string runCase(horaComm_t comm, int rank, int nranks, const Case& c, const Memory& mem = {});

// The sweep used by the threads and processes tests: every collective x dtype x op x count x
// in-place, with big counts for a few dtype/op pairs only.
std::vector<Case> sweep(int nranks, bool withBig);

}  // namespace hora::test
