// Scalar conversions between float and the narrow floating formats, as inline functions
// for the portable code (convert.cc, reduce_scalar.cc). Every function here has internal
// linkage (static), so that translation units built with different -m flags never share a
// copy (no ODR hazard); the vector translation units do not include this header.
//
// All conversions are exact (widening) or round to nearest, ties to even (narrowing),
// handle subnormals, infinities and NaN, and do not depend on the floating-point
// environment (rounding mode, FTZ/DAZ): they are integer code.
//
// Narrowing gives what the GPU's conversion instructions give (cvt.rn.f16.f32,
// cvt.rn.bf16.f32, cvt.rn.satfinite.e4m3x2.f32; kernels/cuda/element.h uses them), so that
// the CPU and the CUDA kernels store the same bits:
//   - any NaN, whatever its sign and payload, becomes the one canonical NaN of the format,
//     all ones but the sign: 0x7fff (float16, bfloat16), 0x7f (e4m3, e5m2);
//   - overflow: float16, bfloat16 and e5m2 round to infinity (IEEE), e4m3 (no infinity)
//     saturates to +-448, infinities included.
// Widening is exact; a NaN widens to a NaN (payload kept, quieted), which only ever narrows
// again to the canonical NaN.
//
// The CUDA kernels compile these functions for GPUs without fp8 conversion instructions
// (HORA_CONV_HD); tests/test_kernels_cuda.cc checks them against NVIDIA's own host
// equivalents of those instructions (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HORA_CONV_HD __host__ __device__
#else
#define HORA_CONV_HD
#endif

namespace hora::kernels::conv {

HORA_CONV_HD static inline uint32_t floatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

HORA_CONV_HD static inline float bitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// A binary format with E exponent bits, M mantissa bits and bias 2^(E-1)-1.
// kIeee: the all-ones exponent encodes inf (mantissa 0) and NaN (half, e5m2). Otherwise
// (e4m3, "fn"): there is no infinity, only S.1111.111 is NaN, and overflow saturates to
// the largest finite value.
template <int E, int M, bool kIeee>
HORA_CONV_HD static inline float narrowToFloat(uint32_t v) {
  constexpr int kBias = (1 << (E - 1)) - 1;
  constexpr uint32_t kExpAll = (1u << E) - 1;
  constexpr uint32_t kManAll = (1u << M) - 1;
  const uint32_t sign = (v >> (E + M)) & 1u;
  const uint32_t exp = (v >> M) & kExpAll;
  const uint32_t man = v & kManAll;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = 0;
    } else {  // subnormal: normalise (every one is a normal float)
      int e = 1 - kBias;
      uint32_t m = man;
      while (!(m & (1u << M))) {
        m <<= 1;
        --e;
      }
      bits = (static_cast<uint32_t>(e + 127) << 23) | ((m & kManAll) << (23 - M));
    }
  } else if (kIeee && exp == kExpAll) {
    // inf, or NaN made quiet with its payload kept (as F16C's vcvtph2ps does)
    bits = 0x7f800000u | (man ? (0x00400000u | (man << (23 - M))) : 0u);
  } else if (!kIeee && exp == kExpAll && man == kManAll) {
    bits = 0x7fc00000u;
  } else {
    bits = ((exp + 127 - kBias) << 23) | (man << (23 - M));
  }
  return bitsFloat(bits | (sign << 31));
}

template <int E, int M, bool kIeee>
HORA_CONV_HD static inline uint32_t floatToNarrow(float f) {
  constexpr int kBias = (1 << (E - 1)) - 1;
  constexpr int kShift = 23 - M;  // float mantissa bits dropped
  constexpr uint32_t kExpMask = ((1u << E) - 1) << M;
  constexpr uint32_t kManAll = (1u << M) - 1;
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(127 - kBias + 1) << 23;
  const uint32_t x = floatBits(f);
  const uint32_t sign = (x >> 31) << (E + M);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return kExpMask | kManAll;  // NaN: the canonical one, no sign
  uint32_t r;
  if (a < kMinNormal) {
    // Subnormal (or zero) in the target: the value in units of the target's smallest
    // subnormal 2^(1-bias-M) is m * 2^-s; round the shift to nearest even. A result of
    // 2^M is the smallest normal, whose encoding it already is.
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x007fffffu) | (e ? 0x00800000u : 0u);
    uint32_t s = 151 - kBias - M - (e ? e : 1u);
    if (s > 31) s = 31;
    r = (m + ((1u << s) >> 1) - 1 + ((m >> s) & 1u)) >> s;
  } else {
    // Normal: round the dropped mantissa bits to nearest even (a carry moves into the
    // exponent, as it should), then rebias.
    r = ((a + ((1u << (kShift - 1)) - 1) + ((a >> kShift) & 1u)) >> kShift) -
        (static_cast<uint32_t>(127 - kBias) << M);
    if (kIeee) {
      if (r > kExpMask) r = kExpMask;  // overflow (and inf) -> inf
    } else {
      if (r > (kExpMask | (kManAll - 1))) r = kExpMask | (kManAll - 1);  // saturate
    }
  }
  return sign | r;
}

HORA_CONV_HD static inline float halfToFloat(uint16_t h) { return narrowToFloat<5, 10, true>(h); }
HORA_CONV_HD static inline uint16_t floatToHalf(float f) {
  return static_cast<uint16_t>(floatToNarrow<5, 10, true>(f));
}
HORA_CONV_HD static inline float e4m3ToFloat(uint8_t v) { return narrowToFloat<4, 3, false>(v); }
HORA_CONV_HD static inline uint8_t floatToE4m3(float f) {
  return static_cast<uint8_t>(floatToNarrow<4, 3, false>(f));
}
HORA_CONV_HD static inline float e5m2ToFloat(uint8_t v) { return narrowToFloat<5, 2, true>(v); }
HORA_CONV_HD static inline uint8_t floatToE5m2(float f) {
  return static_cast<uint8_t>(floatToNarrow<5, 2, true>(f));
}

HORA_CONV_HD static inline float bf16ToFloat(uint16_t b) { return bitsFloat(static_cast<uint32_t>(b) << 16); }
HORA_CONV_HD static inline uint16_t floatToBf16(float f) {
  const uint32_t x = floatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // NaN: the canonical one, no sign
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

}  // namespace hora::kernels::conv
