#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

void build(const Args& a, const JobShape& t, const Plan& plan, core::Scratch& scratch, core::Program& out) {
  out.tag = makeTag(a);
  core::ProgramBuilder b(out);
  algorithm(plan.algo).build(a, t, plan, scratch, b);
}

// Whether a rank can finish the call's program without having heard, through a chain of
// messages each checked on arrival, from every other rank. Each message carries the call's tag
// and its receiver compares it, so after a ring, a tree AllReduce, Rabenseifner's or a direct
// exchange every rank has (indirectly) compared its call with every other's. Not so a
// Broadcast's root or the ranks of a Reduce that only send, nor a Scatter's root or the ranks of
// a Gather that only send (the leaves of its tree, every non-root of the linear one), nor any
// rank of a call with nothing to move: those could return success while a rank with another
// call (root, count, collective) fails. They compare it with their predecessor's later
// (comm/call_check.h).
bool needsAgreement(const Args& a, const JobShape& t) {
  if (!t.callCheck || t.nranks < 2 || a.kind == Kind::Send || a.kind == Kind::Recv || a.kind == Kind::Barrier)
    return false;
  return a.kind == Kind::Broadcast || a.kind == Kind::Reduce || a.kind == Kind::Gather || a.kind == Kind::Scatter ||
         a.count == 0;
}

// One byte, checked by its frame (tag, length, call number): its content is not read. It goes
// as the last job of its communicator in a call or group, after every other job's messages on
// the link (so both ends count them alike, whatever sends and receives each rank's group holds),
// depending on none of their ops: it leaves with the data, and the sender never waits for it.
void buildCheckSend(const JobShape& t, uint64_t tag, core::Scratch& scratch, core::Program& out) {
  out.tag = tag;
  core::ProgramBuilder b(out);
  auto* token = static_cast<uint8_t*>(scratch.get(1));
  *token = 0;
  b.send((t.rank + 1) % t.nranks, token, 1);
}

void buildCheckRecv(const JobShape& t, uint64_t tag, core::Scratch& scratch, core::Program& out) {
  out.tag = tag;
  core::ProgramBuilder b(out);
  b.recv((t.rank + t.nranks - 1) % t.nranks, scratch.get(1), 1);
}

void addCheckRecv(const JobShape& t, uint64_t tag, uint16_t call, core::Scratch& scratch, core::Program& out) {
  core::ProgramBuilder b(out);
  const int32_t i = b.recv((t.rank + t.nranks - 1) % t.nranks, scratch.get(1), 1);
  out.ops[static_cast<size_t>(i)].value = tag;
  out.ops[static_cast<size_t>(i)].counter = call;
}

// Cost: ceil(log2 n) tiny messages per rank.
void buildAgreement(const JobShape& t, uint64_t tag, core::Scratch& scratch, core::Program& out) {
  out.tag = tag;
  core::ProgramBuilder b(out);
  disseminationBarrier(t, scratch, b);
}

}  // namespace hora::coll
