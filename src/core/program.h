// A program: one rank's part of a collective as a list of operations with dependencies, which
// the executor (executor.h) runs on any transport. Algorithms (src/coll) build programs; they
// never touch a wire.
//
//   Send   peer, buffer, bytes           the next message to `peer`
//   Recv   peer, buffer, bytes, action   the next message from `peer`; then `action`
//   Local  action                        a reduction or copy on this rank (compute.h)
//   Signal counter, value                sets one of this rank's counters of the shared stage
//                                        (transports/stage.h)
//   Wait   counter, value                until every member of the stage, this rank included,
//                                        has set that counter to at least value
//   Fetch  member, buffer, bytes, value  copies into buffer `bytes` at `offset` of the buffer
//                                        that stage member published in its region (at
//                                        action.src0) for chunk `value`, read where it lies in
//                                        its memory (SharedStage::readMember: the single copy),
//                                        less the tail that the member said it puts itself
//   Put    member, buffer, bytes, value  the other way: writes `bytes` of buffer there
//                                        (SharedStage::writeMember)
//
// Every op is asynchronous: the executor posts it once its (up to two, or a list of)
// dependencies have completed, tests it, and completes it; a send or receive is carried by a
// transport, an action by a compute engine, a signal or wait by the shared stage. Messages to
// one peer start in the order they were added, and so do messages from one peer, which is how
// the k-th send of one rank meets the k-th receive of the other. A Recv's action (for example
// "reduce the chunk that just arrived into the result") is posted when its bytes are in; the op
// completes after it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/inline_vec.h"
#include "kernels/cpu/reduce.h"

namespace hora::core {

enum class OpKind : uint8_t { Send, Recv, Local, Signal, Wait, Fetch, Put };

// dst = src0 (+) src1 (or a copy / scaling of src0 when src1 is null), per kernels::reduce;
// with nsrcList > 0 the sources are instead Program::srcLists[srcList .. srcList+nsrcList).
// With dst2 the same result also goes there, in the same pass (the kernels' fused
// reduce-copy): one read of the sources for two places.
// Where it runs: the job's compute engine, or its copy engine (Job::copies: the copies between
// device buffers and the host blocks a program runs on, device_copies.h).
enum class Engine : uint8_t { Compute, Copies };
struct Action {
  bool active = false;
  Engine engine = Engine::Compute;
  void* dst = nullptr;
  void* dst2 = nullptr;
  const void* src0 = nullptr;
  const void* src1 = nullptr;
  size_t count = 0;
  kernels::ReduceSpec spec;
  uint32_t srcList = 0, nsrcList = 0;
};

struct Op {
  OpKind kind;
  int32_t peer = -1;     // Send, Recv: the rank; Fetch, Put: the stage member
  int32_t counter = -1;  // Signal, Wait: the stage's counter; Send, Recv: the call number its
                         // frame carries, where not the program's (-1: Program::call)
  void* buf = nullptr;   // Send, Recv, Fetch, Put
  size_t bytes = 0;      // Send, Recv: the message's length; Fetch, Put: what to copy
  uint64_t value = 0;    // Signal, Wait: the counter's value; Fetch, Put: the chunk; Send, Recv:
                         // the message's tag, where not the program's (0: Program::tag)
  // Fetch, Put: where in the member's published buffer, and the length it must have published.
  uint64_t offset = 0, total = 0;
  int32_t dep[2] = {-1, -1};
  uint32_t depList = 0, ndepList = 0;  // more dependencies: Program::depLists[depList ..]
  Action action;
};

struct Deps {
  int32_t a = -1, b = -1;
};

struct Program {
  std::vector<Op> ops;
  std::vector<int32_t> depLists;
  std::vector<const void*> srcLists;
  uint64_t tag = 0;  // carried by every message; see src/coll/tag.cc
  // The collective's number on its communicator, from 1 modulo 65536 (0: send/recv), carried
  // by every message too (transports/frame.h).
  uint16_t call = 0;
  // Peers read or write this rank's buffers themselves, at addresses given in data (the stage's
  // single copy: Fetch, Put), not only through this program's messages.
  bool exposes = false;
  void clear() {
    call = 0;
    exposes = false;
    ops.clear();
    depLists.clear();
    srcLists.clear();
  }
};

// Scratch memory for programs of one group: blocks that never move while the group runs and
// are kept for reuse by the next one.
class Scratch {
 public:
  void* get(size_t bytes);
  void reset();  // every pointer handed out becomes free again
  // n elements of a trivial T, each init: a build's working lists (op ids by step and chunk),
  // from memory kept between calls rather than allocated by each.
  template <class T>
  T* array(size_t n, const T& init) {
    T* p = static_cast<T*>(get(n * sizeof(T)));
    for (size_t i = 0; i < n; ++i) p[i] = init;
    return p;
  }

 private:
  struct Block {
    std::unique_ptr<uint8_t[]> mem;
    size_t size, used;
  };
  std::vector<Block> blocks_;
};

class ProgramBuilder {
 public:
  explicit ProgramBuilder(Program& p) : p_(p) {}
  int32_t send(int peer, const void* buf, size_t bytes, Deps d = {});
  int32_t recv(int peer, void* buf, size_t bytes, Deps d = {}, const Action& then = {});
  int32_t local(const Action& a, Deps d = {});
  int32_t signal(int counter, uint64_t value, Deps d = {});
  int32_t wait(int counter, uint64_t value, Deps d = {});
  // The part [offset, offset + bytes) of the buffer of `total` bytes that stage member `member`
  // published at `published` (a transport::SharedStage::Published in its region) for chunk
  // `chunk`: read into buf (fetch), or written from buf (put).
  struct Remote {
    int member;
    const void* published;
    uint64_t chunk, offset, total;
  };
  int32_t fetch(const Remote& from, void* buf, size_t bytes, Deps d = {});
  int32_t put(const Remote& to, const void* buf, size_t bytes, Deps d = {});
  // A local op that depends on every op in deps and reduces every buffer in srcs.
  int32_t localAll(Action a, const int32_t* deps, size_t ndeps, const void* const* srcs, size_t nsrcs);
  int32_t localAll(Action a, const std::vector<int32_t>& deps, const std::vector<const void*>& srcs) {
    return localAll(a, deps.data(), deps.size(), srcs.data(), srcs.size());
  }
  // Appends `sub`, a program built for a team of ranks numbered 0..k-1 among themselves, with
  // each peer p replaced by team[p]; its ops that depend on nothing depend on `gate` instead
  // (none when gate is -1). Returns the id of its first op: its ops are [first, size()).
  int32_t splice(const Program& sub, const int* team, int32_t gate);
  // An op that completes once every op in [first, last) has (and at once when there is none).
  int32_t join(int32_t first, int32_t last);
  size_t size() const { return p_.ops.size(); }
  void exposeBuffers() { p_.exposes = true; }  // Program::exposes

 private:
  int32_t add(Op op);
  // A local op over the ndeps dependencies already at depList in the program's lists, reducing srcs.
  int32_t addLocal(Action a, uint32_t depList, size_t ndeps, const void* const* srcs, size_t nsrcs);
  Program& p_;
};

// nslots staging buffers of slotBytes used round robin: a slot is reusable once the op that
// last read it (release()) has completed, so taking a slot yields a dependency.
class SlotPool {
 public:
  struct Slot {
    uint8_t* ptr;
    int32_t freeAfter;  // op to depend on before writing the slot
    int index;
  };
  static constexpr int kMaxSlots = 16;  // a plan's slots are at most this many
  SlotPool(Scratch& scratch, int nslots, size_t slotBytes);
  Slot take();
  void release(const Slot& s, int32_t lastReader) { lastUse_[static_cast<size_t>(s.index)] = lastReader; }

 private:
  InlineVec<uint8_t*, kMaxSlots> mem_;  // in place: a call's build allocates nothing
  InlineVec<int32_t, kMaxSlots> lastUse_;
  size_t next_ = 0;
};

// Shorthand for an Action.
inline Action reduceAction(void* dst, const void* src0, const void* src1, size_t count,
                           const kernels::ReduceSpec& spec) {
  Action a;
  a.active = true;
  a.dst = dst;
  a.src0 = src0;
  a.src1 = src1;
  a.count = count;
  a.spec = spec;
  return a;
}

}  // namespace hora::core
