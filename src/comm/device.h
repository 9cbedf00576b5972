// Device buffers and CUDA streams (a CUDA build on a machine with a GPU; elsewhere every
// pointer is host memory and a stream that is not a host stream is an error).
//
// Where the buffers are. Each call's buffers are looked up when it runs (cudaPointerGetAttributes);
// host and device pointers may be mixed freely, and a call whose buffers are all host memory
// runs as it always has. Device buffers must be on the communicator's device (horaCommCuDevice).
//
// How a call with device buffers runs:
//   - an AllReduce whose ranks are all on this host, with every buffer on the device, goes
//     through the CUDA IPC stage (transport::RegionStage): the shared-stage AllReduce with its
//     reductions as kernels reading the peers' GPU memory; the stage is set up, collectively, by
//     the first such call (if a rank cannot map a peer's memory, every rank falls back to bouncing
//     for good);
//   - everything else is bounced: device inputs are copied into pinned host buffers, the call runs
//     on those, and device outputs are copied back.
//
// Stream order. A call on a CUDA stream returns at once: the stream records an event, and the
// communicator's worker thread (a HostStream of the library's own) waits for it, runs the call
// as above, then sets a word of pinned memory that the stream waits on (cuStreamWaitValue32) before
// the work queued after the call. A group may name several CUDA streams: its work waits for all
// of them and all of them wait for it. The word is set even when the call fails (its outputs are
// then undefined), so a stream never hangs on a failed communicator: the failure is the
// communicator's error (every later call, horaCommGetAsyncError) and the stream's
// (horaStreamSynchronize and horaStreamQuery on it).
//
// A call without a stream (or on a host stream) with device buffers is synchronous: its copies
// are ordered on the legacy default stream, so it sees the work of every blocking stream queued
// before it, and its results are in place when it returns.
#pragma once
#include <vector>

#include "comm/comm.h"
#include "comm/stream.h"

namespace hora::device {

// The stream a horaStream_t names.
struct StreamRef {
  HostStream* host = nullptr;  // a host stream from horaStreamCreate
  void* cuda = nullptr;        // a CUDA stream
};
// Throws InvalidArgument for a handle that is neither (with why CUDA streams are not possible
// here, where they are not).
StreamRef resolve(const void* handle);

// Runs the calls now on this thread (the synchronous path): as device-initiated kernels where
// they fit, else bouncing device buffers through host memory.
void runSync(const Calls& calls);
// runSync of one call (the common call outside a group, without a vector of calls where its
// buffers are host memory).
void runSyncOne(horaComm* c, const coll::Args& a);

// Reads the PreMulSum scalars the calls keep in memory (horaScalarDevice) into their Args, in
// `stream`'s order where the memory is the device's (null: the legacy default stream).
void readScalars(Calls& calls, void* stream);

// Queues calls on CUDA streams (streams[i] is calls[i]'s) and returns.
void enqueue(const char* fn, const Calls& calls, const std::vector<void*>& streams);

// horaStreamSynchronize and horaStreamQuery of a CUDA stream: waits (or looks), then throws the
// first error of the library's work on it not yet reported.
void synchronize(void* stream);
bool query(void* stream);

// Whether c's device AllReduces go through its CUDA IPC stage (set up by the first that fits).
bool ipcActive(horaComm* c);
// Whether c's collectives on device buffers are kernels of the device-initiated protocol
// (gpu/protocol.h; set up by the first call that fits).
bool kernelsActive(horaComm* c);
// The kernels of that protocol c has launched (a group's calls are one).
uint64_t kernelLaunches(horaComm* c);

// Per communicator: its worker, pinned bounce blocks and CUDA IPC stage (comm.h holds one).
struct CommState;
void destroy(CommState* s);  // drains the worker first
// The device a communicator is on: the given one, else the current device where CUDA is usable,
// else -1.
int commDevice(int given);

}  // namespace hora::device
