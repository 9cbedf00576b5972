#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

namespace {
// Whether a rank can finish the call's program without having heard, through a chain of
// messages each checked on arrival, from every other rank. Each message carries the call's tag
// and its receiver compares it, so after a ring, a tree AllReduce, Rabenseifner's or a direct
// exchange every rank has (indirectly) compared its call with every other's. Not so a
// Broadcast's root or the ranks of a Reduce that only send, nor any rank of a call with nothing
// to move: those could return success while a rank with another call (root, count, collective)
// fails.
bool needsAgreement(const Args& a, const Topo& t) {
  if (t.nranks < 2 || a.kind == Kind::Send || a.kind == Kind::Recv || a.kind == Kind::Barrier) return false;
  return a.kind == Kind::Broadcast || a.kind == Kind::Reduce || a.count == 0;
}
}  // namespace

void build(const Args& a, const Topo& t, const Plan& plan, core::Scratch& scratch, core::Program& out) {
  out.tag = makeTag(a);
  core::ProgramBuilder b(out);
  algorithm(plan.algo).build(a, t, plan, scratch, b);
  // Agreement: a dissemination barrier of one-byte messages that carry the call's tag, after
  // the algorithm's messages on each link (so both ends count them alike) but depending on none
  // of its ops, so it runs alongside the data. On leaving it each rank has heard, through
  // checked messages, from every other: a mismatch fails every rank of the call. Cost: ceil(log2
  // n) tiny messages per rank, hidden behind the data except for small calls.
  if (needsAgreement(a, t)) disseminationBarrier(t, scratch, b);
}

}  // namespace hora::coll
