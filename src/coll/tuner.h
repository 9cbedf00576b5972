// The planner: how to run each call. AllReduce has two algorithms: direct (one step, every rank
// sends its input to every other) for small buffers, where latency rules, and the ring (the
// bandwidth optimum) above. The rooted collectives use the ring's pipelined chain, the others
// the ring. The planner also sizes the pipeline chunks and staging. HORA_ALGO and
// HORA_CHUNK_BYTES override it.
#pragma once
#include "coll/collective.h"

namespace hora::coll {

struct TunerSettings {
  size_t chunkBytes = 512 * 1024;  // HORA_CHUNK_BYTES
  enum class Force { Auto, Ring, Direct } force = Force::Auto;  // HORA_ALGO
};

// The largest AllReduce (bytes per rank) that goes direct, by rank count; measured with
// perf/allreduce_perf over TCP on loopback (README, Performance).
size_t directLimit(int nranks);

Plan plan(const Args& a, const Topo& t, const TunerSettings& s);

}  // namespace hora::coll
