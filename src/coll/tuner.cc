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

Plan plan(const Args& a, const Topo& t, const TunerSettings& s) {
  Plan p;
  p.chunkBytes = s.chunkBytes;
  p.slots = 4;
  if (a.kind == Kind::AllReduce && t.nranks > 1) {
    const size_t bytes = a.count * dataTypeSize(a.dtype);
    p.algo = bytes <= smallLimit(t.nranks) ? Algo::RecursiveDoubling : Algo::Ring;
    switch (s.force) {
      case TunerSettings::Force::Auto: break;
      case TunerSettings::Force::Ring: p.algo = Algo::Ring; break;
      case TunerSettings::Force::RecursiveDoubling: p.algo = Algo::RecursiveDoubling; break;
      case TunerSettings::Force::Direct:
        p.algo = t.nranks <= kernels::kMaxSources ? Algo::Direct : Algo::Ring;
        break;
    }
  }
  return p;
}

}  // namespace hora::coll
