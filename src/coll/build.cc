#include "coll/algorithm.h"
#include "coll/common.h"

namespace hora::coll {

void build(const Args& a, const Topo& t, const Plan& plan, core::Scratch& scratch, core::Program& out) {
  out.tag = makeTag(a);
  core::ProgramBuilder b(out);
  algorithm(plan.algo).build(a, t, plan, scratch, b);
}

}  // namespace hora::coll
