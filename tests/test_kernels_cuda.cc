// The CUDA kernels' per-element arithmetic (kernels/cuda/element.h), run on the host: for every
// dtype x op (PreMulSum and Avg included), 1 to 16 sources and 1 or 2 destinations, on values
// that include NaN (with payloads and signs), infinities, signed zeros, subnormals, the types'
// extremes and rounding ties, it must give the CPU kernels' bits exactly (kernels::reduce, with
// the scalar and the best vector ISA): bit for bit for the narrow types, NaN included (one
// canonical NaN each), a NaN where they give one for float and double (whose payloads are the
// hardware's). Both the element path and the 16-byte pack path (whole words converted at once)
// are checked.
//
// In a CUDA build element.h converts the narrow types with NVIDIA's intrinsics (cuda_fp16.h,
// cuda_bf16.h, cuda_fp8.h), whose host versions are NVIDIA's own definitions of what the
// instructions return; these tests run those, and check them against the CPU's conversions over
// every code, every tie and random floats. Where a GPU is present, the kernels themselves run on
// it with the same special values and must give the CPU kernels' bits (without one that test says
// so and passes); tests/test_device.cc checks them on random data too.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <random>
#include <vector>

#include "kernels/cuda/element.h"
#include "kernels/cuda/reduce.h"
#include "unit_kernels.h"

#if defined(HORA_CUDA)
#include <cuda_runtime.h>
#endif

using namespace unit;
namespace el = hora::kernels::element;

namespace {

// The element path of the kernels, on the host: first, combine left to right, last.
struct HostReduce {
  void* const* dsts;
  int ndst;
  const void* const* srcs;
  int nsrc;
  size_t count;
  el::Params p;
  template <class D, class Op>
  void operator()() const {
    using E = typename D::E;
    for (size_t i = 0; i < count; ++i) {
      E v;
      std::memcpy(&v, static_cast<const char*>(srcs[0]) + i * sizeof(E), sizeof(E));
      typename D::C acc = el::first<D>(v, p);
      for (int k = 1; k < nsrc; ++k) {
        std::memcpy(&v, static_cast<const char*>(srcs[k]) + i * sizeof(E), sizeof(E));
        acc = el::combine<D, Op>(acc, v);
      }
      const E out = el::last<D>(acc, p);
      for (int j = 0; j < ndst; ++j) std::memcpy(static_cast<char*>(dsts[j]) + i * sizeof(E), &out, sizeof(E));
    }
  }
};

// The pack path of the kernels, on the host: element.h's reducePacks over U packs at a time
// (U = 1, as the kernels run it, and 2), then the rest element by element.
struct HostReducePacks {
  void* const* dsts;
  int ndst;
  const void* const* srcs;
  int nsrc;
  size_t count;
  el::Params p;
  int unroll;
  template <class D, class Op>
  void operator()() const {
    if (unroll == 2) run<D, Op, 2>();
    else run<D, Op, 1>();
  }
  template <class D, class Op, int U>
  void run() const {
    using E = typename D::E;
    const size_t packs = count / static_cast<size_t>(el::Pack<D>::V);
    size_t k = 0;
    auto step = [&](auto unroll) {
      constexpr int N = decltype(unroll)::value;
      el::reducePacks<D, Op, N>(
          nsrc, ndst, p,
          [&](int s, int u) {
            el::Words w;
            std::memcpy(&w, static_cast<const char*>(srcs[s]) + (k + static_cast<size_t>(u)) * 16, 16);
            return w;
          },
          [&](int d, int u, const el::Words& w) {
            std::memcpy(static_cast<char*>(dsts[d]) + (k + static_cast<size_t>(u)) * 16, &w, 16);
          });
      k += N;
    };
    while (k + U <= packs) step(std::integral_constant<int, U>{});
    while (k < packs) step(std::integral_constant<int, 1>{});
    for (size_t i = packs * static_cast<size_t>(el::Pack<D>::V); i < count; ++i) {
      E v;
      std::memcpy(&v, static_cast<const char*>(srcs[0]) + i * sizeof(E), sizeof(E));
      typename D::C acc = el::first<D>(v, p);
      for (int s = 1; s < nsrc; ++s) {
        std::memcpy(&v, static_cast<const char*>(srcs[s]) + i * sizeof(E), sizeof(E));
        acc = el::combine<D, Op>(acc, v);
      }
      const E out = el::last<D>(acc, p);
      for (int j = 0; j < ndst; ++j) std::memcpy(static_cast<char*>(dsts[j]) + i * sizeof(E), &out, sizeof(E));
    }
  }
};

el::Params paramsOf(const ReduceSpec& s) {
  el::Params p;
  p.premul = s.premulFirst;
  p.divide = s.divide;
  p.divisor = s.divisor;
  if (hora::isFloating(s.dtype)) p.mulF = s.scalar.f;
  else p.mulI = s.scalar.i;
  return p;
}

// The special values of a type, as bits.
std::vector<uint64_t> specialsOf(DataType t) {
  const size_t esz = dataTypeSize(t);
  std::vector<uint64_t> specials;
  switch (t) {
    case DataType::Float32:
      specials = {0x7fc00000u, 0xffc00001u, 0x7f800000u, 0xff800000u, 0x80000000u, 0x00000001u, 0x807fffffu,
                  0x7f7fffffu, 0x3f800000u, 0x47700000u, 0x43e80000u};
      break;
    case DataType::Float64:
      specials = {0x7ff8000000000000u, 0x7ff0000000000000u, 0x8000000000000000u, 1u, 0x3ff0000000000000u};
      break;
    // NaNs with payloads and either sign, infinities, the largest finite values and what takes
    // a sum of them to the overflow tie, subnormals, one and what takes a sum to a tie after it.
    case DataType::Float16:
      specials = {0x7e00, 0x7c01, 0xfe01, 0x7fff, 0x7c00, 0xfc00, 0x8000, 0x0001, 0x8003, 0x03ff,
                  0x7bff, 0xfbff, 0x4c00, 0x3c00, 0x3c01, 0x1000};
      break;
    case DataType::Bfloat16:
      specials = {0x7fc0, 0x7f81, 0xffc1, 0x7fff, 0x7f80, 0xff80, 0x8000, 0x0001, 0x8003, 0x007f,
                  0x7f7f, 0xff7f, 0x7b00, 0x3f80, 0x3f81, 0x3b80};
      break;
    case DataType::Float8e4m3: specials = {0x7f, 0xff, 0x7e, 0xfe, 0x58, 0x80, 0x01, 0x83, 0x07, 0x38, 0x39, 0x18}; break;
    case DataType::Float8e5m2:
      specials = {0x7d, 0xfe, 0x7f, 0x7c, 0xfc, 0x7b, 0xfb, 0x6c, 0x68, 0x80, 0x01, 0x83, 0x03, 0x3c, 0x3d, 0x30};
      break;
    default: specials = {0, 1, ~uint64_t(0), uint64_t(1) << (esz * 8 - 1)}; break;
  }
  return specials;
}

// Random bytes, with one special value of the type in every few elements.
void fill(std::vector<uint8_t>& buf, DataType t, std::mt19937_64& rng) {
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const size_t esz = dataTypeSize(t), n = buf.size() / esz;
  const std::vector<uint64_t> specials = specialsOf(t);
  for (size_t i = 0; i < n; i += 1 + rng() % 5) {
    const uint64_t v = specials[rng() % specials.size()];
    std::memcpy(buf.data() + i * esz, &v, esz);
  }
}

struct Count {
  int* n;
  template <class D, class Op>
  void operator()() const { ++*n; }
};

}  // namespace

TEST_CASE("the CUDA kernels' element functions give the CPU kernels' bits, every dtype x op", "[kernels][cuda]") {
  std::mt19937_64 rng(20261126);
  const RedOp ops[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg, RedOp::PreMulSum};
  const size_t count = 1003;
  int cases = 0;
  for (int t = 0; t < hora::kNumDataTypes; ++t) {
    const DataType dt = static_cast<DataType>(t);
    const size_t esz = dataTypeSize(dt);
    for (RedOp op : ops) {
      for (int nsrc : {1, 2, 3, 7, 16}) {
        for (int ndst : {1, 2}) {
          ReduceSpec s;
          s.dtype = dt;
          s.op = op;
          if (op == RedOp::PreMulSum) {
            s.premulFirst = true;
            if (hora::isFloating(dt)) s.scalar.f = 0.37;
            else s.scalar.i = -3;
          }
          if (op == RedOp::Avg) {
            s.divide = true;
            s.divisor = static_cast<uint64_t>(nsrc) + 2;
          }
          std::vector<std::vector<uint8_t>> in(static_cast<size_t>(nsrc), std::vector<uint8_t>(count * esz));
          std::vector<const void*> srcs;
          for (auto& b : in) {
            fill(b, dt, rng);
            srcs.push_back(b.data());
          }
          std::vector<uint8_t> want(count * esz), got0(count * esz), got1(count * esz);
          void* wantDst[1] = {want.data()};
          void* gotDst[2] = {got0.data(), got1.data()};
          for (hora::kernels::Isa isa : {hora::kernels::Isa::Scalar, bestIsa()}) {
            REQUIRE(setIsa(isa));
            hora::kernels::reduce(wantDst, 1, srcs.data(), nsrc, count, s);
            // Element by element; packs one and two at a time; packs in place (the last source
            // is the first destination).
            for (int path : {0, 1, 2, 3}) {
              const bool packed = path > 0;
              std::fill(got0.begin(), got0.end(), 0x5a);
              std::fill(got1.begin(), got1.end(), 0x5a);
              std::vector<const void*> from = srcs;
              if (path == 3) {
                std::memcpy(got0.data(), srcs.back(), count * esz);
                from.back() = got0.data();
              }
              if (packed) {
                HostReducePacks run{gotDst, ndst, from.data(), nsrc, count, paramsOf(s), path == 2 ? 2 : 1};
                REQUIRE(el::dispatch(t, static_cast<int>(op), run));
              } else {
                HostReduce run{gotDst, ndst, srcs.data(), nsrc, count, paramsOf(s)};
                REQUIRE(el::dispatch(t, static_cast<int>(op), run));
              }
              for (int j = 0; j < ndst; ++j) {
                const uint8_t* got = j ? got1.data() : got0.data();
                for (size_t i = 0; i < count; ++i) {
                  if (sameElement(dt, got, want.data(), i)) continue;
                  FAIL(hora::dataTypeName(dt) << " " << hora::redOpName(op) << " nsrc " << nsrc << " ndst " << ndst
                                              << " path " << path << " element " << i
                                              << ": element.h " << elementHex(dt, got, i) << ", CPU kernels "
                                              << elementHex(dt, want.data(), i));
                }
              }
            }
            ++cases;
          }
          setIsa(bestIsa());
        }
      }
    }
  }
  CHECK(cases == hora::kNumDataTypes * 6 * 5 * 2 * 2);
}

TEST_CASE("dispatch knows every dtype and op and refuses other numbers", "[kernels][cuda]") {
  int n = 0;
  for (int t = 0; t < hora::kNumDataTypes; ++t)
    for (int op = 0; op < hora::kNumRedOps; ++op) CHECK(el::dispatch(t, op, Count{&n}));
  CHECK(n == hora::kNumDataTypes * hora::kNumRedOps);
  CHECK_FALSE(el::dispatch(hora::kNumDataTypes, 0, Count{&n}));
  CHECK_FALSE(el::dispatch(0, hora::kNumRedOps, Count{&n}));
  CHECK_FALSE(el::dispatch(-1, 0, Count{&n}));
}

namespace {

// Floats that probe every rounding decision of a narrow format: each code's value, the midpoint
// to the next code (a tie) and the floats either side of it, NaNs with payloads and signs,
// infinities, float subnormals, and random bit patterns.
std::vector<float> probes(float (*widen)(uint32_t), uint32_t codes) {
  std::vector<float> out;
  for (uint32_t c = 0; c < codes; ++c) {
    const float v = widen(c);
    if (std::isnan(v)) continue;
    out.push_back(v);
    const float next = widen(c + 1 < codes ? c + 1 : c);
    if (!std::isnan(next) && std::isfinite(next) && std::isfinite(v) && next != v) {
      const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);
      out.push_back(mid);
      out.push_back(std::nextafter(mid, -std::numeric_limits<float>::infinity()));
      out.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
    }
  }
  for (uint32_t b : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu, 0x7fa00000u,
                     0x7f800000u, 0xff800000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x7f7fffffu,
                     0xff7fffffu, 0x47700000u, 0xc7700000u, 0x476fffffu, 0x43e80000u, 0x43e80001u, 0x477ff000u,
                     0x7f7f8000u, 0xff7f7fffu})
    out.push_back(floatOf(b));
  std::mt19937 rng(99);
  for (int i = 0; i < 300000; ++i) out.push_back(floatOf(rng()));
  return out;
}

template <class Cv>
void checkNarrowing(const char* name, float (*cpuWiden)(uint32_t), uint32_t (*cpuNarrow)(float)) {
  INFO(name);
  constexpr uint32_t kCodes = 1u << (8 * sizeof(typename Cv::E));
  // Widening: every code, exact (a NaN to a NaN).
  int failures = 0;
  for (uint32_t c = 0; c < kCodes; ++c) {
    const float want = cpuWiden(c), got = Cv::widen(static_cast<typename Cv::E>(c));
    const bool same = std::isnan(want) ? std::isnan(got) : bitsOf(got) == bitsOf(want);
    if (!same && failures++ < 10) FAIL_CHECK("code " << hex(c) << " widens to " << hex(bitsOf(got)) << ", CPU "
                                                     << hex(bitsOf(want)));
  }
  // Narrowing, one at a time and a word (2 or 4) at a time.
  const std::vector<float> xs = probes(cpuWiden, kCodes);
  for (size_t i = 0; i < xs.size(); ++i) {
    for (float x : {xs[i], -xs[i]}) {
      const uint32_t want = cpuNarrow(x), got = Cv::narrow(x);
      if (got != want && failures++ < 10)
        FAIL_CHECK(hex(bitsOf(x)) << " narrows to " << hex(got) << ", CPU " << hex(want));
    }
  }
  constexpr int kPer = Cv::kPerWord;
  constexpr int kBits = 32 / kPer;
  for (size_t i = 0; i + kPer <= xs.size(); i += kPer) {
    float in[kPer];
    for (int j = 0; j < kPer; ++j) in[j] = (i / kPer) % 2 ? -xs[i + static_cast<size_t>(j)] : xs[i + static_cast<size_t>(j)];
    const uint32_t word = Cv::narrowWord(in);
    for (int j = 0; j < kPer; ++j) {
      const uint32_t got = kBits == 32 ? word : (word >> (kBits * j)) & ((1u << kBits) - 1);
      const uint32_t want = cpuNarrow(in[j]);
      if (got != want && failures++ < 10)
        FAIL_CHECK(hex(bitsOf(in[j])) << " narrows (word, lane " << j << ") to " << hex(got) << ", CPU " << hex(want));
    }
    float back[kPer];
    Cv::widenWord(word, back);
    for (int j = 0; j < kPer; ++j) {
      const uint32_t code = (word >> (kBits * j)) & ((1u << kBits) - 1);
      const float want = cpuWiden(code);
      const bool same = std::isnan(want) ? std::isnan(back[j]) : bitsOf(back[j]) == bitsOf(want);
      if (!same && failures++ < 10) FAIL_CHECK("code " << hex(code) << " widens (word, lane " << j << ") wrongly");
    }
  }
  CHECK(failures == 0);
}

float cpuHalf(uint32_t c) { return halfToFloat(static_cast<uint16_t>(c)); }
uint32_t cpuToHalf(float f) { return floatToHalf(f); }
float cpuBf16(uint32_t c) { return bfloat16ToFloat(static_cast<uint16_t>(c)); }
uint32_t cpuToBf16(float f) { return floatToBfloat16(f); }
float cpuE4m3(uint32_t c) { return fp8e4m3ToFloat(static_cast<uint8_t>(c)); }
uint32_t cpuToE4m3(float f) { return floatToFp8e4m3(f); }
float cpuE5m2(uint32_t c) { return fp8e5m2ToFloat(static_cast<uint8_t>(c)); }
uint32_t cpuToE5m2(float f) { return floatToFp8e5m2(f); }

}  // namespace

TEST_CASE("the CUDA conversions of the narrow types give the CPU's bits: every code, ties, NaNs, overflow",
          "[kernels][cuda]") {
#if defined(HORA_ELEMENT_INTRINSICS)
  // Here element.h runs NVIDIA's host versions of cvt.rn.f16x2.f32, cvt.rn.bf16x2.f32,
  // cvt.rn.satfinite.{e4m3,e5m2}x2.f32 and cvt.rn.f16x2.e4m3x2 (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h).
  WARN("element.h converts with NVIDIA's intrinsics (their host versions here)");
  // The canonical NaNs and the saturation the instructions give, as the CPU gives them.
  CHECK(el::HalfCv::narrow(floatOf(0xffc00001u)) == 0x7fff);
  CHECK(el::Bf16Cv::narrow(floatOf(0xff800001u)) == 0x7fff);
  CHECK(el::E4m3Cv::narrow(floatOf(0xffc00000u)) == 0x7f);
  CHECK(el::E5m2Cv::narrow(floatOf(0xffc00000u)) == 0x7f);
  CHECK(__nv_cvt_float_to_fp8(std::numeric_limits<float>::infinity(), __NV_SATFINITE, __NV_E4M3) == 0x7e);
  CHECK(__nv_cvt_float_to_fp8(-std::numeric_limits<float>::infinity(), __NV_SATFINITE, __NV_E5M2) == 0xfb);
  CHECK(el::E5m2Cv::narrow(-std::numeric_limits<float>::infinity()) == 0xfc);  // element.h's fix-up
  CHECK(el::E5m2Cv::narrow(61440.0f) == 0x7c);
  CHECK(el::E5m2Cv::narrow(std::nextafter(61440.0f, 0.0f)) == 0x7b);
#else
  WARN("no CUDA headers in this build: element.h converts with the CPU's own functions");
#endif
  checkNarrowing<el::HalfCv>("float16", cpuHalf, cpuToHalf);
  checkNarrowing<el::Bf16Cv>("bfloat16", cpuBf16, cpuToBf16);
  checkNarrowing<el::E4m3Cv>("e4m3", cpuE4m3, cpuToE4m3);
  checkNarrowing<el::E5m2Cv>("e5m2", cpuE5m2, cpuToE5m2);
}

TEST_CASE("the CUDA kernels on a GPU give the CPU kernels' bits on the special values", "[kernels][cuda][gpu]") {
#if !defined(HORA_CUDA)
  WARN("SKIP: a build without CUDA");
#else
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    WARN("SKIP: no GPU: " << (e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device"));
    return;
  }
  auto ok = [](cudaError_t r) { REQUIRE(r == cudaSuccess); };
  ok(static_cast<cudaError_t>(hora::kernels::cuda::preload()));  // as the library does: grids sized by occupancy
  // Per type: every pair of special values (two sources), every code alone (one source; the
  // float types' specials), and triples of specials (three sources); each op; every pointer
  // 16-aligned (the pack path), one element past (a head and a tail element by element), and
  // one byte past (bytewise).
  const RedOp ops[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg, RedOp::PreMulSum};
  std::mt19937_64 rng(5);
  for (DataType dt : {DataType::Float16, DataType::Bfloat16, DataType::Float8e4m3, DataType::Float8e5m2,
                      DataType::Float32}) {
    const size_t esz = dataTypeSize(dt);
    const std::vector<uint64_t> sp = specialsOf(dt);
    for (int nsrc : {1, 2, 3}) {
      std::vector<std::vector<uint8_t>> in(static_cast<size_t>(nsrc));
      size_t count = 0;
      if (nsrc == 1 && esz <= 2) {
        count = size_t(1) << (8 * esz);
        in[0].resize(count * esz);
        for (size_t i = 0; i < count; ++i) std::memcpy(&in[0][i * esz], &i, esz);
      } else if (nsrc == 2) {
        count = sp.size() * sp.size() + 13;
        for (auto& b : in) b.resize(count * esz);
        for (size_t i = 0; i < count; ++i) {
          std::memcpy(&in[0][i * esz], &sp[(i / sp.size()) % sp.size()], esz);
          std::memcpy(&in[1][i * esz], &sp[i % sp.size()], esz);
        }
      } else {
        count = 4099;
        for (auto& b : in) {
          b.resize(count * esz);
          for (size_t i = 0; i < count; ++i) std::memcpy(&b[i * esz], &sp[rng() % sp.size()], esz);
        }
      }
      const size_t bytes = count * esz;
      for (RedOp op : ops) {
        ReduceSpec s;
        s.dtype = dt;
        s.op = op;
        if (op == RedOp::PreMulSum) {
          s.premulFirst = true;
          s.scalar.f = nsrc == 3 ? std::numeric_limits<double>::quiet_NaN() : 0.37;
        }
        if (op == RedOp::Avg) {
          s.divide = true;
          s.divisor = 2;
        }
        std::vector<const void*> hs;
        for (auto& b : in) hs.push_back(b.data());
        std::vector<uint8_t> want(bytes);
        void* w[1] = {want.data()};
        hora::kernels::reduce(w, 1, hs.data(), nsrc, count, s);
        for (size_t at : {size_t(0), esz, size_t(1)}) {
          std::vector<void*> allocs;
          std::vector<const void*> ds;
          for (int k = 0; k < nsrc; ++k) {
            void* d = nullptr;
            ok(cudaMalloc(&d, bytes + 64));
            allocs.push_back(d);
            ok(cudaMemcpy(static_cast<char*>(d) + at, hs[static_cast<size_t>(k)], bytes, cudaMemcpyHostToDevice));
            ds.push_back(static_cast<char*>(d) + at);
          }
          void* out = nullptr;
          ok(cudaMalloc(&out, bytes + 64));
          allocs.push_back(out);
          void* dd[1] = {static_cast<char*>(out) + at};
          ok(static_cast<cudaError_t>(hora::kernels::cuda::reduce(dd, 1, ds.data(), nsrc, count, s, nullptr)));
          std::vector<uint8_t> got(bytes);
          ok(cudaMemcpy(got.data(), dd[0], bytes, cudaMemcpyDeviceToHost));
          for (void* p : allocs) ok(cudaFree(p));
          size_t bad = count;
          for (size_t i = 0; i < count && bad == count; ++i)
            if (!sameElement(dt, got.data(), want.data(), i)) bad = i;
          INFO(hora::dataTypeName(dt) << " " << hora::redOpName(op) << " nsrc " << nsrc << " at " << at << ": "
                                      << (bad == count ? std::string("-")
                                                       : "element " + std::to_string(bad) + ": GPU " +
                                                             elementHex(dt, got.data(), bad) + ", CPU " +
                                                             elementHex(dt, want.data(), bad) + ", inputs " +
                                                             elementHex(dt, in[0].data(), bad) +
                                                             (nsrc > 1 ? " " + elementHex(dt, in[1].data(), bad) : "")));
          CHECK(bad == count);
        }
      }
    }
  }
#endif
}
