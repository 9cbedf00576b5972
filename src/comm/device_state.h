// The device path's private parts, shared by comm/device.cc (bouncing through the host, the CUDA
// IPC stage's calls, streams), comm/device_setup.cc (the collective set-ups: the ranks'
// exchanges, the device stage asked of the stage providers) and comm/device_kernels.cc (the
// device-initiated collectives' host side):
// a communicator's device state (CommState) and what both read of a call. Nothing outside
// comm/device*.cc includes this.
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <poll.h>

#include "base/log.h"
#include "comm/comm.h"
#include "comm/device.h"
#include "comm/kernel_gate.h"
#include "comm/stream.h"
#include "comm/trace.h"
#include "core/device_engine.h"
#include "gpu/cuda.h"
#include "gpu/protocol.h"
#include "gpu/regions.h"
#include "transports/stage.h"

namespace hora::device {

// coll/stage.cc's counter that a member posts once it has read the others' out-slots of a chunk.
inline constexpr int kOutFreeCounter = 3;

enum class Ipc { Unknown, On, Off };

// Makes `dev` the thread's device for a while (kernels go to the current device); the caller's
// device comes back after, where `restore` (a worker keeps its device).
struct OnDevice {
  int prev;
  int dev;
  bool restore;
  explicit OnDevice(int d, bool r = true) : prev(cuda::currentDevice()), dev(d), restore(r) {
    if (prev != dev) cuda::setDevice(dev);
  }
  ~OnDevice() {
    if (!restore || prev < 0 || prev == dev) return;
    try {
      cuda::setDevice(prev);
    } catch (const Error&) {
    }
  }
};

// The first unreported failure of the library's work on each of `streams` becomes e (fn: what
// failed), for their synchronisation to throw.
void noteStreamError(const std::vector<void*>& streams, const char* fn, const Error& e);

// Every communicator of this process with device-initiated collectives: a stream's
// synchronisation settles their failures first (the watchdog may not have yet).
extern std::mutex gKernelCommsMu;
std::vector<std::pair<horaComm*, CommState*>>& kernelComms();

struct CommState {
  int device = -1;
  std::mutex poolMu;
  struct Block {
    uint8_t* p;
    size_t bytes;
    bool taken;
  };
  // Pinned host memory for bouncing. Blocks are taken and given back, and freed only with the
  // communicator: a free of pinned memory may wait for the whole device, and a stream may be
  // waiting for this communicator's worker.
  std::vector<Block> pool;
  // The last stream call done (seq), in pinned memory that the streams' wait kernels read. Never
  // freed: a stream may reach its wait after the communicator is gone (the word then holds the
  // last seq, so the wait passes).
  uint32_t* flag = nullptr;
  std::mutex enqueueMu;  // seq and the worker's queue move together
  uint32_t seq = 0;
  void* copyStream = nullptr;  // the worker's copies
  // The device stage of the large AllReduces on device buffers (a stage provider's, over the
  // host stage: the CUDA IPC stage), once set up (ipc On).
  Ipc ipc = Ipc::Unknown;
  std::shared_ptr<transport::SharedStage> stage;
  uint64_t lastIpcChunk = 0;  // the stage sequence of the last chunk through it
  std::unique_ptr<core::DeviceEngine> engine;
  // The copies between device buffers and the pinned blocks that stand in for them, as ops of
  // the calls' programs (core/device_copies.h): made by the first call bounced, in its caller's
  // thread (a stream and events).
  core::DeviceEngine& copier();
  std::unique_ptr<core::DeviceEngine> copier_;
  // Events of this device, reused: creating or destroying one takes a lock in the driver that a
  // thread blocked on a stream (a copy to pageable memory, say) may hold until that stream's
  // wait for this worker passes, so the worker neither creates nor destroys any, and the callers
  // only while the pool is still growing.
  std::mutex eventsMu;
  std::vector<void*> events;
  // Events of other devices' streams that the worker is done with: destroyed by the next
  // caller (or the communicator's end), never by the worker.
  std::vector<void*> foreignDone;
  // The device-initiated collectives (gpu/protocol.h): this rank's region and every rank's
  // mapping of it, the status its kernels and the host share, and the numbers every rank
  // advances alike with each call.
  struct Kernels {
    Ipc state = Ipc::Unknown;
    gpu::Regions regions;  // this rank's (mine()) and every rank's mapping of it
    gpu::Layout layout;
    gpu::Status* status = nullptr;  // pinned and mapped; never freed (a kernel may outlive us)
    gpu::Status* statusOnDevice = nullptr;  // its device address
    uint64_t calls = 0;  // calls launched (their numbers, outside graphs' replays)
    std::atomic<uint64_t> blocks{0};  // blocks launched (the status counts those finished)
    std::atomic<uint64_t> launches{0};  // kernels launched (a group's calls: one)
    std::array<std::pair<uint64_t, coll::Args>, 8> recent{};  // the last calls, by number (their texts)
    std::mutex mu;                  // streams, reported
    std::vector<void*> streams;     // the CUDA streams kernels were queued on
    bool reported = false;          // the status's failure became the communicator's
    // Held through a report, from `reported` to the streams' and the communicator's errors: a
    // stream's synchronisation that finds the watchdog reporting waits for it to finish, so it
    // never returns success between the two.
    std::mutex reportMu;
    // The flight recorder's entries of the calls in flight, with the blocks launched up to and
    // including each (the watchdog finishes them as the status counts their blocks).
    std::deque<std::pair<trace::Entry*, uint64_t>> traced;
    // The members of the stage that the kernels in flight wait on (a bit each; kAllMembers: every
    // one), with the blocks launched up to and including each kernel: the watchdog fails the
    // communicator for a rank found gone only while a kernel that needs it runs (a rank that has
    // closed while two others still send to each other is no failure), and only for one that
    // failed or died: one that closed its communicator posted all it will, and a kernel may
    // have had all it needs of it (a ring's send to it done, the receive from another not yet).
    // A ring of fixed size (no allocation on a call's path): a launch with the same members as
    // the last extends it, and one past the ring's size joins the last (its members added: the
    // watchdog then looks at more ranks for a while, never fewer).
    static constexpr uint64_t kAllMembers = ~uint64_t(0);
    struct Needs {
      std::array<std::pair<uint64_t, uint64_t>, 32> ring{};  // (blocks launched through it, members)
      size_t first = 0, count = 0;
      void add(uint64_t launched, uint64_t members) {
        auto& last = ring[(first + count + ring.size() - 1) % ring.size()];
        if (count && (last.second == members || count == ring.size())) {
          last = {launched, last.second | members};
          return;
        }
        ring[(first + count++) % ring.size()] = {launched, members};
      }
      // The members the kernels not yet finished wait on, forgetting those that have.
      uint64_t inFlight(uint64_t finished) {
        while (count && ring[first].first <= finished) first = (first + 1) % ring.size(), --count;
        uint64_t members = 0;
        for (size_t i = 0; i < count; ++i) members |= ring[(first + i) % ring.size()].second;
        return members;
      }
    } needs;
    void* last = nullptr;      // the stream of the last kernel (null: the legacy default stream)
    bool lastSet = false;
    void* lastDone = nullptr;  // recorded on it after that kernel (an event of the pool)
    // Ranks of this process on this GPU (the clique, by rank; this one among them at cliqueAt):
    // a kernel is queued once every one has come to its call (kernel_gate.h), and a call on the
    // legacy stream runs on `ownStream` (the legacy stream is one for every thread).
    std::vector<int> clique;
    size_t cliqueAt = 0;
    std::shared_ptr<KernelGate> gate;
    uint64_t gated = 0;  // calls through the gate: every call on a stream, and kernels on none
    void* ownStream = nullptr;
    std::thread watchdog;
    std::mutex stopMu;
    std::condition_variable stopCv;
    bool stop = false;
  } k;
  std::unique_ptr<HostStream> worker;  // last: drained and stopped first

  void* takeEvent() {
    {
      std::lock_guard<std::mutex> lock(eventsMu);
      if (!events.empty()) {
        void* e = events.back();
        events.pop_back();
        return e;
      }
    }
    return cuda::eventCreate();
  }
  void giveEvent(void* e) {
    std::lock_guard<std::mutex> lock(eventsMu);
    events.push_back(e);
  }
  void retireForeign(void* e) {
    std::lock_guard<std::mutex> lock(eventsMu);
    foreignDone.push_back(e);
  }
  void destroyRetired() {  // in a caller's thread
    std::vector<void*> dead;
    {
      std::lock_guard<std::mutex> lock(eventsMu);
      dead.swap(foreignDone);
    }
    for (void* e : dead) cuda::eventDestroy(e);
  }

  uint8_t* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(poolMu);
    for (Block& b : pool)
      if (!b.taken && b.bytes >= bytes) {
        b.taken = true;
        return b.p;
      }
    size_t size = size_t(1) << 20;
    while (size < bytes) size <<= 1;
    pool.push_back(Block{static_cast<uint8_t*>(cuda::hostAlloc(size)), size, true});
    return pool.back().p;
  }
  void give(uint8_t* p) {
    std::lock_guard<std::mutex> lock(poolMu);
    for (Block& b : pool)
      if (b.p == p) b.taken = false;
  }

  // The peers may still be reading this rank's region for the last chunk (their copies out of
  // its out-slots): wait, a while at most, until each has said it is done with it, or is gone.
  void awaitPeersDone();

  // Ends the kernels' watchdog, makes every kernel of this rank stop (a peer's may still be
  // waiting for it: they see it gone or time out) and waits, a while at most, until they have
  // and the peers are done reading this rank's region.
  void endKernels();

  ~CommState();
};

// The device state of c, made by its first device call.
CommState& stateOf(horaComm* c);

// What a call reads and writes, and which of those are device memory.
struct Where {
  const void* in = nullptr;
  size_t inBytes = 0;
  void* out = nullptr;
  size_t outBytes = 0;
  int inDev = -1, outDev = -1;
  bool any() const { return inDev >= 0 || outDev >= 0; }
};
Where where(const horaComm* c, const coll::Args& a);

// The collectives of the device path's set-ups (comm/device_setup.cc), over the communicator, in
// the caller's thread: an all-gather of `bytes` from every rank (gpu::Exchange), and whether
// every rank says ok (every rank goes the same way).
gpu::Exchange exchangeOver(horaComm* c);
bool everyRank(horaComm* c, bool ok);
// Sets up the device stage of the large AllReduces on device buffers, from the first stage
// provider that offers one on every rank, or turns it off for good (st.ipc).
void setupStage(horaComm* c, CommState& st);

// ---- the device-initiated collectives (comm/device_kernels.cc) ----

// Queues (stream) or runs (null: waiting for it) a call as a device-initiated collective (one
// rank: a copy); false where it does not go that way. `lone`: the call is all its caller
// submitted (a collective set-up may run here).
bool viaKernel(horaComm* c, const coll::Args& a, const Where& w, void* stream, bool lone);
// The same for calls of communicator c (a group, or a lone send or recv): one launch, its
// collectives in order and its send/recvs together; false where they do not go that way (calls
// of other communicators, more than gpu::kMaxCalls, reductions of different types or ops, a
// call that is no kernel's, send/recv between ranks as threads of one GPU).
bool viaKernels(horaComm* c, const Calls& calls, const std::vector<Where>& ws, void* stream, bool lone);
// The kernels' failure, or the communicator's that stopped them, as their streams' error (once).
void settleKernels(horaComm* c, CommState& st);
// Waits until every rank of this rank's clique has come to call n, which this rank has entered
// (kernel_gate.h); throws, naming the late rank, after the communicator's timeout.
void awaitClique(horaComm* c, CommState::Kernels& k, uint64_t n);

}  // namespace hora::device
