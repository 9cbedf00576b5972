// Fitting the cost model (cost.h) to measured times: each algorithm's fixed cost (Costs::baseUs)
// and the factor on its bytes' cost (Costs::byteFactor), so that the planner's crossovers fall
// where the measured ones do. `hora-tune` measures every algorithm it can force at a few sizes
// and fits them; tests/test_planner.cc fits the times measured across 4 hosts and checks that
// the planner then chooses, at every size, an algorithm within 10% of the fastest measured.
#pragma once
#include <string>
#include <vector>

#include "coll/algorithm.h"
#include "coll/cost.h"

namespace hora::coll {

// One measured time: a call, the algorithm it was forced to, microseconds per call.
struct Measured {
  Args args;
  Algo algo;
  double us;
};

// What was fitted for one cost key (costKey: "ring-allreduce"): the values, the samples, and the
// largest relative error of the fitted predictions against them.
struct Fitted {
  std::string key;
  double baseUs = 0, factor = 1;
  size_t samples = 0;
  double worst = 0;
};

// c with the fixed cost and bytes' factor of every key in `m` set to the values whose
// predictions on topology t come closest to the measured times (least squares of the relative
// errors; base >= 0, factor from 1/16 to 16), the rest of c unchanged. An algorithm of phases
// (hier) is fitted after the others, whose costs its prediction includes. `report`, if given,
// gets a line per key.
Costs fitCosts(const Costs& c, const JobShape& t, const std::vector<Measured>& m, std::vector<Fitted>* report = nullptr);

}  // namespace hora::coll
