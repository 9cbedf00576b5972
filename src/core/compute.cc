#include "core/compute.h"

#include <cstring>

namespace hora::core {

void runOnCpu(const Action& a, const Program& p) {
  if (!a.active || a.count == 0) return;
  const kernels::ReduceSpec& s = a.spec;
  void* dsts[2] = {a.dst, a.dst2};
  const int ndst = a.dst2 ? 2 : 1;
  if (a.nsrcList) {
    kernels::reduce(dsts, ndst, p.srcLists.data() + a.srcList, static_cast<int>(a.nsrcList), a.count, s);
    return;
  }
  // A copy, to one place or two: the bytes as they are (a reduction of one source would pass
  // the narrow types through their conversions, which keep a NaN but not its bits).
  if (!a.src1 && !s.premulFirst && !s.divide) {
    const size_t bytes = a.count * dataTypeSize(s.dtype);
    if (a.dst != a.src0) memcpy(a.dst, a.src0, bytes);
    if (a.dst2 && a.dst2 != a.src0) memcpy(a.dst2, a.src0, bytes);
    return;
  }
  const void* srcs[2] = {a.src0, a.src1};
  kernels::reduce(dsts, ndst, srcs, a.src1 ? 2 : 1, a.count, s);
}

}  // namespace hora::core
