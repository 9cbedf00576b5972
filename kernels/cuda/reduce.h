// The CUDA reduction kernels: kernels::reduce (kernels/cpu/reduce.h) on device memory, as NCCL's
// reduceCopy: nsrc sources (up to kMaxSources) reduced element by element into ndst destinations
// (up to kMaxDests), in one pass, with the same bits as the CPU kernels (element.h). Pointers are
// device pointers (or any the device can address: a peer's memory mapped by CUDA IPC, mapped
// pinned host memory); they need no alignment. A destination may be the very pointer of a
// source, never a partial overlap.
//
// The kernel reads 16 bytes per load where every pointer has the same offset within 16 bytes
// (the elements before the first aligned 16 bytes, and after the last, one at a time), and one
// element per load otherwise; a grid-stride loop covers any count.
//
// This header includes no CUDA header: the library's other code calls through it whether or not
// this build has CUDA (kernels/cuda/none.cc answers when it has not).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/reduce.h"

namespace hora::kernels::cuda {

// Whether this build has the CUDA kernels.
bool built();

// Queues the reduction on `stream` (a cudaStream_t; null: the legacy default stream) of the
// current device. Returns 0, or the cudaError_t of the launch (or of a bad argument:
// cudaErrorInvalidValue), which cudaGetErrorString explains.
int reduce(void* const* dsts, int ndst, const void* const* srcs, int nsrc, size_t count, const ReduceSpec& spec,
           void* stream);

// Loads every kernel of this file into the current device's context now. Under CUDA's lazy
// loading (the default) a kernel is loaded at its first launch, which may wait for the whole
// device: a launch from the communicator's worker while a stream's waitFlag kernel (below)
// waits for that very worker would never return. Call it in the caller's thread before a
// stream can wait for the worker. Returns 0 or the cudaError_t.
int preload();

// Queues on `stream` a one-thread kernel that returns once the 32-bit word at `flag` (host
// memory mapped for the device, its device address) is at least `value`, in wrap-around order:
// the work queued after it waits for the host (the stream-order wait of src/comm/device.h).
// Returns 0 or the cudaError_t of the launch.
int waitFlag(const volatile uint32_t* flag, uint32_t value, void* stream);

}  // namespace hora::kernels::cuda
