// The portable implementation of reduce(): every dtype x op, for the baseline ISA.
// It is the definition the vector implementations must match bit for bit, and it does
// their tails.
//
// Elements are processed in chunks: the chunk of srcs[0] is widened into an accumulator
// array, every further source is combined into it, the result is finalised, narrowed once
// and copied to every destination. All loads of a chunk happen before its stores, so a
// destination may be the very same buffer as any source.
#include <cstring>
#include <type_traits>

#include "kernels/cpu/convert_inl.h"
#include "kernels/cpu/reduce_impl.h"

namespace hora::kernels::scalar {
namespace {

template <class E>
inline E loadAt(const char* p, size_t i) {
  E v;
  std::memcpy(&v, p + i * sizeof(E), sizeof(E));
  return v;
}

// Integers: wrap like the unsigned type; max/min as the type's signedness says.
template <class T>
struct IntT {
  using E = T;  // element in memory
  using C = T;  // value the arithmetic works on
  using U = std::make_unsigned_t<T>;
  struct P {
    T mul;
    uint64_t div;
  };
  static P params(const ReduceSpec& s) { return {static_cast<T>(s.scalar.i), s.divisor}; }
  static C widen(E v) { return v; }
  static E narrow(C v) { return v; }
  static C add(C a, C b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
  static C mul(C a, C b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
  static C max(C a, C b) { return a > b ? a : b; }
  static C min(C a, C b) { return a < b ? a : b; }
  static C premul(C a, const P& p) { return mul(a, p.mul); }
  static C divide(C a, const P& p) { return divideInt<T>(a, p.div); }
};

// float and double: IEEE in the type itself. max/min return the first operand when it is
// NaN, else the second when it is NaN (so NaN propagates), else the larger/smaller one,
// and the second operand when they compare equal (+0 vs -0): exactly the x86
// maxps/minps(a, b) result with a NaN a patched in.
template <class T>
struct FloatT {
  using E = T;
  using C = T;
  struct P {
    T mul, div;
  };
  static P params(const ReduceSpec& s) {
    return {static_cast<T>(s.scalar.f), static_cast<T>(s.divisor)};
  }
  static C widen(E v) { return v; }
  static E narrow(C v) { return v; }
  static C add(C a, C b) { return a + b; }
  static C mul(C a, C b) { return a * b; }
  static C max(C a, C b) { return a != a ? a : (a > b ? a : b); }
  static C min(C a, C b) { return a != a ? a : (a < b ? a : b); }
  static C premul(C a, const P& p) { return a * p.mul; }
  static C divide(C a, const P& p) { return a / p.div; }
};

// float16, bfloat16, fp8: widened to float, combined in float, rounded once on store.
struct HalfCv {
  using E = uint16_t;
  static float widen(E v) { return conv::halfToFloat(v); }
  static E narrow(float f) { return conv::floatToHalf(f); }
};
struct Bf16Cv {
  using E = uint16_t;
  static float widen(E v) { return conv::bf16ToFloat(v); }
  static E narrow(float f) { return conv::floatToBf16(f); }
};
struct E4m3Cv {
  using E = uint8_t;
  static float widen(E v) { return conv::e4m3ToFloat(v); }
  static E narrow(float f) { return conv::floatToE4m3(f); }
};
struct E5m2Cv {
  using E = uint8_t;
  static float widen(E v) { return conv::e5m2ToFloat(v); }
  static E narrow(float f) { return conv::floatToE5m2(f); }
};

template <class Cv>
struct NarrowT : FloatT<float> {
  using E = typename Cv::E;
  using C = float;
  static C widen(E v) { return Cv::widen(v); }
  static E narrow(C v) { return Cv::narrow(v); }
};

struct OpSum {
  template <class D, class C>
  static C apply(C a, C b) { return D::add(a, b); }
};
struct OpProd {
  template <class D, class C>
  static C apply(C a, C b) { return D::mul(a, b); }
};
struct OpMax {
  template <class D, class C>
  static C apply(C a, C b) { return D::max(a, b); }
};
struct OpMin {
  template <class D, class C>
  static C apply(C a, C b) { return D::min(a, b); }
};

constexpr size_t kChunk = 256;
// A call of at most this many elements (the small calls, where the kernel's fixed cost is most
// of the call's arithmetic) runs through small() instead.
constexpr size_t kSmall = 16;

// At most kSmall elements, element by element through every source (loops that the compiler
// does not vectorise, whose set-up cost a 2-element call more than its arithmetic), each
// narrowed into `out`: every load before the first store, as in kernel().
template <class D, class Op>
void small(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count, const ReduceSpec& spec) {
  using E = typename D::E;
  using C = typename D::C;
  const typename D::P p = D::params(spec);
  E out[kSmall];
  for (size_t i = 0; i < count; ++i) {
    C c = D::widen(loadAt<E>(static_cast<const char*>(srcs[0]), i));
    if (spec.premulFirst) c = D::premul(c, p);
    for (int k = 1; k < nsrc; ++k) c = Op::template apply<D>(c, D::widen(loadAt<E>(static_cast<const char*>(srcs[k]), i)));
    if (spec.divide) c = D::divide(c, p);
    out[i] = D::narrow(c);
  }
  for (int j = 0; j < ndst; ++j) {
    char* d = static_cast<char*>(dsts[j]);
    for (size_t i = 0; i < count; ++i) std::memcpy(d + i * sizeof(E), &out[i], sizeof(E));
  }
}

template <class D, class Op>
void kernel(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
            const ReduceSpec& spec) {
  using E = typename D::E;
  using C = typename D::C;
  const typename D::P p = D::params(spec);
  const bool premul = spec.premulFirst;
  const bool divide = spec.divide;
  C acc[kChunk];
  E out[kChunk];
  for (size_t base = 0; base < count; base += kChunk) {
    const size_t n = count - base < kChunk ? count - base : kChunk;
    const size_t off = base * sizeof(E);
    const char* s0 = static_cast<const char*>(srcs[0]) + off;
    for (size_t i = 0; i < n; ++i) acc[i] = D::widen(loadAt<E>(s0, i));
    if (premul)
      for (size_t i = 0; i < n; ++i) acc[i] = D::premul(acc[i], p);
    for (int k = 1; k < nsrc; ++k) {
      const char* sk = static_cast<const char*>(srcs[k]) + off;
      for (size_t i = 0; i < n; ++i) acc[i] = Op::template apply<D>(acc[i], D::widen(loadAt<E>(sk, i)));
    }
    if (divide)
      for (size_t i = 0; i < n; ++i) acc[i] = D::divide(acc[i], p);
    for (size_t i = 0; i < n; ++i) out[i] = D::narrow(acc[i]);
    for (int j = 0; j < ndst; ++j) std::memcpy(static_cast<char*>(dsts[j]) + off, out, n * sizeof(E));
  }
}

template <class D, class Op>
void run(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count, const ReduceSpec& spec) {
  if (count <= kSmall) small<D, Op>(dsts, ndst, srcs, nsrc, count, spec);
  else kernel<D, Op>(dsts, ndst, srcs, nsrc, count, spec);
}

template <class D>
void byOp(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
          const ReduceSpec& spec) {
  switch (spec.op) {
    case RedOp::Prod: return run<D, OpProd>(dsts, ndst, srcs, nsrc, count, spec);
    case RedOp::Max: return run<D, OpMax>(dsts, ndst, srcs, nsrc, count, spec);
    case RedOp::Min: return run<D, OpMin>(dsts, ndst, srcs, nsrc, count, spec);
    case RedOp::Sum:
    case RedOp::Avg:
    case RedOp::PreMulSum: return run<D, OpSum>(dsts, ndst, srcs, nsrc, count, spec);
  }
}

}  // namespace

void reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
            const ReduceSpec& spec) {
  if (count == 0) return;
  switch (spec.dtype) {
    case DataType::Int8: return byOp<IntT<int8_t>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Uint8: return byOp<IntT<uint8_t>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Int32: return byOp<IntT<int32_t>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Uint32: return byOp<IntT<uint32_t>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Int64: return byOp<IntT<int64_t>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Uint64: return byOp<IntT<uint64_t>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Float16: return byOp<NarrowT<HalfCv>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Float32: return byOp<FloatT<float>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Float64: return byOp<FloatT<double>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Bfloat16: return byOp<NarrowT<Bf16Cv>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Float8e4m3: return byOp<NarrowT<E4m3Cv>>(dsts, ndst, srcs, nsrc, count, spec);
    case DataType::Float8e5m2: return byOp<NarrowT<E5m2Cv>>(dsts, ndst, srcs, nsrc, count, spec);
  }
}

}  // namespace hora::kernels::scalar
