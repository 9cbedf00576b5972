// reduce() with AVX2 + FMA + F16C (this translation unit is built with -mavx2 -mfma -mf16c;
// dispatch.cc calls it only on a CPU that has them). 256-bit vectors, unaligned loads and
// stores; the shared loop is in reduce_simd.inc. No FMA is used on purpose: a contracted
// multiply-add would round differently from the scalar code.
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

#if !defined(__AVX2__) || !defined(__F16C__)
#error "reduce_avx2.cc must be built with -mavx2 -mfma -mf16c"
#endif

// Keep the compiler from fusing a multiply and an add into an FMA (only an issue with GNU
// dialects, whose default is -ffp-contract=fast).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace hora::kernels::avx2 {
namespace {

// The ISA primitives reduce_simd.inc uses.
struct S {
  using F = __m256;
  using D = __m256d;
  using I = __m256i;
  using M = __m256i;  // a lane mask: all ones or all zeros per 32-bit lane
  static constexpr size_t kBytes = 32;
  static constexpr size_t kF = 8;  // float lanes per vector

  // Memory (no alignment needed).
  static F loadF(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }
  static void storeF(void* p, F v) { _mm256_storeu_ps(static_cast<float*>(p), v); }
  static D loadD(const void* p) { return _mm256_loadu_pd(static_cast<const double*>(p)); }
  static void storeD(void* p, D v) { _mm256_storeu_pd(static_cast<double*>(p), v); }
  static I loadI(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static void storeI(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }

  // float / double. max/min: maxps(a, b) is "a > b ? a : b", which yields b when either is
  // NaN; a NaN a is patched in with an unordered compare, so NaN propagates.
  static F setF(float x) { return _mm256_set1_ps(x); }
  static F addF(F a, F b) { return _mm256_add_ps(a, b); }
  static F mulF(F a, F b) { return _mm256_mul_ps(a, b); }
  static F divF(F a, F b) { return _mm256_div_ps(a, b); }
  static F maxF(F a, F b) { return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
  static F minF(F a, F b) { return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q)); }
  static D setD(double x) { return _mm256_set1_pd(x); }
  static D addD(D a, D b) { return _mm256_add_pd(a, b); }
  static D mulD(D a, D b) { return _mm256_mul_pd(a, b); }
  static D divD(D a, D b) { return _mm256_div_pd(a, b); }
  static D maxD(D a, D b) { return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)); }
  static D minD(D a, D b) { return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q)); }

  // 32-bit lanes, for the conversions.
  static I set32(uint32_t x) { return _mm256_set1_epi32(static_cast<int>(x)); }
  static I and32(I a, I b) { return _mm256_and_si256(a, b); }
  static I or32(I a, I b) { return _mm256_or_si256(a, b); }
  static I add32(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub32(I a, I b) { return _mm256_sub_epi32(a, b); }
  template <int n>
  static I srli32(I a) { return _mm256_srli_epi32(a, n); }
  template <int n>
  static I slli32(I a) { return _mm256_slli_epi32(a, n); }
  static I srlv32(I a, I n) { return _mm256_srlv_epi32(a, n); }
  static I sllv32(I a, I n) { return _mm256_sllv_epi32(a, n); }
  static I minu32(I a, I b) { return _mm256_min_epu32(a, b); }
  static I maxu32(I a, I b) { return _mm256_max_epu32(a, b); }
  static M gt32(I a, I b) { return _mm256_cmpgt_epi32(a, b); }  // signed
  static M eq32(I a, I b) { return _mm256_cmpeq_epi32(a, b); }
  static I select(M m, I a, I b) { return _mm256_blendv_epi8(b, a, m); }  // m ? a : b
  static I castFI(F f) { return _mm256_castps_si256(f); }
  static F castIF(I i) { return _mm256_castsi256_ps(i); }
  static F cvtI32F(I i) { return _mm256_cvtepi32_ps(i); }
  static I roundToI32(F f) {  // nearest even, whatever the MXCSR says
    return _mm256_cvttps_epi32(_mm256_round_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }

  // kF narrow elements <-> 32-bit lanes.
  static I loadU8x32(const void* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(static_cast<const __m128i*>(p)));
  }
  static I loadU16x32(const void* p) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  static void store32x16(void* p, I v) {  // lanes hold values < 2^16
    const I packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), _MM_SHUFFLE(3, 1, 2, 0));
    _mm_storeu_si128(static_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static void store32x8(void* p, I v) {  // lanes hold values < 2^8
    const I bytes = _mm256_shuffle_epi8(
        v, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                            0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1));
    const I packed = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
    _mm_storel_epi64(static_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static F loadHalf(const void* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
  // vcvtps2ph rounds like conv::floatToHalf but keeps a NaN's sign and payload (quieted):
  // NaN lanes are replaced by the canonical 0x7fff.
  static void storeHalf(void* p, F v) {
    const __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    const __m256i nan32 = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan32), _mm256_extracti128_si256(nan32, 1));
    _mm_storeu_si128(static_cast<__m128i*>(p), _mm_blendv_epi8(h, _mm_set1_epi16(0x7fff), nan16));
  }
  static F loadE5m2(const void* p) {
    const __m128i b = _mm_loadl_epi64(static_cast<const __m128i*>(p));
    return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(b), 8));
  }
  static void storeBf16Ins(void* p, F v);  // AVX-512 only; never used here

  // Integer lanes of type T: wrapping add/mul, max/min by T's signedness.
  template <class T>
  static I set1(T v) {
    if constexpr (sizeof(T) == 1) return _mm256_set1_epi8(static_cast<char>(v));
    else if constexpr (sizeof(T) == 4) return _mm256_set1_epi32(static_cast<int>(v));
    else return _mm256_set1_epi64x(static_cast<long long>(v));
  }
  template <class T>
  static I add(I a, I b) {
    if constexpr (sizeof(T) == 1) return _mm256_add_epi8(a, b);
    else if constexpr (sizeof(T) == 4) return _mm256_add_epi32(a, b);
    else return _mm256_add_epi64(a, b);
  }
  template <class T>
  static I mul(I a, I b) {
    if constexpr (sizeof(T) == 1) {
      // Even bytes: the low byte of the 16-bit product; odd bytes: product of the high bytes.
      const I even = _mm256_mullo_epi16(a, b);
      const I odd = _mm256_mullo_epi16(_mm256_srli_epi16(a, 8), _mm256_srli_epi16(b, 8));
      return _mm256_or_si256(_mm256_slli_epi16(odd, 8), _mm256_and_si256(even, _mm256_set1_epi16(0xff)));
    } else if constexpr (sizeof(T) == 4) {
      return _mm256_mullo_epi32(a, b);
    } else {
      // lo*lo + ((lo*hi + hi*lo) << 32), mod 2^64.
      const I cross = _mm256_mullo_epi32(a, _mm256_shuffle_epi32(b, _MM_SHUFFLE(2, 3, 0, 1)));
      const I sum = _mm256_add_epi32(cross, _mm256_srli_epi64(cross, 32));
      return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(sum, 32));
    }
  }
  template <class T>
  static I gt64(I a, I b) {
    if constexpr (std::is_signed_v<T>) return _mm256_cmpgt_epi64(a, b);
    const I bias = _mm256_set1_epi64x(INT64_MIN);
    return _mm256_cmpgt_epi64(_mm256_xor_si256(a, bias), _mm256_xor_si256(b, bias));
  }
  template <class T>
  static I max(I a, I b) {
    if constexpr (sizeof(T) == 1) return std::is_signed_v<T> ? _mm256_max_epi8(a, b) : _mm256_max_epu8(a, b);
    else if constexpr (sizeof(T) == 4) return std::is_signed_v<T> ? _mm256_max_epi32(a, b) : _mm256_max_epu32(a, b);
    else return _mm256_blendv_epi8(b, a, gt64<T>(a, b));
  }
  template <class T>
  static I min(I a, I b) {
    if constexpr (sizeof(T) == 1) return std::is_signed_v<T> ? _mm256_min_epi8(a, b) : _mm256_min_epu8(a, b);
    else if constexpr (sizeof(T) == 4) return std::is_signed_v<T> ? _mm256_min_epi32(a, b) : _mm256_min_epu32(a, b);
    else return _mm256_blendv_epi8(a, b, gt64<T>(a, b));
  }
};

#include "kernels/cpu/reduce_simd.inc"

}  // namespace

void reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
            const ReduceSpec& spec) {
  reduceSimd<false>(dsts, ndst, srcs, nsrc, count, spec);
}

}  // namespace hora::kernels::avx2
