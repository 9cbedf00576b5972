// The per-element arithmetic of the CUDA kernels (reduce.cu), as __host__ __device__ functions:
// the device runs them, and the host runs the very same functions in the unit tests
// (tests/test_kernels_cuda.cc), which compare them bit for bit with the CPU kernels
// (kernels/cpu/reduce.h) for every dtype x op. Nothing else uses them.
//
// One element of a reduction is
//     acc = widen(srcs[0][i]);  acc = premul(acc)        (PreMulSum)
//     acc = combine(acc, widen(srcs[k][i]))               k = 1 .. nsrc-1, left to right
//     acc = divide(acc)                                   (the last step of Avg)
//     dsts[j][i] = narrow(acc)
// with the rules of the README's Semantics, as kernels/cpu/reduce.h states them: integers wrap
// as unsigned, their Avg is the truncated quotient; float and double are IEEE in the type, each
// operation rounded on its own (no fused multiply-add: the device code uses the _rn intrinsics,
// which the compiler never contracts; float subnormals are kept, nvcc's -ftz=false); the narrow
// floating types are widened to float, combined in float and rounded once; max/min return the
// accumulator if it is NaN, else the new value if it is NaN, else the larger/smaller, and the
// new value when they compare equal.
//
// The narrow types convert with the GPU's own instructions, through NVIDIA's intrinsics
// (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h), two elements per instruction on the 16-byte packs:
//   float16   widen cvt.f32.f16;  narrow cvt.rn.f16x2.f32 (NaN -> 0x7fff, overflow -> inf)
//   bfloat16  widen: a shift;     narrow cvt.rn.bf16x2.f32 (NaN -> 0x7fff, overflow -> inf)
//   e4m3      widen cvt.rn.f16x2.e4m3x2 + cvt.f32.f16;  narrow cvt.rn.satfinite.e4m3x2.f32
//             (NaN -> 0x7f, overflow and inf -> +-448)
//   e5m2      widen: a shift into a float16 + cvt.f32.f16;  narrow cvt.rn.satfinite.e5m2x2.f32
//             (NaN -> 0x7f), then the values that round past the largest finite value (from
//             61440 up, inf included) are set to inf, as the Semantics say (the instruction
//             exists only saturating)
// The CPU kernels give the same bits (kernels/cpu/convert_inl.h). On the host these intrinsics
// are NVIDIA's host implementations of the same instructions, so the host tests check the
// arithmetic the device runs. GPUs before sm_89 have no fp8 conversion instructions: there the
// fp8 types use the CPU's own integer-coded conversions (conv::), which the host tests check
// against the same intrinsics. A build without the CUDA headers (no nvcc) uses conv:: for every
// type; the device code always has them.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/convert_inl.h"
#include "kernels/cpu/reduce_impl.h"

#if defined(__CUDACC__) || defined(HORA_CUDA)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define HORA_ELEMENT_INTRINSICS 1
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#define HORA_ELEMENT_FP8_SOFT 1  // no fp8 conversion instructions on this GPU
#endif
#else
#define HORA_ELEMENT_FP8_SOFT 1  // no CUDA headers: the CPU's conversions stand in
#endif

#if defined(__CUDACC__)
#define HORA_HD __host__ __device__ __forceinline__
#else
#define HORA_HD inline
#endif
#if defined(__CUDA_ARCH__)
#define HORA_UNROLL _Pragma("unroll")
#else
#define HORA_UNROLL
#endif

namespace hora::kernels::element {

// What a reduction needs besides its operands, already in a form the device reads as it is.
struct Params {
  int64_t mulI = 0;     // PreMulSum's factor for integer types (two's complement bits)
  double mulF = 0;      // ... for floating types
  uint64_t divisor = 1; // Avg's divisor
  bool premul = false;
  bool divide = false;
};

template <class T>
struct Int {
  using E = T;
  using C = T;
  static constexpr int kPerWord = 0;  // packs: element by element
  using U = std::make_unsigned_t<T>;
  HORA_HD static C widen(E v) { return v; }
  HORA_HD static E narrow(C v) { return v; }
  HORA_HD static C add(C a, C b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
  HORA_HD static C mul(C a, C b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
  HORA_HD static C max(C a, C b) { return a > b ? a : b; }
  HORA_HD static C min(C a, C b) { return a < b ? a : b; }
  HORA_HD static C premul(C a, const Params& p) { return mul(a, static_cast<T>(p.mulI)); }
  HORA_HD static C divide(C a, const Params& p) { return divideInt<T>(a, p.divisor); }
};

// IEEE arithmetic in T, each operation rounded to nearest on its own.
template <class T>
struct Ieee;
template <>
struct Ieee<float> {
  HORA_HD static float add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
  }
  HORA_HD static float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
  }
  HORA_HD static float div(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fdiv_rn(a, b);
#else
    return a / b;
#endif
  }
};
template <>
struct Ieee<double> {
  HORA_HD static double add(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
  }
  HORA_HD static double mul(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
  }
  HORA_HD static double div(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
  }
};

template <class T>
struct Float {
  using E = T;
  using C = T;
  static constexpr int kPerWord = 0;
  HORA_HD static C widen(E v) { return v; }
  HORA_HD static E narrow(C v) { return v; }
  HORA_HD static C add(C a, C b) { return Ieee<T>::add(a, b); }
  HORA_HD static C mul(C a, C b) { return Ieee<T>::mul(a, b); }
  HORA_HD static C max(C a, C b) { return a != a ? a : (a > b ? a : b); }
  HORA_HD static C min(C a, C b) { return a != a ? a : (a < b ? a : b); }
  HORA_HD static C premul(C a, const Params& p) { return Ieee<T>::mul(a, static_cast<T>(p.mulF)); }
  HORA_HD static C divide(C a, const Params& p) { return Ieee<T>::div(a, static_cast<T>(p.divisor)); }
};

// float16, bfloat16 and the float8 formats: float arithmetic between a widening and a narrowing.
// Each converts one element (widen, narrow) and one 32-bit word of kPerWord elements (widenWord,
// narrowWord: element 0 in the low bits, as in memory), the packs' path.
struct HalfCv {
  using E = uint16_t;
  static constexpr int kPerWord = 2;
#if defined(HORA_ELEMENT_INTRINSICS)
  HORA_HD static float widen(E v) {
    __half_raw r;
    r.x = v;
    return __half2float(__half(r));
  }
  HORA_HD static E narrow(float f) { return static_cast<__half_raw>(__float2half_rn(f)).x; }
  HORA_HD static void widenWord(uint32_t w, float* out) {
    __half2_raw r;
    r.x = static_cast<unsigned short>(w);
    r.y = static_cast<unsigned short>(w >> 16);
    const float2 f = __half22float2(__half2(r));
    out[0] = f.x;
    out[1] = f.y;
  }
  HORA_HD static uint32_t narrowWord(const float* in) {
    const __half2_raw r = static_cast<__half2_raw>(__floats2half2_rn(in[0], in[1]));
    return r.x | (static_cast<uint32_t>(r.y) << 16);
  }
#else
  HORA_HD static float widen(E v) { return conv::halfToFloat(v); }
  HORA_HD static E narrow(float f) { return conv::floatToHalf(f); }
  HORA_HD static void widenWord(uint32_t w, float* out) {
    out[0] = widen(static_cast<E>(w));
    out[1] = widen(static_cast<E>(w >> 16));
  }
  HORA_HD static uint32_t narrowWord(const float* in) {
    return narrow(in[0]) | (static_cast<uint32_t>(narrow(in[1])) << 16);
  }
#endif
};

struct Bf16Cv {
  using E = uint16_t;
  static constexpr int kPerWord = 2;
  HORA_HD static float widen(E v) { return conv::bitsFloat(static_cast<uint32_t>(v) << 16); }  // exact
  HORA_HD static void widenWord(uint32_t w, float* out) {
    out[0] = conv::bitsFloat(w << 16);
    out[1] = conv::bitsFloat(w & 0xffff0000u);
  }
#if defined(HORA_ELEMENT_INTRINSICS)
  HORA_HD static E narrow(float f) { return static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(f)).x; }
  HORA_HD static uint32_t narrowWord(const float* in) {
    const __nv_bfloat162_raw r = static_cast<__nv_bfloat162_raw>(__floats2bfloat162_rn(in[0], in[1]));
    return r.x | (static_cast<uint32_t>(r.y) << 16);
  }
#else
  HORA_HD static E narrow(float f) { return conv::floatToBf16(f); }
  HORA_HD static uint32_t narrowWord(const float* in) {
    return narrow(in[0]) | (static_cast<uint32_t>(narrow(in[1])) << 16);
  }
#endif
};

// fp8: two elements (a 16-bit half of a word) at a time.
#if defined(HORA_ELEMENT_INTRINSICS)
HORA_HD float2 halfPairToFloat2(__half2_raw r) { return __half22float2(__half2(r)); }
HORA_HD __half2_raw fp8PairToHalves(uint32_t pair, __nv_fp8_interpretation_t kind) {
  return __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), kind);
}
HORA_HD uint32_t floatsToFp8Pair(float a, float b, __nv_fp8_interpretation_t kind) {
  float2 f;
  f.x = a;
  f.y = b;
  return __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, kind);
}
#endif

// e5m2 keeps IEEE overflow (the Semantics): where the saturating conversion gave +-57344 for a
// value from 61440 up (the tie rounds to the even code, inf), or for an infinity, the result is
// inf of the sign. NaN (above inf's bits) is left as the conversion made it.
HORA_HD uint32_t e5m2Overflow(float f, uint32_t code) {
  const uint32_t x = conv::floatBits(f);
  const uint32_t a = x & 0x7fffffffu;
  return a - 0x47700000u <= 0x7f800000u - 0x47700000u ? ((x >> 24) & 0x80u) | 0x7cu : code;
}

struct E4m3Cv {
  using E = uint8_t;
  static constexpr int kPerWord = 4;
#if defined(HORA_ELEMENT_FP8_SOFT)
  HORA_HD static float widen(E v) { return conv::e4m3ToFloat(v); }
  HORA_HD static E narrow(float f) { return conv::floatToE4m3(f); }
  HORA_HD static void widenWord(uint32_t w, float* out) {
    for (int j = 0; j < 4; ++j) out[j] = widen(static_cast<E>(w >> (8 * j)));
  }
  HORA_HD static uint32_t narrowWord(const float* in) {
    uint32_t w = 0;
    for (int j = 0; j < 4; ++j) w |= static_cast<uint32_t>(narrow(in[j])) << (8 * j);
    return w;
  }
#else
  HORA_HD static float widen(E v) { return halfPairToFloat2(fp8PairToHalves(v, __NV_E4M3)).x; }
  HORA_HD static E narrow(float f) { return static_cast<E>(floatsToFp8Pair(f, 0.0f, __NV_E4M3)); }
  HORA_HD static void widenWord(uint32_t w, float* out) {
    const float2 lo = halfPairToFloat2(fp8PairToHalves(w & 0xffffu, __NV_E4M3));
    const float2 hi = halfPairToFloat2(fp8PairToHalves(w >> 16, __NV_E4M3));
    out[0] = lo.x;
    out[1] = lo.y;
    out[2] = hi.x;
    out[3] = hi.y;
  }
  HORA_HD static uint32_t narrowWord(const float* in) {
    return floatsToFp8Pair(in[0], in[1], __NV_E4M3) | (floatsToFp8Pair(in[2], in[3], __NV_E4M3) << 16);
  }
#endif
};

struct E5m2Cv {
  using E = uint8_t;
  static constexpr int kPerWord = 4;
#if defined(HORA_ELEMENT_INTRINSICS)
  // An e5m2 code is the top byte of the float16 of the same value.
  HORA_HD static float widen(E v) { return HalfCv::widen(static_cast<uint16_t>(v << 8)); }
  HORA_HD static void widenWord(uint32_t w, float* out) {
    HalfCv::widenWord((w & 0xffu) << 8 | (w & 0xff00u) << 16, out);
    HalfCv::widenWord((w & 0xff0000u) >> 8 | (w & 0xff000000u), out + 2);
  }
#else
  HORA_HD static float widen(E v) { return conv::e5m2ToFloat(v); }
  HORA_HD static void widenWord(uint32_t w, float* out) {
    for (int j = 0; j < 4; ++j) out[j] = widen(static_cast<E>(w >> (8 * j)));
  }
#endif
#if defined(HORA_ELEMENT_FP8_SOFT)
  HORA_HD static E narrow(float f) { return conv::floatToE5m2(f); }
  HORA_HD static uint32_t narrowWord(const float* in) {
    uint32_t w = 0;
    for (int j = 0; j < 4; ++j) w |= static_cast<uint32_t>(narrow(in[j])) << (8 * j);
    return w;
  }
#else
  HORA_HD static E narrow(float f) {
    return static_cast<E>(e5m2Overflow(f, floatsToFp8Pair(f, 0.0f, __NV_E5M2) & 0xffu));
  }
  HORA_HD static uint32_t narrowWord(const float* in) {
    const uint32_t lo = floatsToFp8Pair(in[0], in[1], __NV_E5M2);
    const uint32_t hi = floatsToFp8Pair(in[2], in[3], __NV_E5M2);
    return e5m2Overflow(in[0], lo & 0xffu) | e5m2Overflow(in[1], lo >> 8) << 8 |
           e5m2Overflow(in[2], hi & 0xffu) << 16 | e5m2Overflow(in[3], hi >> 8) << 24;
  }
#endif
};

template <class Cv>
struct Narrow : Float<float> {
  using E = typename Cv::E;
  using C = float;
  static constexpr int kPerWord = Cv::kPerWord;
  HORA_HD static C widen(E v) { return Cv::widen(v); }
  HORA_HD static E narrow(C v) { return Cv::narrow(v); }
  HORA_HD static void widenWord(uint32_t w, C* out) { Cv::widenWord(w, out); }
  HORA_HD static uint32_t narrowWord(const C* in) { return Cv::narrowWord(in); }
};

struct Sum {
  template <class D>
  HORA_HD static typename D::C apply(typename D::C a, typename D::C b) { return D::add(a, b); }
};
struct Prod {
  template <class D>
  HORA_HD static typename D::C apply(typename D::C a, typename D::C b) { return D::mul(a, b); }
};
struct Max {
  template <class D>
  HORA_HD static typename D::C apply(typename D::C a, typename D::C b) { return D::max(a, b); }
};
struct Min {
  template <class D>
  HORA_HD static typename D::C apply(typename D::C a, typename D::C b) { return D::min(a, b); }
};

// The three steps of one element, which the kernels' scalar and vector paths both call.
template <class D>
HORA_HD typename D::C first(typename D::E v, const Params& p) {
  typename D::C acc = D::widen(v);
  return p.premul ? D::premul(acc, p) : acc;
}
template <class D, class Op>
HORA_HD typename D::C combine(typename D::C acc, typename D::E v) {
  return Op::template apply<D>(acc, D::widen(v));
}
template <class D>
HORA_HD typename D::E last(typename D::C acc, const Params& p) {
  return D::narrow(p.divide ? D::divide(acc, p) : acc);
}

// The same three steps on a pack: 16 bytes of elements as four 32-bit words (as a 16-byte load
// gives them), the narrow types converted a word at a time.
struct Words {
  uint32_t w[4];
};
template <class D>
struct Pack {
  using E = typename D::E;
  using C = typename D::C;
  static constexpr int V = 16 / static_cast<int>(sizeof(E));
  HORA_HD static void widen(const Words& in, C (&out)[V]) {
    if constexpr (D::kPerWord > 0) {
      HORA_UNROLL
      for (int w = 0; w < 4; ++w) D::widenWord(in.w[w], out + w * D::kPerWord);
    } else {
      E e[V];
      memcpy(e, in.w, sizeof e);
      HORA_UNROLL
      for (int j = 0; j < V; ++j) out[j] = D::widen(e[j]);
    }
  }
  HORA_HD static Words narrow(const C (&in)[V]) {
    Words out;
    if constexpr (D::kPerWord > 0) {
      HORA_UNROLL
      for (int w = 0; w < 4; ++w) out.w[w] = D::narrowWord(in + w * D::kPerWord);
    } else {
      E e[V];
      HORA_UNROLL
      for (int j = 0; j < V; ++j) e[j] = D::narrow(in[j]);
      memcpy(out.w, e, sizeof e);
    }
    return out;
  }
  HORA_HD static void first(const Words& in, const Params& p, C (&acc)[V]) {
    widen(in, acc);
    if (p.premul) {
      HORA_UNROLL
      for (int j = 0; j < V; ++j) acc[j] = D::premul(acc[j], p);
    }
  }
  template <class Op>
  HORA_HD static void combine(C (&acc)[V], const Words& in) {
    C x[V];
    widen(in, x);
    HORA_UNROLL
    for (int j = 0; j < V; ++j) acc[j] = Op::template apply<D>(acc[j], x[j]);
  }
  HORA_HD static Words last(C (&acc)[V], const Params& p) {
    if (p.divide) {
      HORA_UNROLL
      for (int j = 0; j < V; ++j) acc[j] = D::divide(acc[j], p);
    }
    return narrow(acc);
  }
};

// U packs of every source into every destination, as the kernels' vector path does them:
// load(k, u) returns source k's pack u, store(d, u, words) writes destination d's. Source k + 1 is
// loaded before source k is combined (the next loads are in flight during the arithmetic), and
// every load comes before the first store, so a destination may be a source.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class D, class Op, int U, class Load, class Store>
HORA_HD void reducePacks(int nsrc, int ndst, const Params& p, const Load& load, const Store& store) {
  using P = Pack<D>;
  typename D::C acc[U][P::V];
  Words cur[U], next[U];
  HORA_UNROLL
  for (int u = 0; u < U; ++u) cur[u] = load(0, u);
  if (nsrc > 1) {
    HORA_UNROLL
    for (int u = 0; u < U; ++u) next[u] = load(1, u);
  }
  HORA_UNROLL
  for (int u = 0; u < U; ++u) P::first(cur[u], p, acc[u]);
  for (int k = 1; k < nsrc; ++k) {
    HORA_UNROLL
    for (int u = 0; u < U; ++u) cur[u] = next[u];
    if (k + 1 < nsrc) {
      HORA_UNROLL
      for (int u = 0; u < U; ++u) next[u] = load(k + 1, u);
    }
    HORA_UNROLL
    for (int u = 0; u < U; ++u) P::template combine<Op>(acc[u], cur[u]);
  }
  HORA_UNROLL
  for (int u = 0; u < U; ++u) cur[u] = P::last(acc[u], p);
  for (int d = 0; d < ndst; ++d) {
    HORA_UNROLL
    for (int u = 0; u < U; ++u) store(d, u, cur[u]);
  }
}

// Calls fn.template operator()<D, Op>() with the element type and op of a (dtype, op) pair, as
// the numbers of base/types.h (DataType, RedOp) give them; false for numbers it does not know.
// Avg and PreMulSum combine as Sum (their other steps are Params'). Host code: the launch and
// the tests.
template <class Fn>
inline bool dispatch(int dtype, int op, Fn&& fn) {
  auto byOp = [&](auto d) {
    using D = decltype(d);
    switch (op) {
      case 0: case 4: case 5: fn.template operator()<D, Sum>(); return true;  // Sum, Avg, PreMulSum
      case 1: fn.template operator()<D, Prod>(); return true;
      case 2: fn.template operator()<D, Max>(); return true;
      case 3: fn.template operator()<D, Min>(); return true;
      default: return false;
    }
  };
  switch (dtype) {
    case 0: return byOp(Int<int8_t>{});
    case 1: return byOp(Int<uint8_t>{});
    case 2: return byOp(Int<int32_t>{});
    case 3: return byOp(Int<uint32_t>{});
    case 4: return byOp(Int<int64_t>{});
    case 5: return byOp(Int<uint64_t>{});
    case 6: return byOp(Narrow<HalfCv>{});
    case 7: return byOp(Float<float>{});
    case 8: return byOp(Float<double>{});
    case 9: return byOp(Narrow<Bf16Cv>{});
    case 10: return byOp(Narrow<E4m3Cv>{});
    case 11: return byOp(Narrow<E5m2Cv>{});
    default: return false;
  }
}

}  // namespace hora::kernels::element
