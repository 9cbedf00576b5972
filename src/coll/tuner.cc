#include "coll/tuner.h"

#include <algorithm>

#include "kernels/cpu/reduce.h"

namespace hora::coll {

size_t smallLimit(int nranks) {
  // Recursive doubling moves log2(p) * N bytes in log2(p) (+2) steps, the ring 2(n-1)/n * N in
  // 2(n-1) steps. On loopback TCP (perf/allreduce_perf, HORA_ALGO=ring against =rd, 2 cores)
  // they break even near 128-256 KiB at 2 ranks (one exchange) and 32-64 KiB at 3, 4 and 8.
  if (nranks < 2) return 0;
  return nranks == 2 ? size_t(128) << 10 : size_t(32) << 10;
}

size_t shmFlatLimit(int nranks) {
  // perf/allreduce_perf -S 1 -a 3 with HORA_ALGO=rd, shmflat and shmslice on 2 cores (so 4 and
  // 8 ranks are oversubscribed): the flat algorithm (run at once, without a program) wins up to
  // 4 KiB at 2 ranks (0.26 against 0.43 us at 8 bytes; 0.73 against 0.84 at 4 KiB), up to
  // 32 KiB at 4 (9.5 against 10.4 us for the slice) and up to 16 KiB at 8.
  if (nranks == 2) return size_t(4) << 10;
  return nranks >= 8 ? size_t(16) << 10 : size_t(32) << 10;
}

namespace {
bool shmStage(const Topo& t) { return t.world && t.nranks <= kernels::kMaxSources; }

Algo shmAlgo(size_t bytes, int nranks) {
  if (bytes <= shmFlatLimit(nranks)) return Algo::ShmFlat;
  if (nranks == 2) {
    // Recursive doubling is one message each way: it beats the ring up to 64 KiB. Past that
    // the ring over shared-memory rings beats the slice algorithm: the ring moves N per rank,
    // the slice copies N in and out as well (17 ms against 27 ms at 128 MiB).
    return bytes <= (size_t(64) << 10) ? Algo::RecursiveDoubling : Algo::Ring;
  }
  // From 3 ranks the slice algorithm's 2 waits per chunk beat the ring's 2(n-1) steps at every
  // larger size (at 8 ranks: 0.76 against 1.44 ms at 2 MiB, 73 against 101 ms at 128 MiB).
  return Algo::ShmSlice;
}
}  // namespace

Plan plan(const Args& a, const Topo& t, const TunerSettings& s) {
  Plan p;
  p.chunkBytes = s.chunkBytes;
  p.slots = 4;
  if (a.kind == Kind::AllReduce && t.nranks > 1) {
    const size_t bytes = a.count * dataTypeSize(a.dtype);
    p.algo = bytes <= smallLimit(t.nranks) ? Algo::RecursiveDoubling : Algo::Ring;
    if (shmStage(t)) p.algo = shmAlgo(bytes, t.nranks);
    switch (s.force) {
      case TunerSettings::Force::Auto: break;
      case TunerSettings::Force::Ring: p.algo = Algo::Ring; break;
      case TunerSettings::Force::ShmFlat: p.algo = shmStage(t) ? Algo::ShmFlat : Algo::Ring; break;
      case TunerSettings::Force::ShmSlice: p.algo = shmStage(t) ? Algo::ShmSlice : Algo::Ring; break;
      case TunerSettings::Force::RecursiveDoubling: p.algo = Algo::RecursiveDoubling; break;
      case TunerSettings::Force::Direct:
        p.algo = t.nranks <= kernels::kMaxSources ? Algo::Direct : Algo::Ring;
        break;
    }
  }
  return p;
}

}  // namespace hora::coll
