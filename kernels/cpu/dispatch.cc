// Picks the reduce() implementation at run time from what the CPU (and the OS, which must
// save the wide registers) supports. Built for the baseline ISA: nothing here may use a
// vector instruction, and the vector implementations are only called once the CPU has
// been checked.
#include <atomic>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kernels/cpu/reduce_impl.h"

namespace hora::kernels {
namespace {

// Below this many elements the vector code would do nothing but call the scalar tail.
constexpr size_t kScalarBelow = 16;

struct CpuFeatures {
  bool avx2 = false;    // AVX2 + FMA + F16C
  bool avx512 = false;  // AVX-512 F + BW + VL + DQ
  bool bf16 = false;    // AVX512_BF16
};

#if defined(__x86_64__) || defined(__i386__)
// F16C from CPUID leaf 1 (some compilers' __builtin_cpu_supports lack "f16c").
bool hasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // The runtime's checks (libgcc, compiler-rt) include the OS's XSAVE support of the
  // YMM/ZMM state; F16C needs no more state than AVX2 does.
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && hasF16c();
  f.avx512 = f.avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  f.bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

const CpuFeatures& cpu() {
  static const CpuFeatures features = detect();
  return features;
}

struct Impl {
  Isa isa;
  ReduceFn fn;
};

// Constant-initialised, so usable from any static constructor.
constexpr Impl kScalar{Isa::Scalar, &scalar::reduce};
#if defined(__x86_64__) || defined(__i386__)
constexpr Impl kAvx2{Isa::Avx2, &avx2::reduce};
constexpr Impl kAvx512{Isa::Avx512, &avx512::reduce};
constexpr Impl kAvx512Bf16{Isa::Avx512, &avx512::reduceBf16};
#endif

// The active implementation; null until the first use picks the best one.
std::atomic<const Impl*> gActive{nullptr};

const Impl* implFor(Isa isa) {
  if (!isaSupported(isa)) return nullptr;
  switch (isa) {
    case Isa::Scalar: return &kScalar;
#if defined(__x86_64__) || defined(__i386__)
    case Isa::Avx2: return &kAvx2;
    case Isa::Avx512: return cpu().bf16 ? &kAvx512Bf16 : &kAvx512;
#else
    default: break;
#endif
  }
  return nullptr;
}

const Impl* active() {
  const Impl* impl = gActive.load(std::memory_order_acquire);
  if (impl) return impl;
  const Impl* best = implFor(bestIsa());
  // Only install the default if no setIsa() got there first.
  if (gActive.compare_exchange_strong(impl, best, std::memory_order_acq_rel)) return best;
  return impl;
}

}  // namespace

void reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
            const ReduceSpec& spec) {
  if (count == 0) return;
  if (count < kScalarBelow) return scalar::reduce(dsts, ndst, srcs, nsrc, count, spec);
  active()->fn(dsts, ndst, srcs, nsrc, count, spec);
}

const char* isaName(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool isaSupported(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
#if defined(__x86_64__) || defined(__i386__)
    case Isa::Avx2: return cpu().avx2;
    case Isa::Avx512: return cpu().avx512;
#else
    default: return false;
#endif
  }
  return false;
}

Isa bestIsa() {
  if (isaSupported(Isa::Avx512)) return Isa::Avx512;
  if (isaSupported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Scalar;
}

Isa activeIsa() { return active()->isa; }

bool setIsa(Isa isa) {
  const Impl* impl = implFor(isa);
  if (!impl) return false;
  gActive.store(impl, std::memory_order_release);
  return true;
}

}  // namespace hora::kernels
