// Tests of the CPU reduction kernels (kernels/cpu): the conversions against known bit
// patterns and a brute-force nearest-value search, and reduce() of every implementation
// (ISA) against an independent scalar reference, bit for bit, for every dtype x op.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/reduce.h"
#include "kernels/cpu/reduce_impl.h"  // avx512::reduce, to test the non-BF16-instruction path

// The reference must not fuse multiply-adds either (only matters with -mfma builds).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

using namespace hora;
using namespace hora::kernels;

namespace {

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint64_t bitsOfD(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

std::string hex(uint64_t v) {
  std::ostringstream o;
  o << "0x" << std::hex << v;
  return o.str();
}

// Restores the best ISA however a test ends.
struct IsaGuard {
  ~IsaGuard() { setIsa(bestIsa()); }
};

// ---- Narrow float formats, described independently of the library --------------------------

struct Format {
  const char* name;
  int e, m;   // exponent and mantissa bits
  bool ieee;  // all-ones exponent = inf/NaN; else (e4m3) only all-ones = NaN, no inf
  float (*widen)(uint32_t);
  uint32_t (*narrow)(float);
};

float wHalf(uint32_t v) { return halfToFloat(static_cast<uint16_t>(v)); }
uint32_t nHalf(float f) { return floatToHalf(f); }
float wBf16(uint32_t v) { return bfloat16ToFloat(static_cast<uint16_t>(v)); }
uint32_t nBf16(float f) { return floatToBfloat16(f); }
float wE4m3(uint32_t v) { return fp8e4m3ToFloat(static_cast<uint8_t>(v)); }
uint32_t nE4m3(float f) { return floatToFp8e4m3(f); }
float wE5m2(uint32_t v) { return fp8e5m2ToFloat(static_cast<uint8_t>(v)); }
uint32_t nE5m2(float f) { return floatToFp8e5m2(f); }

const Format kHalf{"half", 5, 10, true, wHalf, nHalf};
const Format kBf16{"bfloat16", 8, 7, true, wBf16, nBf16};
const Format kE4m3{"e4m3", 4, 3, false, wE4m3, nE4m3};
const Format kE5m2{"e5m2", 5, 2, true, wE5m2, nE5m2};

// The value of a code from the textbook formula; NaN for NaN codes.
double codeValue(const Format& f, uint32_t code) {
  const int bias = (1 << (f.e - 1)) - 1;
  const uint32_t sign = (code >> (f.e + f.m)) & 1;
  const uint32_t exp = (code >> f.m) & ((1u << f.e) - 1);
  const uint32_t man = code & ((1u << f.m) - 1);
  const uint32_t expAll = (1u << f.e) - 1, manAll = (1u << f.m) - 1;
  double v;
  if (f.ieee && exp == expAll) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (!f.ieee && exp == expAll && man == manAll) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<double>(man), 1 - bias - f.m);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(man), -f.m), static_cast<int>(exp) - bias);
  }
  return sign ? -v : v;
}

bool isNanCode(const Format& f, uint32_t code) { return std::isnan(codeValue(f, code)); }

// Positive finite codes in increasing order (code order is value order) with their values.
struct Table {
  std::vector<uint32_t> codes;
  std::vector<double> vals;
};
Table positiveFinite(const Format& f) {
  Table t;
  for (uint32_t c = 0; c < (1u << (f.e + f.m)); ++c) {
    const double v = codeValue(f, c);
    if (std::isfinite(v)) {
      t.codes.push_back(c);
      t.vals.push_back(v);
    }
  }
  return t;
}

// Round to nearest, ties to the even code, by searching the table; overflow per format.
uint32_t nearestCode(const Format& f, const Table& t, double x) {
  const uint32_t sign = std::signbit(x) ? (1u << (f.e + f.m)) : 0;
  const double a = std::fabs(x);
  const size_t n = t.codes.size();
  const double maxV = t.vals[n - 1];
  if (!f.ieee) {
    if (a >= maxV) return sign | t.codes[n - 1];  // saturating (inf too)
  } else {
    // Halfway to the next power of two past the maximum rounds to inf (the even code).
    if (a >= maxV + (maxV - t.vals[n - 2]) / 2) return sign | (((1u << f.e) - 1) << f.m);
  }
  const size_t hi = static_cast<size_t>(std::lower_bound(t.vals.begin(), t.vals.end(), a) - t.vals.begin());
  if (hi == n) return sign | t.codes[n - 1];
  if (t.vals[hi] == a || hi == 0) return sign | t.codes[hi];
  const double dlo = a - t.vals[hi - 1], dhi = t.vals[hi] - a;
  if (dlo < dhi) return sign | t.codes[hi - 1];
  if (dhi < dlo) return sign | t.codes[hi];
  return sign | ((t.codes[hi - 1] & 1) ? t.codes[hi] : t.codes[hi - 1]);
}

void checkFormat(const Format& f) {
  INFO("format " << f.name);
  const uint32_t ncodes = 1u << (1 + f.e + f.m);  // both signs
  // Widening: every code, against the formula (NaN stays NaN, with its sign).
  for (uint32_t c = 0; c < ncodes; ++c) {
    const double want = codeValue(f, c);
    const float got = f.widen(c);
    if (std::isnan(want)) {
      if (!std::isnan(got)) FAIL("code " << hex(c) << " should widen to NaN");
      continue;
    }
    if (static_cast<double>(got) != want || std::signbit(got) != std::signbit(want))
      FAIL("code " << hex(c) << " widens to " << got << ", want " << want);
  }
  // Narrowing: every code's value, the midpoints between neighbours (ties), the floats just
  // either side of them, and random floats, against the brute-force search.
  const Table pos = positiveFinite(f);
  std::vector<float> probes;
  for (size_t i = 0; i < pos.vals.size(); ++i) {
    const float v = static_cast<float>(pos.vals[i]);
    probes.push_back(v);
    const double next = i + 1 < pos.vals.size() ? pos.vals[i + 1] : 2 * pos.vals[i] - pos.vals[i - 1];
    const float mid = static_cast<float>((pos.vals[i] + next) / 2);  // exact
    probes.push_back(mid);
    probes.push_back(std::nextafter(mid, 0.0f));
    probes.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
  }
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000; ++i) probes.push_back(floatOf(rng()));
  probes.push_back(std::numeric_limits<float>::infinity());
  probes.push_back(std::numeric_limits<float>::max());
  probes.push_back(std::numeric_limits<float>::denorm_min());
  probes.push_back(std::numeric_limits<float>::min());
  int failures = 0;
  for (float p : probes) {
    for (float x : {p, -p}) {
      const uint32_t got = f.narrow(x);
      if (std::isnan(x)) {
        if (!isNanCode(f, got) && failures++ < 10) FAIL_CHECK("NaN narrows to non-NaN " << hex(got));
        continue;
      }
      const uint32_t want = nearestCode(f, pos, x);
      if (got != want && failures++ < 10)
        FAIL_CHECK(std::hexfloat << x << " (" << hex(bitsOf(x)) << ") narrows to " << hex(got) << ", want "
                                 << hex(want));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("conversions: known bit patterns", "[kernels][convert]") {
  // half
  CHECK(halfToFloat(0x3c00) == 1.0f);
  CHECK(halfToFloat(0xc000) == -2.0f);
  CHECK(halfToFloat(0x7bff) == 65504.0f);
  CHECK(halfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(halfToFloat(0x0400) == std::ldexp(1.0f, -14));
  CHECK(halfToFloat(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(halfToFloat(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(halfToFloat(0x7e00)));
  CHECK(std::isnan(halfToFloat(0x7c01)));  // signalling NaN stays NaN
  CHECK(bitsOf(halfToFloat(0x8000)) == 0x80000000u);
  CHECK(floatToHalf(1.0f) == 0x3c00);
  CHECK(floatToHalf(65504.0f) == 0x7bff);
  CHECK(floatToHalf(65519.0f) == 0x7bff);           // below the halfway point to 65536
  CHECK(floatToHalf(65520.0f) == 0x7c00);           // halfway: ties to even = inf
  CHECK(floatToHalf(1e6f) == 0x7c00);
  CHECK(floatToHalf(-1e6f) == 0xfc00);
  CHECK(floatToHalf(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(floatToHalf(std::ldexp(1.0f, -25)) == 0x0000);          // tie -> even (0)
  CHECK(floatToHalf(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(floatToHalf(std::ldexp(3.0f, -25)) == 0x0002);          // 1.5 ulps: tie -> even (2)
  CHECK(floatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);   // tie -> even
  CHECK(floatToHalf(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);   // tie -> even (up)
  CHECK(floatToHalf(-0.0f) == 0x8000);
  {
    const uint16_t h = floatToHalf(std::numeric_limits<float>::quiet_NaN());
    CHECK((h & 0x7c00) == 0x7c00);
    CHECK((h & 0x03ff) != 0);
  }
  // bfloat16
  CHECK(bfloat16ToFloat(0x3f80) == 1.0f);
  CHECK(bfloat16ToFloat(0x7f7f) == floatOf(0x7f7f0000));
  CHECK(floatToBfloat16(1.0f) == 0x3f80);
  CHECK(floatToBfloat16(floatOf(0x3f808000)) == 0x3f80);  // tie -> even
  CHECK(floatToBfloat16(floatOf(0x3f818000)) == 0x3f82);  // tie -> even (up)
  CHECK(floatToBfloat16(floatOf(0x3f808001)) == 0x3f81);
  CHECK(floatToBfloat16(floatOf(0x00018000)) == 0x0002);  // subnormal tie -> even
  CHECK(floatToBfloat16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds up to inf
  CHECK(floatToBfloat16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK((floatToBfloat16(floatOf(0x7f800001)) & 0x7fff) > 0x7f80);  // sNaN stays NaN
  CHECK((floatToBfloat16(floatOf(0xffffffff)) & 0x7fff) > 0x7f80);
  // fp8 e4m3: max 448 = 0x7e, NaN 0x7f/0xff, no inf, saturating
  CHECK(fp8e4m3ToFloat(0x7e) == 448.0f);
  CHECK(fp8e4m3ToFloat(0x38) == 1.0f);
  CHECK(fp8e4m3ToFloat(0x01) == std::ldexp(1.0f, -9));
  CHECK(fp8e4m3ToFloat(0x78) == 256.0f);  // exponent all ones is a normal number
  CHECK(std::isnan(fp8e4m3ToFloat(0x7f)));
  CHECK(std::isnan(fp8e4m3ToFloat(0xff)));
  CHECK(floatToFp8e4m3(448.0f) == 0x7e);
  CHECK(floatToFp8e4m3(500.0f) == 0x7e);
  CHECK(floatToFp8e4m3(1e30f) == 0x7e);
  CHECK(floatToFp8e4m3(-1e30f) == 0xfe);
  CHECK(floatToFp8e4m3(std::numeric_limits<float>::infinity()) == 0x7e);
  CHECK(floatToFp8e4m3(-std::numeric_limits<float>::infinity()) == 0xfe);
  CHECK(floatToFp8e4m3(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(floatToFp8e4m3(1.0f) == 0x38);
  CHECK(floatToFp8e4m3(1.0625f) == 0x38);  // tie -> even
  CHECK(floatToFp8e4m3(1.1875f) == 0x3a);  // tie -> even (up)
  CHECK(floatToFp8e4m3(std::ldexp(1.0f, -10)) == 0x00);  // tie -> even (0)
  CHECK(floatToFp8e4m3(std::ldexp(1.0f, -9)) == 0x01);
  // fp8 e5m2: max 57344 = 0x7b, IEEE inf/NaN
  CHECK(fp8e5m2ToFloat(0x7b) == 57344.0f);
  CHECK(fp8e5m2ToFloat(0x3c) == 1.0f);
  CHECK(fp8e5m2ToFloat(0x01) == std::ldexp(1.0f, -16));
  CHECK(fp8e5m2ToFloat(0x7c) == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(fp8e5m2ToFloat(0x7d)));
  CHECK(floatToFp8e5m2(57344.0f) == 0x7b);
  CHECK(floatToFp8e5m2(61439.0f) == 0x7b);
  CHECK(floatToFp8e5m2(61440.0f) == 0x7c);  // halfway to 65536: ties to even = inf
  CHECK(floatToFp8e5m2(1e30f) == 0x7c);
  CHECK(floatToFp8e5m2(-1e30f) == 0xfc);
  CHECK(isNanCode(kE5m2, floatToFp8e5m2(std::numeric_limits<float>::quiet_NaN())));
  CHECK(floatToFp8e5m2(1.125f) == 0x3c);  // tie -> even
  CHECK(floatToFp8e5m2(1.375f) == 0x3e);  // tie -> even (up)
}

TEST_CASE("conversions: every code and brute-force rounding", "[kernels][convert]") {
  checkFormat(kHalf);
  checkFormat(kBf16);
  checkFormat(kE4m3);
  checkFormat(kE5m2);
}

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

void refReduce(uint8_t* out, const std::vector<const uint8_t*>& srcs, size_t count, const ReduceSpec& s) {
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

// Element i of a and b equal: bit for bit, or both NaN for floating types.
bool sameElement(DataType t, const uint8_t* a, const uint8_t* b, size_t i) {
  const size_t es = dataTypeSize(t);
  if (std::memcmp(a + i * es, b + i * es, es) == 0) return true;
  switch (t) {
    case DataType::Float32: return std::isnan(loadT<float>(a, i)) && std::isnan(loadT<float>(b, i));
    case DataType::Float64: return std::isnan(loadT<double>(a, i)) && std::isnan(loadT<double>(b, i));
    case DataType::Float16:
      return std::isnan(halfToFloat(loadT<uint16_t>(a, i))) && std::isnan(halfToFloat(loadT<uint16_t>(b, i)));
    case DataType::Bfloat16:
      return std::isnan(bfloat16ToFloat(loadT<uint16_t>(a, i))) &&
             std::isnan(bfloat16ToFloat(loadT<uint16_t>(b, i)));
    case DataType::Float8e4m3: return a[i] == 0x7f || a[i] == 0xff ? (b[i] & 0x7f) == 0x7f : false;
    case DataType::Float8e5m2: return (a[i] & 0x7f) > 0x7c && (b[i] & 0x7f) > 0x7c;
    default: return false;
  }
}

std::string elementHex(DataType t, const uint8_t* p, size_t i) {
  const size_t es = dataTypeSize(t);
  uint64_t v = 0;
  std::memcpy(&v, p + i * es, es);  // little endian
  return hex(v);
}

// ---- Implementations under test ------------------------------------------------------------

struct Impl {
  const char* name;
  Isa isa;
  ReduceFn direct;  // called directly instead of through reduce() (null: reduce())
};

std::vector<Impl> implsToTest() {
  std::vector<Impl> out;
  const Impl all[] = {
      {"scalar", Isa::Scalar, nullptr},
      {"avx2", Isa::Avx2, nullptr},
      {"avx512", Isa::Avx512, nullptr},
#if defined(__x86_64__) || defined(__i386__)
      // Called directly: no scalar short cut for small counts, and the AVX-512 code that
      // rounds bfloat16 with integer code (reduce() uses vcvtneps2bf16 where present).
      {"avx2 (direct)", Isa::Avx2, &avx2::reduce},
      {"avx512 (direct, integer bfloat16 rounding)", Isa::Avx512, &avx512::reduce},
#endif
  };
  for (const Impl& impl : all) {
    if (!isaSupported(impl.isa)) {
      WARN("skipping " << impl.name << ": not supported by this CPU/build");
      continue;
    }
    out.push_back(impl);
  }
  return out;
}

void runImpl(const Impl& impl, void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
             const ReduceSpec& spec) {
  if (impl.direct) {
    impl.direct(dsts, ndst, srcs, nsrc, count, spec);
  } else {
    REQUIRE(setIsa(impl.isa));
    reduce(dsts, ndst, srcs, nsrc, count, spec);
  }
}

// A buffer whose data starts `off` bytes past a 64-byte boundary. Guarded: with guard
// bytes around it (to see stray writes in any build). Exact: ending where its allocation
// ends (so that AddressSanitizer sees a read past the end).
constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xa5;

struct Buf {
  uint8_t* mem = nullptr;
  size_t memSize = 0;
  uint8_t* p = nullptr;
  size_t bytes = 0;
  Buf() = default;
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { std::free(mem); }
  void alloc(size_t size) {
    std::free(mem);
    void* m = nullptr;
    REQUIRE(posix_memalign(&m, 64, size == 0 ? 1 : size) == 0);
    mem = static_cast<uint8_t*>(m);
    memSize = size;
  }
  void guarded(size_t nbytes, size_t off) {
    alloc(kGuard + off + nbytes + kGuard);
    std::memset(mem, kGuardByte, memSize);
    p = mem + kGuard + off;
    bytes = nbytes;
  }
  void exact(size_t nbytes, size_t off) {
    alloc(off + nbytes);
    p = mem + off;
    bytes = nbytes;
  }
  bool guardsIntact() const {
    for (const uint8_t* q = mem; q < p; ++q)
      if (*q != kGuardByte) return false;
    for (const uint8_t* q = p + bytes; q < mem + memSize; ++q)
      if (*q != kGuardByte) return false;
    return true;
  }
};

// Random test data: moderate values with carries and rounding, plus special values.
std::vector<uint8_t> makeData(DataType t, size_t count, std::mt19937_64& rng) {
  const size_t es = dataTypeSize(t);
  std::vector<uint8_t> out(count * es);
  std::uniform_real_distribution<double> u01(0, 1);
  auto moderate = [&]() {  // |x| in [1/8, 8), 24 random mantissa bits
    const double m = 1.0 + static_cast<double>(rng() & 0xffffff) / 16777216.0;
    const double v = std::ldexp(m, static_cast<int>(rng() % 6) - 3);
    return (rng() & 1) ? -v : v;
  };
  const float fspecial[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), 0.0f, -0.0f,
                            std::numeric_limits<float>::denorm_min(), -floatOf(0x00400001),
                            std::numeric_limits<float>::max(), std::numeric_limits<float>::min()};
  const double dspecial[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity(), 0.0, -0.0,
                             std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max(),
                             std::numeric_limits<double>::min()};
  for (size_t i = 0; i < count; ++i) {
    const double r = u01(rng);
    uint64_t bits = rng();
    switch (t) {
      case DataType::Int8: case DataType::Uint8: case DataType::Int32:
      case DataType::Uint32: case DataType::Int64: case DataType::Uint64: {
        if (r < 0.25) {  // small values and the edges
          const int64_t edge[] = {0, 1, -1, 2, -2, 3, -7, 127, -128, 255};
          bits = static_cast<uint64_t>(edge[rng() % 10]);
          if (rng() % 4 == 0) bits = (rng() & 1) ? ~0ull >> 1 >> (64 - 8 * es) : 1ull << (8 * es - 1);
        }
        std::memcpy(&out[i * es], &bits, es);
        break;
      }
      case DataType::Float32: {
        const float v = r < 0.05 ? fspecial[rng() % 9] : static_cast<float>(moderate());
        std::memcpy(&out[i * es], &v, es);
        break;
      }
      case DataType::Float64: {
        const double v = r < 0.05 ? dspecial[rng() % 8] : moderate();
        std::memcpy(&out[i * es], &v, es);
        break;
      }
      case DataType::Float16: case DataType::Bfloat16: {
        uint16_t c;
        const float m = static_cast<float>(moderate());
        if (r < 0.2) c = static_cast<uint16_t>(bits);  // anything: NaN, inf, subnormal, huge
        else if (r < 0.25) c = static_cast<uint16_t>((bits & 0x8000) | (bits & 0x3f));  // subnormal
        else c = t == DataType::Float16 ? floatToHalf(m) : floatToBfloat16(m);
        std::memcpy(&out[i * es], &c, es);
        break;
      }
      case DataType::Float8e4m3: case DataType::Float8e5m2:
        out[i] = static_cast<uint8_t>(bits);  // every code, NaN included
        break;
    }
  }
  return out;
}

const DataType kAllTypes[] = {DataType::Int8,    DataType::Uint8,    DataType::Int32,      DataType::Uint32,
                              DataType::Int64,   DataType::Uint64,   DataType::Float16,    DataType::Float32,
                              DataType::Float64, DataType::Bfloat16, DataType::Float8e4m3, DataType::Float8e5m2};
const RedOp kAllOps[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg, RedOp::PreMulSum};

ReduceSpec specFor(DataType t, RedOp op, int variant) {
  ReduceSpec s;
  s.dtype = t;
  s.op = op;
  s.premulFirst = op == RedOp::PreMulSum;
  s.divide = op == RedOp::Avg;
  s.divisor = 3;
  const double fs[] = {-1.5, 0.1, -0.25, 3.0};
  const int64_t is[] = {-3, 7, -1, 2};
  if (isFloating(t)) s.scalar.f = fs[variant % 4];
  else s.scalar.i = is[variant % 4];
  return s;
}

// Runs every combination of the sweep for one spec and counts mismatches.
struct Sweep {
  std::vector<std::vector<uint8_t>> data;  // per source, kMaxCount elements
  size_t maxCount = 0;
  int failures = 0;

  void run(const Impl& impl, const ReduceSpec& spec, int nsrc, const std::vector<size_t>& counts,
           const std::vector<int>& ndsts) {
    const DataType t = spec.dtype;
    const size_t es = dataTypeSize(t);
    std::vector<uint8_t> want(maxCount * es);
    {
      std::vector<const uint8_t*> srcs;
      for (int k = 0; k < nsrc; ++k) srcs.push_back(data[k].data());
      refReduce(want.data(), srcs, maxCount, spec);  // element-wise: a prefix is the answer for fewer
    }
    for (size_t off : {0, 1, 3}) {
      for (size_t count : counts) {
        // Sources at different misalignments from one another too.
        std::vector<Buf> src(static_cast<size_t>(nsrc));
        for (int k = 0; k < nsrc; ++k) {
          src[k].exact(count * es, (off + static_cast<size_t>(k)) % 4);
          std::memcpy(src[k].p, data[k].data(), count * es);
        }
        for (int inplace : {-1, 0, nsrc - 1}) {  // -1: out of place; else dsts[0] == srcs[inplace]
          if (inplace == nsrc - 1 && nsrc == 1) continue;
          for (int ndst : ndsts) check(impl, spec, src, inplace, ndst, count, off, want);
        }
      }
    }
  }

  void check(const Impl& impl, const ReduceSpec& spec, const std::vector<Buf>& src, int inplace, int ndst,
             size_t count, size_t off, const std::vector<uint8_t>& want) {
    const DataType t = spec.dtype;
    const size_t es = dataTypeSize(t);
    const int nsrc = static_cast<int>(src.size());
    std::vector<Buf> dst(static_cast<size_t>(ndst));
    void* dptr[kMaxDests];
    const void* sptr[kMaxSources];
    for (int k = 0; k < nsrc; ++k) sptr[k] = src[k].p;
    for (int j = 0; j < ndst; ++j) {
      dst[j].guarded(count * es, (off + 2 * static_cast<size_t>(j)) % 4);
      if (j == 0 && inplace >= 0) {
        std::memcpy(dst[j].p, src[inplace].p, count * es);
        sptr[inplace] = dst[j].p;
      } else {
        std::memset(dst[j].p, 0x5a, count * es);
      }
      dptr[j] = dst[j].p;
    }
    runImpl(impl, dptr, ndst, sptr, nsrc, count, spec);
    for (int j = 0; j < ndst; ++j) {
      const Buf& b = dst[j];
      size_t bad = count;
      if (std::memcmp(b.p, want.data(), count * es) != 0) {
        for (size_t i = 0; i < count && bad == count; ++i)
          if (!sameElement(t, b.p, want.data(), i)) bad = i;
      }
      const bool guards = b.guardsIntact();
      if ((bad != count || !guards) && failures++ < 10) {
        FAIL_CHECK(impl.name << " " << dataTypeName(t) << " " << redOpName(spec.op) << " nsrc=" << nsrc
                             << " ndst=" << ndst << " count=" << count << " off=" << off << " inplace=" << inplace
                             << " premul=" << spec.premulFirst << " divide=" << spec.divide << "/" << spec.divisor
                             << " dst" << j << (guards ? "" : ": wrote outside the destination")
                             << (bad == count ? std::string()
                                              : ": element " + std::to_string(bad) + " is " +
                                                    elementHex(t, b.p, bad) + ", want " +
                                                    elementHex(t, want.data(), bad)));
      }
    }
  }
};

const std::vector<size_t> kCounts = {0, 1, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 255, 1000, 4099};

}  // namespace

TEST_CASE("reduce: every implementation x dtype x op matches the reference", "[kernels][reduce]") {
  IsaGuard restore;
  const std::vector<Impl> impls = implsToTest();
  std::mt19937_64 rng(42);
  for (DataType t : kAllTypes) {
    Sweep sw;
    sw.maxCount = kCounts.back();
    for (int k = 0; k < 8; ++k) sw.data.push_back(makeData(t, sw.maxCount, rng));
    for (const Impl& impl : impls) {
      for (RedOp op : kAllOps) {
        for (int nsrc : {1, 2, 3, 8}) sw.run(impl, specFor(t, op, nsrc), nsrc, kCounts, {1, 2});
      }
    }
    INFO(dataTypeName(t));
    CHECK(sw.failures == 0);
  }
}

TEST_CASE("reduce: premul and divide combined with every op, other divisors, many sources and dests",
          "[kernels][reduce]") {
  IsaGuard restore;
  const std::vector<Impl> impls = implsToTest();
  std::mt19937_64 rng(7);
  for (DataType t : kAllTypes) {
    Sweep sw;
    sw.maxCount = 300;
    for (int k = 0; k < kMaxSources; ++k) sw.data.push_back(makeData(t, sw.maxCount, rng));
    for (const Impl& impl : impls) {
      for (RedOp op : kAllOps) {
        for (uint64_t divisor : {1, 2, 7, 8}) {
          ReduceSpec s = specFor(t, op, static_cast<int>(divisor));
          s.premulFirst = true;
          s.divide = true;
          s.divisor = divisor;
          sw.run(impl, s, 2, {17, 300}, {1});
        }
        sw.run(impl, specFor(t, op, 1), kMaxSources, {5, 300}, {kMaxDests});
      }
    }
    INFO(dataTypeName(t));
    CHECK(sw.failures == 0);
  }
}

namespace {

// One special case: every source holds one value in all `count` elements.
struct Special {
  DataType t;
  RedOp op;
  std::vector<uint64_t> in;  // element bits per source
  uint64_t want;             // element bits expected
  bool wantNan = false;
  double fscalar = 0;
  int64_t iscalar = 0;
  uint64_t divisor = 3;
};

uint64_t fb(float f) { return bitsOf(f); }
uint64_t db(double d) { return bitsOfD(d); }

void checkSpecial(const Special& c) {
  const size_t es = dataTypeSize(c.t);
  ReduceSpec s;
  s.dtype = c.t;
  s.op = c.op;
  s.premulFirst = c.op == RedOp::PreMulSum;
  s.divide = c.op == RedOp::Avg;
  s.divisor = c.divisor;
  if (isFloating(c.t)) s.scalar.f = c.fscalar;
  else s.scalar.i = c.iscalar;
  for (const Impl& impl : implsToTest()) {
    for (size_t count : {1, 100}) {  // the scalar path, and the vector loop plus a tail
      std::vector<std::vector<uint8_t>> srcs(c.in.size(), std::vector<uint8_t>(count * es));
      std::vector<const void*> sp;
      for (size_t k = 0; k < c.in.size(); ++k) {
        for (size_t i = 0; i < count; ++i) std::memcpy(&srcs[k][i * es], &c.in[k], es);
        sp.push_back(srcs[k].data());
      }
      std::vector<uint8_t> dst(count * es, 0x5a);
      void* dp[1] = {dst.data()};
      runImpl(impl, dp, 1, sp.data(), static_cast<int>(sp.size()), count, s);
      std::vector<uint8_t> want(count * es);
      for (size_t i = 0; i < count; ++i) std::memcpy(&want[i * es], &c.want, es);
      bool ok = true;
      for (size_t i = 0; i < count && ok; ++i) {
        if (c.wantNan) {
          ok = sameElement(c.t, dst.data(), want.data(), i);  // c.want is a NaN of the type
        } else {
          ok = std::memcmp(&dst[i * es], &want[i * es], es) == 0;
        }
      }
      INFO(impl.name << " " << dataTypeName(c.t) << " " << redOpName(c.op) << " count=" << count << ": got "
                     << elementHex(c.t, dst.data(), 0) << ", want " << hex(c.want));
      CHECK(ok);
    }
  }
}

}  // namespace

TEST_CASE("reduce: special values", "[kernels][reduce]") {
  IsaGuard restore;
  using DT = DataType;
  using R = RedOp;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const double dnan = std::numeric_limits<double>::quiet_NaN();
  const auto i8 = [](int v) { return static_cast<uint64_t>(static_cast<uint8_t>(v)); };
  const auto i32 = [](int32_t v) { return static_cast<uint64_t>(static_cast<uint32_t>(v)); };
  const auto i64 = [](int64_t v) { return static_cast<uint64_t>(v); };
  const std::vector<Special> cases = {
      // integer wrap
      {DT::Int8, R::Sum, {i8(127), i8(1)}, i8(-128)},
      {DT::Uint8, R::Sum, {255, 1}, 0},
      {DT::Int32, R::Sum, {i32(INT32_MAX), 1}, i32(INT32_MIN)},
      {DT::Int64, R::Sum, {i64(INT64_MAX), 1}, i64(INT64_MIN)},
      {DT::Uint64, R::Sum, {~0ull, 2}, 1},
      {DT::Int8, R::Prod, {i8(16), i8(16)}, 0},
      {DT::Int8, R::Prod, {i8(-3), i8(100)}, i8(static_cast<int8_t>(static_cast<uint8_t>(-300 & 0xff)))},
      {DT::Uint32, R::Prod, {0x10001, 0x10001}, 0x20001},
      {DT::Int64, R::Prod, {i64(INT64_MAX), 2}, i64(-2)},
      {DT::Int64, R::Prod, {0x100000001ull, 0x100000001ull}, 0x200000001ull},
      {DT::Uint64, R::Prod, {0xffffffffffffffffull, 0xffffffffffffffffull}, 1},
      {DT::Int64, R::Prod, {i64(-3), i64(5), i64(-7)}, 105},
      // signed vs unsigned max/min
      {DT::Int8, R::Max, {i8(-1), i8(1)}, i8(1)},
      {DT::Int8, R::Min, {i8(-1), i8(1)}, i8(-1)},
      {DT::Uint8, R::Max, {255, 1}, 255},
      {DT::Uint8, R::Min, {255, 1}, 1},
      {DT::Int32, R::Max, {i32(-1), 1}, 1},
      {DT::Uint32, R::Max, {0xffffffff, 1}, 0xffffffff},
      {DT::Int64, R::Max, {i64(-1), 1}, 1},
      {DT::Int64, R::Min, {i64(-1), 1}, i64(-1)},
      {DT::Uint64, R::Max, {~0ull, 1}, ~0ull},
      {DT::Uint64, R::Min, {~0ull, 1}, 1},
      {DT::Uint64, R::Max, {0x8000000000000000ull, 0x7fffffffffffffffull}, 0x8000000000000000ull},
      // Avg: truncated quotient of the wrapped sum
      {DT::Int8, R::Avg, {i8(-4), i8(-3)}, i8(-2)},
      {DT::Int32, R::Avg, {i32(-4), i32(-3)}, i32(-2)},
      {DT::Int64, R::Avg, {i64(-4), i64(-3)}, i64(-2)},
      {DT::Int64, R::Avg, {i64(-7)}, i64(-2)},
      {DT::Int8, R::Avg, {i8(100), i8(100)}, i8(-18)},  // 200 wraps to -56; -56/3 = -18
      {DT::Uint8, R::Avg, {4, 3}, 2},
      {DT::Uint64, R::Avg, {~0ull, 0}, ~0ull / 3},
      {DT::Float32, R::Avg, {fb(-4), fb(-3)}, fb(-7.0f / 3.0f)},
      // PreMulSum: negative and fractional scalars
      {DT::Float32, R::PreMulSum, {fb(3), fb(1)}, fb(-0.5f), false, -0.5},
      {DT::Float32, R::PreMulSum, {fb(3), fb(1)}, fb(3 * static_cast<float>(0.1) + 1), false, 0.1},
      {DT::Float64, R::PreMulSum, {db(3), db(1)}, db(3 * 0.1 + 1), false, 0.1},
      {DT::Float16, R::PreMulSum, {0x4200, 0x3c00}, 0xb800, false, -0.5},  // 3*-0.5+1 = -0.5
      {DT::Int32, R::PreMulSum, {5, 2}, i32(-13), false, 0, -3},
      {DT::Int8, R::PreMulSum, {i8(100), 0}, i8(static_cast<int8_t>(static_cast<uint8_t>(300 & 0xff))), false, 0, 3},
      // half types near overflow, and subnormals
      {DT::Float16, R::Sum, {0x7bff, 0x7bff}, 0x7c00},            // 65504+65504 -> inf
      {DT::Float16, R::Sum, {0xfbff, 0xfbff}, 0xfc00},
      {DT::Float16, R::Sum, {0x7bff, 0x7bff, 0xfbff}, 0x7bff},    // accumulated in float: no inf
      {DT::Float16, R::Sum, {0x0001, 0x0001}, 0x0002},
      {DT::Bfloat16, R::Sum, {0x7f7f, 0x7f7f}, 0x7f80},
      {DT::Bfloat16, R::Sum, {0x0001, 0x0001}, 0x0002},           // subnormal result kept
      {DT::Bfloat16, R::Max, {0x0001, 0x0000}, 0x0001},
      {DT::Bfloat16, R::Min, {0x8003, 0x0001}, 0x8003},
      {DT::Float8e4m3, R::Sum, {0x7e, 0x7e}, 0x7e},               // 448+448 saturates
      {DT::Float8e4m3, R::Sum, {0xfe, 0xfe}, 0xfe},
      {DT::Float8e5m2, R::Sum, {0x7b, 0x7b}, 0x7c},               // 57344*2 -> inf
      {DT::Float8e5m2, R::Sum, {0x01, 0x01}, 0x02},
      // NaN and inf
      {DT::Float32, R::Max, {fb(nan), fb(1)}, fb(nan), true},
      {DT::Float32, R::Max, {fb(1), fb(nan)}, fb(nan), true},
      {DT::Float32, R::Min, {fb(nan), fb(1)}, fb(nan), true},
      {DT::Float32, R::Min, {fb(1), fb(nan)}, fb(nan), true},
      {DT::Float32, R::Max, {fb(1), fb(nan), fb(2)}, fb(nan), true},
      {DT::Float32, R::Max, {fb(inf), fb(1)}, fb(inf)},
      {DT::Float32, R::Min, {fb(-inf), fb(1)}, fb(-inf)},
      {DT::Float32, R::Sum, {fb(inf), fb(-inf)}, fb(nan), true},
      {DT::Float32, R::Sum, {fb(nan), fb(1)}, fb(nan), true},
      {DT::Float64, R::Max, {db(1), db(dnan)}, db(dnan), true},
      {DT::Float64, R::Min, {db(dnan), db(1)}, db(dnan), true},
      {DT::Float16, R::Max, {0x3c00, 0x7e00}, 0x7e00, true},
      {DT::Float16, R::Min, {0x7e00, 0x3c00}, 0x7e00, true},
      {DT::Bfloat16, R::Max, {0x3f80, 0x7fc0}, 0x7fc0, true},
      {DT::Bfloat16, R::Min, {0x7fc0, 0x3f80}, 0x7fc0, true},
      {DT::Float8e4m3, R::Max, {0x38, 0x7f}, 0x7f, true},
      {DT::Float8e4m3, R::Min, {0xff, 0x38}, 0x7f, true},
      {DT::Float8e5m2, R::Max, {0x3c, 0x7e}, 0x7e, true},
      {DT::Float8e5m2, R::Min, {0x7e, 0x3c}, 0x7e, true},
  };
  for (const Special& c : cases) checkSpecial(c);
}

TEST_CASE("reduce: count 0 writes nothing; ISA selection", "[kernels][reduce]") {
  IsaGuard restore;
  float a = 1, b = 2, d = 42;
  ReduceSpec s;
  for (const Impl& impl : implsToTest()) {
    const void* sp[2] = {&a, &b};
    void* dp[1] = {&d};
    runImpl(impl, dp, 1, sp, 2, 0, s);
    CHECK(d == 42);
  }
  CHECK(isaSupported(Isa::Scalar));
  CHECK(std::string(isaName(Isa::Scalar)) == "scalar");
  CHECK(std::string(isaName(Isa::Avx2)) == "avx2");
  CHECK(std::string(isaName(Isa::Avx512)) == "avx512");
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
    const Isa before = activeIsa();
    if (isaSupported(isa)) {
      CHECK(setIsa(isa));
      CHECK(activeIsa() == isa);
    } else {
      CHECK_FALSE(setIsa(isa));
      CHECK(activeIsa() == before);
    }
  }
  CHECK(isaSupported(bestIsa()));
  if (isaSupported(Isa::Avx512)) CHECK(bestIsa() == Isa::Avx512);
  else if (isaSupported(Isa::Avx2)) CHECK(bestIsa() == Isa::Avx2);
  CHECK(setIsa(bestIsa()));
  CHECK(activeIsa() == bestIsa());
}
