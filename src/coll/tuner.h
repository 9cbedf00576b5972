// The planner: how to run each call. For now every collective has one algorithm (the ring, or
// its pipelined chain for rooted calls); the planner sizes the pipeline chunks and the staging.
// HORA_CHUNK_BYTES overrides the chunk.
#pragma once
#include "coll/collective.h"

namespace hora::coll {

struct TunerSettings {
  size_t chunkBytes = 512 * 1024;  // from HORA_CHUNK_BYTES
};

Plan plan(const Args& a, const Topo& t, const TunerSettings& s);

}  // namespace hora::coll
