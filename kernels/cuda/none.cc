// A build without CUDA: the kernels are not there, and nothing calls them (src/core/cuda.cc
// says CUDA is unusable first).
#include "kernels/cuda/reduce.h"

namespace hora::kernels::cuda {

bool built() { return false; }

int reduce(void* const*, int, const void* const*, int, size_t, const ReduceSpec&, void*) { return -1; }

int preload() { return -1; }
int waitFlag(const volatile uint32_t*, uint32_t, void*) { return -1; }

}  // namespace hora::kernels::cuda
