// gpu/cuda.h: the backend chosen once (by HORA_CUDA, config()), and the calls passed to it.
#include "gpu/cuda.h"

#include <atomic>
#include <mutex>

#include "gpu/cuda_backend.h"
#include "base/error.h"

namespace hora::cuda {

namespace {
std::atomic<Mode> gMode{Mode::Auto};

struct Chosen {
  Backend* backend = nullptr;
  std::string why;
};

const Chosen& chosen() {
  static const Chosen c = [] {
    Chosen x;
    switch (gMode.load()) {
      case Mode::Off: x.why = "HORA_CUDA=off"; break;
      case Mode::Emulate: x.backend = emulatedBackend(); break;
      case Mode::EmulateShared: x.backend = emulatedBackend(); break;
      case Mode::Auto: x.backend = runtimeBackend(&x.why); break;
    }
    return x;
  }();
  return c;
}

Backend& b() {
  Backend* be = chosen().backend;
  if (!be) fail(Errc::Cuda, "CUDA is not usable here: %s", chosen().why.c_str());
  return *be;
}
}  // namespace

void configure(Mode m) { gMode.store(m); }
Mode mode() { return gMode.load(); }
bool usable() { return chosen().backend != nullptr; }
const std::string& unusableWhy() { return chosen().why; }
#if HORA_CUDA
bool built() { return true; }
#else
bool built() { return false; }  // (a build without CUDA: HORA_CUDA undefined)
#endif
bool emulated() { return usable() && (gMode.load() == Mode::Emulate || gMode.load() == Mode::EmulateShared); }
std::string deviceUuid(int dev) {
  if (gMode.load() == Mode::EmulateShared) return "656d756c617465642d73686172656430";  // one for the host
  return b().deviceUuid(dev);
}

int deviceOf(const void* p) { return p && usable() ? b().deviceOf(p) : -1; }
bool isStream(const void* s) { return s && usable() && b().isStream(s); }
int currentDevice() { return usable() ? b().currentDevice() : -1; }
void setDevice(int dev) { b().setDevice(dev); }
void* hostAlloc(size_t bytes) { return b().hostAlloc(bytes); }
void hostFree(void* p) {
  if (p) b().hostFree(p);
}
void* deviceAlloc(size_t bytes) { return b().deviceAlloc(bytes); }
void deviceFree(void* p) {
  if (p) b().deviceFree(p);
}
void copyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes) b().copyAsync(dst, src, bytes, stream);
}
void* streamCreate() { return b().streamCreate(); }
void streamDestroy(void* s) {
  if (s) b().streamDestroy(s);
}
void streamSync(void* s) { b().streamSync(s); }
void deviceSync() { b().deviceSync(); }
void streamSyncQuiet(void* s) {
  if (usable()) b().streamSyncQuiet(s);
}
bool streamDone(void* s) { return b().streamDone(s); }
void* eventCreate() { return b().eventCreate(); }
void eventDestroy(void* e) {
  if (e) b().eventDestroy(e);
}
void eventRecord(void* e, void* stream) { b().eventRecord(e, stream); }
bool eventDone(void* e) { return b().eventDone(e); }
void streamWaitEvent(void* stream, void* e) { b().streamWaitEvent(stream, e); }
int streamDevice(void* stream) { return stream ? b().streamDevice(stream) : b().currentDevice(); }
void loadKernels() { b().loadKernels(); }
void streamWaitFlag(void* stream, const volatile uint32_t* flag, uint32_t value, bool kernel) {
  b().streamWaitFlag(stream, flag, value, kernel);
}
void reduceAsync(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                 const kernels::ReduceSpec& spec, void* stream) {
  if (count) b().reduceAsync(dsts, ndst, srcs, nsrc, count, spec, stream);
}
void collectiveAsync(const gpu::Desc& d, void* stream) { b().collectiveAsync(d, stream); }
void batchAsync(const gpu::Batch& t, void* stream) { b().batchAsync(t, stream); }
void* mappedPointer(void* host) { return b().mappedPointer(host); }
bool isCapturing(void* stream) { return stream && b().isCapturing(stream); }
void streamBeginCapture(void* stream) { b().streamBeginCapture(stream); }
void* streamEndCapture(void* stream) { return b().streamEndCapture(stream); }
void graphLaunch(void* graph, void* stream) { b().graphLaunch(graph, stream); }
void graphDestroy(void* graph) {
  if (graph) b().graphDestroy(graph);
}
IpcHandle ipcHandle(void* devicePtr) { return b().ipcHandle(devicePtr); }
void* ipcOpen(const IpcHandle& h) { return b().ipcOpen(h); }
void ipcClose(void* p) {
  if (p) b().ipcClose(p);
}
bool canAccessPeer(int dev, int peer) { return usable() && b().canAccessPeer(dev, peer); }
void enablePeer(int peer) { b().enablePeer(peer); }

}  // namespace hora::cuda
