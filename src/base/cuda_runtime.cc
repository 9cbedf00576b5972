// The CUDA runtime's backend of base/cuda.h (a CUDA build; elsewhere runtimeBackend() says why
// there is none).
#include <chrono>
#include <cstring>
#include <thread>

#include "base/cuda_backend.h"
#include "base/error.h"

#if HORA_CUDA
#include <cuda.h>
#include <cuda_runtime.h>

#include "kernels/cuda/reduce.h"
#endif

namespace hora::cuda {

#if HORA_CUDA

namespace {

std::string errText(cudaError_t e) { return format("%s: %s", cudaGetErrorName(e), cudaGetErrorString(e)); }

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  fail(Errc::Cuda, "%s failed: %s", what, errText(e).c_str());
}

cudaStream_t S(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t E(void* e) { return static_cast<cudaEvent_t>(e); }

// The host function that stands in for a stream wait where the driver has no memory operations.
struct FlagWait {
  const volatile uint32_t* flag;
  uint32_t value;
};
void CUDART_CB waitOnHost(void* arg) {
  FlagWait* w = static_cast<FlagWait*>(arg);
  while (static_cast<int32_t>(*w->flag - w->value) < 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
  delete w;
}

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
using DeviceAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);

class Runtime final : public Backend {
 public:
  // cuStreamWaitValue32 from the driver, where it has stream memory operations.
  WaitValue32 waitValue32 = nullptr;

  int deviceOf(const void* p) override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
  }
  bool isStream(const void* s) override {
    unsigned flags = 0;
    if (cudaStreamGetFlags(static_cast<cudaStream_t>(const_cast<void*>(s)), &flags) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return true;
  }
  int currentDevice() override {
    int d = -1;
    return cudaGetDevice(&d) == cudaSuccess ? d : -1;
  }
  void setDevice(int dev) override { check(cudaSetDevice(dev), "cudaSetDevice"); }
  void* hostAlloc(size_t bytes) override {
    void* p = nullptr;
    check(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc");
    return p;
  }
  void hostFree(void* p) override { cudaFreeHost(p); }
  void* deviceAlloc(size_t bytes) override {
    void* p = nullptr;
    check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    return p;
  }
  void deviceFree(void* p) override { cudaFree(p); }
  void copyAsync(void* dst, const void* src, size_t bytes, void* stream) override {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S(stream)), "cudaMemcpyAsync");
  }
  void* streamCreate() override {
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return s;
  }
  void streamDestroy(void* s) override { cudaStreamDestroy(S(s)); }
  void streamSync(void* s) override { check(cudaStreamSynchronize(S(s)), "cudaStreamSynchronize"); }
  void streamSyncQuiet(void* s) override {
    if (cudaStreamSynchronize(S(s)) != cudaSuccess) cudaGetLastError();
  }
  bool streamDone(void* s) override {
    const cudaError_t r = cudaStreamQuery(S(s));
    if (r == cudaErrorNotReady) return false;
    check(r, "the stream's work (cudaStreamQuery)");
    return true;
  }
  void* eventCreate() override {
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return e;
  }
  void eventDestroy(void* e) override { cudaEventDestroy(E(e)); }
  void eventRecord(void* e, void* stream) override { check(cudaEventRecord(E(e), S(stream)), "cudaEventRecord"); }
  bool eventDone(void* e) override {
    const cudaError_t r = cudaEventQuery(E(e));
    if (r == cudaErrorNotReady) return false;
    check(r, "the stream's work (cudaEventQuery)");
    return true;
  }
  void streamWaitEvent(void* stream, void* e) override {
    check(cudaStreamWaitEvent(S(stream), E(e), 0), "cudaStreamWaitEvent");
  }
  void streamWaitFlag(void* stream, const volatile uint32_t* flag, uint32_t value) override {
    if (waitValue32) {
      const CUresult r = waitValue32(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag), value,
                                     CU_STREAM_WAIT_VALUE_GEQ);
      if (r == CUDA_SUCCESS) return;
      fail(Errc::Cuda, "cuStreamWaitValue32 failed: CUresult %d", static_cast<int>(r));
    }
    check(cudaLaunchHostFunc(S(stream), waitOnHost, new FlagWait{flag, value}), "cudaLaunchHostFunc");
  }
  void reduceAsync(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                   const kernels::ReduceSpec& spec, void* stream) override {
    check(static_cast<cudaError_t>(kernels::cuda::reduce(dsts, ndst, srcs, nsrc, count, spec, stream)),
          "the reduction kernel's launch");
  }
  IpcHandle ipcHandle(void* devicePtr) override {
    cudaIpcMemHandle_t h;
    check(cudaIpcGetMemHandle(&h, devicePtr), "cudaIpcGetMemHandle");
    IpcHandle out;
    static_assert(sizeof h <= sizeof out.bytes, "cudaIpcMemHandle_t is 64 bytes");
    memcpy(out.bytes, &h, sizeof h);
    return out;
  }
  void* ipcOpen(const IpcHandle& in) override {
    cudaIpcMemHandle_t h;
    memcpy(&h, in.bytes, sizeof h);
    void* p = nullptr;
    check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
    return p;
  }
  void ipcClose(void* p) override { cudaIpcCloseMemHandle(p); }
  bool canAccessPeer(int dev, int peer) override {
    if (dev == peer) return true;
    int ok = 0;
    return cudaDeviceCanAccessPeer(&ok, dev, peer) == cudaSuccess && ok;
  }
  void enablePeer(int peer) override {
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess || dev == peer) return;
    const cudaError_t r = cudaDeviceEnablePeerAccess(peer, 0);
    if (r == cudaErrorPeerAccessAlreadyEnabled) {
      cudaGetLastError();
      return;
    }
    check(r, "cudaDeviceEnablePeerAccess");
  }
};

}  // namespace

Backend* runtimeBackend(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *why = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
               ? format("no usable CUDA driver or device on this machine (%s)", errText(e).c_str())
               : format("the CUDA runtime failed to start (%s)", errText(e).c_str());
    return nullptr;
  }
  if (n == 0) {
    *why = "no CUDA device on this machine";
    return nullptr;
  }
  static Runtime* rt = new Runtime();  // never destroyed: streams may outlive exit
  void* fn = nullptr;
  void* attrFn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  int dev = 0, nor = 0, memops = 0;
  cudaGetDevice(&dev);
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess && fn &&
      cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &attrFn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      attrFn) {
    const auto attr = reinterpret_cast<DeviceAttribute>(attrFn);
    attr(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
    attr(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev);
    if (nor || memops) rt->waitValue32 = reinterpret_cast<WaitValue32>(fn);
  }
  cudaGetLastError();
  return rt;
}

#else  // no CUDA in this build

Backend* runtimeBackend(std::string* why) {
  *why = "this build of libhora has no CUDA (meson option cuda)";
  return nullptr;
}

#endif

}  // namespace hora::cuda
