#include "base/cuda.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "base/error.h"

#if HORA_CUDA
#include <cuda.h>
#include <cuda_runtime.h>
#endif

namespace hora::cuda {

bool built() { return HORA_CUDA + 0 != 0; }

#if HORA_CUDA

namespace {

std::string errText(cudaError_t e) {
  return format("%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
}

struct State {
  bool usable = false;
  std::string why;
  // cuStreamWaitValue32 from the driver, when it has stream memory operations.
  CUresult (*waitValue32)(CUstream, CUdeviceptr, cuuint32_t, unsigned) = nullptr;
};

const State& state() {
  static const State s = [] {
    State st;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky: clear it
      st.why = e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice
                   ? format("no usable CUDA driver or device on this machine (%s)", errText(e).c_str())
                   : format("the CUDA runtime failed to start (%s)", errText(e).c_str());
      return st;
    }
    if (n == 0) {
      st.why = "no CUDA device on this machine";
      return st;
    }
    st.usable = true;
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess && fn) {
      int dev = 0, ok = 0;
      cudaGetDevice(&dev);
      void* afn = nullptr;
      if (cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &afn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
          afn) {
        const auto attr = reinterpret_cast<CUresult (*)(int*, CUdevice_attribute, CUdevice)>(afn);
        attr(&ok, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);  // set where memory ops are on
        int memops = 0;
        attr(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev);
        ok |= memops;
      }
      if (ok) st.waitValue32 = reinterpret_cast<CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned)>(fn);
    }
    cudaGetLastError();
    return st;
  }();
  return s;
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

}  // namespace

bool usable() { return state().usable; }
const std::string& unusableWhy() { return state().why; }

void check(int err, const char* what) {
  if (err == cudaSuccess) return;
  const cudaError_t e = static_cast<cudaError_t>(err);
  fail(Errc::Cuda, "%s failed: %s", what, errText(e).c_str());
}

int deviceOf(const void* p) {
  if (!p || !usable()) return -1;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}

bool isStream(const void* s) {
  if (!s || !usable()) return false;
  unsigned flags = 0;
  if (cudaStreamGetFlags(static_cast<cudaStream_t>(const_cast<void*>(s)), &flags) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

int currentDevice() {
  if (!usable()) return -1;
  int d = -1;
  return cudaGetDevice(&d) == cudaSuccess ? d : -1;
}

void setDevice(int dev) { check(cudaSetDevice(dev), "cudaSetDevice"); }

void* hostAlloc(size_t bytes) {
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc");
  return p;
}
void hostFree(void* p) {
  if (p) cudaFreeHost(p);
}
void* deviceAlloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  return p;
}
void deviceFree(void* p) {
  if (p) cudaFree(p);
}
void copyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, S(stream)), "cudaMemcpyAsync");
}

void* streamCreate() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return s;
}
void streamDestroy(void* s) {
  if (s) cudaStreamDestroy(S(s));
}
void streamSync(void* s) { check(cudaStreamSynchronize(S(s)), "cudaStreamSynchronize"); }
void streamSyncQuiet(void* s) {
  if (cudaStreamSynchronize(S(s)) != cudaSuccess) cudaGetLastError();
}
bool streamDone(void* s) {
  const cudaError_t r = cudaStreamQuery(S(s));
  if (r == cudaErrorNotReady) return false;
  check(r, "the stream's work (cudaStreamQuery)");
  return true;
}
void* eventCreate() {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return e;
}
void eventDestroy(void* e) {
  if (e) cudaEventDestroy(E(e));
}
void eventRecord(void* e, void* stream) { check(cudaEventRecord(E(e), S(stream)), "cudaEventRecord"); }
bool eventDone(void* e) {
  const cudaError_t r = cudaEventQuery(E(e));
  if (r == cudaErrorNotReady) return false;
  check(r, "the stream's work (cudaEventQuery)");
  return true;
}
void streamWaitEvent(void* stream, void* e) { check(cudaStreamWaitEvent(S(stream), E(e), 0), "cudaStreamWaitEvent"); }

void streamWaitFlag(void* stream, const volatile uint32_t* flag, uint32_t value) {
  if (const auto wait = state().waitValue32) {
    const CUresult r = wait(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag), value,
                            CU_STREAM_WAIT_VALUE_GEQ);
    if (r == CUDA_SUCCESS) return;
    fail(Errc::Cuda, "cuStreamWaitValue32 failed: CUresult %d", static_cast<int>(r));
  }
  check(cudaLaunchHostFunc(S(stream), waitOnHost, new FlagWait{flag, value}), "cudaLaunchHostFunc");
}

IpcHandle ipcHandle(void* devicePtr) {
  cudaIpcMemHandle_t h;
  check(cudaIpcGetMemHandle(&h, devicePtr), "cudaIpcGetMemHandle");
  IpcHandle out;
  static_assert(sizeof h <= sizeof out.bytes, "cudaIpcMemHandle_t is 64 bytes");
  memcpy(out.bytes, &h, sizeof h);
  return out;
}
void* ipcOpen(const IpcHandle& in) {
  cudaIpcMemHandle_t h;
  memcpy(&h, in.bytes, sizeof h);
  void* p = nullptr;
  check(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  return p;
}
void ipcClose(void* p) {
  if (p) cudaIpcCloseMemHandle(p);
}
bool canAccessPeer(int dev, int peer) {
  if (dev == peer) return true;
  int ok = 0;
  return cudaDeviceCanAccessPeer(&ok, dev, peer) == cudaSuccess && ok;
}
void enablePeer(int peer) {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess || dev == peer) return;
  const cudaError_t r = cudaDeviceEnablePeerAccess(peer, 0);
  if (r == cudaErrorPeerAccessAlreadyEnabled) {
    cudaGetLastError();
    return;
  }
  check(r, "cudaDeviceEnablePeerAccess");
}

#else  // no CUDA in this build

namespace {
[[noreturn]] void none() { fail(Errc::Cuda, "this build of libhora has no CUDA (meson option cuda)"); }
}  // namespace

bool usable() { return false; }
const std::string& unusableWhy() {
  static const std::string why = "this build of libhora has no CUDA (meson option cuda)";
  return why;
}
void check(int err, const char* what) {
  if (err) fail(Errc::Cuda, "%s failed: error %d", what, err);
}
int deviceOf(const void*) { return -1; }
bool isStream(const void*) { return false; }
int currentDevice() { return -1; }
void setDevice(int) { none(); }
void* hostAlloc(size_t) { none(); }
void hostFree(void*) {}
void* deviceAlloc(size_t) { none(); }
void deviceFree(void*) {}
void copyAsync(void*, const void*, size_t, void*) { none(); }
void* streamCreate() { none(); }
void streamDestroy(void*) {}
void streamSync(void*) { none(); }
void streamSyncQuiet(void*) {}
bool streamDone(void*) { none(); }
void* eventCreate() { none(); }
void eventDestroy(void*) {}
void eventRecord(void*, void*) { none(); }
bool eventDone(void*) { none(); }
void streamWaitEvent(void*, void*) { none(); }
void streamWaitFlag(void*, const volatile uint32_t*, uint32_t) { none(); }
IpcHandle ipcHandle(void*) { none(); }
void* ipcOpen(const IpcHandle&) { none(); }
void ipcClose(void*) {}
bool canAccessPeer(int, int) { return false; }
void enablePeer(int) { none(); }
#endif

}  // namespace hora::cuda
