#include "comm/device.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "base/host.h"
#include "base/log.h"
#include "comm/config.h"
#include "comm/device_state.h"
#include "core/device_copies.h"
#include "kernels/cpu/scalar.h"
#include "transports/stage.h"

namespace hora::device {

namespace {

// The first unreported failure of the library's work on each CUDA stream.
std::mutex gErrorsMu;
std::unordered_map<void*, Error>& streamErrors() {
  static auto* m = new std::unordered_map<void*, Error>();  // never destroyed: workers may outlive exit
  return *m;
}

void takeStreamError(void* s) {
  std::lock_guard<std::mutex> lock(gErrorsMu);
  auto it = streamErrors().find(s);
  if (it == streamErrors().end()) return;
  Error e = it->second;
  streamErrors().erase(it);
  throw e;
}

}  // namespace

void noteStreamError(const std::vector<void*>& streams, const char* fn, const Error& e) {
  std::lock_guard<std::mutex> lock(gErrorsMu);
  for (void* s : streams)
    streamErrors().emplace(s, Error(e.code(), format("%s (on CUDA stream %p): %s", fn, s, e.what())));
}

// The peers may still be reading this rank's region for the last chunk (their copies out of
// its out-slots): wait, a while at most, until each has said it is done with it, or is gone.
void CommState::awaitPeersDone() {
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

CommState::~CommState() {
  worker.reset();
  endKernels();
  try {
    engine.reset();
    copier_.reset();
    awaitPeersDone();
    stage.reset();  // (its regions with it)
    k.regions.close();
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

void destroy(CommState* s) { delete s; }

core::DeviceEngine& CommState::copier() {
  std::lock_guard<std::mutex> lock(poolMu);
  if (!copier_) copier_ = std::make_unique<core::DeviceEngine>(device);
  return *copier_;
}

int commDevice(int given) {
  if (given >= 0) return given;
  return cuda::usable() ? cuda::currentDevice() : -1;
}

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
    // (A GPU none of the built code runs on: copies and bouncing still work; a reduction
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


Where where(const horaComm* c, const coll::Args& a) {
  Where w;
  const size_t e = dataTypeSize(a.dtype), one = a.count * e, all = one * static_cast<size_t>(c->self().nranks);
  switch (a.kind) {
    case coll::Kind::AllReduce: w = {a.sendbuf, one, a.recvbuf, one}; break;
    case coll::Kind::Broadcast: w = {c->self().rank == a.root ? a.sendbuf : nullptr, one, a.recvbuf, one}; break;
    case coll::Kind::Reduce: w = {a.sendbuf, one, c->self().rank == a.root ? a.recvbuf : nullptr, one}; break;
    case coll::Kind::AllGather: w = {a.sendbuf, one, a.recvbuf, all}; break;
    case coll::Kind::ReduceScatter: w = {a.sendbuf, all, a.recvbuf, one}; break;
    case coll::Kind::AllToAll: w = {a.sendbuf, all, a.recvbuf, all}; break;
    case coll::Kind::Send: w = {a.sendbuf, one, nullptr, 0}; break;
    case coll::Kind::Recv: w = {nullptr, 0, a.recvbuf, one}; break;
    case coll::Kind::Barrier: return w;
    // Only the root's big buffer holds every block; elsewhere that buffer is not used.
    case coll::Kind::Gather:
      w = {a.sendbuf, one, c->self().rank == a.root ? a.recvbuf : nullptr, c->self().rank == a.root ? all : 0};
      break;
    case coll::Kind::Scatter:
      w = {c->self().rank == a.root ? a.sendbuf : nullptr, c->self().rank == a.root ? all : 0, a.recvbuf, one};
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

namespace {

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
         c->self().nranks > 1 && c->self().nranks <= kernels::kMaxSources && c->stage && c->stage->size() == c->self().nranks;
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
// set-up and CUDA allocations are safe): through the IPC stage, or bounced through pinned blocks
// taken here and given back when it goes.
struct Bounce {
  Calls calls;  // pinned buffers in place of the device ones
  // By call: its copies between the device buffers and the blocks, as ops of its program
  // (core/device_copies.h), on its communicator's copy engine.
  std::vector<core::DeviceCopies> copies;
  std::vector<std::pair<CommState*, uint8_t*>> taken;
  bool ipc = false;
  Bounce() = default;
  Bounce(const Bounce&) = delete;
  Bounce& operator=(const Bounce&) = delete;
  ~Bounce() {
    for (auto& [st, b] : taken) st->give(b);
  }
};

// `lone`: the calls are the whole of what the caller submitted (not one communicator's part of
// a group over several, whose other parts may be this very thread's to submit: a collective
// set-up here would wait for them).
std::unique_ptr<Bounce> bounceFor(const Calls& calls, const std::vector<Where>& ws, bool lone) {
  auto p = std::make_unique<Bounce>();
  p->calls = calls;
  if (calls.size() == 1 && ipcFits(calls[0].first, calls[0].second, ws[0])) {
    horaComm* c = calls[0].first;
    CommState& st = stateOf(c);
    if (st.ipc == Ipc::Unknown && lone) {
      awaitStreamWork(c);  // the worker idle: nothing of this communicator's is queued on a stream
      OnDevice on(st.device);
      setupStage(c, st);
    }
    if (st.ipc == Ipc::On) {
      p->calls[0].second.deviceIpc = true;
      p->ipc = true;
      return p;
    }
  }
  p->copies.resize(calls.size());
  std::vector<std::pair<core::DeviceEngine*, size_t>> copiers;  // and the copies each may hold in flight
  for (size_t i = 0; i < calls.size(); ++i) {
    const Where& w = ws[i];
    if (!w.any()) continue;
    CommState& st = stateOf(calls[i].first);
    coll::Args& a = p->calls[i].second;
    core::DeviceCopies& dc = p->copies[i];
    core::DeviceEngine& copier = st.copier();
    dc.engine = &copier;
    auto it = std::find_if(copiers.begin(), copiers.end(), [&](const auto& e) { return e.first == &copier; });
    if (it == copiers.end()) it = copiers.insert(copiers.end(), {&copier, 0});
    it->second += 2 * core::kMaxCopyChunks + 2;  // (each way at most kMaxCopyChunks and a copy's rest)
    dc.chunkBytes = config().cudaBounceChunk;
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
      dc.ins.push_back(core::DeviceCopy{b + (lo(w.in) - base), w.in, w.inBytes});
      dc.outs.push_back(core::DeviceCopy{w.out, b + (lo(w.out) - base), w.outBytes});
      continue;
    }
    if (w.inDev >= 0) {
      uint8_t* b = st.take(w.inBytes);
      p->taken.emplace_back(&st, b);
      a.sendbuf = b;
      dc.ins.push_back(core::DeviceCopy{b, w.in, w.inBytes});
    }
    if (w.outDev >= 0) {
      uint8_t* b = st.take(w.outBytes);
      p->taken.emplace_back(&st, b);
      a.recvbuf = b;
      dc.outs.push_back(core::DeviceCopy{w.out, b, w.outBytes});
    }
  }
  for (auto& [copier, events] : copiers) copier->reserve(events);
  return p;
}

// Microseconds since t, for the trace of a stream call's phases (HORA_DEBUG=TRACE).
// Only read when the trace is on: no clock reads on the call's path otherwise.
bool tracing() { return log::enabled(log::Level::Trace, log::kColl); }
long long usSince(Clock::time_point t) {
  if (!tracing()) return 0;
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t).count());
}

// Runs a bounce: with `stream` null, on the legacy default stream's behalf (after what was
// queued there; a worker has waited for its streams' events instead). Nothing of it is in
// flight when this returns or throws.
void execute(Bounce& p, void* stream) {
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
    st.lastIpcChunk = c->seq.stageSeq;
    return;
  }
  // The copies run on each communicator's copy engine, a stream of its own: on the legacy
  // default stream's behalf, after what was queued there before.
  if (!stream) awaitLegacyStream(p.calls[0].first, stateOf(p.calls[0].first));
  const Clock::time_point t0 = tracing() ? Clock::now() : Clock::time_point();
  hora::runCalls(p.calls, &p.copies);
  HORA_TRACE(log::kColl, "bounced %s: %lld us, copies included", coll::describe(p.calls[0].second).c_str(),
             usSince(t0));
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
  if (calls.size() > 1 && viaKernels(calls[0].first, calls, ws, nullptr, true)) return;
  OnDevice on(stateOf(calls[0].first).device);
  std::unique_ptr<Bounce> p = bounceFor(calls, ws, true);
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
  bool gated = false, capturing = false;
  for (horaComm* c : comms) gated = gated || stateOf(c).k.gate;
  if (gated)
    for (void* s : distinct) capturing = capturing || cuda::isCapturing(s);
  if (gated && !capturing) {
    for (horaComm* c : comms) {
      CommState::Kernels& k = stateOf(c).k;
      if (k.gate) k.gate->enter(k.cliqueAt, ++k.gated);
    }
    for (horaComm* c : comms) {
      CommState::Kernels& k = stateOf(c).k;
      if (k.gate) awaitClique(c, k, k.gated);
    }
  }
  // First, everything that may fail or wait (arguments, set-up, bounce memory), before any
  // stream is touched.
  struct Item {
    horaComm* c;
    CommState* st;
    Calls calls;
    std::shared_ptr<Bounce> bouncing;  // null: host buffers only
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
  if (distinct.size() == 1 && comms.size() == 1 && !calls[0].second.scalarAt) {
    std::vector<Where> ws;
    if (anyOnDevice(calls, ws) && (calls.size() == 1 ? viaKernel(calls[0].first, calls[0].second, ws[0], distinct[0], true)
                                                     : viaKernels(calls[0].first, calls, ws, distinct[0], true)))
      return;
  }
  // What goes through the worker waits on the host for the streams' events, which a CUDA graph
  // being captured does not record for the host to see.
  for (void* s : distinct)
    if (cuda::isCapturing(s))
      fail(Errc::InvalidUsage, "%s on CUDA stream %p cannot be captured in a CUDA graph: only calls whose buffers are all on the "
           "device, between ranks of one host (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, not PreMulSum; "
           "send/recv; a group of at most 16 such calls of one communicator, its reductions of one type and op), are a "
           "kernel on the stream; this one needs the communicator's worker",
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
      it.bouncing = bounceFor(it.calls, ws, comms.size() == 1);
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
    st.worker->enqueue(fn, it.calls, [c, &st, calls = it.calls, bouncing = it.bouncing, events = it.events,
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
        if (bouncing) {
          readScalars(bouncing->calls, st.copyStream);
          execute(*bouncing, st.copyStream);
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

uint64_t kernelLaunches(horaComm* c) {
  std::lock_guard<std::mutex> lock(c->deviceMu);
  return c->device ? c->device->k.launches.load() : 0;
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
