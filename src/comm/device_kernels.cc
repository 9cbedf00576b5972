// The host's side of the device-initiated collectives (gpu/protocol.h): their set-up with the
// peers, the launch of a call (one rank: a copy), the clique's meeting of ranks that share a GPU
// in one process (kernel_gate.h), the watchdog that stops the kernels on a failure, and the
// failures' reports.
#include <array>
#include <cstring>
#include <map>

#include "base/wait.h"
#include "comm/config.h"
#include "comm/device_state.h"

namespace hora::device {

std::mutex gKernelCommsMu;
std::vector<std::pair<horaComm*, CommState*>>& kernelComms() {
  static auto* v = new std::vector<std::pair<horaComm*, CommState*>>();
  return *v;
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
    case coll::Kind::Send:
    case coll::Kind::Recv:
      if (a.peer < 0 || a.peer >= c->self().nranks) return false;
      break;
    default: return false;
  }
  if (a.count == 0 || a.op == RedOp::PreMulSum || a.scalarAt) return false;
  if ((w.in && w.inDev < 0) || (w.out && w.outDev < 0) || (!w.in && !w.out)) return false;
  if (c->self().nranks > gpu::kMaxRanks) return false;
  return c->self().nranks == 1 || (c->stage && c->stage->size() == c->self().nranks);
}

const char* counterName(int counter) {
  switch (counter) {
    case gpu::kIn: return "'in' (a chunk deposited)";
    case gpu::kOut: return "'out' (a chunk's reduced part ready)";
    case gpu::kFreed: return "'freed' (a slot read by all)";
    case gpu::kLlDone: return "'LL done' (a small call's data read)";
    case gpu::kPtrs: return "'buffers' (a direct call's buffers published)";
    case gpu::kDone: return "'done' (a direct call's part written)";
    case gpu::kSent: return "'sent' (a send's chunk deposited for this rank)";
    case gpu::kAcked: return "'acked' (this rank's chunk of a send consumed)";
    default: return "counter";
  }
}

// The error a kernel's status describes, naming the rank it waited for.
Error statusError(const horaComm* c, const CommState& st, const gpu::Status& s) {
  const int peer = s.peer;
  const bool known = peer >= 0 && peer < c->self().nranks && static_cast<size_t>(peer) < c->self().peers.size();
  const std::string who = known ? c->self().peers[static_cast<size_t>(peer)].name() : format("rank %d", peer);
  std::string what = format("call #%llu of this communicator's device collectives", static_cast<unsigned long long>(s.call));
  for (const auto& [no, a] : st.k.recent)
    if (no == s.call && no) what = coll::describe(a) + " (" + what + ")";
  if (s.counter == gpu::kSent || s.counter == gpu::kAcked) what = "a send/recv with this rank on device buffers";
  if (static_cast<gpu::Code>(s.code) == gpu::Code::SizeMismatch)
    return Error(Errc::InvalidUsage, format("mismatched send/recv: %s sends %llu bytes where this rank receives %llu "
                                            "(a send and its receive must have one size)",
                                            who.c_str(), static_cast<unsigned long long>(s.seen),
                                            static_cast<unsigned long long>(s.target)));
  if (static_cast<gpu::Code>(s.code) == gpu::Code::Mismatch)
    return Error(Errc::InvalidUsage, format("mismatched calls: %s is in another collective than this rank's %s (its "
                                            "tag %016llx); every rank must make the same calls in the same order",
                                            who.c_str(), what.c_str(), static_cast<unsigned long long>(s.theirTag)));
  std::string stalled;
  if (known && static_cast<size_t>(peer) < c->self().localPids.size() && c->self().localPids[static_cast<size_t>(peer)])
    stalled = processStalled(c->self().localPids[static_cast<size_t>(peer)]);
  const std::string waited =
      s.counter < 0 ? format("for its data of that call (flag %llu, it is at %llu)", static_cast<unsigned long long>(s.target),
                             static_cast<unsigned long long>(s.seen))
                    : format("for its %s counter to reach %llu (it is at %llu)", counterName(s.counter),
                             static_cast<unsigned long long>(s.target), static_cast<unsigned long long>(s.seen));
  return Error(Errc::Timeout, format("Timed out: %s%s did not go on with %s within %lld ms: this rank's kernel waited %s",
                                     who.c_str(), stalled.empty() ? "" : (" " + stalled + " and").c_str(), what.c_str(),
                                     static_cast<long long>(c->opts.timeout.count()), waited.c_str()));
}

// Whether this is the kernels' first failure report (with k.reportMu held); then `streams`, the
// streams they were queued on.
bool firstReport(CommState::Kernels& k, std::vector<void*>& streams) {
  std::lock_guard<std::mutex> lock(k.mu);
  if (k.reported) return false;
  k.reported = true;
  streams = k.streams;
  return true;
}

// The kernels' failure, once: the communicator's error (its peers hear of it) and the error of
// every stream they were queued on.
void reportKernels(horaComm* c, CommState& st) {
  CommState::Kernels& k = st.k;
  if (!k.status || !__atomic_load_n(&k.status->code, __ATOMIC_ACQUIRE)) return;
  std::lock_guard<std::mutex> report(k.reportMu);
  std::vector<void*> streams;
  if (!firstReport(k, streams)) return;
  const Error e = statusError(c, st, *k.status);
  noteStreamError(streams, "a collective on a CUDA stream", e);
  if (!c->aborting.load()) c->fail(e);
  c->setLastError(e.what());
}

void settleKernels(horaComm* c, CommState& st);

bool kernelsInFlight(const CommState& st) {
  return st.k.status && gpu::sumOf(st.k.status->finished) < st.k.blocks.load();
}

// The members of the stage that the kernels in flight wait on (Kernels::needs), forgetting the
// kernels that have finished.
uint64_t neededMembers(CommState& st) {
  CommState::Kernels& k = st.k;
  const uint64_t finished = gpu::sumOf(k.status->finished);
  std::lock_guard<std::mutex> lock(k.mu);
  return k.needs.inFlight(finished);
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
      std::string gone;
      const uint64_t needed = neededMembers(*st);
      for (int m = 0; m < c->stage->size() && gone.empty(); ++m) {
        if (m == c->stage->index() ||
            (needed != CommState::Kernels::kAllMembers && (m >= 64 || !(needed >> m & 1))))
          continue;
        fds.clear();
        gone = c->stage->arm(m, &relayed, fds);
        c->stage->disarm();
        // A member that closed its communicator posted all it will first: a kernel may have
        // had all it needs of it (a ring's send to it done, the receive from another still
        // waiting), and one that waits for more of it says so when its wait times out, naming
        // it. A member that failed or died without closing is the kernels' failure now.
        if (relayed == Errc::Success && c->stage->closed(m)) gone.clear();
      }
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
    if (!firstReport(k, streams)) return;
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
  // Send/recv: a chunk per peer and block of the first kP2pBlocks blocks, two slots each (16 MiB
  // of the region on a GPU).
  k.layout.p2pBytes = k.layout.slotBytes / 4;
  std::string why;
  uint8_t* region = nullptr;
  try {
    region = gpu::allocateRegion(k.layout.bytes());
    // Counters and LL flags start at 0 (the slots need nothing).
    const size_t head = k.layout.slotAt(0, 0, 0);
    // (From pageable memory, on the worker's stream: nothing here may free pinned memory, which
    // may wait for every stream, one of which may be waiting for this very call.)
    std::vector<uint8_t> zeros(head, 0);
    cuda::copyAsync(region, zeros.data(), head, st.copyStream);
    cuda::streamSync(st.copyStream);
    k.status = static_cast<gpu::Status*>(cuda::hostAlloc(sizeof(gpu::Status)));
    memset(k.status, 0, sizeof(gpu::Status));
    k.statusOnDevice = static_cast<gpu::Status*>(cuda::mappedPointer(k.status));
  } catch (const Error& e) {
    gpu::releaseRegion(region);
    region = nullptr;
    why = e.what();
  }
  k.regions.map(c->self().rank, c->self().nranks, st.device, region, why, exchangeOver(c));
  bool ok = k.regions.ok();
  why = k.regions.why();
  k.clique = k.regions.clique();
  const std::string& sharing = k.regions.sharing();
  if (!sharing.empty()) {
    // Processes take turns on a GPU (without MPS): a kernel that spins for another's would
    // hold the GPU through its turn. Every rank sees the same UUIDs, so every one says this.
    ok = false;
    why = sharing + ", which a kernel spinning for a time-sliced peer would hold through its turn (streams wait "
          "on memory instead)";
  }
  if (everyRank(c, ok)) {
    k.state = Ipc::On;
    if (k.clique.size() > 1) {
      k.cliqueAt = static_cast<size_t>(std::find(k.clique.begin(), k.clique.end(), c->self().rank) - k.clique.begin());
      k.gate = gateFor(k.regions.byRank()[static_cast<size_t>(k.clique[0])], k.clique.size());
      OnDevice on(st.device);
      k.ownStream = cuda::streamCreate();
    }
    k.watchdog = std::thread(watchKernels, c, &st);
    {
      std::lock_guard<std::mutex> lock(gKernelCommsMu);
      kernelComms().emplace_back(c, &st);
    }
    HORA_INFO(log::kInit, "rank %d: collectives on device buffers are kernels on the caller's stream, between the %d "
              "ranks of this host (device %d, %d blocks, %zu KiB slots, LL up to %zu KiB)", c->self().rank, c->self().nranks,
              st.device, k.layout.blocks, k.layout.slotBytes >> 10, gpu::kLlBytes >> 10);
    return;
  }
  k.state = Ipc::Off;
  HORA_INFO(log::kInit, "rank %d: no device-initiated collectives (%s); the communicator's worker runs them", c->self().rank,
            why.empty() ? "another rank could not map every region" : why.c_str());
  k.regions.close();
}

// Queues (stream) or runs (null: on the legacy default stream, waiting for it) a call as a
// device-initiated collective; false where it does not go that way.
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


// Waits until every rank of this rank's clique has come to call n (kernel_gate.h), which this
// rank has entered: the one wait, spinning first only where every rank has a core.
void awaitClique(horaComm* c, CommState::Kernels& k, uint64_t n) {
  if (k.gate->all(n)) return;
  Waiter w(c->opts.timeout, &c->aborting, [c, &k, n] {
    const size_t late = k.gate->late(n);
    const int rank = late < k.clique.size() ? k.clique[late] : c->self().rank;
    return format("%s to come to this communicator's call #%llu on a CUDA stream (ranks of one process on one GPU "
                  "queue a call only once every one of them has come to it: their kernels wait for each other on "
                  "the GPU)",
                  c->self().peers[static_cast<size_t>(rank)].name().c_str(), static_cast<unsigned long long>(n));
  }, c->spinFor);
  try {
    while (!k.gate->all(n)) w.idle([&](milliseconds most) { k.gate->sleep(n, most); });
  } catch (const Error& e) {
    if (c->aborting.load()) {
      c->check();
      throw;
    }
    c->fail(e);
    throw;
  }
}

// One rank: a collective's result is its input, so the call is a copy on the stream (none in
// place), at the copy engine's rate and with nothing to set up. Nothing can wait, so the flight
// recorder has it finished once queued.
void viaCopy(horaComm* c, const coll::Args& a, const Where& w, void* stream) {
  c->check();
  CommState& st = stateOf(c);
  OnDevice on(st.device);
  if (w.in && w.out && w.in != w.out) cuda::copyAsync(w.out, w.in, a.count * dataTypeSize(a.dtype), stream);
  ++c->seq.calls;
  if (c->trace) c->trace->finish(c->trace->startOnDevice(a), true);
  if (!stream) cuda::streamSync(nullptr);
}

// Sets the kernels up where this is their first call (`lone`: it may, as a collective over the
// communicator); whether they are on.
bool kernelsOn(horaComm* c, CommState& st, void* stream, bool lone) {
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
  return k.state == Ipc::On;
}

// The kernel's account of call a (kernelFits).
gpu::Desc descOf(const horaComm* c, const CommState::Kernels& k, const coll::Args& a, const Where& w) {
  gpu::Desc d;
  switch (a.kind) {
    case coll::Kind::AllReduce: d.coll = gpu::Coll::AllReduce; break;
    case coll::Kind::Broadcast: d.coll = gpu::Coll::Broadcast; break;
    case coll::Kind::Reduce: d.coll = gpu::Coll::Reduce; break;
    case coll::Kind::AllGather: d.coll = gpu::Coll::AllGather; break;
    case coll::Kind::Send: d.coll = gpu::Coll::Send; break;
    case coll::Kind::Recv: d.coll = gpu::Coll::Recv; break;
    default: d.coll = gpu::Coll::ReduceScatter; break;
  }
  d.rank = c->self().rank;
  d.nranks = c->self().nranks;
  d.root = gpu::isP2p(d.coll) ? a.peer : a.root;
  d.esize = dataTypeSize(a.dtype);
  d.bytes = a.count * d.esize;
  d.send = w.in;
  d.recv = w.out;
  for (int j = 0; j < c->self().nranks; ++j) d.regions[j] = k.regions.byRank()[static_cast<size_t>(j)];
  d.layout = k.layout;
  d.status = k.statusOnDevice;
  d.timeoutNs = static_cast<uint64_t>(c->opts.timeout.count()) * 1000000u;
  d.dtype = static_cast<int>(a.dtype);
  d.op = static_cast<int>(a.op);
  d.divide = a.op == RedOp::Avg;
  d.divisor = static_cast<uint64_t>(c->self().nranks);
  d.oneGpu = k.clique.size() == static_cast<size_t>(c->self().nranks);
  if (gpu::isP2p(d.coll)) {
    d.blocks = d.layout.p2pBlocks();
    return d;
  }
  d.tag = coll::makeTag(a) | 1;
  d.ll = gpu::fitsLl(d.coll, d.bytes, d.nranks);
  d.direct = d.oneGpu && !d.ll;
  d.blocks = gpu::blocksFor(d);
  if (d.coll == gpu::Coll::Broadcast && c->self().rank != a.root) d.send = nullptr;
  return d;
}

// Queues a kernel (`queue`, given the stream to queue it on) of `calls` whose blocks account for
// `blocks` parts (gpu::account) on `stream`, or runs it (null: on the legacy default stream,
// waiting for it), in the communicator's kernel order.
void launchKernel(horaComm* c, CommState& st, const coll::Args* calls, size_t ncalls, uint64_t blocks, void* stream,
                  const std::function<void(void*)>& queue) {
  CommState::Kernels& k = st.k;
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
    queue(target);
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
  // The members it waits on: a send's or receive's peer, every one for a collective.
  uint64_t needs = c->stage ? 0 : CommState::Kernels::kAllMembers;
  for (size_t i = 0; i < ncalls && needs != CommState::Kernels::kAllMembers; ++i) {
    const coll::Args& a = calls[i];
    const auto& members = c->stage->ranks();
    const auto at = std::find(members.begin(), members.end(), a.peer);
    const size_t m = static_cast<size_t>(at - members.begin());
    const bool p2p = a.kind == coll::Kind::Send || a.kind == coll::Kind::Recv;
    needs = p2p && at != members.end() && m < 64 ? needs | (uint64_t(1) << m) : CommState::Kernels::kAllMembers;
  }
  uint64_t launched = 0;
  {
    std::lock_guard<std::mutex> lock(k.mu);
    launched = k.blocks.fetch_add(blocks) + blocks;
    k.needs.add(launched, needs);
  }
  k.launches.fetch_add(1);
  // (No allocation on a call's path: a launch holds at most kMaxCalls calls.)
  std::array<trace::Entry*, gpu::kMaxCalls> entries{};
  size_t traced = 0;
  for (size_t i = 0; i < ncalls; ++i) {
    const coll::Args& a = calls[i];
    if (a.kind != coll::Kind::Send && a.kind != coll::Kind::Recv) {
      ++k.calls;  // (the kernel's own number, outside a graph's replays)
      k.recent[k.calls % k.recent.size()] = {k.calls, a};
    }
    ++c->seq.calls;
    if (c->trace && traced < entries.size()) entries[traced++] = c->trace->startOnDevice(a);
  }
  if (stream) {
    std::lock_guard<std::mutex> lock(k.mu);
    for (size_t i = 0; i < traced; ++i) k.traced.emplace_back(entries[i], launched);
    return;
  }
  OnDevice on(st.device);
  cuda::streamSync(k.ownStream);  // (null: the legacy stream)
  const bool ok = !gpu::sumOf(k.status->cut) && !__atomic_load_n(&k.status->code, __ATOMIC_ACQUIRE);
  for (size_t i = 0; i < traced; ++i) c->trace->finish(entries[i], ok);
  reportKernels(c, st);
  c->check();
  if (__atomic_load_n(&k.status->abort, __ATOMIC_ACQUIRE)) fail(Errc::InvalidUsage, "the communicator was aborted");
}

bool viaKernel(horaComm* c, const coll::Args& a, const Where& w, void* stream, bool lone) {
  if (!kernelFits(c, a, w)) return false;
  if (c->self().nranks == 1) {
    if (a.kind == coll::Kind::Send || a.kind == coll::Kind::Recv) return false;  // (a group of both: viaKernels)
    viaCopy(c, a, w, stream);
    return true;
  }
  CommState& st = stateOf(c);
  if (!kernelsOn(c, st, stream, lone)) return false;
  c->check();
  if (a.kind == coll::Kind::Send || a.kind == coll::Kind::Recv) {
    thread_local Calls one(1);
    thread_local std::vector<Where> where(1);
    one[0] = {c, a};
    where[0] = w;
    return viaKernels(c, one, where, stream, lone);
  }
  const gpu::Desc d = descOf(c, st.k, a, w);
  launchKernel(c, st, &a, 1, static_cast<uint64_t>(d.blocks), stream, [&d](void* target) { cuda::collectiveAsync(d, target); });
  return true;
}

bool viaKernels(horaComm* c, const Calls& calls, const std::vector<Where>& ws, void* stream, bool lone) {
  if (calls.empty() || calls.size() > static_cast<size_t>(gpu::kMaxCalls) || c->self().nranks == 1) return false;
  const coll::Args* reducing = nullptr;
  bool p2p = false;
  for (size_t i = 0; i < calls.size(); ++i) {
    const coll::Args& a = calls[i].second;
    if (calls[i].first != c || !kernelFits(c, a, ws[i])) return false;
    if (a.kind == coll::Kind::Send || a.kind == coll::Kind::Recv) {
      p2p = true;
    } else if (a.kind != coll::Kind::Broadcast && a.kind != coll::Kind::AllGather) {
      // One kernel reduces in one type and op.
      if (reducing && (reducing->dtype != a.dtype || reducing->op != a.op)) return false;
      reducing = &a;
    }
  }
  CommState& st = stateOf(c);
  if (!kernelsOn(c, st, stream, lone)) return false;
  // Ranks as threads of one GPU queue a kernel once every one of them has come to the same
  // call (kernel_gate.h): send/recv, which pairs of ranks make, would not keep them in step.
  if (p2p && st.k.gate) return false;
  c->check();
  // This thread's, reused: 3 KB of kernel parameters and the calls, not allocated per group.
  thread_local gpu::Batch batch;
  thread_local std::vector<coll::Args> args;
  batch.ncalls = 0;
  batch.blocks = 1;
  args.clear();
  uint64_t blocks = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    gpu::Desc& d = batch.calls[batch.ncalls++];
    d = descOf(c, st.k, calls[i].second, ws[i]);
    args.push_back(calls[i].second);
    if (!gpu::isP2p(d.coll)) blocks += static_cast<uint64_t>(d.blocks);
    batch.blocks = std::max(batch.blocks, d.blocks);
  }
  if (p2p) blocks += static_cast<uint64_t>(st.k.layout.p2pBlocks());
  launchKernel(c, st, args.data(), args.size(), blocks, stream, [](void* target) { cuda::batchAsync(batch, target); });
  return true;
}

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
    k.regions.leak();
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
    return peek(k.regions.byRank()[static_cast<size_t>(j)] + k.layout.countersAt(b) + sizeof(uint64_t) * static_cast<size_t>(which));
  };
  const auto peersDone = [&] {
    for (int b = 0; b < k.layout.blocks; ++b) {
      const uint8_t* mine = k.regions.mine() + k.layout.stateAt(b);
      const uint64_t chunks = peek(mine + offsetof(gpu::BlockState, chunks)), ll = peek(mine + offsetof(gpu::BlockState, ll));
      for (size_t j = 0; j < k.regions.byRank().size(); ++j)
        if (counter(static_cast<int>(j), b, gpu::kFreed) < chunks || (b == 0 && counter(static_cast<int>(j), 0, gpu::kLlDone) < ll))
          return false;
    }
    // And every chunk this rank deposited for a peer's receive consumed.
    const int r = static_cast<int>(std::find(k.regions.byRank().begin(), k.regions.byRank().end(), k.regions.mine()) -
                                   k.regions.byRank().begin());
    for (int b = 0; b < k.layout.p2pBlocks(); ++b)
      for (size_t j = 0; j < k.regions.byRank().size(); ++j) {
        const uint64_t sent = peek(k.regions.mine() + k.layout.pairAt(b, static_cast<int>(j)) + offsetof(gpu::Pair, sent));
        if (sent && peek(k.regions.byRank()[j] + k.layout.pairAt(b, r) + offsetof(gpu::Pair, acked)) < sent) return false;
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

}  // namespace hora::device
