// The CUDA runtime's backend of gpu/cuda.h (a CUDA build; elsewhere runtimeBackend() says why
// there is none).
#include <cstring>
#include <atomic>
#include <mutex>

#include "gpu/cuda_backend.h"
#include "base/error.h"

#if HORA_CUDA
#include <cuda.h>
#include <cuda_runtime.h>

#include "gpu/protocol_host.h"
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

using PointerGetAttributes = CUresult (*)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);

class Runtime final : public Backend {
 public:
  // cuPointerGetAttributes from the driver: unlike cudaPointerGetAttributes it makes no
  // context, so a process that only ever passes host memory never gets one.
  PointerGetAttributes pointerAttributes = nullptr;
  using WaitValue = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
  WaitValue waitValue = nullptr;  // cuStreamWaitValue32, where the driver has it
  std::atomic<bool> waitValueFailed{false};
  static constexpr int kMaxDevices = 64;
  std::mutex loadMu_;
  bool loaded_[kMaxDevices] = {};

  int deviceOf(const void* p) override {
    CUpointer_attribute which[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_IS_MANAGED};
    unsigned type = 0;
    int ordinal = -1;
    int managed = 0;  // (a bool in the driver's ABI; read as its first byte below)
    void* data[3] = {&type, &ordinal, &managed};
    managed = 0;
    if (pointerAttributes(3, which, data, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return -1;
    const bool isManaged = (managed & 0xff) != 0;
    return type == CU_MEMORYTYPE_DEVICE || isManaged ? ordinal : -1;
  }
  bool isStream(const void* s) override {
    cudaStream_t stream = static_cast<cudaStream_t>(const_cast<void*>(s));
    // First a question a stream being captured may be asked, then (not capturing) the usual
    // probe: on an H200 a captured collective's launch failed, 'operation failed due to a
    // previous error during capture', when this asked cudaStreamGetFlags first.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (capture != cudaStreamCaptureStatusNone) return true;
    unsigned flags = 0;
    if (cudaStreamGetFlags(stream, &flags) == cudaSuccess) return true;
    cudaGetLastError();
    return false;
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
  void deviceSync() override { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
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
  int streamDevice(void* stream) override {
    int dev = -1;
    check(cudaStreamGetDevice(S(stream), &dev), "cudaStreamGetDevice");
    return dev;
  }
  void loadKernels() override {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    if (dev < 0 || dev >= kMaxDevices) fail(Errc::Cuda, "CUDA device %d: more devices than Hora handles", dev);
    std::lock_guard<std::mutex> lock(loadMu_);
    if (loaded_[dev]) return;
    check(static_cast<cudaError_t>(kernels::cuda::preload()), "loading the CUDA kernels (cudaFuncGetAttributes)");
    check(static_cast<cudaError_t>(gpu::preload()), "loading the collective kernels (cudaFuncGetAttributes)");
    loaded_[dev] = true;
  }
  void streamWaitFlag(void* stream, const volatile uint32_t* flag, uint32_t value, bool kernel) override {
    void* onDevice = nullptr;
    check(cudaHostGetDevicePointer(&onDevice, const_cast<uint32_t*>(flag), 0), "cudaHostGetDevicePointer");
    // The stream's front end waits on the word (cuStreamWaitValue32): no kernel spins meanwhile,
    // so ranks of several processes that share a GPU (and so take turns on it) do not wait out
    // each other's turns: measured on an H200, a hand-off from the host to a stream took 68 us
    // this way and 257 us through a polling kernel with two processes on the GPU (63 us either
    // way with one). The polling kernel where the driver refuses the wait.
    if (!kernel && waitValue && !waitValueFailed.load(std::memory_order_relaxed)) {
      if (waitValue(S(stream), reinterpret_cast<CUdeviceptr>(onDevice), value, CU_STREAM_WAIT_VALUE_GEQ) ==
          CUDA_SUCCESS)
        return;
      waitValueFailed.store(true);
    }
    check(static_cast<cudaError_t>(
              kernels::cuda::waitFlag(static_cast<const volatile uint32_t*>(onDevice), value, stream)),
          "the wait kernel's launch");
  }
  void reduceAsync(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                   const kernels::ReduceSpec& spec, void* stream) override {
    check(static_cast<cudaError_t>(kernels::cuda::reduce(dsts, ndst, srcs, nsrc, count, spec, stream)),
          "the reduction kernel's launch");
  }
  void collectiveAsync(const gpu::Desc& d, void* stream) override {
    check(static_cast<cudaError_t>(gpu::launch(d, stream)), "the collective kernel's launch");
  }
  void batchAsync(const gpu::Batch& t, void* stream) override {
    check(static_cast<cudaError_t>(gpu::launch(t, stream)), "the launch of a group's collective kernel");
  }
  std::string deviceUuid(int dev) override {
    cudaDeviceProp p;
    check(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
    std::string out;
    for (int i = 0; i < 16; ++i) out += format("%02x", static_cast<unsigned char>(p.uuid.bytes[i]));
    return out;
  }
  void* mappedPointer(void* host) override {
    void* p = nullptr;
    check(cudaHostGetDevicePointer(&p, host, 0), "cudaHostGetDevicePointer");
    return p;
  }
  bool isCapturing(void* stream) override {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    check(cudaStreamIsCapturing(S(stream), &st), "cudaStreamIsCapturing");
    return st != cudaStreamCaptureStatusNone;
  }
  void streamBeginCapture(void* stream) override {
    check(cudaStreamBeginCapture(S(stream), cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
  }
  void* streamEndCapture(void* stream) override {
    cudaGraph_t g = nullptr;
    check(cudaStreamEndCapture(S(stream), &g), "cudaStreamEndCapture");
    cudaGraphExec_t x = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    check(e, "cudaGraphInstantiate");
    return x;
  }
  void graphLaunch(void* graph, void* stream) override {
    check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), S(stream)), "cudaGraphLaunch");
  }
  void graphDestroy(void* graph) override {
    check(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)), "cudaGraphExecDestroy");
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
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !fn) {
    cudaGetLastError();
    *why = "the CUDA driver has no cuPointerGetAttributes";
    return nullptr;
  }
  static Runtime* rt = new Runtime();  // never destroyed: streams may outlive exit
  rt->pointerAttributes = reinterpret_cast<PointerGetAttributes>(fn);
  void* wait = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &wait, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess && wait)
    rt->waitValue = reinterpret_cast<Runtime::WaitValue>(wait);
  else
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
