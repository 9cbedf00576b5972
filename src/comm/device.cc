#include "comm/device.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "gpu/cuda.h"
#include "kernels/cpu/scalar.h"
#include "base/log.h"
#include "comm/config.h"
#include "comm/kernel_gate.h"
#include "comm/trace.h"
#include "core/device_engine.h"
#include "gpu/protocol.h"
#include "base/host.h"
#include "transports/cuda_ipc/stage.h"

namespace hora::device {

namespace {

// Each member's region of the CUDA IPC stage holds 4 slots (coll/stage.cc) of this many bytes:
// a chunk of a large AllReduce. 8 MiB per slot keeps a kernel's launch small beside its work.
constexpr size_t kIpcSlotBytes = size_t(8) << 20;
// coll/stage.cc's counter that a member posts once it has read the others' out-slots of a chunk.
constexpr int kOutFreeCounter = 3;

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

// The first unreported failure of the library's work on each CUDA stream.
std::mutex gErrorsMu;
std::unordered_map<void*, Error>& streamErrors() {
  static auto* m = new std::unordered_map<void*, Error>();  // never destroyed: workers may outlive exit
  return *m;
}

void noteStreamError(const std::vector<void*>& streams, const char* fn, const Error& e) {
  std::lock_guard<std::mutex> lock(gErrorsMu);
  for (void* s : streams)
    streamErrors().emplace(s, Error(e.code(), format("%s (on CUDA stream %p): %s", fn, s, e.what())));
}

void takeStreamError(void* s) {
  std::lock_guard<std::mutex> lock(gErrorsMu);
  auto it = streamErrors().find(s);
  if (it == streamErrors().end()) return;
  Error e = it->second;
  streamErrors().erase(it);
  throw e;
}

// Every communicator of this process with device-initiated collectives: a stream's
// synchronisation settles their failures first (the watchdog may not have yet).
std::mutex gKernelCommsMu;
std::vector<std::pair<horaComm*, CommState*>>& kernelComms() {
  static auto* v = new std::vector<std::pair<horaComm*, CommState*>>();
  return *v;
}

// The device-initiated collectives' regions of this process, with the number of communicators
// that use each: a rank of this process reads another's region through its very pointer, so the
// region is freed by the last of them to go, not by its owner.
std::mutex gRegionsMu;
std::unordered_map<uint8_t*, int>& sharedRegions() {
  static auto* m = new std::unordered_map<uint8_t*, int>();
  return *m;
}
void retainRegion(uint8_t* p) {
  std::lock_guard<std::mutex> lock(gRegionsMu);
  ++sharedRegions()[p];
}
void releaseRegion(uint8_t* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> lock(gRegionsMu);
    auto it = sharedRegions().find(p);
    if (it != sharedRegions().end() && --it->second > 0) return;
    if (it != sharedRegions().end()) sharedRegions().erase(it);
  }
  cuda::deviceFree(p);
}

}  // namespace

struct CommState {
  int device = -1;
  std::mutex poolMu;
  struct Block {
    uint8_t* p;
    size_t bytes;
    bool taken;
  };
  // Pinned host memory for staging. Blocks are taken and given back, and freed only with the
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
  Ipc ipc = Ipc::Unknown;
  uint8_t* region = nullptr;
  std::vector<void*> opened;
  std::shared_ptr<transport::CudaIpcStage> stage;
  uint64_t lastIpcChunk = 0;  // the stage sequence of the last chunk through it
  std::unique_ptr<core::DeviceEngine> engine;
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
    uint8_t* region = nullptr;
    std::vector<void*> opened;
    std::vector<uint8_t*> retained;  // other ranks' regions of this process (retainRegion)
    std::vector<uint8_t*> regions;
    gpu::Layout layout;
    gpu::Status* status = nullptr;  // pinned and mapped; never freed (a kernel may outlive us)
    gpu::Status* statusOnDevice = nullptr;  // its device address
    uint64_t calls = 0;  // calls launched (their numbers, outside graphs' replays)
    std::atomic<uint64_t> blocks{0};  // blocks launched (the status counts those finished)
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
  void awaitPeersDone() {
    if (!stage || !lastIpcChunk) return;
    const auto until = Clock::now() + std::chrono::seconds(5);
    std::vector<pollfd> fds;
    while (Clock::now() < until && !stage->reached(kOutFreeCounter, lastIpcChunk)) {
      Errc relayed = Errc::Success;
      fds.clear();
      const std::string gone = stage->arm(-1, &relayed, fds);
      stage->disarm();
      if (!gone.empty()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  // Ends the kernels' watchdog, makes every kernel of this rank stop (a peer's may still be
  // waiting for it: they see it gone or time out) and waits, a while at most, until they have
  // and the peers are done reading this rank's region.
  void endKernels();

  ~CommState() {
    worker.reset();
    endKernels();
    try {
      engine.reset();
      awaitPeersDone();
      stage.reset();
      for (void* p : opened) cuda::ipcClose(p);
      for (void* p : k.opened) cuda::ipcClose(p);
      for (uint8_t* p : k.retained) releaseRegion(p);
      cuda::deviceFree(region);
      releaseRegion(k.region);
      for (Block& b : pool) cuda::hostFree(b.p);
      for (void* e : events) cuda::eventDestroy(e);
      cuda::eventDestroy(k.lastDone);
      if (k.ownStream) cuda::streamDestroy(k.ownStream);
      for (void* e : foreignDone) cuda::eventDestroy(e);
      cuda::streamDestroy(copyStream);
    } catch (const std::exception& e) {
      HORA_WARN(log::kColl, "freeing the communicator's device resources: %s", e.what());
    }
  }
};

void CommState::endKernels() {
  {
    std::lock_guard<std::mutex> lock(gKernelCommsMu);
    auto& v = kernelComms();
    v.erase(std::remove_if(v.begin(), v.end(), [this](const auto& e) { return e.second == this; }), v.end());
  }
  if (k.watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> lock(k.stopMu);
      k.stop = true;
    }
    k.stopCv.notify_all();
    k.watchdog.join();
  }
  if (k.state != Ipc::On) return;
  const auto finished = [this] { return gpu::sumOf(k.status->finished) >= k.blocks.load(); };
  // This rank's kernels end (a correct program has synchronised its streams; one that has not,
  // or whose peers are gone, is told to stop after a second).
  const auto start = Clock::now();
  while (!finished() && Clock::now() - start < std::chrono::seconds(5)) {
    if (Clock::now() - start > std::chrono::seconds(1)) __atomic_store_n(&k.status->abort, 1u, __ATOMIC_RELEASE);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!finished()) {
    HORA_WARN(log::kColl, "a collective kernel of this communicator is still running after 5 s: its device memory is "
              "left allocated");
    k.region = nullptr;
    k.opened.clear();
    k.retained.clear();
    return;
  }
  if (__atomic_load_n(&k.status->abort, __ATOMIC_ACQUIRE)) return;  // failed: the peers stop too
  // The peers read this rank's region until they have posted the last chunk freed and the last
  // LL call read: wait for them, a while at most.
  // (Device memory: read by copies, on the worker's stream, which waits for nothing else.)
  const auto peek = [this](const uint8_t* at) {
    uint64_t v = 0;
    cuda::copyAsync(&v, at, sizeof v, copyStream);
    cuda::streamSync(copyStream);
    return v;
  };
  const auto counter = [&](int j, int b, int which) {
    return peek(k.regions[static_cast<size_t>(j)] + k.layout.countersAt(b) + sizeof(uint64_t) * static_cast<size_t>(which));
  };
  const auto peersDone = [&] {
    for (int b = 0; b < k.layout.blocks; ++b) {
      const uint8_t* mine = k.region + k.layout.stateAt(b);
      const uint64_t chunks = peek(mine + offsetof(gpu::BlockState, chunks)), ll = peek(mine + offsetof(gpu::BlockState, ll));
      for (size_t j = 0; j < k.regions.size(); ++j)
        if (counter(static_cast<int>(j), b, gpu::kFreed) < chunks || (b == 0 && counter(static_cast<int>(j), 0, gpu::kLlDone) < ll))
          return false;
    }
    return true;
  };
  const auto until = Clock::now() + std::chrono::seconds(5);
  try {
    OnDevice on(device);
    while (!peersDone() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::microseconds(200));
  } catch (const Error& e) {
    HORA_WARN(log::kColl, "reading the peers' progress through the device collectives' regions: %s", e.what());
  }
}

void destroy(CommState* s) { delete s; }

int commDevice(int given) {
  if (given >= 0) return given;
  return cuda::usable() ? cuda::currentDevice() : -1;
}

namespace {

CommState& stateOf(horaComm* c) {
  std::lock_guard<std::mutex> lock(c->deviceMu);
  if (c->device) return *c->device;
  if (c->opts.cudaDev < 0)
    fail(Errc::InvalidUsage, "this communicator has no CUDA device (%s)",
         cuda::usable() ? "it was made before one was current" : cuda::unusableWhy().c_str());
  auto s = std::make_unique<CommState>();
  s->device = c->opts.cudaDev;
  OnDevice on(s->device);
  try {
    cuda::loadKernels();  // here, in a caller's thread, before a stream can wait for the worker
  } catch (const Error& e) {
    // (A GPU none of the built code runs on: copies and staging still work; a reduction
    // fails at its launch, with CUDA's reason.)
    HORA_WARN(log::kColl, "loading the CUDA kernels: %s", e.what());
  }
  s->flag = static_cast<uint32_t*>(cuda::hostAlloc(64));
  __atomic_store_n(s->flag, 0u, __ATOMIC_RELEASE);
  s->copyStream = cuda::streamCreate();
  for (int i = 0; i < 8; ++i) s->events.push_back(cuda::eventCreate());
  s->worker = std::make_unique<HostStream>(false);
  c->device.reset(s.release());
  return *c->device;
}

// What a call reads and writes, and which of those are device memory.
struct Where {
  const void* in = nullptr;
  size_t inBytes = 0;
  void* out = nullptr;
  size_t outBytes = 0;
  int inDev = -1, outDev = -1;
  bool any() const { return inDev >= 0 || outDev >= 0; }
};

Where where(const horaComm* c, const coll::Args& a) {
  Where w;
  const size_t e = dataTypeSize(a.dtype), one = a.count * e, all = one * static_cast<size_t>(c->nranks);
  switch (a.kind) {
    case coll::Kind::AllReduce: w = {a.sendbuf, one, a.recvbuf, one}; break;
    case coll::Kind::Broadcast: w = {c->rank == a.root ? a.sendbuf : nullptr, one, a.recvbuf, one}; break;
    case coll::Kind::Reduce: w = {a.sendbuf, one, c->rank == a.root ? a.recvbuf : nullptr, one}; break;
    case coll::Kind::AllGather: w = {a.sendbuf, one, a.recvbuf, all}; break;
    case coll::Kind::ReduceScatter: w = {a.sendbuf, all, a.recvbuf, one}; break;
    case coll::Kind::AllToAll: w = {a.sendbuf, all, a.recvbuf, all}; break;
    case coll::Kind::Send: w = {a.sendbuf, one, nullptr, 0}; break;
    case coll::Kind::Recv: w = {nullptr, 0, a.recvbuf, one}; break;
    case coll::Kind::Barrier: return w;
    // Only the root's big buffer holds every block; elsewhere that buffer is not used.
    case coll::Kind::Gather:
      w = {a.sendbuf, one, c->rank == a.root ? a.recvbuf : nullptr, c->rank == a.root ? all : 0};
      break;
    case coll::Kind::Scatter:
      w = {c->rank == a.root ? a.sendbuf : nullptr, c->rank == a.root ? all : 0, a.recvbuf, one};
      break;
  }
  if (!w.inBytes) w.in = nullptr;
  if (!w.outBytes) w.out = nullptr;
  w.inDev = cuda::deviceOf(w.in);
  w.outDev = cuda::deviceOf(w.out);
  for (int d : {w.inDev, w.outDev})
    if (d >= 0 && d != c->opts.cudaDev)
      fail(Errc::InvalidArgument, "a buffer of %s is on CUDA device %d, the communicator on device %d",
           coll::describe(a).c_str(), d, c->opts.cudaDev);
  return w;
}

bool anyOnDevice(const Calls& calls, std::vector<Where>& ws) {
  ws.clear();
  bool any = false;
  for (const auto& [c, a] : calls) {
    ws.push_back(where(c, a));
    any |= ws.back().any();
  }
  return any;
}

// Whether a call goes through the CUDA IPC stage: the same answer on every rank that makes the
// same call with device buffers.
bool ipcFits(const horaComm* c, const coll::Args& a, const Where& w) {
  return config().cudaIpc && a.kind == coll::Kind::AllReduce && a.count > 0 && w.inDev >= 0 && w.outDev >= 0 &&
         c->nranks > 1 && c->nranks <= kernels::kMaxSources && c->stage && c->stage->size() == c->nranks;
}

// Every rank's region (device memory: this rank's is `mine`, null where it could not allocate
// one), mapped here, by rank: exchanged by a collective of the communicator's own, in the
// caller's thread. *ok is cleared, with *why, where a region is missing or cannot be mapped; the
// mappings made are added to `opened`, the pointers of ranks of this process to `retained`;
// `sharing` says which ranks, if any, are processes that share one GPU (the UUIDs exchanged).
std::vector<uint8_t*> exchangeRegions(horaComm* c, CommState& st, uint8_t* mine, std::vector<void*>& opened,
                                      int32_t* ok, std::string* why, std::vector<uint8_t*>* retained = nullptr,
                                      std::string* sharing = nullptr, std::vector<int>* clique = nullptr) {
  struct Info {
    unsigned char handle[64];
    uint64_t region;
    int32_t pid, device, ok, pad;
    char uuid[40];
  };
  Info me{};
  try {
    snprintf(me.uuid, sizeof me.uuid, "%s", cuda::deviceUuid(st.device).c_str());
  } catch (const Error& e) {
    // (Without it, this rank's sharing of a GPU with another process goes unseen: said, not fatal.)
    HORA_INFO(log::kInit, "rank %d: the UUID of CUDA device %d: %s", c->rank, st.device, e.what());
  }
  me.ok = *ok && mine;
  if (me.ok) {
    try {
      cuda::IpcHandle h = cuda::ipcHandle(mine);
      memcpy(me.handle, h.bytes, sizeof me.handle);
    } catch (const Error& e) {
      me.ok = 0;
      *why = e.what();
    }
  }
  me.region = reinterpret_cast<uintptr_t>(mine);
  me.pid = static_cast<int32_t>(getpid());
  me.device = st.device;
  std::vector<Info> all(static_cast<size_t>(c->nranks));
  coll::Args g;
  g.kind = coll::Kind::AllGather;
  g.sendbuf = &me;
  g.recvbuf = all.data();
  g.count = sizeof(Info);
  g.dtype = DataType::Uint8;
  hora::runCalls(Calls{{c, g}});
  std::vector<uint8_t*> regions(static_cast<size_t>(c->nranks));
  if (clique) {
    clique->clear();
    for (int j = 0; j < c->nranks; ++j)
      if (all[static_cast<size_t>(j)].pid == me.pid && all[static_cast<size_t>(j)].device == me.device) clique->push_back(j);
  }
  if (sharing) {
    sharing->clear();
    for (int i = 0; i < c->nranks && sharing->empty(); ++i)
      for (int j = i + 1; j < c->nranks; ++j) {
        const Info &a = all[static_cast<size_t>(i)], &b = all[static_cast<size_t>(j)];
        if (a.uuid[0] && strncmp(a.uuid, b.uuid, sizeof a.uuid) == 0 && a.pid != b.pid) {
          *sharing = format("ranks %d and %d are processes that share GPU %.32s", i, j, a.uuid);
          break;
        }
      }
  }
  *ok = 1;
  for (int j = 0; j < c->nranks && *ok; ++j) {
    const Info& p = all[static_cast<size_t>(j)];
    if (!p.ok) {
      *ok = 0;
      if (why->empty()) *why = format("rank %d could not export its region", j);
    } else if (j == c->rank) {
      regions[static_cast<size_t>(j)] = mine;
    } else if (p.pid == me.pid) {
      // A rank of this process: its pointer, on this very device or one this GPU reaches.
      if (p.device == st.device || cuda::canAccessPeer(st.device, p.device)) {
        if (p.device != st.device) cuda::enablePeer(p.device);
        regions[static_cast<size_t>(j)] = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(p.region));
        if (retained) {
          retainRegion(regions[static_cast<size_t>(j)]);
          retained->push_back(regions[static_cast<size_t>(j)]);
        }
      } else {
        *ok = 0;
        *why = format("device %d cannot reach device %d of rank %d", st.device, p.device, j);
      }
    } else {
      try {
        cuda::IpcHandle h;
        memcpy(h.bytes, p.handle, sizeof h.bytes);
        void* mapped = cuda::ipcOpen(h);
        opened.push_back(mapped);
        regions[static_cast<size_t>(j)] = static_cast<uint8_t*>(mapped);
      } catch (const Error& e) {
        *ok = 0;
        *why = format("mapping rank %d's region: %s", j, e.what());
      }
    }
  }
  return regions;
}

// Whether every rank says ok (a collective: every rank goes the same way).
bool everyRank(horaComm* c, int32_t ok) {
  int32_t all = 0;
  coll::Args m;
  m.kind = coll::Kind::AllReduce;
  m.sendbuf = &ok;
  m.recvbuf = &all;
  m.count = 1;
  m.dtype = DataType::Int32;
  m.op = RedOp::Min;
  hora::runCalls(Calls{{c, m}});
  return all != 0;
}

// Sets up the CUDA IPC stage: collective over the communicator (its first call that fits), in
// the caller's thread, with no stream waiting on this communicator's worker (a CUDA allocation
// or free may wait for the whole device).
void setupIpc(horaComm* c, CommState& st) {
  const size_t regionBytes = 4 * kIpcSlotBytes;
  std::string why;
  int32_t ok = 1;
  try {
    if (!st.region) st.region = static_cast<uint8_t*>(cuda::deviceAlloc(regionBytes));
  } catch (const Error& e) {
    why = e.what();
  }
  std::vector<uint8_t*> regions = exchangeRegions(c, st, st.region, st.opened, &ok, &why);
  if (ok) {
    try {
      st.engine = std::make_unique<core::DeviceEngine>(st.device);
    } catch (const Error& e) {
      ok = 0;
      why = e.what();
    }
  }
  if (everyRank(c, ok)) {
    st.stage = std::make_shared<transport::CudaIpcStage>(c->stage, std::move(regions), regionBytes);
    st.ipc = Ipc::On;
    HORA_INFO(log::kInit, "rank %d: device AllReduce through CUDA IPC between the %d ranks of this host (device %d, "
              "%zu MiB slots)", c->rank, c->nranks, st.device, kIpcSlotBytes >> 20);
    return;
  }
  st.ipc = Ipc::Off;
  HORA_INFO(log::kInit, "rank %d: no CUDA IPC stage (%s); device buffers are staged through host memory", c->rank,
            why.empty() ? "another rank could not map every region" : why.c_str());
  st.engine.reset();
  for (void* p : st.opened) cuda::ipcClose(p);
  st.opened.clear();  // (the region itself goes with the communicator)
}

// ---- Device-initiated collectives (gpu/protocol.h) ----

// Whether a call can be a kernel of the protocol: every rank decides alike for a matched call
// whose buffers are all on the device.
bool kernelFits(const horaComm* c, const coll::Args& a, const Where& w) {
  if (!config().cudaKernels || !config().cudaIpc) return false;
  switch (a.kind) {
    case coll::Kind::AllReduce:
    case coll::Kind::Broadcast:
    case coll::Kind::Reduce:
    case coll::Kind::AllGather:
    case coll::Kind::ReduceScatter: break;
    default: return false;
  }
  if (a.count == 0 || a.op == RedOp::PreMulSum || a.scalarAt) return false;
  if ((w.in && w.inDev < 0) || (w.out && w.outDev < 0) || (!w.in && !w.out)) return false;
  if (c->nranks > gpu::kMaxRanks) return false;
  return c->nranks == 1 || (c->stage && c->stage->size() == c->nranks);
}

const char* counterName(int counter) {
  switch (counter) {
    case gpu::kIn: return "'in' (a chunk deposited)";
    case gpu::kOut: return "'out' (a chunk's reduced part ready)";
    case gpu::kFreed: return "'freed' (a slot read by all)";
    case gpu::kLlDone: return "'LL done' (a small call's data read)";
    default: return "counter";
  }
}

// The error a kernel's status describes, naming the rank it waited for.
Error statusError(const horaComm* c, const CommState& st, const gpu::Status& s) {
  const int peer = s.peer;
  const bool known = peer >= 0 && peer < c->nranks && static_cast<size_t>(peer) < c->peers.size();
  const std::string who = known ? c->peers[static_cast<size_t>(peer)].name() : format("rank %d", peer);
  std::string what = format("call #%llu of this communicator's device collectives", static_cast<unsigned long long>(s.call));
  for (const auto& [no, a] : st.k.recent)
    if (no == s.call && no) what = coll::describe(a) + " (" + what + ")";
  if (static_cast<gpu::Code>(s.code) == gpu::Code::Mismatch)
    return Error(Errc::InvalidUsage, format("mismatched calls: %s is in another collective than this rank's %s (its "
                                            "tag %016llx); every rank must make the same calls in the same order",
                                            who.c_str(), what.c_str(), static_cast<unsigned long long>(s.theirTag)));
  std::string stalled;
  if (known && static_cast<size_t>(peer) < c->localPids.size() && c->localPids[static_cast<size_t>(peer)])
    stalled = processStalled(c->localPids[static_cast<size_t>(peer)]);
  const std::string waited =
      s.counter < 0 ? format("for its data of that call (flag %llu, it is at %llu)", static_cast<unsigned long long>(s.target),
                             static_cast<unsigned long long>(s.seen))
                    : format("for its %s counter to reach %llu (it is at %llu)", counterName(s.counter),
                             static_cast<unsigned long long>(s.target), static_cast<unsigned long long>(s.seen));
  return Error(Errc::Timeout, format("Timed out: %s%s did not go on with %s within %lld ms: this rank's kernel waited %s",
                                     who.c_str(), stalled.empty() ? "" : (" " + stalled + " and").c_str(), what.c_str(),
                                     static_cast<long long>(c->opts.timeout.count()), waited.c_str()));
}

// The kernels' failure, once: the communicator's error (its peers hear of it) and the error of
// every stream they were queued on.
void reportKernels(horaComm* c, CommState& st) {
  CommState::Kernels& k = st.k;
  if (!k.status || !__atomic_load_n(&k.status->code, __ATOMIC_ACQUIRE)) return;
  std::lock_guard<std::mutex> report(k.reportMu);
  std::vector<void*> streams;
  {
    std::lock_guard<std::mutex> lock(k.mu);
    if (k.reported) return;
    k.reported = true;
    streams = k.streams;
  }
  const Error e = statusError(c, st, *k.status);
  noteStreamError(streams, "a collective on a CUDA stream", e);
  if (!c->aborting.load()) c->fail(e);
  c->setLastError(e.what());
}

void settleKernels(horaComm* c, CommState& st);

bool kernelsInFlight(const CommState& st) {
  return st.k.status && gpu::sumOf(st.k.status->finished) < st.k.blocks.load();
}

// The host's side of the kernels, on a thread of its own: it stops them (their status's abort
// word) when the communicator is aborted or fails or a rank of this host is found gone, and turns
// a kernel's failure into the communicator's error. Not on any call's path.
void watchKernels(horaComm* c, CommState* st) {
  CommState::Kernels& k = st->k;
  std::vector<pollfd> fds;
  std::unique_lock<std::mutex> lock(k.stopMu);
  for (;;) {
    const auto every = kernelsInFlight(*st) ? std::chrono::milliseconds(2) : std::chrono::milliseconds(20);
    if (k.stopCv.wait_for(lock, every, [&] { return k.stop; })) return;
    lock.unlock();
    const Errc failed = c->asyncError();
    bool stop = c->aborting.load() || (failed != Errc::Success && failed != Errc::InProgress);
    if (!stop && c->stage && kernelsInFlight(*st)) {
      Errc relayed = Errc::Success;
      fds.clear();
      const std::string gone = c->stage->arm(-1, &relayed, fds);
      c->stage->disarm();
      if (!gone.empty() && kernelsInFlight(*st)) {
        c->fail(relayed != Errc::Success ? static_cast<const Error&>(PeerFailure(gone, relayed))
                                         : static_cast<const Error&>(Error(Errc::Remote, gone)));
        stop = true;
      }
    }
    if (stop) __atomic_store_n(&k.status->abort, 1u, __ATOMIC_RELEASE);
    settleKernels(c, *st);
    lock.lock();
  }
}

// The kernels' failure, or the communicator's that stopped them, as their streams' error (once).
void settleKernels(horaComm* c, CommState& st) {
  CommState::Kernels& k = st.k;
  // The recorder's entries of the calls whose kernels have returned.
  if (c->trace) {
    const uint64_t finished = gpu::sumOf(k.status->finished);
    const bool ok = !gpu::sumOf(k.status->cut) && !__atomic_load_n(&k.status->code, __ATOMIC_ACQUIRE);
    std::lock_guard<std::mutex> lock(k.mu);
    while (!k.traced.empty() && k.traced.front().second <= finished) {
      c->trace->finish(k.traced.front().first, ok);
      k.traced.pop_front();
    }
  }
  reportKernels(c, st);
  // A kernel cut short by the host (an abort, the communicator's failure): its calls failed.
  if (__atomic_load_n(&k.status->abort, __ATOMIC_ACQUIRE) && gpu::sumOf(k.status->cut)) {
    // The streams learn why: the communicator's error.
    std::lock_guard<std::mutex> report(k.reportMu);
    std::vector<void*> streams;
    {
      std::lock_guard<std::mutex> g(k.mu);
      if (k.reported) return;
      k.reported = true;
      streams = k.streams;
    }
    Error why(Errc::InvalidUsage, "the communicator was aborted");
    try {
      c->check();
    } catch (const Error& e) {
      why = e;
    }
    noteStreamError(streams, "a collective on a CUDA stream", why);
    c->setLastError(std::string("a collective on a CUDA stream: ") + why.what());
  }
}

// Sets up the device-initiated collectives: collective over the communicator (its first call
// that fits), in the caller's thread.
void setupKernels(horaComm* c, CommState& st) {
  CommState::Kernels& k = st.k;
  // The same on every rank (one host: one build, one device mode).
  // On a GPU, enough blocks for a large call to stream at the memory's rate (each block an SM);
  // on the emulated one, two (the multi-block protocol is what it tests).
  k.layout.blocks = cuda::emulated() ? 2 : 32;
  k.layout.slotBytes = cuda::emulated() ? size_t(256) << 10 : size_t(512) << 10;
  std::string why;
  int32_t ok = 1;
  try {
    k.region = static_cast<uint8_t*>(cuda::deviceAlloc(k.layout.bytes()));
    retainRegion(k.region);
    // Counters and LL flags start at 0 (the slots need nothing).
    const size_t head = k.layout.slotAt(0, 0, 0);
    // (From pageable memory, on the worker's stream: nothing here may free pinned memory, which
    // may wait for every stream, one of which may be waiting for this very call.)
    std::vector<uint8_t> zeros(head, 0);
    cuda::copyAsync(k.region, zeros.data(), head, st.copyStream);
    cuda::streamSync(st.copyStream);
    k.status = static_cast<gpu::Status*>(cuda::hostAlloc(sizeof(gpu::Status)));
    memset(k.status, 0, sizeof(gpu::Status));
    k.statusOnDevice = static_cast<gpu::Status*>(cuda::mappedPointer(k.status));
  } catch (const Error& e) {
    ok = 0;
    why = e.what();
  }
  std::string sharing;
  k.regions = exchangeRegions(c, st, k.region, k.opened, &ok, &why, &k.retained, &sharing, &k.clique);
  if (!sharing.empty()) {
    // Processes take turns on a GPU (without MPS): a kernel that spins for another's would
    // hold the GPU through its turn. Every rank sees the same UUIDs, so every one says this.
    ok = 0;
    why = sharing + ", which a kernel spinning for a time-sliced peer would hold through its turn (streams wait "
          "on memory instead)";
  }
  if (everyRank(c, ok)) {
    k.state = Ipc::On;
    if (k.clique.size() > 1) {
      k.cliqueAt = static_cast<size_t>(std::find(k.clique.begin(), k.clique.end(), c->rank) - k.clique.begin());
      k.gate = gateFor(k.regions[static_cast<size_t>(k.clique[0])], k.clique.size());
      OnDevice on(st.device);
      k.ownStream = cuda::streamCreate();
    }
    k.watchdog = std::thread(watchKernels, c, &st);
    {
      std::lock_guard<std::mutex> lock(gKernelCommsMu);
      kernelComms().emplace_back(c, &st);
    }
    HORA_INFO(log::kInit, "rank %d: collectives on device buffers are kernels on the caller's stream, between the %d "
              "ranks of this host (device %d, %d blocks, %zu KiB slots, LL up to %zu KiB)", c->rank, c->nranks,
              st.device, k.layout.blocks, k.layout.slotBytes >> 10, gpu::kLlBytes >> 10);
    return;
  }
  k.state = Ipc::Off;
  HORA_INFO(log::kInit, "rank %d: no device-initiated collectives (%s); the communicator's worker runs them", c->rank,
            why.empty() ? "another rank could not map every region" : why.c_str());
  for (void* p : k.opened) cuda::ipcClose(p);
  k.opened.clear();
  for (uint8_t* p : k.retained) releaseRegion(p);
  k.retained.clear();
}

// Queues (stream) or runs (null: on the legacy default stream, waiting for it) a call as a
// device-initiated collective; false where it does not go that way.
}  // namespace

std::shared_ptr<KernelGate> gateFor(const void* key, size_t members) {
  static std::mutex mu;
  static std::map<const void*, std::weak_ptr<KernelGate>> gates;
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = gates.begin(); it != gates.end();) it = it->second.expired() ? gates.erase(it) : std::next(it);
  std::shared_ptr<KernelGate> g = gates[key].lock();
  if (!g) {
    g = std::make_shared<KernelGate>(members);
    gates[key] = g;
  }
  return g;
}

namespace {

// Waits until every rank of this rank's clique has come to call n (kernel_gate.h), which this
// rank has entered.
void awaitClique(horaComm* c, CommState::Kernels& k, uint64_t n) {
  const int r = k.gate->await(n, [c] { return c->aborting.load(); }, c->opts.timeout);
  if (r == 0) return;
  c->check();
  if (r < 0) fail(Errc::InvalidUsage, "the communicator was aborted");
  const int late = k.clique[static_cast<size_t>(r - 1)];
  const Error e(Errc::Timeout,
                format("Timed out: %s did not come to this communicator's call #%llu on a CUDA stream within %lld ms "
                       "(ranks of one process on one GPU queue a call only once every one of them has come to it: "
                       "their kernels wait for each other on the GPU)",
                       c->peers[static_cast<size_t>(late)].name().c_str(), static_cast<unsigned long long>(n),
                       static_cast<long long>(c->opts.timeout.count())));
  c->fail(e);
  throw e;
}

// One rank: a collective's result is its input, so the call is a copy on the stream (none in
// place), at the copy engine's rate and with nothing to set up. Nothing can wait, so the flight
// recorder has it finished once queued.
void viaCopy(horaComm* c, const coll::Args& a, const Where& w, void* stream) {
  c->check();
  CommState& st = stateOf(c);
  OnDevice on(st.device);
  if (w.in && w.out && w.in != w.out) cuda::copyAsync(w.out, w.in, a.count * dataTypeSize(a.dtype), stream);
  ++c->calls;
  if (c->trace) c->trace->finish(c->trace->startOnDevice(a), true);
  if (!stream) cuda::streamSync(nullptr);
}

bool viaKernel(horaComm* c, const coll::Args& a, const Where& w, void* stream, bool lone) {
  if (!kernelFits(c, a, w)) return false;
  if (c->nranks == 1) {
    viaCopy(c, a, w, stream);
    return true;
  }
  CommState& st = stateOf(c);
  CommState::Kernels& k = st.k;
  if (k.state == Ipc::Unknown) {
    if (!lone) return false;
    if (stream && cuda::isCapturing(stream))
      fail(Errc::InvalidUsage, "the first collective on device buffers of a communicator sets up its device memory "
           "with its peers and cannot be captured in a CUDA graph: make one such call before the capture");
    awaitStreamWork(c);  // the worker idle: the set-up's collectives go first everywhere
    OnDevice on(st.device);
    setupKernels(c, st);
  }
  if (k.state != Ipc::On) return false;
  c->check();
  gpu::Desc d;
  switch (a.kind) {
    case coll::Kind::AllReduce: d.coll = gpu::Coll::AllReduce; break;
    case coll::Kind::Broadcast: d.coll = gpu::Coll::Broadcast; break;
    case coll::Kind::Reduce: d.coll = gpu::Coll::Reduce; break;
    case coll::Kind::AllGather: d.coll = gpu::Coll::AllGather; break;
    default: d.coll = gpu::Coll::ReduceScatter; break;
  }
  d.rank = c->rank;
  d.nranks = c->nranks;
  d.root = a.root;
  d.esize = dataTypeSize(a.dtype);
  d.bytes = a.count * d.esize;
  d.send = w.in;
  d.recv = w.out;
  for (int j = 0; j < c->nranks; ++j) d.regions[j] = k.regions[static_cast<size_t>(j)];
  d.layout = k.layout;
  d.status = k.statusOnDevice;
  d.timeoutNs = static_cast<uint64_t>(c->opts.timeout.count()) * 1000000u;
  d.dtype = static_cast<int>(a.dtype);
  d.op = static_cast<int>(a.op);
  d.divide = a.op == RedOp::Avg;
  d.divisor = static_cast<uint64_t>(c->nranks);
  d.tag = coll::makeTag(a) | 1;
  d.ll = gpu::fitsLl(d.coll, d.bytes, d.nranks);
  d.blocks = gpu::blocksFor(d);
  if (d.coll == gpu::Coll::Broadcast && c->rank != a.root) d.send = nullptr;
  {
    std::lock_guard<std::mutex> lock(k.mu);
    if (stream && std::find(k.streams.begin(), k.streams.end(), stream) == k.streams.end()) k.streams.push_back(stream);
  }
  try {
    OnDevice on(st.device);
    // A communicator's kernels run one after another, whichever streams they are queued on: each
    // reads the numbers the one before it left. A call on another stream than the last waits
    // for the last one's event (on the GPU: no host wait). A captured call does not (a graph
    // cannot wait for work outside it): its order is the caller's, as with NCCL.
    const bool capturing = stream && cuda::isCapturing(stream);
    if (k.gate && !stream) {  // (a stream's call: at enqueue)
      k.gate->enter(k.cliqueAt, ++k.gated);
      awaitClique(c, k, k.gated);
    }
    // The legacy stream is every thread's: a clique's kernels on it would queue one behind the
    // other, the first spinning for the second. Such a call runs on the rank's own stream, after
    // what the legacy stream holds.
    void* target = stream;
    if (!stream && k.ownStream) {
      void* e = st.takeEvent();
      cuda::eventRecord(e, nullptr);
      cuda::streamWaitEvent(k.ownStream, e);
      st.giveEvent(e);
      target = k.ownStream;
    }
    if (k.lastSet && k.last != target && !capturing) cuda::streamWaitEvent(target, k.lastDone);
    cuda::collectiveAsync(d, target);
    if (!capturing) {
      if (!k.lastDone) k.lastDone = st.takeEvent();
      cuda::eventRecord(k.lastDone, target);
      k.last = target;
      k.lastSet = true;
    }
  } catch (const Error& e) {
    // The peers' numbers have moved on with this call: the communicator cannot go on.
    if (!c->aborting.load()) c->fail(e);
    throw;
  }
  ++k.calls;  // (the kernel's own number, outside a graph's replays)
  const uint64_t launched = k.blocks.fetch_add(static_cast<uint64_t>(d.blocks)) + static_cast<uint64_t>(d.blocks);
  k.recent[k.calls % k.recent.size()] = {k.calls, a};
  ++c->calls;
  trace::Entry* entry = c->trace ? c->trace->startOnDevice(a) : nullptr;
  if (stream) {
    if (entry) {
      std::lock_guard<std::mutex> lock(k.mu);
      k.traced.emplace_back(entry, launched);
    }
    return true;
  }
  OnDevice on(st.device);
  cuda::streamSync(k.ownStream);  // (null: the legacy stream)
  if (c->trace)
    c->trace->finish(entry, !gpu::sumOf(k.status->cut) && !__atomic_load_n(&k.status->code, __ATOMIC_ACQUIRE));
  reportKernels(c, st);
  c->check();
  if (__atomic_load_n(&k.status->abort, __ATOMIC_ACQUIRE)) fail(Errc::InvalidUsage, "the communicator was aborted");
  return true;
}

// Waits for an event (the caller's own work: no deadline), backing off from yielding to
// sleeping, and giving up when the communicator, if any, is aborted.
void awaitEvent(void* e, const horaComm* c) {
  unsigned idle = 0;
  while (!cuda::eventDone(e)) {
    if (c && c->aborting.load()) fail(Errc::InvalidUsage, "the communicator was aborted");
    if (++idle < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(idle < 1024 ? 10 : 200));
  }
}

// Waits for the work queued on the user's streams before a call.
void awaitEvents(horaComm* c, const std::vector<void*>& events) {
  for (void* e : events) awaitEvent(e, c);
}

// Waits for everything queued before now on the legacy default stream, which waits for the
// work of every blocking stream queued before it: what a synchronous call with device buffers
// must see.
void awaitLegacyStream(const horaComm* c, CommState& st) {
  void* ev = st.takeEvent();
  struct Give {
    CommState& st;
    void* ev;
    ~Give() { st.giveEvent(ev); }
  } give{st, ev};
  cuda::eventRecord(ev, nullptr);
  awaitEvent(ev, c);
}

// How calls with device buffers will run, settled in the caller's thread (where a collective
// set-up and CUDA allocations are safe): through the IPC stage, or staged through pinned blocks
// taken here and given back when it goes.
struct Staging {
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  Calls calls;  // pinned buffers in place of the device ones
  std::vector<Copy> ins, outs;
  std::vector<std::pair<CommState*, uint8_t*>> taken;
  bool ipc = false;
  Staging() = default;
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    for (auto& [st, b] : taken) st->give(b);
  }
};

// `lone`: the calls are the whole of what the caller submitted (not one communicator's part of
// a group over several, whose other parts may be this very thread's to submit: a collective
// set-up here would wait for them).
std::unique_ptr<Staging> stagingFor(const Calls& calls, const std::vector<Where>& ws, bool lone) {
  auto p = std::make_unique<Staging>();
  p->calls = calls;
  if (calls.size() == 1 && ipcFits(calls[0].first, calls[0].second, ws[0])) {
    horaComm* c = calls[0].first;
    CommState& st = stateOf(c);
    if (st.ipc == Ipc::Unknown && lone) {
      awaitStreamWork(c);  // the worker idle: nothing of this communicator's is queued on a stream
      OnDevice on(st.device);
      setupIpc(c, st);
    }
    if (st.ipc == Ipc::On) {
      p->calls[0].second.deviceIpc = true;
      p->ipc = true;
      return p;
    }
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const Where& w = ws[i];
    if (!w.any()) continue;
    CommState& st = stateOf(calls[i].first);
    coll::Args& a = p->calls[i].second;
    const auto lo = [](const void* q) { return reinterpret_cast<uintptr_t>(q); };
    const bool both = w.inDev >= 0 && w.outDev >= 0;
    if (both && lo(w.in) < lo(w.out) + w.outBytes && lo(w.out) < lo(w.in) + w.inBytes) {
      // In place (or a rank's slice of the other): one block for both, the same offsets.
      const uintptr_t base = std::min(lo(w.in), lo(w.out));
      const uintptr_t end = std::max(lo(w.in) + w.inBytes, lo(w.out) + w.outBytes);
      uint8_t* b = st.take(end - base);
      p->taken.emplace_back(&st, b);
      a.sendbuf = b + (lo(w.in) - base);
      a.recvbuf = b + (lo(w.out) - base);
      p->ins.push_back(Staging::Copy{b + (lo(w.in) - base), w.in, w.inBytes});
      p->outs.push_back(Staging::Copy{w.out, b + (lo(w.out) - base), w.outBytes});
      continue;
    }
    if (w.inDev >= 0) {
      uint8_t* b = st.take(w.inBytes);
      p->taken.emplace_back(&st, b);
      a.sendbuf = b;
      p->ins.push_back(Staging::Copy{b, w.in, w.inBytes});
    }
    if (w.outDev >= 0) {
      uint8_t* b = st.take(w.outBytes);
      p->taken.emplace_back(&st, b);
      a.recvbuf = b;
      p->outs.push_back(Staging::Copy{w.out, b, w.outBytes});
    }
  }
  return p;
}

// Microseconds since t, for the trace of a stream call's phases (HORA_DEBUG=TRACE).
// Only read when the trace is on: no clock reads on the call's path otherwise.
bool tracing() { return log::enabled(log::Level::Trace, log::kColl); }
long long usSince(Clock::time_point t) {
  if (!tracing()) return 0;
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
}

// Runs a staging, its copies on `stream` (null: the legacy default stream, after waiting for it).
// Nothing of it is in flight when this returns or throws.
void execute(Staging& p, void* stream) {
  if (p.ipc) {
    horaComm* c = p.calls[0].first;
    CommState& st = stateOf(c);
    if (!stream) awaitLegacyStream(c, st);  // (a worker has waited for the streams' events)
    try {
      hora::runOnStage(c, p.calls[0].second, *st.stage, *st.engine);
    } catch (...) {
      st.engine->reset();
      throw;
    }
    st.lastIpcChunk = c->stageSeq;
    return;
  }
  try {
    const Clock::time_point t0 = tracing() ? Clock::now() : Clock::time_point();
    for (const Staging::Copy& k : p.ins) cuda::copyAsync(k.dst, k.src, k.bytes, stream);
    if (!p.ins.empty()) cuda::streamSync(stream);
    const long long in = usSince(t0);
    hora::runCalls(p.calls);
    const long long call = usSince(t0) - in;
    for (const Staging::Copy& k : p.outs) cuda::copyAsync(k.dst, k.src, k.bytes, stream);
    if (!p.outs.empty()) cuda::streamSync(stream);
    HORA_TRACE(log::kColl, "staged %s: copies in %lld us, the call %lld us, copies out %lld us",
               coll::describe(p.calls[0].second).c_str(), in, call, usSince(t0) - in - call);
  } catch (...) {
    cuda::streamSyncQuiet(stream);  // no copy may still touch a block given back
    throw;
  }
}

// A call on CUDA streams failed: before the streams go on (whoever looks once they have must see
// it), the failure becomes the streams' (horaStreamSynchronize), the communicator's (its error
// state: every later call, horaCommGetAsyncError; the peers hear of it) and its last error.
void failed(horaComm* c, const std::vector<void*>& streams, const char* fn, const Error& e) {
  noteStreamError(streams, fn, e);
  if (!c->aborting.load()) c->fail(e);
  c->setLastError(std::string(fn) + " (on a CUDA stream): " + e.what());
}

}  // namespace

StreamRef resolve(const void* handle) {
  StreamRef r;
  if (!handle) return r;
  if ((r.host = HostStream::find(handle))) return r;
  if (cuda::usable() && cuda::isStream(handle)) {
    r.cuda = const_cast<void*>(handle);
    return r;
  }
  if (!cuda::usable())
    fail(Errc::InvalidArgument, "stream %p is not a live host stream from horaStreamCreate, and it cannot be a "
         "CUDA stream: %s (NULL means synchronous)", handle, cuda::unusableWhy().c_str());
  fail(Errc::InvalidArgument, "stream %p is neither a live host stream from horaStreamCreate nor a CUDA stream "
       "(NULL means synchronous)", handle);
}

void readScalars(Calls& calls, void* stream) {
  for (auto& call : calls) {
    coll::Args& a = call.second;
    if (!a.scalarAt) continue;
    alignas(16) unsigned char value[16] = {0};
    const size_t e = dataTypeSize(a.dtype);
    if (cuda::usable() && cuda::deviceOf(a.scalarAt) >= 0) {
      cuda::copyAsync(value, a.scalarAt, e, stream);
      cuda::streamSync(stream);
    } else {
      memcpy(value, a.scalarAt, e);
    }
    a.scalar = kernels::scalarFromBytes(value, a.dtype);
    a.scalarAt = nullptr;
  }
}

void runSync(const Calls& calls) {
  for (const auto& call : calls)
    if (call.second.scalarAt) {
      // A scalar in memory (horaScalarDevice): read now, after the work queued before the call
      // (the legacy default stream's order, as the call's own copies).
      Calls read = calls;
      readScalars(read, nullptr);
      return runSync(read);
    }
  if (!cuda::usable()) return hora::runCalls(calls);
  thread_local std::vector<Where> ws;
  if (!anyOnDevice(calls, ws)) return hora::runCalls(calls);
  if (calls.size() == 1 && viaKernel(calls[0].first, calls[0].second, ws[0], nullptr, true)) return;
  OnDevice on(stateOf(calls[0].first).device);
  std::unique_ptr<Staging> p = stagingFor(calls, ws, true);
  execute(*p, nullptr);
}

void runSyncOne(horaComm* c, const coll::Args& a) {
  if (!a.scalarAt && !cuda::usable()) return hora::runOne(c, a);
  thread_local Calls one(1);
  one[0] = {c, a};
  runSync(one);
}

void enqueue(const char* fn, const Calls& calls, const std::vector<void*>& streams) {
  std::vector<void*> distinct;
  for (void* s : streams)
    if (std::find(distinct.begin(), distinct.end(), s) == distinct.end()) distinct.push_back(s);
  std::vector<horaComm*> comms;
  for (const auto& call : calls)
    if (std::find(comms.begin(), comms.end(), call.first) == comms.end()) comms.push_back(call.first);
  // Ranks as threads of one GPU: whatever a call queues on its stream (a kernel, or a wait for
  // the worker) may wait on the GPU for another rank of the clique's same call, so it is queued
  // once every one of them has come to it (kernel_gate.h). (A capture queues nothing that runs.)
  bool capturing = false;
  for (void* s : distinct) capturing = capturing || cuda::isCapturing(s);
  if (!capturing) {
    for (horaComm* c : comms) {
      CommState::Kernels& k = stateOf(c).k;
      if (k.gate) k.gate->enter(k.cliqueAt, ++k.gated);
    }
    for (horaComm* c : comms) {
      CommState::Kernels& k = stateOf(c).k;
      if (k.gate) awaitClique(c, k, k.gated);
    }
  }
  // First, everything that may fail or wait (arguments, set-up, staging memory), before any
  // stream is touched.
  struct Item {
    horaComm* c;
    CommState* st;
    Calls calls;
    std::shared_ptr<Staging> staging;  // null: host buffers only
    std::vector<void*> events;
    std::vector<char> pooled;  // events[i] is from st's pool (a stream of its device), else its own
  };
  // An event goes back to its communicator's pool, or (another device's) to be destroyed by a
  // later caller.
  const auto release = [](CommState& st, const std::vector<void*>& events, const std::vector<char>& pooled) {
    for (size_t i = 0; i < events.size(); ++i) {
      if (pooled[i]) st.giveEvent(events[i]);
      else st.retireForeign(events[i]);
    }
  };
  if (calls.size() == 1 && distinct.size() == 1 && !calls[0].second.scalarAt) {
    std::vector<Where> ws;
    if (anyOnDevice(calls, ws) && viaKernel(calls[0].first, calls[0].second, ws[0], distinct[0], true)) return;
  }
  // What goes through the worker waits on the host for the streams' events, which a CUDA graph
  // being captured does not record for the host to see.
  for (void* s : distinct)
    if (cuda::isCapturing(s))
      fail(Errc::InvalidUsage, "%s on CUDA stream %p cannot be captured in a CUDA graph: only a lone collective "
           "(AllReduce, Broadcast, Reduce, AllGather, ReduceScatter; not PreMulSum) whose buffers are all on the "
           "device, between ranks of one host, is a kernel on the stream; this one needs the communicator's worker",
           fn, s);
  std::vector<Item> items;
  for (horaComm* c : comms) {
    Item it{c, &stateOf(c), {}, nullptr, {}, {}};
    it.st->destroyRetired();
    for (const auto& call : calls)
      if (call.first == c) it.calls.push_back(call);
    std::vector<Where> ws;
    if (anyOnDevice(it.calls, ws)) {
      OnDevice on(it.st->device);
      it.staging = stagingFor(it.calls, ws, comms.size() == 1);
    }
    items.push_back(std::move(it));
  }
  // Then one event per stream and communicator, recorded under the stream's device; then every
  // worker's work; then the streams' waits, only once every worker has its work (a stream of a
  // group over several communicators must not wait for one before the others' events exist).
  try {
    for (Item& it : items)
      for (void* s : distinct) {
        const int dev = cuda::streamDevice(s);
        OnDevice on(dev);
        const bool mine = dev == it.st->device;
        it.events.push_back(mine ? it.st->takeEvent() : cuda::eventCreate());
        it.pooled.push_back(mine);
        cuda::eventRecord(it.events.back(), s);
      }
  } catch (...) {
    for (Item& it : items) release(*it.st, it.events, it.pooled);
    throw;
  }
  std::vector<uint32_t> seqs;
  for (Item& it : items) {
    CommState& st = *it.st;
    std::lock_guard<std::mutex> lock(st.enqueueMu);
    const uint32_t seq = ++st.seq;
    seqs.push_back(seq);
    horaComm* c = it.c;
    st.worker->enqueue(fn, it.calls, [c, &st, calls = it.calls, staging = it.staging, events = it.events,
                                      pooled = it.pooled, distinct, seq, fn, release,
                                      queued = tracing() ? Clock::now() : Clock::time_point()] {
      struct Done {  // whatever happens, the streams go on (first), and the events go back
        CommState& st;
        const std::vector<void*>& events;
        const std::vector<char>& pooled;
        uint32_t seq;
        decltype(release)& give;
        ~Done() {
          __atomic_store_n(st.flag, seq, __ATOMIC_RELEASE);
          give(st, events, pooled);
        }
      } done{st, events, pooled, seq, release};
      try {
        OnDevice on(st.device, false);
        const long long picked = usSince(queued);
        awaitEvents(c, events);
        const long long ready = usSince(queued);
        for (const auto& call : calls)
          if (call.first->aborting.load()) fail(Errc::InvalidUsage, "the communicator was aborted");
        if (staging) {
          readScalars(staging->calls, st.copyStream);
          execute(*staging, st.copyStream);
        } else {
          Calls run = calls;
          readScalars(run, st.copyStream);
          hora::runCalls(run);
        }
        HORA_TRACE(log::kColl, "%s #%u on a CUDA stream: taken up %lld us after it was queued, the stream's work "
                   "before it done at %lld us, the call done at %lld us", fn, seq, picked, ready, usSince(queued));
        return;
      } catch (const Error& e) {
        failed(c, distinct, fn, e);
      } catch (const std::bad_alloc&) {
        failed(c, distinct, fn, Error(Errc::System, "out of memory"));
      } catch (const std::exception& e) {
        failed(c, distinct, fn, Error(Errc::Internal, std::string("internal error: ") + e.what()));
      }
    });
  }
  for (size_t i = 0; i < items.size(); ++i)
    for (void* s : distinct) {
      OnDevice on(cuda::streamDevice(s));
      cuda::streamWaitFlag(s, items[i].st->flag, seqs[i], config().cudaWaitKernel);
    }
}

bool kernelsActive(horaComm* c) {
  std::lock_guard<std::mutex> lock(c->deviceMu);
  return c->device && c->device->k.state == Ipc::On;
}

bool ipcActive(horaComm* c) {
  std::lock_guard<std::mutex> lock(c->deviceMu);
  return c->device && c->device->ipc == Ipc::On;
}

namespace {
// The failures of the kernels queued on `stream`, settled now.
void settleStream(void* stream) {
  std::lock_guard<std::mutex> lock(gKernelCommsMu);
  for (auto& [c, st] : kernelComms()) {
    bool on = false;
    {
      std::lock_guard<std::mutex> g(st->k.mu);
      on = std::find(st->k.streams.begin(), st->k.streams.end(), stream) != st->k.streams.end();
    }
    if (on) settleKernels(c, *st);
  }
}
}  // namespace

void synchronize(void* stream) {
  cuda::streamSync(stream);
  settleStream(stream);
  takeStreamError(stream);
}

bool query(void* stream) {
  if (!cuda::streamDone(stream)) return false;
  settleStream(stream);
  takeStreamError(stream);
  return true;
}

}  // namespace hora::device
