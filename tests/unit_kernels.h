// Helpers shared by the kernel tests (test_kernels_convert.cc, test_kernels.cc): bit views of
// floats, hex text, a guard that restores the best ISA, and the independent scalar reference
// of reduce() with the element comparison the reduce tests use.
//
// Include it last: it turns off the contraction of multiply-adds for the rest of the including
// file, so that the references and the expected values the tests compute are not fused either.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "base/types.h"
#include "kernels/cpu/reduce.h"

// The reference must not fuse multiply-adds either (only matters with -mfma builds).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace unit {

// The library's names as the tests spell them (they say `using namespace hora::kernels`).
using hora::DataType;
using hora::dataTypeSize;
using hora::RedOp;
using hora::kernels::bestIsa;
using hora::kernels::bfloat16ToFloat;
using hora::kernels::floatToBfloat16;
using hora::kernels::floatToFp8e4m3;
using hora::kernels::floatToFp8e5m2;
using hora::kernels::floatToHalf;
using hora::kernels::fp8e4m3ToFloat;
using hora::kernels::fp8e5m2ToFloat;
using hora::kernels::halfToFloat;
using hora::kernels::ReduceSpec;
using hora::kernels::setIsa;

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint64_t bitsOfD(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

inline std::string hex(uint64_t v) {
  std::ostringstream o;
  o << "0x" << std::hex << v;
  return o.str();
}

// Restores the best ISA however a test ends.
struct IsaGuard {
  ~IsaGuard() { setIsa(bestIsa()); }
};

// ---- The reference reduce ------------------------------------------------------------------

template <class T>
T loadT(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}
template <class T>
void storeT(uint8_t* p, size_t i, T v) {
  std::memcpy(p + i * sizeof(T), &v, sizeof(T));
}

// Integers: wrap as unsigned (truncating a 64-bit result), compare as the type says,
// divide with C++'s truncating '/' on the (signed or unsigned) value.
template <class T>
void refInt(uint8_t* out, const std::vector<const uint8_t*>& srcs, size_t count, const ReduceSpec& s) {
  using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
  for (size_t i = 0; i < count; ++i) {
    T acc = loadT<T>(srcs[0], i);
    if (s.premulFirst) acc = static_cast<T>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(s.scalar.i));
    for (size_t k = 1; k < srcs.size(); ++k) {
      const T x = loadT<T>(srcs[k], i);
      switch (s.op) {
        case RedOp::Prod: acc = static_cast<T>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(x)); break;
        case RedOp::Max: acc = static_cast<W>(x) > static_cast<W>(acc) ? x : acc; break;
        case RedOp::Min: acc = static_cast<W>(x) < static_cast<W>(acc) ? x : acc; break;
        default: acc = static_cast<T>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(x)); break;
      }
    }
    if (s.divide) acc = static_cast<T>(static_cast<W>(acc) / static_cast<W>(s.divisor));
    storeT<T>(out, i, acc);
  }
}

// max/min: NaN if either is NaN (the first NaN), else the larger/smaller one, else (equal,
// e.g. +0 and -0) the later operand.
template <class F>
F refMax(F a, F b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return a > b ? a : b;
}
template <class F>
F refMin(F a, F b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return a < b ? a : b;
}

// Floating types: F is the arithmetic type; widen/narrow the element (identity for
// float/double).
template <class F, class E, class Widen, class Narrow>
void refFloat(uint8_t* out, const std::vector<const uint8_t*>& srcs, size_t count, const ReduceSpec& s,
              Widen widen, Narrow narrow) {
  const F scalar = static_cast<F>(s.scalar.f);
  const F divisor = static_cast<F>(s.divisor);
  for (size_t i = 0; i < count; ++i) {
    F acc = widen(loadT<E>(srcs[0], i));
    if (s.premulFirst) acc = acc * scalar;
    for (size_t k = 1; k < srcs.size(); ++k) {
      const F x = widen(loadT<E>(srcs[k], i));
      switch (s.op) {
        case RedOp::Prod: acc = acc * x; break;
        case RedOp::Max: acc = refMax(acc, x); break;
        case RedOp::Min: acc = refMin(acc, x); break;
        default: acc = acc + x; break;
      }
    }
    if (s.divide) acc = acc / divisor;
    storeT<E>(out, i, narrow(acc));
  }
}

inline void refReduce(uint8_t* out, const std::vector<const uint8_t*>& srcs, size_t count, const ReduceSpec& s) {
  auto same = [](auto v) { return v; };
  switch (s.dtype) {
    case DataType::Int8: return refInt<int8_t>(out, srcs, count, s);
    case DataType::Uint8: return refInt<uint8_t>(out, srcs, count, s);
    case DataType::Int32: return refInt<int32_t>(out, srcs, count, s);
    case DataType::Uint32: return refInt<uint32_t>(out, srcs, count, s);
    case DataType::Int64: return refInt<int64_t>(out, srcs, count, s);
    case DataType::Uint64: return refInt<uint64_t>(out, srcs, count, s);
    case DataType::Float32: return refFloat<float, float>(out, srcs, count, s, same, same);
    case DataType::Float64: return refFloat<double, double>(out, srcs, count, s, same, same);
    case DataType::Float16: return refFloat<float, uint16_t>(out, srcs, count, s, halfToFloat, floatToHalf);
    case DataType::Bfloat16:
      return refFloat<float, uint16_t>(out, srcs, count, s, bfloat16ToFloat, floatToBfloat16);
    case DataType::Float8e4m3:
      return refFloat<float, uint8_t>(out, srcs, count, s, fp8e4m3ToFloat, floatToFp8e4m3);
    case DataType::Float8e5m2:
      return refFloat<float, uint8_t>(out, srcs, count, s, fp8e5m2ToFloat, floatToFp8e5m2);
  }
}

// Element i of a and b equal: bit for bit, or both NaN for float and double (whose NaN
// payloads are the hardware's). The narrow floating types store one canonical NaN on every
// CPU path and on the GPU, so they compare bit for bit, NaN included.
inline bool sameElement(DataType t, const uint8_t* a, const uint8_t* b, size_t i) {
  const size_t es = dataTypeSize(t);
  if (std::memcmp(a + i * es, b + i * es, es) == 0) return true;
  switch (t) {
    case DataType::Float32: return std::isnan(loadT<float>(a, i)) && std::isnan(loadT<float>(b, i));
    case DataType::Float64: return std::isnan(loadT<double>(a, i)) && std::isnan(loadT<double>(b, i));
    default: return false;
  }
}

// The canonical NaN that narrowing stores (0 for the types that have none here).
inline uint32_t canonicalNan(DataType t) {
  switch (t) {
    case DataType::Float16: case DataType::Bfloat16: return 0x7fff;
    case DataType::Float8e4m3: case DataType::Float8e5m2: return 0x7f;
    default: return 0;
  }
}

inline std::string elementHex(DataType t, const uint8_t* p, size_t i) {
  const size_t es = dataTypeSize(t);
  uint64_t v = 0;
  std::memcpy(&v, p + i * es, es);  // little endian
  return hex(v);
}

}  // namespace unit
