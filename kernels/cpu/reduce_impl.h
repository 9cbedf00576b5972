// Internal to kernels/cpu: the per-ISA implementations behind reduce() (dispatch.cc picks
// one) and the few pieces of semantics they share. Each implementation lives in its own
// namespace, so that code built with different -m flags is never merged by the linker.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/reduce.h"

namespace hora::kernels {

using ReduceFn = void (*)(void* const* dsts, int ndst, const void* const* srcs, int nsrc,
                          size_t count, const ReduceSpec& spec);

namespace scalar {
// Portable; every dtype x op. Also does the tails the vector implementations leave.
void reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
            const ReduceSpec& spec);
}  // namespace scalar

#if defined(__x86_64__) || defined(__i386__)
namespace avx2 {
// Needs AVX2, FMA, F16C.
void reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
            const ReduceSpec& spec);
}  // namespace avx2
namespace avx512 {
// Needs AVX-512 F, BW, VL, DQ (+ the AVX2 set); bfloat16 rounded with integer code.
void reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
            const ReduceSpec& spec);
// The same, bfloat16 rounded with vcvtneps2bf16 (needs AVX512_BF16 as well).
void reduceBf16(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                const ReduceSpec& spec);
}  // namespace avx512
#endif

// The Avg division of an integer: the truncated quotient (toward zero) of the value, as
// its type's signedness reads it. A divisor of 0 (rejected by callers) leaves the value
// as it is rather than trapping. Internal linkage: see convert_inl.h. The CUDA kernels'
// element functions (kernels/cuda/element.h) use it too, compiled for the device.
#if defined(__CUDACC__)
#define HORA_DIVIDE_HD __host__ __device__
#else
#define HORA_DIVIDE_HD
#endif
template <class T>
HORA_DIVIDE_HD static inline T divideInt(T v, uint64_t d) {
  if (d == 0) return v;
  if constexpr (std::is_signed_v<T>) {
    const int64_t x = v;
    const uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
    const uint64_t q = mag / d;
    return static_cast<T>(x < 0 ? 0 - q : q);
  } else {
    return static_cast<T>(static_cast<uint64_t>(v) / d);
  }
}

}  // namespace hora::kernels
