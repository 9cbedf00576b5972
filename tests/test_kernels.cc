// Tests of the CPU reduction kernels (kernels/cpu): reduce() of every implementation (ISA)
// against an independent scalar reference (unit_kernels.h), bit for bit, for every dtype x op,
// and special values. The conversions are tested in test_kernels_convert.cc.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/reduce.h"
#include "kernels/cpu/reduce_impl.h"  // avx512::reduce, to test the non-BF16-instruction path
#include "unit_kernels.h"             // last: no fused multiply-adds from here on

using namespace hora;
using namespace hora::kernels;
using namespace unit;

namespace {

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
      // The tests 'kernels isa avx2' and 'kernels isa avx512' (kernels_isa.cc) are skipped then.
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
      std::string inputs;
      for (uint64_t v : c.in) inputs += " " + hex(v);
      INFO(impl.name << " " << dataTypeName(c.t) << " " << redOpName(c.op) << " of" << inputs << " count=" << count
                     << ": got " << elementHex(c.t, dst.data(), 0) << ", want " << hex(c.want));
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
      // The narrow types store one canonical NaN, whatever the NaNs that made it (sign and
      // payload dropped), bit for bit on every path.
      {DT::Float16, R::Max, {0x3c00, 0x7e00}, 0x7fff},
      {DT::Float16, R::Min, {0x7e00, 0x3c00}, 0x7fff},
      {DT::Float16, R::Sum, {0xfe01, 0x3c00}, 0x7fff},             // negative, payload
      {DT::Float16, R::Sum, {0x7c01}, 0x7fff},                     // signalling, one source
      {DT::Float16, R::Max, {0xfd55, 0x7e00}, 0x7fff},
      {DT::Float16, R::Sum, {0x7c00, 0xfc00}, 0x7fff},             // inf - inf
      {DT::Float16, R::Prod, {0x0000, 0x7c00}, 0x7fff},            // 0 * inf
      {DT::Float16, R::Avg, {0xffff, 0x3c00}, 0x7fff},
      {DT::Float16, R::PreMulSum, {0x3c00, 0x3c00}, 0x7fff, false, nan},
      {DT::Bfloat16, R::Max, {0x3f80, 0x7fc0}, 0x7fff},
      {DT::Bfloat16, R::Min, {0x7fc0, 0x3f80}, 0x7fff},
      {DT::Bfloat16, R::Sum, {0xffc1, 0x3f80}, 0x7fff},
      {DT::Bfloat16, R::Sum, {0x7f81}, 0x7fff},
      {DT::Bfloat16, R::Sum, {0x7f80, 0xff80}, 0x7fff},
      {DT::Bfloat16, R::Min, {0x3f80, 0xffff}, 0x7fff},
      {DT::Float8e4m3, R::Max, {0x38, 0x7f}, 0x7f},
      {DT::Float8e4m3, R::Min, {0xff, 0x38}, 0x7f},
      {DT::Float8e4m3, R::Sum, {0xff}, 0x7f},
      {DT::Float8e4m3, R::Prod, {0x00, 0xff, 0x38}, 0x7f},
      {DT::Float8e5m2, R::Max, {0x3c, 0x7e}, 0x7f},
      {DT::Float8e5m2, R::Min, {0x7e, 0x3c}, 0x7f},
      {DT::Float8e5m2, R::Sum, {0xfd}, 0x7f},
      {DT::Float8e5m2, R::Sum, {0x7c, 0xfc}, 0x7f},                // inf - inf
      {DT::Float8e5m2, R::Avg, {0xfe, 0x3c}, 0x7f},
      // Overflow at the tie: e4m3 saturates (464 is halfway past 448), e5m2 goes to inf
      // (61440 is halfway between 57344 and 65536, and the even code is inf).
      {DT::Float8e4m3, R::Sum, {0x7e, 0x58}, 0x7e},                // 448 + 16
      {DT::Float8e4m3, R::Sum, {0xfe, 0xd8}, 0xfe},
      {DT::Float8e4m3, R::Prod, {0x7e, 0x7e}, 0x7e},               // 448 * 448
      {DT::Float8e5m2, R::Sum, {0x7b, 0x6c}, 0x7c},                // 57344 + 4096
      {DT::Float8e5m2, R::Sum, {0x7b, 0x68}, 0x7b},                // 57344 + 2048
      {DT::Float8e5m2, R::Sum, {0xfb, 0xec}, 0xfc},
      {DT::Float8e5m2, R::Max, {0x7c, 0x3c}, 0x7c},                // inf stays inf
      {DT::Float16, R::Sum, {0x7bff, 0x4c00}, 0x7c00},             // 65504 + 16: halfway, even = inf
      {DT::Float16, R::Sum, {0x7bff, 0x4800}, 0x7bff},             // 65504 + 8
      // Ties to even, and subnormal results (float subnormals are not flushed).
      {DT::Float16, R::Sum, {0x3c00, 0x1000}, 0x3c00},             // 1 + 2^-11
      {DT::Float16, R::Sum, {0x3c01, 0x1000}, 0x3c02},
      {DT::Float16, R::Sum, {0x0001, 0x8002}, 0x8001},
      {DT::Float16, R::Avg, {0x0001, 0x0000}, 0x0000, false, 0, 0, 2},   // 2^-25: tie -> 0
      {DT::Float16, R::Avg, {0x0003, 0x0000}, 0x0002, false, 0, 0, 2},   // 1.5 ulps: tie -> 2
      {DT::Bfloat16, R::Avg, {0x0001, 0x0000}, 0x0000, false, 0, 0, 2},  // float subnormal tie -> 0
      {DT::Bfloat16, R::Avg, {0x0003, 0x0000}, 0x0002, false, 0, 0, 2},
      {DT::Bfloat16, R::Sum, {0x3f80, 0x3b80}, 0x3f80},            // 1 + 2^-8: tie -> even
      {DT::Bfloat16, R::Sum, {0x3f81, 0x3b80}, 0x3f82},
      {DT::Float8e4m3, R::Sum, {0x38, 0x18}, 0x38},                // 1 + 2^-4: tie -> even
      {DT::Float8e4m3, R::Sum, {0x39, 0x18}, 0x3a},
      {DT::Float8e4m3, R::Avg, {0x01, 0x00}, 0x00, false, 0, 0, 2},
      {DT::Float8e4m3, R::Avg, {0x03, 0x00}, 0x02, false, 0, 0, 2},
      {DT::Float8e5m2, R::Avg, {0x01, 0x00}, 0x00, false, 0, 0, 2},
      {DT::Float8e5m2, R::Avg, {0x83, 0x00}, 0x82, false, 0, 0, 2},
      {DT::Float32, R::Sum, {0x00000001, 0x00000001}, 0x00000002},
      {DT::Float32, R::Avg, {0x00000003, 0x00000000}, 0x00000002, false, 0, 0, 2},
  };
  for (const Special& c : cases) checkSpecial(c);
}

TEST_CASE("reduce: every code of the narrow types passes through unchanged, every NaN as the canonical one",
          "[kernels][reduce]") {
  // One source (widen, narrow), and two with -0 added (exact for every value, +0 included):
  // every code comes back as it was on every path, but NaN codes, which come back as the
  // canonical NaN. The count is not a multiple of any vector, so the tails see codes too.
  IsaGuard restore;
  for (DataType t : {DataType::Float16, DataType::Bfloat16, DataType::Float8e4m3, DataType::Float8e5m2}) {
    const size_t es = dataTypeSize(t);
    const size_t ncodes = size_t(1) << (8 * es);
    const size_t count = ncodes + 37;
    std::vector<uint8_t> in(count * es), zeros(count * es), want(count * es);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t code = static_cast<uint32_t>(i % ncodes);
      const uint32_t negZero = es == 2 ? 0x8000 : 0x80;
      bool nan = false;
      switch (t) {
        case DataType::Float16: nan = (code & 0x7fff) > 0x7c00; break;
        case DataType::Bfloat16: nan = (code & 0x7fff) > 0x7f80; break;
        case DataType::Float8e4m3: nan = (code & 0x7f) == 0x7f; break;
        default: nan = (code & 0x7f) > 0x7c; break;
      }
      const uint32_t out = nan ? canonicalNan(t) : code;
      std::memcpy(&in[i * es], &code, es);
      std::memcpy(&zeros[i * es], &negZero, es);
      std::memcpy(&want[i * es], &out, es);
    }
    ReduceSpec s;
    s.dtype = t;
    s.op = RedOp::Sum;
    for (const Impl& impl : implsToTest()) {
      for (int nsrc : {1, 2}) {
        std::vector<uint8_t> dst(count * es, 0x5a);
        void* dp[1] = {dst.data()};
        const void* sp[2] = {in.data(), zeros.data()};
        runImpl(impl, dp, 1, sp, nsrc, count, s);
        size_t bad = count;
        for (size_t i = 0; i < count && bad == count; ++i)
          if (std::memcmp(&dst[i * es], &want[i * es], es) != 0) bad = i;
        INFO(impl.name << " " << dataTypeName(t) << " nsrc " << nsrc << ": code "
                       << (bad < count ? elementHex(t, in.data(), bad) + " gives " + elementHex(t, dst.data(), bad) +
                                             ", want " + elementHex(t, want.data(), bad)
                                       : std::string("-")));
        CHECK(bad == count);
      }
    }
  }
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
