#include "coll/tuner.h"

#include <algorithm>

#include "kernels/cpu/reduce.h"

namespace hora::coll {

size_t directLimit(int nranks) {
  // Direct moves (n-1)/(2(n-1)/n) = n/2 times the ring's bytes in 1 step instead of 2(n-1):
  // on loopback TCP it wins up to about 128 KiB at 2 ranks, 64 KiB at 4 and 8 (perf/allreduce_perf
  // with HORA_ALGO=ring and =direct); 256 KiB / n follows that.
  if (nranks < 2 || nranks > kernels::kMaxSources) return 0;
  return std::max<size_t>(16 << 10, (size_t(256) << 10) / static_cast<size_t>(nranks));
}

Plan plan(const Args& a, const Topo& t, const TunerSettings& s) {
  Plan p;
  p.chunkBytes = s.chunkBytes;
  p.slots = 4;
  if (a.kind == Kind::AllReduce && t.nranks > 1) {
    const size_t bytes = a.count * dataTypeSize(a.dtype);
    bool direct = bytes <= directLimit(t.nranks);
    if (s.force == TunerSettings::Force::Ring) direct = false;
    if (s.force == TunerSettings::Force::Direct) direct = t.nranks <= kernels::kMaxSources;
    p.algo = direct ? Algo::Direct : Algo::Ring;
  }
  return p;
}

}  // namespace hora::coll
