// A build without CUDA: the protocol's kernel is not there (the emulated GPU runs it on the host,
// protocol_host.cc).
#include "gpu/protocol_host.h"

namespace hora::gpu {

int launch(const Desc&, void*) { return -1; }
int launch(const Batch&, void*) { return -1; }
int preload() { return -1; }

}  // namespace hora::gpu
