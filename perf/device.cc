#include "device.h"

#include <cstdio>
#include <cstdlib>

#if HORA_CUDA
#include <cuda_runtime.h>
#endif

namespace hperf::dev {

#if HORA_CUDA
namespace {
void ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "perf: %s failed: %s\n", what, cudaGetErrorString(e));
  std::fflush(nullptr);
  std::exit(1);
}
}  // namespace

int gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}
std::string why() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return cudaGetErrorString(e);
  return n ? "" : "no CUDA device";
}
void* alloc(size_t bytes) {
  void* p = nullptr;
  ok(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  ok(cudaMemset(p, 0, bytes ? bytes : 1), "cudaMemset");
  return p;
}
void release(void* p) { cudaFree(p); }
void toDevice(void* dst, const void* src, size_t bytes) { ok(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy"); }
void toHost(void* dst, const void* src, size_t bytes) { ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy"); }
horaStream_t newStream() {
  cudaStream_t s = nullptr;
  ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  return reinterpret_cast<horaStream_t>(s);
}
void sync(horaStream_t s) { ok(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(s)), "cudaStreamSynchronize"); }
void destroyStream(horaStream_t s) { cudaStreamDestroy(reinterpret_cast<cudaStream_t>(s)); }
#else
int gpus() { return 0; }
std::string why() { return "the perf tools were built without CUDA"; }
void* alloc(size_t) { std::abort(); }
void release(void*) {}
void toDevice(void*, const void*, size_t) { std::abort(); }
void toHost(void*, const void*, size_t) { std::abort(); }
horaStream_t newStream() { return nullptr; }
void sync(horaStream_t) {}
void destroyStream(horaStream_t) {}
#endif

}  // namespace hperf::dev
