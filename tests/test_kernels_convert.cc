// Tests of the CPU conversions of the narrow float formats (kernels/cpu: half, bfloat16, fp8
// e4m3 and e5m2): known bit patterns, every code widened against the textbook formula, and
// narrowing against a brute-force nearest-value search. reduce() is tested in test_kernels.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/reduce.h"
#include "unit_kernels.h"  // last: no fused multiply-adds from here on

using namespace hora;
using namespace hora::kernels;
using namespace unit;

namespace {

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
      if (std::isnan(x)) {  // any NaN: the canonical one, all ones but the sign
        const uint32_t canonical = (1u << (f.e + f.m)) - 1;
        if (got != canonical && failures++ < 10)
          FAIL_CHECK("NaN " << hex(bitsOf(x)) << " narrows to " << hex(got) << ", want " << hex(canonical));
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

}  // namespace

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
  CHECK(floatToHalf(std::numeric_limits<float>::quiet_NaN()) == 0x7fff);  // the canonical NaN
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
  CHECK(floatToBfloat16(floatOf(0x7f800001)) == 0x7fff);  // sNaN: the canonical NaN
  CHECK(floatToBfloat16(floatOf(0xffffffff)) == 0x7fff);
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
  CHECK(floatToFp8e5m2(std::numeric_limits<float>::quiet_NaN()) == 0x7f);
  CHECK(floatToFp8e5m2(std::numeric_limits<float>::infinity()) == 0x7c);
  CHECK(floatToFp8e5m2(-std::numeric_limits<float>::infinity()) == 0xfc);
  CHECK(floatToFp8e5m2(1.125f) == 0x3c);  // tie -> even
  CHECK(floatToFp8e5m2(1.375f) == 0x3e);  // tie -> even (up)
}

TEST_CASE("conversions: every NaN narrows to the canonical NaN, sign and payload dropped", "[kernels][convert]") {
  // Quiet and signalling, either sign, payloads in the bits that survive a narrowing and in
  // those that do not; and the NaNs that widening the narrow formats' own NaN codes gives.
  std::vector<float> nans;
  for (uint32_t payload : {0x400000u, 0x000001u, 0x200000u, 0x7fffffu, 0x001000u, 0x3fffffu, 0x400001u})
    for (uint32_t sign : {0u, 0x80000000u}) nans.push_back(floatOf(sign | 0x7f800000u | payload));
  for (uint32_t h = 0x7c01; h <= 0x7fff; h += 0x3f) {
    nans.push_back(halfToFloat(static_cast<uint16_t>(h)));
    nans.push_back(halfToFloat(static_cast<uint16_t>(h | 0x8000)));
    nans.push_back(bfloat16ToFloat(static_cast<uint16_t>(0x7f80 | (h & 0x7f) | 1)));
  }
  for (uint8_t v : {0x7f, 0xff}) nans.push_back(fp8e4m3ToFloat(v));
  for (uint8_t v : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) nans.push_back(fp8e5m2ToFloat(v));
  for (float x : nans) {
    INFO("NaN " << hex(bitsOf(x)));
    REQUIRE(std::isnan(x));
    CHECK(floatToHalf(x) == 0x7fff);
    CHECK(floatToBfloat16(x) == 0x7fff);
    CHECK(floatToFp8e4m3(x) == 0x7f);
    CHECK(floatToFp8e5m2(x) == 0x7f);
  }
}

TEST_CASE("conversions: overflow, ties and subnormals at the edges", "[kernels][convert]") {
  const float inf = std::numeric_limits<float>::infinity();
  // float16: 65520 is halfway between 65504 and 65536 (ties to the even code, inf).
  CHECK(floatToHalf(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(floatToHalf(-65520.0f) == 0xfc00);
  CHECK(floatToHalf(-inf) == 0xfc00);
  CHECK(floatToHalf(std::ldexp(1.0f, -24) * 0.5f) == 0x0000);                       // tie -> 0
  CHECK(floatToHalf(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(floatToHalf(std::ldexp(1023.5f, -24)) == 0x0400);  // largest subnormal + half: tie -> even (min normal)
  CHECK(floatToHalf(std::ldexp(1022.5f, -24)) == 0x03fe);  // tie -> even (down)
  CHECK(floatToHalf(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(floatToHalf(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  // bfloat16: float subnormals are kept (not flushed), max float rounds up to inf.
  CHECK(floatToBfloat16(std::numeric_limits<float>::denorm_min()) == 0x0000);  // below the tie
  CHECK(floatToBfloat16(floatOf(0x00008000)) == 0x0000);                        // tie -> even (0)
  CHECK(floatToBfloat16(floatOf(0x00008001)) == 0x0001);
  CHECK(floatToBfloat16(floatOf(0x807fffff)) == 0x8080);  // largest negative subnormal rounds to -min normal
  CHECK(floatToBfloat16(floatOf(0x7f7f7fff)) == 0x7f7f);
  CHECK(floatToBfloat16(floatOf(0x7f7f8000)) == 0x7f80);  // tie -> even = inf
  CHECK(floatToBfloat16(-inf) == 0xff80);
  // e4m3: saturating; 464 is halfway between 448 and the 480 it does not have.
  CHECK(floatToFp8e4m3(464.0f) == 0x7e);
  CHECK(floatToFp8e4m3(std::nextafter(464.0f, inf)) == 0x7e);
  CHECK(floatToFp8e4m3(-464.0f) == 0xfe);
  CHECK(floatToFp8e4m3(std::numeric_limits<float>::max()) == 0x7e);
  CHECK(floatToFp8e4m3(std::ldexp(1.5f, -10)) == 0x01);                      // above the tie
  CHECK(floatToFp8e4m3(std::ldexp(3.0f, -10)) == 0x02);                      // 1.5 ulps: tie -> even
  CHECK(floatToFp8e4m3(std::ldexp(7.5f, -9)) == 0x08);                       // tie -> min normal
  CHECK(floatToFp8e4m3(std::numeric_limits<float>::denorm_min()) == 0x00);
  CHECK(floatToFp8e4m3(-std::numeric_limits<float>::denorm_min()) == 0x80);
  // e5m2: IEEE-like; 61440 is halfway between 57344 and 65536 (ties to even = inf).
  CHECK(floatToFp8e5m2(std::nextafter(61440.0f, 0.0f)) == 0x7b);
  CHECK(floatToFp8e5m2(-61440.0f) == 0xfc);
  CHECK(floatToFp8e5m2(std::ldexp(1.0f, -17)) == 0x00);   // tie -> 0
  CHECK(floatToFp8e5m2(std::ldexp(3.0f, -17)) == 0x02);   // tie -> even
  CHECK(floatToFp8e5m2(std::ldexp(3.5f, -16)) == 0x04);   // tie -> min normal
}

TEST_CASE("conversions: every code and brute-force rounding", "[kernels][convert]") {
  checkFormat(kHalf);
  checkFormat(kBf16);
  checkFormat(kE4m3);
  checkFormat(kE5m2);
}
