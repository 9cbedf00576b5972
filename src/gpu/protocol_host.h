// The device-initiated protocol run on the host (the emulated GPU's kernel), and its launch on a
// CUDA stream (protocol.cu; kernels::cuda::built() says whether this build has it).
#pragma once
#include "gpu/protocol.h"

namespace hora::gpu {

// Runs d's kernel (or a batch's), every block, on this thread (the emulated device).
void runOnHost(const Desc& d);
void runOnHost(const Batch& t);

// Queues d's kernel (or a batch's) on `stream` (a cudaStream_t, null: the legacy default stream)
// of the current device. Returns 0 or the cudaError_t of the launch; without CUDA in this build,
// -1.
int launch(const Desc& d, void* stream);
int launch(const Batch& t, void* stream);
// Loads every kernel of protocol.cu into the current device's context now (see
// kernels::cuda::preload). Returns 0 or the cudaError_t; without CUDA, -1.
int preload();

}  // namespace hora::gpu
