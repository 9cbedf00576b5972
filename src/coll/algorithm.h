// The algorithm registry. Each algorithm is one object in one file of src/coll, registered by
// one line of algorithms.def; it says which collectives it implements, when it cannot run a call
// (its constraints on ranks, hosts and links), how long it predicts a call takes under the cost
// model (cost.h), and how it builds this rank's program. The planner (planner.h) asks every one
// that implements the call and fits, and takes the fastest; HORA_ALGO narrows the choice by the
// names of the table below, which the logs use too.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "coll/collective.h"
#include "coll/cost.h"

namespace hora::coll {

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  virtual Algo id() const = 0;
  virtual bool implements(Kind k) const = 0;
  // Why it cannot run this call on this communicator (a constant text), or null when it can.
  // `alone`: the call is not part of a group (some run only alone, without a program).
  virtual const char* unfit(const Args& a, const JobShape& t, bool alone) const {
    (void)a, (void)t, (void)alone;
    return nullptr;
  }
  // Its predicted time for the call, in microseconds: its fixed cost (Costs::base of its name
  // and the collective), the waits, and the bytes' cost times Costs::factor of the same
  // (coll/fit.h fits both).
  virtual double predictUs(const Args& a, const JobShape& t, const Costs& c) const = 0;
  // Settles what the plan leaves to the algorithm (an algorithm of phases: the algorithm of
  // each), once the planner has chosen it.
  virtual void refine(const Args& a, const JobShape& t, const Costs& c, Plan& p) const { (void)a, (void)t, (void)c, (void)p; }
  // Appends this rank's ops for the call.
  virtual void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const = 0;
  // A lone call it runs at once, through the shared stage, without building a program (a few
  // hundred instructions less); the planner asks only when it chose this algorithm.
  virtual bool runsNow(const Args& a, const JobShape& t) const {
    (void)a, (void)t;
    return false;
  }
  virtual void runNow(const Args& a, const JobShape& t, const AwaitFn& await) const {
    (void)a, (void)t, (void)await;
  }
  const char* name() const;
};

#define HORA_ALGORITHM(id, name) const Algorithm& algorithm##id();
#include "coll/algorithms.def"
#undef HORA_ALGORITHM

// Every algorithm, in the table's order.
const std::vector<const Algorithm*>& algorithms();
const Algorithm& algorithm(Algo id);
const char* algoName(Algo id);
// The algorithm of that name, or null.
const Algorithm* findAlgorithm(const std::string& name);
// "ring, rd, ..." : the algorithms that implement `k` (every one when k is null).
std::string algorithmNames(const Kind* k = nullptr);

}  // namespace hora::coll
