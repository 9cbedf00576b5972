// Test data of the benchmark tools: data types, half/bfloat16 conversion, the input
// pattern and its expected reductions (see common.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common.h"

namespace hperf {

size_t typeSize(horaDataType_t type) {
  switch (type) {
    case horaInt8: case horaUint8: case horaFloat8e4m3: case horaFloat8e5m2: return 1;
    case horaFloat16: case horaBfloat16: return 2;
    case horaInt32: case horaUint32: case horaFloat32: return 4;
    case horaInt64: case horaUint64: case horaFloat64: return 8;
    default: return 1;
  }
}

const char* typeName(horaDataType_t type) {
  switch (type) {
    case horaInt8: return "int8";
    case horaUint8: return "uint8";
    case horaInt32: return "int32";
    case horaUint32: return "uint32";
    case horaInt64: return "int64";
    case horaUint64: return "uint64";
    case horaFloat16: return "half";
    case horaFloat32: return "float";
    case horaFloat64: return "double";
    case horaBfloat16: return "bfloat16";
    case horaFloat8e4m3: return "float8e4m3";
    case horaFloat8e5m2: return "float8e5m2";
    default: return "?";
  }
}

const char* opName(horaRedOp_t op) {
  switch (op) {
    case horaSum: return "sum";
    case horaProd: return "prod";
    case horaMax: return "max";
    case horaMin: return "min";
    case horaAvg: return "avg";
    default: return "?";
  }
}

bool isFloatType(horaDataType_t type) {
  return type == horaFloat16 || type == horaFloat32 || type == horaFloat64 || type == horaBfloat16;
}

bool isSignedType(horaDataType_t type) {
  return isFloatType(type) || type == horaInt8 || type == horaInt32 || type == horaInt64;
}

// ---- half and bfloat16 -------------------------------------------------------------

float halfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: mant * 2^-24, exact in float
      float v = std::ldexp(static_cast<float>(mant), -24);
      return sign ? -v : v;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u)  // inf, NaN (kept quiet)
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0));
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: inf
  if (absx < 0x38800000u) {                                                // below 2^-14
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);          // <= 2^-25: zero
    const uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - (absx >> 23);  // 14..24: to units of 2^-24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t h = (absx - 0x38000000u) >> 13;  // rebias 127 -> 15
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float bf16ToFloat(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// ---- typed access ------------------------------------------------------------------

namespace {

struct HalfTag {};
struct Bf16Tag {};

template <class T>
struct Io {
  static void put(void* buf, size_t i, double v) { static_cast<T*>(buf)[i] = static_cast<T>(v); }
  static double get(const void* buf, size_t i) { return static_cast<double>(static_cast<const T*>(buf)[i]); }
};
template <>
struct Io<HalfTag> {
  static void put(void* buf, size_t i, double v) { static_cast<uint16_t*>(buf)[i] = floatToHalf(static_cast<float>(v)); }
  static double get(const void* buf, size_t i) { return halfToFloat(static_cast<const uint16_t*>(buf)[i]); }
};
template <>
struct Io<Bf16Tag> {
  static void put(void* buf, size_t i, double v) { static_cast<uint16_t*>(buf)[i] = floatToBf16(static_cast<float>(v)); }
  static double get(const void* buf, size_t i) { return bf16ToFloat(static_cast<const uint16_t*>(buf)[i]); }
};

// Calls f(Io<T>{}) for the C++ type that holds `type`.
template <class F>
void dispatch(horaDataType_t type, F&& f) {
  switch (type) {
    case horaInt8: f(Io<int8_t>{}); break;
    case horaUint8: f(Io<uint8_t>{}); break;
    case horaInt32: f(Io<int32_t>{}); break;
    case horaUint32: f(Io<uint32_t>{}); break;
    case horaInt64: f(Io<int64_t>{}); break;
    case horaUint64: f(Io<uint64_t>{}); break;
    case horaFloat16: f(Io<HalfTag>{}); break;
    case horaFloat32: f(Io<float>{}); break;
    case horaFloat64: f(Io<double>{}); break;
    case horaBfloat16: f(Io<Bf16Tag>{}); break;
    default: break;
  }
}

uint32_t mix(uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

// The largest magnitude below which every integer is exact in `type` and every sum of
// inputs stays clear of the poison value (so an untouched output never passes).
int64_t exactLimit(horaDataType_t type) {
  switch (type) {
    case horaInt8: return 127;
    case horaUint8: return 254;
    case horaInt32: return std::numeric_limits<int32_t>::max();
    case horaUint32: return std::numeric_limits<uint32_t>::max() - 1;
    case horaFloat16: return 2048;
    case horaBfloat16: return 256;
    case horaFloat32: return int64_t{1} << 24;
    default: return int64_t{1} << 53;  // int64, uint64, double: kept exact in a double
  }
}

// The unit roundoff of a floating type.
double roundoff(horaDataType_t type) {
  switch (type) {
    case horaFloat16: return std::ldexp(1.0, -11);
    case horaBfloat16: return std::ldexp(1.0, -8);
    case horaFloat32: return std::ldexp(1.0, -24);
    default: return std::ldexp(1.0, -53);
  }
}

}  // namespace

// ---- the pattern -------------------------------------------------------------------

Pattern::Pattern(horaDataType_t type, horaRedOp_t op, int nranks, uint32_t seed)
    : type_(type), op_(op), nranks_(nranks < 1 ? 1 : nranks), seed_(mix(seed + 0x51ed27u)) {
  offset_ = seed_ % kPeriod;
  const int64_t limit = exactLimit(type);
  const int64_t n = nranks_;
  // Sums of n values of magnitude m stay within limit; with more ranks than limit, only
  // one rank in sparse_ is non-zero per element.
  if (limit / n >= 1) {
    magnitude_ = std::min<int64_t>(15, limit / n);
  } else {
    magnitude_ = 1;
    sparse_ = static_cast<uint32_t>((n + limit - 1) / limit);
  }
  // Products: at most maxFactors factors of 2 or 3 per element, so |product| <= limit.
  int64_t maxFactors = 0;
  for (int64_t p = 3; p <= limit && maxFactors < 40; p *= 3) ++maxFactors;
  factorEvery_ = static_cast<uint32_t>(std::max<int64_t>(1, (n + maxFactors - 1) / maxFactors));
  if (op == horaAvg && isFloatType(type))
    tolerance_ = 2.0 * static_cast<double>(n + 2) * static_cast<double>(magnitude_) * roundoff(type);
}

double Pattern::valueAt(int rank, uint32_t j) const {
  const uint32_t r = static_cast<uint32_t>(rank);
  const uint32_t h = mix(seed_ ^ (r * 0x9e3779b1u) ^ mix(j * 0x85ebca77u + r));
  const bool sgn = isSignedType(type_);
  if (op_ == horaProd) {
    double v = 1.0;
    if (factorEvery_ == 1 || (j + r) % factorEvery_ == 0) v = static_cast<double>(1 + ((uint64_t{h} * 3) >> 32));
    if (sgn && ((h >> 1) & 3u) == 0) v = -v;
    return v;
  }
  if (sparse_ > 1 && (j + r) % sparse_ != 0) return 0.0;
  // A value in [-m, m] (or [0, m] if unsigned) from the hash x.
  auto pick = [sgn](uint32_t x, int64_t m) {
    const uint64_t span = sgn ? 2 * static_cast<uint64_t>(m) + 1 : static_cast<uint64_t>(m) + 1;
    const int64_t v = static_cast<int64_t>((static_cast<uint64_t>(x) * span) >> 32);
    return sgn ? v - m : v;
  };
  if (op_ == horaAvg && sparse_ == 1) {
    // A part shared by all ranks plus a rank's own: the average of integers (truncated)
    // is then not just 0 when ranks are many.
    const int64_t shared = (magnitude_ + 1) / 2;
    return static_cast<double>(pick(mix(seed_ ^ mix(j * 0x85ebca77u + 0x2545f491u)), shared) +
                               pick(h, magnitude_ - shared));
  }
  return static_cast<double>(pick(h, magnitude_));
}

double Pattern::reduceAt(uint32_t j) const {
  double acc = valueAt(0, j);
  for (int r = 1; r < nranks_; ++r) {
    const double v = valueAt(r, j);
    switch (op_) {
      case horaProd: acc *= v; break;
      case horaMax: acc = std::max(acc, v); break;
      case horaMin: acc = std::min(acc, v); break;
      default: acc += v; break;  // sum, avg
    }
  }
  if (op_ == horaAvg) {
    if (isFloatType(type_)) {
      acc /= nranks_;
    } else {  // the truncated quotient, as integer division
      acc = static_cast<double>(static_cast<int64_t>(acc) / static_cast<int64_t>(nranks_));
    }
  }
  return acc;
}

double Pattern::value(int rank, size_t index) const { return valueAt(rank, phase(index)); }

double Pattern::reduced(size_t index) const { return reduceAt(phase(index)); }

bool Pattern::matches(double got, double want) const {
  if (tolerance_ > 0) return std::fabs(got - want) <= tolerance_;  // false for NaN
  return got == want;
}

void Pattern::fill(void* buf, size_t count, int rank, size_t start) const {
  dispatch(type_, [&](auto io) {
    uint32_t j = phase(start);
    for (size_t i = 0; i < count; ++i) {
      io.put(buf, i, valueAt(rank, j));
      if (++j == kPeriod) j = 0;
    }
  });
}

size_t Pattern::checkInput(const void* buf, size_t count, int rank, size_t start) const {
  size_t wrong = 0;
  dispatch(type_, [&](auto io) {
    uint32_t j = phase(start);
    for (size_t i = 0; i < count; ++i) {
      if (!(io.get(buf, i) == valueAt(rank, j))) ++wrong;
      if (++j == kPeriod) j = 0;
    }
  });
  return wrong;
}

size_t Pattern::checkReduced(const void* buf, size_t count, size_t start) const {
  if (count == 0) return 0;
  std::vector<double>& table = table_;
  if (table.empty()) {
    table.resize(kPeriod);
    for (uint32_t j = 0; j < kPeriod; ++j) table[j] = reduceAt(j);
  }
  size_t wrong = 0;
  dispatch(type_, [&](auto io) {
    uint32_t j = phase(start);
    for (size_t i = 0; i < count; ++i) {
      if (!matches(io.get(buf, i), table[j])) ++wrong;
      if (++j == kPeriod) j = 0;
    }
  });
  return wrong;
}

void poison(void* buf, size_t count, horaDataType_t type) {
  switch (type) {
    case horaInt8: std::fill_n(static_cast<int8_t*>(buf), count, std::numeric_limits<int8_t>::min()); break;
    case horaInt32: std::fill_n(static_cast<int32_t*>(buf), count, std::numeric_limits<int32_t>::min()); break;
    case horaInt64: std::fill_n(static_cast<int64_t*>(buf), count, std::numeric_limits<int64_t>::min()); break;
    default: std::memset(buf, 0xff, count * typeSize(type)); break;  // unsigned max; NaN for floats
  }
}

}  // namespace hperf
