// The planner: how to run each call. AllReduce runs recursive doubling (log2 n steps) for small
// buffers, where latency rules, and the ring (the bandwidth optimum) above; direct (one step,
// every rank sends to every other) can be forced. The rooted collectives use the ring's
// pipelined chain, the others the ring. The planner also sizes the pipeline chunks and staging.
// HORA_ALGO and HORA_CHUNK_BYTES override it.
#pragma once
#include "coll/collective.h"

namespace hora::coll {

struct TunerSettings {
  size_t chunkBytes = 512 * 1024;  // HORA_CHUNK_BYTES
  enum class Force { Auto, Ring, Direct, RecursiveDoubling, ShmFlat, ShmSlice } force = Force::Auto;  // HORA_ALGO
};

// The largest AllReduce (bytes per rank) that goes by recursive doubling, by rank count;
// measured with perf/allreduce_perf over TCP on loopback.
size_t smallLimit(int nranks);
// The largest AllReduce that goes flat through shared memory (every rank reduces everything).
size_t shmFlatLimit(int nranks);

Plan plan(const Args& a, const Topo& t, const TunerSettings& s);

}  // namespace hora::coll
