#include "base/error.h"
#include "coll/common.h"

namespace hora::coll {

void build(const Args& a, const Topo& t, const Plan& plan, core::Scratch& scratch, core::Program& out) {
  out.tag = makeTag(a);
  core::ProgramBuilder b(out);
  switch (a.kind) {
    case Kind::AllReduce:
      if (plan.algo == Algo::ShmFlat || plan.algo == Algo::ShmSlice) shmAllReduce(a, t, plan, scratch, b);
      else if (plan.algo == Algo::Direct) directAllReduce(a, t, plan, scratch, b);
      else if (plan.algo == Algo::RecursiveDoubling) rdAllReduce(a, t, plan, scratch, b);
      else ringAllReduce(a, t, plan, scratch, b);
      break;
    case Kind::AllGather: ringAllGather(a, t, plan, scratch, b); break;
    case Kind::ReduceScatter: ringReduceScatter(a, t, plan, scratch, b); break;
    case Kind::Broadcast: chainBroadcast(a, t, plan, scratch, b); break;
    case Kind::Reduce: chainReduce(a, t, plan, scratch, b); break;
    case Kind::AllToAll: pairwiseAllToAll(a, t, plan, scratch, b); break;
    case Kind::Barrier: disseminationBarrier(t, scratch, b); break;
    case Kind::Send:
    case Kind::Recv: p2p(a, t, plan, b); break;
  }
}

}  // namespace hora::coll
