// What the shared-stage algorithms share between the programs (stage.cc) and the one-step
// path that runs a lone call at once (stage_now.cc): the counters, the slots, and which calls
// go through the cells. Within src/coll only.
#pragma once
#include <cstddef>
#include <cstdint>

#include "coll/collective.h"
#include "transports/stage.h"

namespace hora::coll {

// Each rank's four counters (transports/stage.h), as stage.cc's head says what they mean.
enum Counter { kInReady = 0, kOutReady = 1, kInFree = 2, kOutFree = 3 };

// Each rank's region (transports/stage.h, SharedStage::kSlots): in-slots s%2 and out-slots
// 2 + s%2 of C bytes.
struct Slots {
  const transport::SharedStage& st;
  size_t C;  // bytes per slot
  uint8_t* in(int rank, uint64_t s) const { return st.region(rank) + (s % 2) * C; }
  uint8_t* out(int rank, uint64_t s) const { return st.region(rank) + (2 + s % 2) * C; }
};

// What each rank puts in its slot: its input (all n blocks of it for ReduceScatter and AllToAll,
// and for the root of a Scatter: every rank counts that one, so that all decide alike).
size_t flatInput(const Args& a, const JobShape& t);
// Whether a lone rooted call (Broadcast, Scatter, Reduce, Gather) goes through the stage's
// cells: its input fits one, and the stage has them.
bool inCells(const Args& a, const JobShape& t);

}  // namespace hora::coll
