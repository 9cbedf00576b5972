#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

void build(const Args& a, const Topo& t, const Plan& plan, core::Scratch& scratch, core::Program& out) {
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
// call (root, count, collective) fails.
bool needsAgreement(const Args& a, const Topo& t) {
  if (!t.callCheck || t.nranks < 2 || a.kind == Kind::Send || a.kind == Kind::Recv || a.kind == Kind::Barrier)
    return false;
  return a.kind == Kind::Broadcast || a.kind == Kind::Reduce || a.kind == Kind::Gather || a.kind == Kind::Scatter ||
         a.count == 0;
}

// A dissemination barrier of one-byte messages that carry `tag`. As the last job of its
// communicator in a call or group, after every other job's messages on each link (so both ends
// count them alike, whatever sends and receives each rank's group holds), depending on none of
// their ops, it runs alongside the data: on leaving it each rank has heard, through checked
// messages, from every other, so a mismatch fails every rank. Cost: ceil(log2 n) tiny messages
// per rank, hidden behind the data except for small calls.
void buildAgreement(const Topo& t, uint64_t tag, core::Scratch& scratch, core::Program& out) {
  out.tag = tag;
  core::ProgramBuilder b(out);
  disseminationBarrier(t, scratch, b);
}

}  // namespace hora::coll
