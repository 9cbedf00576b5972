// CPU reduction kernels: the only place where per-dtype arithmetic lives.
//
// One entry point, reduce(), computes for every element i
//
//     x      = srcs[0][i], times spec.scalar first when spec.premulFirst (PreMulSum)
//     acc    = x (+) srcs[1][i] (+) ... (+) srcs[nsrc-1][i]          left to right
//     acc    = acc / spec.divisor when spec.divide (the last step of Avg)
//     dsts[j][i] = acc for every j < ndst                              (fused reduce-copy)
//
// where (+) is the op's combiner: sum for Sum, Avg and PreMulSum; product for Prod;
// max / min for Max / Min.
//
// Semantics (the README's "Semantics"):
//   - integers wrap like unsigned arithmetic (sum, prod, premul); max/min compare as the
//     type's signedness says; the Avg division is the truncated quotient of the wrapped sum;
//   - float, double: IEEE in the type itself; max/min propagate NaN (NaN if either is NaN);
//   - float16, bfloat16, float8 (e4m3, e5m2): widened to float, combined in float across
//     all sources of one call, rounded once (to nearest even) when stored; a NaN result is
//     stored as the format's one canonical NaN (0x7fff, 0x7f); e4m3 saturates to +-448,
//     the others overflow to infinity (what the GPU's conversion instructions give, so that
//     the CUDA kernels store the same bits);
//   - premul scalar: spec.scalar.f for floating types, spec.scalar.i (two's complement
//     bits) for integer types.
// Details every implementation (ISA) shares, so that all of them give the same bits:
//   - the premul scalar and the divisor are first converted to the arithmetic type
//     (float for float32 and the narrow types, double for float64, the integer type);
//   - floating max/min: the first operand (the accumulator) if it is NaN, else the second
//     if it is NaN, else the larger/smaller, and the second when they compare equal
//     (+0 vs -0): x86 maxps/minps(acc, x) with a NaN acc patched in;
//   - an integer Avg with divisor 0 (callers reject it) leaves the sum undivided.
//
// Pointers need no alignment. A destination may be the very same pointer as a source
// (in place) but must not partially overlap one. count == 0 does nothing.
//
// Implementations: scalar (always), AVX2 (+F16C, FMA) and AVX-512 (F, BW, VL; BF16 where
// present) picked at run time from the CPU; setIsa() forces one (tests, HORA_KERNEL_ISA).
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/types.h"

namespace hora::kernels {

union Scalar {
  double f;
  int64_t i;
};

struct ReduceSpec {
  DataType dtype = DataType::Float32;
  RedOp op = RedOp::Sum;
  bool premulFirst = false;  // multiply srcs[0] by scalar before combining (PreMulSum)
  Scalar scalar{0.0};
  bool divide = false;  // divide the result by divisor (the final step of Avg)
  uint64_t divisor = 1;
};

inline constexpr int kMaxSources = 16;
inline constexpr int kMaxDests = 4;

// 1 <= nsrc <= kMaxSources, 1 <= ndst <= kMaxDests.
void reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
            const ReduceSpec& spec);

enum class Isa : uint8_t { Scalar = 0, Avx2 = 1, Avx512 = 2 };

const char* isaName(Isa isa);
bool isaSupported(Isa isa);  // by this CPU and this build
Isa bestIsa();               // the best supported
Isa activeIsa();
// Forces an implementation; returns false (and changes nothing) if it is not supported.
bool setIsa(Isa isa);

// Conversions between the narrow floating types and float (round to nearest even; widening
// is exact). Narrowing a NaN gives the format's canonical NaN, whatever its sign and payload.
float halfToFloat(uint16_t h);
uint16_t floatToHalf(float f);  // overflow -> inf; NaN -> 0x7fff
float bfloat16ToFloat(uint16_t b);
uint16_t floatToBfloat16(float f);  // overflow -> inf; NaN -> 0x7fff
float fp8e4m3ToFloat(uint8_t v);
uint8_t floatToFp8e4m3(float f);  // saturating to +-448 (inf too); NaN -> 0x7f
float fp8e5m2ToFloat(uint8_t v);
uint8_t floatToFp8e5m2(float f);  // IEEE-like: overflow -> inf; NaN -> 0x7f

}  // namespace hora::kernels
