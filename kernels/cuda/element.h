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
// which the compiler never contracts); the narrow floating types are widened to float,
// combined in float and rounded once (kernels/cpu/convert_inl.h, the CPU's own conversions,
// and the CPU's integer division, reduce_impl.h);
// max/min return the accumulator if it is NaN, else the new value if it is NaN, else the
// larger/smaller, and the new value when they compare equal.
#pragma once
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/convert_inl.h"
#include "kernels/cpu/reduce_impl.h"

#if defined(__CUDACC__)
#define HORA_HD __host__ __device__ __forceinline__
#else
#define HORA_HD inline
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
struct HalfCv {
  using E = uint16_t;
  HORA_HD static float widen(E v) { return conv::halfToFloat(v); }
  HORA_HD static E narrow(float f) { return conv::floatToHalf(f); }
};
struct Bf16Cv {
  using E = uint16_t;
  HORA_HD static float widen(E v) { return conv::bf16ToFloat(v); }
  HORA_HD static E narrow(float f) { return conv::floatToBf16(f); }
};
struct E4m3Cv {
  using E = uint8_t;
  HORA_HD static float widen(E v) { return conv::e4m3ToFloat(v); }
  HORA_HD static E narrow(float f) { return conv::floatToE4m3(f); }
};
struct E5m2Cv {
  using E = uint8_t;
  HORA_HD static float widen(E v) { return conv::e5m2ToFloat(v); }
  HORA_HD static E narrow(float f) { return conv::floatToE5m2(f); }
};
template <class Cv>
struct Narrow : Float<float> {
  using E = typename Cv::E;
  using C = float;
  HORA_HD static C widen(E v) { return Cv::widen(v); }
  HORA_HD static E narrow(C v) { return Cv::narrow(v); }
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
