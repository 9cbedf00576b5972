// Device memory for the perf tools (-M device), through the CUDA runtime as any CUDA program
// uses it; in a build without CUDA, gpus() is 0 and the tools stay on host memory.
#pragma once
#include <cstddef>
#include <string>

#include "hora.h"

namespace hperf::dev {

int gpus();              // devices this process can use (0 without a driver, a GPU, or CUDA)
std::string why();       // why gpus() is 0
void* alloc(size_t bytes);  // device memory (exits the tool on failure)
void release(void* p);
void toDevice(void* dst, const void* src, size_t bytes);
void toHost(void* dst, const void* src, size_t bytes);
horaStream_t newStream();
void sync(horaStream_t s);  // exits the tool on a CUDA error
void destroyStream(horaStream_t s);

}  // namespace hperf::dev
