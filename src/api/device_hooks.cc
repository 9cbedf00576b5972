// The device runtime for the Python layer, outside include/hora.h: streams, events, copies and
// the "which device is this pointer on" question, through the library's own CUDA runtime (or
// the emulated device under HORA_CUDA=emulate). hora/_device.py binds these by name; they let
// Python code that has no CUDA of its own (an object with __cuda_array_interface__ without
// torch, and every device test on a machine without a GPU) order work on streams exactly as
// torch.cuda's streams and events do for torch's tensors. Streams and events of this process's
// other CUDA users (torch, CuPy) are the driver's objects, so they mix with these freely.
// Not part of the supported ABI: they may change with the Python layer.
#include "api/guard.h"
#include "gpu/cuda.h"
#include "base/wait.h"
#include "comm/config.h"

using namespace hora;
using api::guard;

namespace {

void needDevice(const char* what) {
  config();
  if (!cuda::usable()) fail(Errc::Cuda, "%s: %s", what, cuda::unusableWhy().c_str());
}

}  // namespace

// *device: the device of the allocation p points into, -1 for host memory or without a device.
// Never loads a driver that HORA_CUDA=off keeps away.
HORA_API horaResult_t horaInternalDeviceOf(const void* p, int* device) {
  return guard("horaInternalDeviceOf", nullptr, [&] {
    if (!device) fail(Errc::InvalidArgument, "device is NULL");
    config();
    *device = p && cuda::usable() ? cuda::deviceOf(p) : -1;
  });
}

HORA_API horaResult_t horaInternalCurrentDevice(int* device) {
  return guard("horaInternalCurrentDevice", nullptr, [&] {
    if (!device) fail(Errc::InvalidArgument, "device is NULL");
    config();
    *device = cuda::usable() ? cuda::currentDevice() : -1;
  });
}

HORA_API horaResult_t horaInternalStreamCreate(void** stream) {
  return guard("horaInternalStreamCreate", nullptr, [&] {
    if (!stream) fail(Errc::InvalidArgument, "stream is NULL");
    needDevice("no stream to create");
    *stream = cuda::streamCreate();
  });
}

HORA_API horaResult_t horaInternalStreamDestroy(void* stream) {
  return guard("horaInternalStreamDestroy", nullptr, [&] {
    if (!stream) return;
    needDevice("no stream to destroy");
    cuda::streamDestroy(stream);
  });
}

HORA_API horaResult_t horaInternalStreamSynchronize(void* stream) {
  return guard("horaInternalStreamSynchronize", nullptr, [&] {
    needDevice("no stream to wait for");
    cuda::streamSync(stream);
  });
}

HORA_API horaResult_t horaInternalEventCreate(void** event) {
  return guard("horaInternalEventCreate", nullptr, [&] {
    if (!event) fail(Errc::InvalidArgument, "event is NULL");
    needDevice("no event to create");
    *event = cuda::eventCreate();
  });
}

HORA_API horaResult_t horaInternalEventDestroy(void* event) {
  return guard("horaInternalEventDestroy", nullptr, [&] {
    if (!event) return;
    needDevice("no event to destroy");
    cuda::eventDestroy(event);
  });
}

HORA_API horaResult_t horaInternalEventRecord(void* event, void* stream) {
  return guard("horaInternalEventRecord", nullptr, [&] {
    if (!event) fail(Errc::InvalidArgument, "event is NULL");
    needDevice("no event to record");
    cuda::eventRecord(event, stream);
  });
}

// horaSuccess when the work before the event's record is done, horaInProgress while it is not.
HORA_API horaResult_t horaInternalEventQuery(void* event) {
  bool done = false;
  const horaResult_t r = guard("horaInternalEventQuery", nullptr, [&] {
    if (!event) fail(Errc::InvalidArgument, "event is NULL");
    needDevice("no event to query");
    done = cuda::eventDone(event);
  });
  return r == horaSuccess && !done ? horaInProgress : r;
}

// Blocks the calling thread until the event's work is done, backing off from spinning.
HORA_API horaResult_t horaInternalEventSynchronize(void* event) {
  return guard("horaInternalEventSynchronize", nullptr, [&] {
    if (!event) fail(Errc::InvalidArgument, "event is NULL");
    needDevice("no event to wait for");
    // The work may take as long as it takes: no deadline but a day (the backoff is the point).
    Waiter w(std::chrono::hours(24), nullptr, [] { return std::string("a device event"); });
    while (!cuda::eventDone(event)) w.idle();
  });
}

HORA_API horaResult_t horaInternalStreamWaitEvent(void* stream, void* event) {
  return guard("horaInternalStreamWaitEvent", nullptr, [&] {
    if (!event) fail(Errc::InvalidArgument, "event is NULL");
    needDevice("no stream to order");
    cuda::streamWaitEvent(stream, event);
  });
}

HORA_API horaResult_t horaInternalMemcpyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  return guard("horaInternalMemcpyAsync", nullptr, [&] {
    if (bytes == 0) return;
    if (!dst || !src) fail(Errc::InvalidArgument, "a NULL buffer for %zu bytes", bytes);
    needDevice("no device to copy with");
    cuda::copyAsync(dst, src, bytes, stream);
  });
}

// Pinned host memory (cudaHostAlloc, portable and mapped).
HORA_API horaResult_t horaInternalHostAlloc(void** ptr, size_t bytes) {
  return guard("horaInternalHostAlloc", nullptr, [&] {
    if (!ptr) fail(Errc::InvalidArgument, "ptr is NULL");
    needDevice("no pinned memory to allocate");
    *ptr = cuda::hostAlloc(bytes);
  });
}

HORA_API horaResult_t horaInternalHostFree(void* ptr) {
  return guard("horaInternalHostFree", nullptr, [&] {
    if (!ptr) return;
    needDevice("no pinned memory to free");
    cuda::hostFree(ptr);
  });
}

// Holds the work queued on `stream` after this call until the 32-bit word at `word` (pinned
// memory from horaInternalHostAlloc) is at least `value`: a gate that a test opens when it
// chooses, so that what it queued behind the gate is certainly not done before.
HORA_API horaResult_t horaInternalStreamWaitValue(void* stream, const void* word, uint32_t value) {
  return guard("horaInternalStreamWaitValue", nullptr, [&] {
    if (!word) fail(Errc::InvalidArgument, "word is NULL");
    needDevice("no stream to hold");
    cuda::loadKernels();
    cuda::streamWaitFlag(stream, static_cast<const volatile uint32_t*>(word), value, false);
  });
}

// *built: 1 when this library was built with the CUDA runtime and kernels (whether or not this
// machine has a GPU), else 0. Loads no driver.
HORA_API horaResult_t horaInternalCudaBuilt(int* built) {
  return guard("horaInternalCudaBuilt", nullptr, [&] {
    if (!built) fail(Errc::InvalidArgument, "built is NULL");
    *built = cuda::built() ? 1 : 0;
  });
}
