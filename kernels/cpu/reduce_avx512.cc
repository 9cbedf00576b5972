// reduce() with AVX-512 F/BW/VL/DQ (+ AVX2, FMA, F16C; this translation unit is built with
// the matching -m flags, and -mavx512bf16 for reduceBf16 alone). dispatch.cc calls it only
// on a CPU that has them. 512-bit vectors, unaligned loads and stores; the shared loop is in
// reduce_simd.inc. No FMA is used on purpose (see reduce_avx2.cc).
// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm*_undefined_*()
// helpers (GCC PR105593); nothing of ours is affected.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/reduce_impl.h"

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || \
    !defined(__AVX512DQ__) || !defined(__F16C__)
#error "reduce_avx512.cc must be built with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c"
#endif

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace hora::kernels::avx512 {
namespace {

// The ISA primitives reduce_simd.inc uses (documented in reduce_avx2.cc).
struct S {
  using F = __m512;
  using D = __m512d;
  using I = __m512i;
  using M = __mmask16;  // one bit per 32-bit lane
  static constexpr size_t kBytes = 64;
  static constexpr size_t kF = 16;

  static F loadF(const void* p) { return _mm512_loadu_ps(p); }
  static void storeF(void* p, F v) { _mm512_storeu_ps(p, v); }
  static D loadD(const void* p) { return _mm512_loadu_pd(p); }
  static void storeD(void* p, D v) { _mm512_storeu_pd(p, v); }
  static I loadI(const void* p) { return _mm512_loadu_si512(p); }
  static void storeI(void* p, I v) { _mm512_storeu_si512(p, v); }

  // max/min: as in reduce_avx2.cc, a NaN first operand is patched in.
  static F setF(float x) { return _mm512_set1_ps(x); }
  static F addF(F a, F b) { return _mm512_add_ps(a, b); }
  static F mulF(F a, F b) { return _mm512_mul_ps(a, b); }
  static F divF(F a, F b) { return _mm512_div_ps(a, b); }
  static F maxF(F a, F b) { return _mm512_mask_mov_ps(_mm512_max_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a); }
  static F minF(F a, F b) { return _mm512_mask_mov_ps(_mm512_min_ps(a, b), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), a); }
  static D setD(double x) { return _mm512_set1_pd(x); }
  static D addD(D a, D b) { return _mm512_add_pd(a, b); }
  static D mulD(D a, D b) { return _mm512_mul_pd(a, b); }
  static D divD(D a, D b) { return _mm512_div_pd(a, b); }
  static D maxD(D a, D b) { return _mm512_mask_mov_pd(_mm512_max_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a); }
  static D minD(D a, D b) { return _mm512_mask_mov_pd(_mm512_min_pd(a, b), _mm512_cmp_pd_mask(a, a, _CMP_UNORD_Q), a); }

  static I set32(uint32_t x) { return _mm512_set1_epi32(static_cast<int>(x)); }
  static I and32(I a, I b) { return _mm512_and_si512(a, b); }
  static I or32(I a, I b) { return _mm512_or_si512(a, b); }
  static I add32(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm512_sub_epi32(a, b); }
  template <int n>
  static I srli32(I a) { return _mm512_srli_epi32(a, n); }
  template <int n>
  static I slli32(I a) { return _mm512_slli_epi32(a, n); }
  static I srlv32(I a, I n) { return _mm512_srlv_epi32(a, n); }
  static I sllv32(I a, I n) { return _mm512_sllv_epi32(a, n); }
  static I minu32(I a, I b) { return _mm512_min_epu32(a, b); }
  static I maxu32(I a, I b) { return _mm512_max_epu32(a, b); }
  static M gt32(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  static M eq32(I a, I b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static I select(M m, I a, I b) { return _mm512_mask_blend_epi32(m, b, a); }  // m ? a : b
  static I castFI(F f) { return _mm512_castps_si512(f); }
  static F castIF(I i) { return _mm512_castsi512_ps(i); }
  static F cvtI32F(I i) { return _mm512_cvtepi32_ps(i); }
  static I roundToI32(F f) { return _mm512_cvt_roundps_epi32(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

  static I loadU8x32(const void* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))); }
  static I loadU16x32(const void* p) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  static void store32x16(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v)); }
  static void store32x8(void* p, I v) { _mm_storeu_si128(static_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v)); }
  static F loadHalf(const void* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p))); }
  // NaN lanes: the canonical 0x7fff (vcvtps2ph keeps sign and payload; see reduce_avx2.cc).
  static void storeHalf(void* p, F v) {
    const __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    _mm256_storeu_si256(static_cast<__m256i*>(p), _mm256_mask_mov_epi16(h, nan, _mm256_set1_epi16(0x7fff)));
  }
  static F loadE5m2(const void* p) {
    const __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(static_cast<const __m128i*>(p))), 8);
    return _mm512_cvtph_ps(h);
  }
  static void storeBf16Ins(void* p, F v);  // defined below, after reduce_simd.inc

  template <class T>
  static I set1(T v) {
    if constexpr (sizeof(T) == 1) return _mm512_set1_epi8(static_cast<char>(v));
    else if constexpr (sizeof(T) == 4) return _mm512_set1_epi32(static_cast<int>(v));
    else return _mm512_set1_epi64(static_cast<long long>(v));
  }
  template <class T>
  static I add(I a, I b) {
    if constexpr (sizeof(T) == 1) return _mm512_add_epi8(a, b);
    else if constexpr (sizeof(T) == 4) return _mm512_add_epi32(a, b);
    else return _mm512_add_epi64(a, b);
  }
  template <class T>
  static I mul(I a, I b) {
    if constexpr (sizeof(T) == 1) {
      const I even = _mm512_mullo_epi16(a, b);
      const I odd = _mm512_mullo_epi16(_mm512_srli_epi16(a, 8), _mm512_srli_epi16(b, 8));
      return _mm512_or_si512(_mm512_slli_epi16(odd, 8), _mm512_and_si512(even, _mm512_set1_epi16(0xff)));
    } else if constexpr (sizeof(T) == 4) {
      return _mm512_mullo_epi32(a, b);
    } else {
      return _mm512_mullo_epi64(a, b);
    }
  }
  template <class T>
  static I max(I a, I b) {
    constexpr bool kSigned = std::is_signed_v<T>;
    if constexpr (sizeof(T) == 1) return kSigned ? _mm512_max_epi8(a, b) : _mm512_max_epu8(a, b);
    else if constexpr (sizeof(T) == 4) return kSigned ? _mm512_max_epi32(a, b) : _mm512_max_epu32(a, b);
    else return kSigned ? _mm512_max_epi64(a, b) : _mm512_max_epu64(a, b);
  }
  template <class T>
  static I min(I a, I b) {
    constexpr bool kSigned = std::is_signed_v<T>;
    if constexpr (sizeof(T) == 1) return kSigned ? _mm512_min_epi8(a, b) : _mm512_min_epu8(a, b);
    else if constexpr (sizeof(T) == 4) return kSigned ? _mm512_min_epi32(a, b) : _mm512_min_epu32(a, b);
    else return kSigned ? _mm512_min_epi64(a, b) : _mm512_min_epu64(a, b);
  }
};

#include "kernels/cpu/reduce_simd.inc"

// bfloat16 with vcvtneps2bf16. The instruction rounds to nearest even like
// narrowBf16Lanes, but it flushes subnormal inputs to zero, and keeps a NaN's sign and
// payload (quieted): subnormal lanes (rare) are redone with the integer rounding, NaN lanes
// get the canonical 0x7fff, so the result is the same bit for bit.
void S::storeBf16Ins(void* p, F v) {
#if defined(__AVX512BF16__)
  const __m256bh bh = _mm512_cvtneps_pbh(v);
  __m256i r;
  std::memcpy(&r, &bh, sizeof r);
  const I x = castFI(v);
  const __mmask16 sub = _mm512_testn_epi32_mask(x, set32(0x7f800000)) & _mm512_test_epi32_mask(x, set32(0x007fffff));
  if (sub) r = _mm256_mask_mov_epi16(r, sub, _mm512_cvtepi32_epi16(narrowBf16Lanes(v)));
  r = _mm256_mask_mov_epi16(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm256_set1_epi16(0x7fff));
  _mm256_storeu_si256(static_cast<__m256i*>(p), r);
#else
  store32x16(p, narrowBf16Lanes(v));
#endif
}

}  // namespace

void reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
            const ReduceSpec& spec) {
  reduceSimd<false>(dsts, ndst, srcs, nsrc, count, spec);
}

void reduceBf16(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                const ReduceSpec& spec) {
  reduceSimd<true>(dsts, ndst, srcs, nsrc, count, spec);
}

}  // namespace hora::kernels::avx512
