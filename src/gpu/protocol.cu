// The device-initiated protocol (protocol.h) as a CUDA kernel: one launch per call, `blocks`
// blocks of kThreads threads, each block a channel of its own. Thread 0 of a block waits on the
// counters; every thread moves data. Reads of the regions bypass L1 (__ldcg): a slot is reused
// every second chunk, and another SM (a rank as a thread on the same GPU) or another GPU wrote
// it. The element arithmetic is kernels/cuda/element.h's, bit for bit the CPU kernels'.
#include <cuda_runtime.h>

#include <cstring>

#include "gpu/protocol_host.h"
#include "kernels/cuda/element.h"

namespace hora::gpu {
namespace {

namespace el = kernels::element;

constexpr int kThreads = 512;

template <class E>
__device__ __forceinline__ E loadCg(const void* p) {
  E v;
  if constexpr (sizeof(E) == 1) {
    const unsigned char b = __ldcg(static_cast<const unsigned char*>(p));
    memcpy(&v, &b, 1);
  } else if constexpr (sizeof(E) == 2) {
    const unsigned short b = __ldcg(static_cast<const unsigned short*>(p));
    memcpy(&v, &b, 2);
  } else if constexpr (sizeof(E) == 4) {
    const unsigned int b = __ldcg(static_cast<const unsigned int*>(p));
    memcpy(&v, &b, 4);
  } else {
    const unsigned long long b = __ldcg(static_cast<const unsigned long long*>(p));
    memcpy(&v, &b, 8);
  }
  return v;
}

template <class D, class Op>
struct DevX {
  using E = typename D::E;
  el::Params p;

  __device__ int tid() const { return static_cast<int>(threadIdx.x); }
  __device__ int nthreads() const { return static_cast<int>(blockDim.x); }
  __device__ void sync() const { __syncthreads(); }
  __device__ bool agree(bool ok) const { return __syncthreads_and(ok ? 1 : 0) != 0; }
  // Thread 0's v, in every thread.
  __device__ uint64_t share(uint64_t v) const {
    __shared__ uint64_t shared;
    if (threadIdx.x == 0) shared = v;
    __syncthreads();
    const uint64_t out = shared;
    __syncthreads();
    return out;
  }

  __device__ void copy(void* dst, const void* src, size_t bytes) const {
    if (!bytes || dst == src) return;
    char* o = static_cast<char*>(dst);
    const char* i = static_cast<const char*>(src);
    size_t done = 0;
    if (((reinterpret_cast<uintptr_t>(o) | reinterpret_cast<uintptr_t>(i)) & 15) == 0) {
      const size_t packs = bytes / 16;
      for (size_t k = threadIdx.x; k < packs; k += blockDim.x)
        reinterpret_cast<uint4*>(o)[k] = __ldcg(reinterpret_cast<const uint4*>(i) + k);
      done = packs * 16;
    }
    for (size_t k = done + threadIdx.x; k < bytes; k += blockDim.x) o[k] = static_cast<char>(__ldcg(reinterpret_cast<const unsigned char*>(i) + k));
  }

  // Into m destinations: 16 bytes of every source per thread and step where every pointer is
  // 16-aligned (the elements after the last whole pack one at a time), else one element at a
  // time; each pack is loaded from every source, then stored to each destination (one that is
  // also a source is read before it is written).
  __device__ void reduceN(void* const* dsts, int m, const void* const* srcs, int n, size_t count, const Desc&) const {
    constexpr size_t V = 16 / sizeof(E);
    union Pack {
      uint4 v;
      E e[V];
    };
    uintptr_t ors = 0;
    for (int k = 0; k < m; ++k) ors |= reinterpret_cast<uintptr_t>(dsts[k]);
    for (int k = 0; k < n; ++k) ors |= reinterpret_cast<uintptr_t>(srcs[k]);
    const size_t packs = (ors & 15) == 0 ? count / V : 0;
    for (size_t q = threadIdx.x; q < packs; q += blockDim.x) {
      Pack in;
      in.v = __ldcg(static_cast<const uint4*>(srcs[0]) + q);
      typename D::C acc[V];
#pragma unroll
      for (size_t j = 0; j < V; ++j) acc[j] = el::first<D>(in.e[j], p);
      for (int k = 1; k < n; ++k) {
        in.v = __ldcg(static_cast<const uint4*>(srcs[k]) + q);
#pragma unroll
        for (size_t j = 0; j < V; ++j) acc[j] = el::combine<D, Op>(acc[j], in.e[j]);
      }
      Pack out;
#pragma unroll
      for (size_t j = 0; j < V; ++j) out.e[j] = el::last<D>(acc[j], p);
      for (int k = 0; k < m; ++k) static_cast<uint4*>(dsts[k])[q] = out.v;
    }
    for (size_t i = packs * V + threadIdx.x; i < count; i += blockDim.x) {
      typename D::C acc = el::first<D>(loadCg<E>(static_cast<const E*>(srcs[0]) + i), p);
      for (int k = 1; k < n; ++k) acc = el::combine<D, Op>(acc, loadCg<E>(static_cast<const E*>(srcs[k]) + i));
      const E out = el::last<D>(acc, p);
      for (int k = 0; k < m; ++k) static_cast<E*>(dsts[k])[i] = out;
    }
  }
  __device__ void reduce(void* dst, const void* const* srcs, int n, size_t count, const Desc& d) const {
    reduceN(&dst, 1, srcs, n, count, d);
  }
  __device__ void reduce2(void* a, void* b, const void* const* srcs, int n, size_t count, const Desc& d) const {
    void* dsts[2] = {a, b};
    reduceN(dsts, a == b ? 1 : 2, srcs, n, count, d);
  }

  __device__ static uint64_t load64(const uint64_t* q) { return *reinterpret_cast<const volatile uint64_t*>(q); }
  __device__ static void store64(uint64_t* q, uint64_t v) { *reinterpret_cast<volatile uint64_t*>(q) = v; }
  __device__ static uint32_t load32(const uint32_t* q) { return *reinterpret_cast<const volatile uint32_t*>(q); }
  __device__ static void store32(uint32_t* q, uint32_t v) { *reinterpret_cast<volatile uint32_t*>(q) = v; }
  // On this rank's own device memory: an atomic among its blocks.
  __device__ static bool claim(uint64_t* q) { return atomicCAS(reinterpret_cast<unsigned long long*>(q), 0ull, 1ull) == 0ull; }
  __device__ static void fenceSystem() { __threadfence_system(); }
  __device__ static void fenceDevice() { __threadfence(); }
  __device__ static uint64_t now() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  }
  __device__ static void pause(unsigned spins) {
    if (spins > 64) __nanosleep(spins > 4096 ? 1000 : 100);
  }
  __device__ static uint32_t read32(const uint8_t* q) {
    if ((reinterpret_cast<uintptr_t>(q) & 3) == 0) return *reinterpret_cast<const uint32_t*>(q);
    return static_cast<uint32_t>(q[0]) | static_cast<uint32_t>(q[1]) << 8 | static_cast<uint32_t>(q[2]) << 16 |
           static_cast<uint32_t>(q[3]) << 24;
  }
  __device__ static void write32(uint8_t* q, uint32_t v) {
    if ((reinterpret_cast<uintptr_t>(q) & 3) == 0) {
      *reinterpret_cast<uint32_t*>(q) = v;
      return;
    }
    for (int k = 0; k < 4; ++k) q[k] = static_cast<uint8_t>(v >> (8 * k));
  }
};

template <class D, class Op>
__global__ void __launch_bounds__(kThreads) protocolKernel(const __grid_constant__ Desc d) {
  DevX<D, Op> x;
  x.p.divide = d.divide;
  x.p.divisor = d.divisor;
  Run<DevX<D, Op>>{x, d, static_cast<int>(blockIdx.x)}();
}

template <class D, class Op>
__global__ void __launch_bounds__(kThreads) batchKernel(const __grid_constant__ Batch t) {
  DevX<D, Op> x;
  // (Every reducing call of a batch has one type and op: this kernel's.)
  for (int i = 0; i < t.ncalls; ++i)
    if (!isP2p(t.calls[i].coll)) {
      x.p.divide = t.calls[i].divide;
      x.p.divisor = t.calls[i].divisor;
      break;
    }
  runBatch(x, t, static_cast<int>(blockIdx.x));
}

struct LaunchBatch {
  const Batch* t;
  cudaStream_t stream;
  cudaError_t result = cudaErrorInvalidValue;
  template <class D, class Op>
  void operator()() {
    batchKernel<D, Op><<<static_cast<unsigned>(t->blocks), kThreads, 0, stream>>>(*t);
    result = cudaGetLastError();
  }
};

struct Launch {
  const Desc* d;
  cudaStream_t stream;
  cudaError_t result = cudaErrorInvalidValue;
  template <class D, class Op>
  void operator()() {
    protocolKernel<D, Op><<<static_cast<unsigned>(d->blocks), kThreads, 0, stream>>>(*d);
    result = cudaGetLastError();
  }
};

struct Load {
  cudaError_t result = cudaSuccess;
  template <class D, class Op>
  void operator()() {
    cudaFuncAttributes attr;
    cudaError_t e = cudaFuncGetAttributes(&attr, protocolKernel<D, Op>);
    if (result == cudaSuccess) result = e;
    e = cudaFuncGetAttributes(&attr, batchKernel<D, Op>);
    if (result == cudaSuccess) result = e;
  }
};

}  // namespace

int preload() {
  Load l;
  for (int t = 0; t < 12; ++t)
    for (int op = 0; op < 4; ++op) el::dispatch(t, op, l);
  return l.result;
}

int launch(const Desc& d, void* stream) {
  if (d.blocks < 1 || d.blocks > d.layout.blocks || d.layout.blocks > kMaxBlocks || d.nranks < 1 || d.nranks > kMaxRanks) return cudaErrorInvalidValue;
  Launch l{&d, static_cast<cudaStream_t>(stream)};
  if (!el::dispatch(d.dtype, d.op, l)) return cudaErrorInvalidValue;
  return l.result;
}

int launch(const Batch& t, void* stream) {
  if (t.ncalls < 1 || t.ncalls > kMaxCalls || t.blocks < 1 || t.blocks > t.calls[0].layout.blocks ||
      t.calls[0].layout.blocks > kMaxBlocks || t.calls[0].nranks < 1 || t.calls[0].nranks > kMaxRanks)
    return cudaErrorInvalidValue;
  // The kernel of the batch's reductions (a batch of copies only: any).
  int dtype = t.calls[0].dtype, op = t.calls[0].op;
  for (int i = 0; i < t.ncalls; ++i)
    if (!isP2p(t.calls[i].coll)) {
      dtype = t.calls[i].dtype;
      op = t.calls[i].op;
      break;
    }
  LaunchBatch l{&t, static_cast<cudaStream_t>(stream)};
  if (!el::dispatch(dtype, op, l)) return cudaErrorInvalidValue;
  return l.result;
}

}  // namespace hora::gpu
