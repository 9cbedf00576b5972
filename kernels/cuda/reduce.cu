// The CUDA reduction kernels (reduce.h): one kernel per (element type, combining op), its
// arithmetic element.h's (the narrow types through the GPU's conversion instructions).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/element.h"
#include "kernels/cuda/reduce.h"

namespace hora::kernels::cuda {
namespace {

namespace el = element;

constexpr int kThreads = 512;
constexpr int kPack = 16;  // bytes per vector load

struct Args {
  const void* srcs[kMaxSources];
  void* dsts[kMaxDests];
  int nsrc, ndst;
  size_t count;
  // Vector path: elements [0, head) one at a time, then `packs` packs of 16 bytes, then the
  // rest one at a time. Off (packs == 0, head == count) when the pointers disagree mod 16.
  size_t head, packs;
  bool elementAligned;  // every pointer aligned to the element size (else byte loads)
  el::Params p;
};

template <class E>
__device__ __forceinline__ E loadElement(const void* base, size_t i, bool aligned) {
  const E* at = static_cast<const E*>(base) + i;
  if (aligned) return *at;
  E v;
  const unsigned char* b = reinterpret_cast<const unsigned char*>(at);
  unsigned char* o = reinterpret_cast<unsigned char*>(&v);
#pragma unroll
  for (int k = 0; k < static_cast<int>(sizeof(E)); ++k) o[k] = b[k];
  return v;
}

template <class E>
__device__ __forceinline__ void storeElement(void* base, size_t i, E v, bool aligned) {
  E* at = static_cast<E*>(base) + i;
  if (aligned) {
    *at = v;
    return;
  }
  unsigned char* b = reinterpret_cast<unsigned char*>(at);
  const unsigned char* o = reinterpret_cast<const unsigned char*>(&v);
#pragma unroll
  for (int k = 0; k < static_cast<int>(sizeof(E)); ++k) b[k] = o[k];
}

template <class D, class Op>
__device__ __forceinline__ void oneElement(const Args& a, size_t i) {
  using E = typename D::E;
  typename D::C acc = el::first<D>(loadElement<E>(a.srcs[0], i, a.elementAligned), a.p);
  for (int k = 1; k < a.nsrc; ++k) acc = el::combine<D, Op>(acc, loadElement<E>(a.srcs[k], i, a.elementAligned));
  const E out = el::last<D>(acc, a.p);
  for (int j = 0; j < a.ndst; ++j) storeElement<E>(a.dsts[j], i, out, a.elementAligned);
}

__device__ __forceinline__ el::Words loadPack(const void* base, size_t off) {
  const uint4 v = *reinterpret_cast<const uint4*>(static_cast<const char*>(base) + off);
  return el::Words{{v.x, v.y, v.z, v.w}};
}

__device__ __forceinline__ void storePack(void* base, size_t off, const el::Words& w) {
  *reinterpret_cast<uint4*>(static_cast<char*>(base) + off) = make_uint4(w.w[0], w.w[1], w.w[2], w.w[3]);
}

// U packs of 16 bytes (pack k0 + u * stride, at byte offset body + pack * 16, 16-aligned in every
// pointer) of every source into every destination (element.h's reducePacks: one source's loads
// in flight while the one before is combined, every load before the first store).
template <class D, class Op, int U>
__device__ __forceinline__ void packs(const Args& a, size_t body, size_t k0, size_t stride) {
  el::reducePacks<D, Op, U>(
      a.nsrc, a.ndst, a.p,
      [&](int k, int u) { return loadPack(a.srcs[k], body + (k0 + static_cast<size_t>(u) * stride) * kPack); },
      [&](int d, int u, const el::Words& w) {
        storePack(a.dsts[d], body + (k0 + static_cast<size_t>(u) * stride) * kPack, w);
      });
}

template <class D, class Op>
__global__ void __launch_bounds__(kThreads) reduceKernel(const __grid_constant__ Args a) {
  using E = typename D::E;
  constexpr size_t V = kPack / sizeof(E);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (size_t i = tid; i < a.head; i += stride) oneElement<D, Op>(a, i);
  const size_t body = a.head * sizeof(E);
  for (size_t k = tid; k < a.packs; k += stride) packs<D, Op, 1>(a, body, k, stride);
  for (size_t i = a.head + a.packs * V + tid; i < a.count; i += stride) oneElement<D, Op>(a, i);
}

// How many blocks of each kernel an SM holds at once (its registers decide), found when the
// kernels are loaded (preload); 0 until then.
template <class D, class Op>
std::atomic<int> residentBlocks{0};

// Polls the host's word, sleeping a little between reads (it crosses the bus), then makes what
// the host wrote before it visible to the work after it.
__global__ void waitFlagKernel(const volatile uint32_t* flag, uint32_t value) {
  while (static_cast<int32_t>(*flag - value) < 0) __nanosleep(1000);
  __threadfence_system();
}

// One wave of blocks at most: as many as the device holds at once (perSm per SM; 4 where the
// kernel's occupancy is not known yet), fewer for a small count; the grid-stride loop does the
// rest. More than one wave would leave a last, partial wave running alone (the grid-stride
// loop gives every block the same share).
unsigned blocksFor(size_t items, int perSm) {
  static std::atomic<int> sms[64] = {};
  int dev = 0;
  int n = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && dev < 64) {
    n = sms[dev].load(std::memory_order_relaxed);
    if (!n && cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess)
      sms[dev].store(n, std::memory_order_relaxed);
  }
  if (n <= 0) n = 108;
  const size_t most = static_cast<size_t>(n) * static_cast<size_t>(perSm > 0 ? perSm : 4);
  size_t blocks = (items + kThreads - 1) / kThreads;
  if (blocks > most) blocks = most;
  return static_cast<unsigned>(blocks ? blocks : 1);
}

struct Launch {
  const Args* args;
  cudaStream_t stream;
  size_t items;
  cudaError_t result = cudaErrorInvalidValue;
  template <class D, class Op>
  void operator()() {
    const unsigned blocks = blocksFor(items, residentBlocks<D, Op>.load(std::memory_order_relaxed));
    reduceKernel<D, Op><<<blocks, kThreads, 0, stream>>>(*args);
    result = cudaGetLastError();
  }
};

// Loads a kernel into the current context (cudaFuncGetAttributes does, under lazy loading) and
// notes how many of its blocks an SM holds (a hint only: if that fails, its error is cleared and
// the launch guesses).
struct Load {
  cudaError_t result = cudaSuccess;
  template <class D, class Op>
  void operator()() {
    cudaFuncAttributes attr;
    const cudaError_t e = cudaFuncGetAttributes(&attr, reduceKernel<D, Op>);
    int perSm = 0;
    if (e == cudaSuccess) {
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, reduceKernel<D, Op>, kThreads, 0) == cudaSuccess &&
          perSm > 0)
        residentBlocks<D, Op>.store(perSm, std::memory_order_relaxed);
      else
        (void)cudaGetLastError();
    }
    if (result == cudaSuccess) result = e;
  }
};

}  // namespace

bool built() { return true; }

int reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count, const ReduceSpec& spec,
           void* stream) {
  if (nsrc < 1 || nsrc > kMaxSources || ndst < 1 || ndst > kMaxDests) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  Args a;
  memset(&a, 0, sizeof a);
  a.nsrc = nsrc;
  a.ndst = ndst;
  a.count = count;
  const size_t esz = dataTypeSize(spec.dtype);
  if (esz == 0) return cudaErrorInvalidValue;
  uintptr_t ors = 0;
  const uintptr_t mis = reinterpret_cast<uintptr_t>(srcs[0]) % kPack;
  bool same = true;
  for (int k = 0; k < nsrc; ++k) {
    a.srcs[k] = srcs[k];
    ors |= reinterpret_cast<uintptr_t>(srcs[k]);
    same &= reinterpret_cast<uintptr_t>(srcs[k]) % kPack == mis;
  }
  for (int j = 0; j < ndst; ++j) {
    a.dsts[j] = dsts[j];
    ors |= reinterpret_cast<uintptr_t>(dsts[j]);
    same &= reinterpret_cast<uintptr_t>(dsts[j]) % kPack == mis;
  }
  a.elementAligned = ors % esz == 0;
  if (same && a.elementAligned) {
    size_t head = ((kPack - mis) % kPack) / esz;
    if (head > count) head = count;
    a.head = head;
    a.packs = (count - head) * esz / kPack;
  } else {
    a.head = count;
    a.packs = 0;
  }
  a.p.premul = spec.premulFirst;
  if (isFloating(spec.dtype)) a.p.mulF = spec.scalar.f;
  else a.p.mulI = spec.scalar.i;
  a.p.divide = spec.divide;
  a.p.divisor = spec.divisor;
  const size_t rest = count - a.head - a.packs * (kPack / esz);
  Launch l{&a, static_cast<cudaStream_t>(stream), a.packs + (a.head > rest ? a.head : rest)};
  if (!el::dispatch(static_cast<int>(spec.dtype), static_cast<int>(spec.op), l)) return cudaErrorInvalidValue;
  return l.result;
}

int preload() {
  Load l;
  for (int t = 0; t < kNumDataTypes; ++t)
    for (int op = 0; op < 4; ++op) el::dispatch(t, op, l);
  cudaFuncAttributes attr;
  const cudaError_t e = cudaFuncGetAttributes(&attr, waitFlagKernel);
  return l.result != cudaSuccess ? l.result : e;
}

int waitFlag(const volatile uint32_t* flag, uint32_t value, void* stream) {
  waitFlagKernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(flag, value);
  return cudaGetLastError();
}

}  // namespace hora::kernels::cuda
