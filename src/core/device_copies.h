// Device buffers that a program runs on through host blocks: the copies between them as ops of
// the program itself, chunk by chunk, so that the wire, the reductions and the copies overlap
// (NCCL's proxy moves a chunk while the kernel fills the next; this is the same pipeline on the
// host's side). A call whose buffers are in device memory, where no kernel can reach its peers
// (other hosts, or HORA_CUDA_IPC=0), is planned and built as if its buffers were the pinned host
// blocks that stand in for them; addDeviceCopies then adds
//   - a copy in of each chunk of each input (device to block), every op that reads or writes
//     that chunk of the block depending on it, the copies ordered by the op that first needs
//     them (a ring's first send needs its own block of the buffer, not the buffer's start);
//   - a copy out of each chunk of each result (block to device), depending on every op that
//     writes that chunk of the block (and the copy in of the same chunk, in place); a chunk that
//     no op writes, copied in from the very place it would go back to, is not copied out.
// The copies are actions of the Copies engine (Job::copies: a DeviceEngine, whose stream runs
// them in the order they are posted). The ops of the program are left as they were: the same
// messages in the same order, so the peers see no difference, whatever their buffers.
//
// A program that lets a peer read or write this rank's buffers by itself (Program::exposes, or
// a Fetch or Put: the stage's single copy) gives it their addresses in data no op's range
// shows: there every op waits for every copy in, and every copy out for every op.
#pragma once
#include <cstddef>
#include <vector>

#include "core/program.h"

namespace hora::core {

struct DeviceCopy {
  void* dst;
  const void* src;
  size_t bytes;
};

class ComputeEngine;

struct DeviceCopies {
  ComputeEngine* engine = nullptr;  // runs the copies (Job::copies)
  std::vector<DeviceCopy> ins;   // device buffer -> the program's host block
  std::vector<DeviceCopy> outs;  // the program's host block -> device buffer
  // The size of a chunk of a copy (0: each copy whole); at most kMaxChunks chunks each way.
  size_t chunkBytes = 0;
  bool empty() const { return ins.empty() && outs.empty(); }
};

// Chunks of each direction at most: each a copy and an event in flight on the engine at once.
inline constexpr size_t kMaxCopyChunks = 32;

// What addDeviceCopies added: how many copies each way (for the trace).
struct CopiesAdded {
  size_t in = 0, out = 0, outSkipped = 0;
};

CopiesAdded addDeviceCopies(Program& p, const DeviceCopies& copies);

// A program of the copies alone (ins or outs), for a call that does not run as a program.
void copiesProgram(Program& p, const std::vector<DeviceCopy>& copies);

}  // namespace hora::core
