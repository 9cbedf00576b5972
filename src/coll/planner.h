// The planner: how to run each call. Every algorithm that implements the call's collective and
// can run it here (algorithm.h) predicts its time under the cost model (cost.h); the smallest
// prediction wins. HORA_ALGO narrows the choice, for every collective or per collective; a
// forced algorithm that cannot run a call is an error that says why and what could. The planner
// also sizes the pipeline chunks and staging.
#pragma once
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "coll/algorithm.h"
#include "coll/cost.h"

namespace hora::coll {

inline constexpr size_t kKinds = 16;  // above every Kind's value

struct PlannerSettings {
  size_t chunkBytes = 512 * 1024;  // HORA_CHUNK_BYTES
  // HORA_ALGO: the algorithm forced for each collective (by Kind value), or -1 to choose.
  std::array<int, kKinds> forced;
  Costs costs;  // HORA_TUNE_FILE, or the defaults
  PlannerSettings() { forced.fill(-1); }
};

// Parses HORA_ALGO's value: `auto`, a name (forced for every collective it implements), or a
// comma list of `collective:name` (allreduce, broadcast, reduce, allgather, reducescatter,
// alltoall, barrier, gather, scatter). Throws Errc::InvalidArgument naming what is available.
std::array<int, kKinds> parseForced(const std::string& value);

// Why the planner chose what it did: the winner's prediction and the others'.
struct Choice {
  bool forced = false;
  double predictedUs = 0;
  std::vector<std::pair<Algo, double>> others;  // the other candidates that could run it
};

// The plan of a call; `alone`: not part of a group. Throws when a forced algorithm cannot run it.
Plan plan(const Args& a, const JobShape& t, const PlannerSettings& s, bool alone, Choice* why = nullptr);

// "AllReduce 1 MiB float, 4 ranks on 1 host: chose slice (predicted 410 us; rd 900 us, ...)".
std::string explain(const Args& a, const JobShape& t, const Plan& p, const Choice& c);

}  // namespace hora::coll
