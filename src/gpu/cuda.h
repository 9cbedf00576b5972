// The CUDA runtime as the library uses it, behind functions that include no CUDA header, so
// that the rest of the library compiles the same with or without CUDA. A build without CUDA
// (meson option `cuda`), or a machine without a driver or a GPU, answers usable() false with
// the reason, and nothing else here is called then. Every failure of the runtime throws
// hora::Error with Errc::Cuda (horaUnhandledCudaError) and the runtime's own name and text.
//
// The runtime is linked statically (libcudart_static) and loads the driver when first asked:
// libhora loads on any machine, and only a communicator that meets a device pointer or a CUDA
// stream asks.
//
// Behind these functions is one of two backends (cuda_backend.h): the CUDA runtime, or, for
// testing the library's device paths on machines without a GPU (HORA_CUDA=emulate), an emulated
// device: one "GPU" whose memory is shared host memory (so that CUDA IPC works between
// processes), whose streams are threads that run their work in order, a little late, and whose
// kernels are the CPU kernels.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cpu/reduce.h"

namespace hora::gpu {
struct Desc;
struct Batch;
}

namespace hora::cuda {

// HORA_CUDA: auto (the runtime where it is usable), off (never: every pointer is host memory and
// no driver is loaded), emulate (the emulated device, each process's its own), emulate-shared (the
// emulated device, one GPU that every process of the host shares, as processes time-slicing one
// GPU). Set before the first use (config()).
enum class Mode { Auto, Off, Emulate, EmulateShared };
void configure(Mode m);
Mode mode();

// A backend is there: built with CUDA, a driver and a device (or emulated). Asked once.
bool usable();
// Why not, when !usable(): "this build has no CUDA (meson option cuda)", "no CUDA driver on this
// machine (cudaErrorInsufficientDriver: ...)", ...
const std::string& unusableWhy();
bool built();  // this build has the CUDA runtime and kernels
bool emulated();

// The device of a device (or managed) allocation p points into, else -1: host memory, memory
// CUDA does not know, or CUDA unusable. Pinned host memory is host memory.
int deviceOf(const void* p);
// Whether s is a CUDA stream of this process (not a host stream; only asked when usable()).
bool isStream(const void* s);
int currentDevice();  // -1 when unusable
// The GPU's UUID (16 bytes, as hex): equal for two processes exactly when they use one GPU.
std::string deviceUuid(int dev);
void setDevice(int dev);

// Memory.
void* hostAlloc(size_t bytes);  // pinned, portable, mapped
void hostFree(void* p);
void* deviceAlloc(size_t bytes);
void deviceFree(void* p);
// Copies in `stream`'s order (null: the legacy default stream); any kinds of memory.
void copyAsync(void* dst, const void* src, size_t bytes, void* stream);

// Streams and events.
void* streamCreate();  // non-blocking (no implicit order with the legacy default stream)
void streamDestroy(void* s);
void streamSync(void* s);
void streamSyncQuiet(void* s);  // ignoring (and clearing) any error
// Waits for every stream of the current device (cudaDeviceSynchronize; for tests: programs do this).
void deviceSync();
bool streamDone(void* s);       // all its work finished (throws its error, if any)
void* eventCreate();  // without timing
void eventDestroy(void* e);
void eventRecord(void* e, void* stream);
bool eventDone(void* e);  // throws the error of the work before it, if any
void streamWaitEvent(void* stream, void* e);
int streamDevice(void* stream);  // the device of a CUDA stream (null: the current device)
// Loads the reduction and wait kernels into the current device's context (once per device and
// process). Under CUDA's lazy loading a kernel's first launch may wait for the whole device, so
// a launch from a communicator's worker while a stream waits for that worker (streamWaitFlag)
// would never return: call this in the caller's thread before any stream waits on a worker.
void loadKernels();
// Makes the work queued on `stream` after this wait until the 32-bit word at `flag` (pinned
// host memory from hostAlloc) is at least `value`, in wrap-around order: the stream's own wait
// on memory (cuStreamWaitValue32), or with `kernel` (or where the driver refuses that) a
// one-thread kernel on the stream that polls the word. Either holds the stream's hardware queue
// until the word is set; the kernel also holds the GPU's turn of this process while it polls.
void streamWaitFlag(void* stream, const volatile uint32_t* flag, uint32_t value, bool kernel);
// Queues kernels::reduce on device memory (kernels/cuda) in `stream`'s order.
void reduceAsync(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count,
                 const kernels::ReduceSpec& spec, void* stream);

// Queues a device-initiated collective (gpu/protocol.h: the kernel that moves, reduces and
// synchronises through the ranks' mapped regions) on `stream`; its failures are written to
// d.status (host-mapped memory from hostAlloc), not thrown.
void collectiveAsync(const gpu::Desc& d, void* stream);
// The same for several calls in one launch (a group; gpu::Batch).
void batchAsync(const gpu::Batch& t, void* stream);

// The device's address of pinned host memory from hostAlloc (the same pointer under unified
// addressing).
void* mappedPointer(void* host);

// CUDA graphs. Whether `stream` is being captured now: work queued on it is recorded into a
// graph, not run.
bool isCapturing(void* stream);
// Captures the work queued on `stream` (relaxed mode) until streamEndCapture, which returns an
// executable graph that graphLaunch replays on a stream.
void streamBeginCapture(void* stream);
void* streamEndCapture(void* stream);
void graphLaunch(void* graph, void* stream);
void graphDestroy(void* graph);

// CUDA IPC.
struct IpcHandle {
  unsigned char bytes[64];
};
IpcHandle ipcHandle(void* devicePtr);
void* ipcOpen(const IpcHandle& h);  // enables peer access if the memory is on another device
void ipcClose(void* p);
bool canAccessPeer(int dev, int peer);
// Lets the current device read and write `peer`'s memory (once; again is not an error).
void enablePeer(int peer);

}  // namespace hora::cuda
