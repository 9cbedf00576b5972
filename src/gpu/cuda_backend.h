// The two implementations behind gpu/cuda.h: the CUDA runtime (cuda_runtime.cc) and the
// emulated device (cuda_emulated.cc). Internal to src/gpu/cuda*.cc.
#pragma once
#include <string>

#include "gpu/cuda.h"

namespace hora::cuda {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int deviceOf(const void* p) = 0;
  virtual bool isStream(const void* s) = 0;
  virtual int currentDevice() = 0;
  virtual std::string deviceUuid(int dev) = 0;
  virtual void setDevice(int dev) = 0;
  virtual void* hostAlloc(size_t bytes) = 0;
  virtual void hostFree(void* p) = 0;
  virtual void* deviceAlloc(size_t bytes) = 0;
  virtual void deviceFree(void* p) = 0;
  virtual void copyAsync(void* dst, const void* src, size_t bytes, void* stream) = 0;
  virtual void* streamCreate() = 0;
  virtual void streamDestroy(void* s) = 0;
  virtual void streamSync(void* s) = 0;
  virtual void streamSyncQuiet(void* s) = 0;
  virtual void deviceSync() = 0;
  virtual bool streamDone(void* s) = 0;
  virtual void* eventCreate() = 0;
  virtual void eventDestroy(void* e) = 0;
  virtual void eventRecord(void* e, void* stream) = 0;
  virtual bool eventDone(void* e) = 0;
  virtual void streamWaitEvent(void* stream, void* e) = 0;
  virtual int streamDevice(void* stream) = 0;
  virtual void loadKernels() = 0;
  virtual void streamWaitFlag(void* stream, const volatile uint32_t* flag, uint32_t value, bool kernel) = 0;
  virtual void reduceAsync(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                           const kernels::ReduceSpec& spec, void* stream) = 0;
  virtual void collectiveAsync(const gpu::Desc& d, void* stream) = 0;
  virtual void batchAsync(const gpu::Batch& t, void* stream) = 0;
  virtual void* mappedPointer(void* host) = 0;
  virtual bool isCapturing(void* stream) = 0;
  virtual void streamBeginCapture(void* stream) = 0;
  virtual void* streamEndCapture(void* stream) = 0;
  virtual void graphLaunch(void* graph, void* stream) = 0;
  virtual void graphDestroy(void* graph) = 0;
  virtual IpcHandle ipcHandle(void* devicePtr) = 0;
  virtual void* ipcOpen(const IpcHandle& h) = 0;
  virtual void ipcClose(void* p) = 0;
  virtual bool canAccessPeer(int dev, int peer) = 0;
  virtual void enablePeer(int peer) = 0;
};

// The CUDA runtime's backend, or null with the reason (no CUDA in this build, no driver, no
// device).
Backend* runtimeBackend(std::string* why);
Backend* emulatedBackend();

}  // namespace hora::cuda
