// The CUDA kernels' per-element arithmetic (kernels/cuda/element.h), run on the host: for every
// dtype x op (PreMulSum and Avg included), 1 to 16 sources and 1 or 2 destinations, on values
// that include NaN, infinities, signed zeros, subnormals and the types' extremes, it must give
// the CPU kernels' bits exactly (kernels::reduce, with the scalar and the best vector ISA), a NaN
// where they give one (its payload is the hardware's, as between the CPU's ISAs). The
// device runs the same functions; tests/gpu checks the kernels themselves where a GPU is.
#include <catch2/catch.hpp>

#include <random>

#include "kernels/cuda/element.h"
#include "unit_kernels.h"

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

el::Params paramsOf(const ReduceSpec& s) {
  el::Params p;
  p.premul = s.premulFirst;
  p.divide = s.divide;
  p.divisor = s.divisor;
  if (hora::isFloating(s.dtype)) p.mulF = s.scalar.f;
  else p.mulI = s.scalar.i;
  return p;
}

// Random bytes, with one special value of the type in every few elements.
void fill(std::vector<uint8_t>& buf, DataType t, std::mt19937_64& rng) {
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const size_t esz = dataTypeSize(t), n = buf.size() / esz;
  std::vector<uint64_t> specials;
  switch (t) {
    case DataType::Float32:
      specials = {0x7fc00000u, 0x7f800000u, 0xff800000u, 0x80000000u, 0x00000001u, 0x7f7fffffu, 0x3f800000u};
      break;
    case DataType::Float64:
      specials = {0x7ff8000000000000u, 0x7ff0000000000000u, 0x8000000000000000u, 1u, 0x3ff0000000000000u};
      break;
    case DataType::Float16: specials = {0x7e00, 0x7c00, 0xfc00, 0x8000, 0x0001, 0x7bff, 0x3c00}; break;
    case DataType::Bfloat16: specials = {0x7fc0, 0x7f80, 0xff80, 0x8000, 0x0001, 0x7f7f, 0x3f80}; break;
    case DataType::Float8e4m3: specials = {0x7f, 0x7e, 0x80, 0x01, 0x38}; break;
    case DataType::Float8e5m2: specials = {0x7e, 0x7c, 0xfc, 0x80, 0x01, 0x7b, 0x3c}; break;
    default: specials = {0, 1, ~uint64_t(0), uint64_t(1) << (esz * 8 - 1)}; break;
  }
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
            HostReduce run{gotDst, ndst, srcs.data(), nsrc, count, paramsOf(s)};
            REQUIRE(el::dispatch(t, static_cast<int>(op), run));
            for (int j = 0; j < ndst; ++j) {
              const uint8_t* got = j ? got1.data() : got0.data();
              for (size_t i = 0; i < count; ++i) {
                if (sameElement(dt, got, want.data(), i)) continue;
                FAIL(hora::dataTypeName(dt) << " " << hora::redOpName(op) << " nsrc " << nsrc << " ndst " << ndst
                                            << " element " << i << ": element.h " << elementHex(dt, got, i)
                                            << ", CPU kernels " << elementHex(dt, want.data(), i));
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
