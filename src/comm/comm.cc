#include "comm/comm.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_set>

#include "base/host.h"
#include "hora.h"
#include "base/log.h"
#include "comm/config.h"
#include "comm/device.h"

namespace hora {

std::string PeerInfo::name() const { return format("rank %d (%s, pid %d)", rank, host.c_str(), pid); }

transport::PeerView PeerInfo::view(const char* transportName) const {
  return transport::PeerView{rank, name(), hostId, record.get(transportName)};
}

std::vector<size_t> chooseTransports(const std::vector<TransportOffer>& offers, const std::vector<PeerInfo>& peers,
                                     int rank) {
  const PeerInfo& me = peers[static_cast<size_t>(rank)];
  std::vector<size_t> choice(peers.size());
  for (const PeerInfo& p : peers) {
    int best = 0;
    for (size_t i = 0; i < offers.size(); ++i) {
      const char* n = offers[i].name.c_str();
      if (!me.record.get(n) || !p.record.get(n)) continue;
      const int prio = offers[i].transport->canConnect(me.view(n), p.view(n));
      if (prio > best) {
        best = prio;
        choice[static_cast<size_t>(p.rank)] = i;
      }
    }
    if (best == 0) {
      std::string tried;
      for (const TransportOffer& o : offers) {
        const char* n = o.name.c_str();
        const std::string why = o.transport->offReason();
        tried += format("%s%s (%s)", tried.empty() ? "" : ", ", n,
                        !me.record.get(n) ? (why.empty() ? std::string("off on this rank") : "off on this rank: " + why).c_str()
                        : !p.record.get(n) ? "off on that rank" : "cannot reach it");
      }
      fail(Errc::InvalidUsage, "no transport reaches %s from %s: %s; HORA_TRANSPORTS chooses among %s",
           p.name().c_str(), me.name().c_str(), tried.c_str(), transport::optionalTransportNames().c_str());
    }
  }
  return choice;
}

transport::Settings transportSettings(const Config& cfg, int rank, int nranks, const SockAddr& bindAddr) {
  transport::Settings ts;
  ts.rank = rank;
  ts.nranks = nranks;
  ts.bindAddr = bindAddr;
  ts.socketsPerPeer = cfg.nsocksPerPeer;
  ts.chunkBytes = cfg.chunkBytes;
  ts.shmSingleCopy = cfg.shmSingleCopy;
  ts.ibHca = cfg.ibHca;
  ts.ibHcaLenient = cfg.ncclSource.count("HORA_IB_HCA") != 0;
  ts.ibGidIndex = cfg.ibGidIndex;
  ts.ibQpsPerPeer = cfg.ibQpsPerPeer;
  ts.topoFile = cfg.topoFile;
  return ts;
}

std::vector<topo::HostEntry> jobHosts(const std::vector<PeerInfo>& peers) {
  std::vector<topo::HostEntry> hosts;
  std::vector<std::string> ids;
  for (const PeerInfo& p : peers) {
    size_t h = static_cast<size_t>(std::find(ids.begin(), ids.end(), p.hostId) - ids.begin());
    if (h == ids.size()) {
      ids.push_back(p.hostId);
      hosts.push_back(topo::HostEntry{p.machine, {}, {}});
    }
    hosts[h].ranks.push_back(p.rank);
    hosts[h].places.push_back(p.place);
  }
  return hosts;
}

namespace {

// This host's topology: discovered once per process (hwloc takes tens of milliseconds), from
// HORA_TOPO_FILE when it is set; and where the calling thread runs.
std::string topologyField(const Config& cfg) {
  static std::mutex mu;
  static std::string file;
  static std::unique_ptr<topo::Host> host;
  std::lock_guard<std::mutex> lock(mu);
  if (!host || file != cfg.topoFile) {
    host = std::make_unique<topo::Host>(topo::discover(cfg.topoFile));
    file = cfg.topoFile;
  }
  return topo::encode(*host, topo::place(cfg.topoFile));
}

// The "core" field of the peer record: who this rank is, and the settings that must agree
// across ranks.
constexpr uint32_t kCoreMagic = 0x45524f43;  // "CORE"
constexpr size_t kMaxHostName = 255;

std::string coreField(int rank, const Config& cfg) {
  return FieldWriter()
      .u32(kCoreMagic)
      .u32(static_cast<uint32_t>(rank))
      .u32(static_cast<uint32_t>(getpid()))
      .u64(cfg.chunkBytes)
      .u32((cfg.hierStage ? 1u : 0u) | (cfg.callCheck ? 0u : 2u))  // flags
      .str(log::hostName())
      .str(hostIdentity())
      .str(machineIdentity())
      .take();
}

// The settings of the core field that must agree across ranks.
struct CoreSettings {
  uint64_t chunkBytes = 0;
  uint32_t flags = 0;  // 1: HORA_HIER_STAGE; 2: HORA_CALL_CHECK=0
};

PeerInfo decodePeer(const std::string& blob, int expectRank, CoreSettings* settings) {
  PeerInfo p;
  p.rank = expectRank;
  std::string why;
  if (!Record::decode(blob, &p.record, &why)) hora::fail(Errc::Remote, "rank %d sent a malformed peer record: %s", expectRank, why.c_str());
  const std::string* core = p.record.get("core");
  if (!core) hora::fail(Errc::Remote, "rank %d sent a peer record without its identity", expectRank);
  FieldReader r(*core);
  uint32_t magic = 0, rank = 0, pid = 0;
  if (!r.u32(&magic) || magic != kCoreMagic || !r.u32(&rank) || !r.u32(&pid) || !r.u64(&settings->chunkBytes) ||
      !r.u32(&settings->flags) ||
      !r.str(&p.host, kMaxHostName) || !r.str(&p.hostId, 64) || !r.str(&p.machineId, 64) || !r.atEnd() || static_cast<int>(rank) != expectRank)
    hora::fail(Errc::Remote, "rank %d sent a malformed peer record", expectRank);
  for (char& c : p.host)
    if (c < 0x20 || c > 0x7e) c = '?';
  p.pid = static_cast<int>(pid);
  const std::string* rejoin = p.record.get("rejoin");
  uint8_t packed[SockAddr::kPackedBytes];
  bool rejoinOk = rejoin && rejoin->size() == sizeof packed;
  if (rejoinOk) {
    memcpy(packed, rejoin->data(), sizeof packed);
    rejoinOk = SockAddr::unpack(packed, &p.rejoin);
  }
  if (!rejoinOk) hora::fail(Errc::Remote, "%s sent a malformed peer record: no valid rejoin address", p.name().c_str());
  const std::string* topology = p.record.get("topo");
  if (!topology || !topo::decode(*topology, &p.machine, &p.place, &why))
    hora::fail(Errc::Remote, "%s sent a malformed topology in its peer record: %s", p.name().c_str(),
               topology ? why.c_str() : "none");
  return p;
}

// The settings that must agree, checked against rank 0's in rank order: every rank sees every
// record, so every rank finds the same first difference and fails with the same text.
void checkSettingsAgree(const std::vector<PeerInfo>& peers, const std::vector<CoreSettings>& settings) {
  struct Setting {
    const char* name;
    uint64_t (*value)(const CoreSettings&);
  };
  static const Setting kSettings[] = {
      {"HORA_CHUNK_BYTES", [](const CoreSettings& s) { return s.chunkBytes; }},
      {"HORA_HIER_STAGE", [](const CoreSettings& s) -> uint64_t { return s.flags & 1; }},
      {"HORA_CALL_CHECK", [](const CoreSettings& s) -> uint64_t { return (s.flags & 2) ? 0 : 1; }},
  };
  for (size_t r = 1; r < settings.size(); ++r)
    for (const Setting& k : kSettings)
      if (k.value(settings[r]) != k.value(settings[0]))
        hora::fail(Errc::InvalidUsage, "%s differs across ranks: %s has %llu, %s has %llu", k.name, peers[0].name().c_str(),
                   static_cast<unsigned long long>(k.value(settings[0])), peers[r].name().c_str(),
                   static_cast<unsigned long long>(k.value(settings[r])));
}

bool enabled(const transport::Registration& r, const Config& cfg) {
  return !r.optional || std::find(cfg.transports.begin(), cfg.transports.end(), r.name) != cfg.transports.end();
}

}  // namespace

}  // namespace hora

using namespace hora;

std::unique_ptr<horaComm> horaComm::create(const UniqueId& id, int nranks, int rank, const CommOptions& opts) {
  std::unique_ptr<horaComm> c = shell(nranks, rank, opts, false);
  c->init(id);
  return c;
}

std::unique_ptr<horaComm> horaComm::shell(int nranks, int rank, const CommOptions& opts, bool pending) {
  const Config& cfg = config();
  transport::setTagDescriber(coll::describeTag);
  std::unique_ptr<horaComm> c(new horaComm());
  c->self_.rank = rank;
  c->self_.nranks = nranks;
  c->opts = opts;
  c->opts.cudaDev = hora::device::commDevice(opts.cudaDev);
  c->planner.chunkBytes = cfg.chunkBytes;
  c->planner.forced = cfg.algoForced;
  c->planner.costs = cfg.costs;
  c->pending_.store(pending);
  c->wakeFd = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!c->wakeFd.valid()) hora::fail(Errc::System, "eventfd: %s", errnoText(errno).c_str());
  c->trace = std::make_unique<trace::Recorder>(cfg.traceCalls, rank, nranks, opts.name);
  if (cfg.dumpSignal) trace::installSignal();
  return c;
}

void horaComm::init(const UniqueId& id) {
  const Config& cfg = config();
  horaComm* const c = this;
  const CommOptions& opts = c->opts;
  const int rank = self_.rank, nranks = self_.nranks;
  c->self_.commId = id.commId();
  c->self_.secret = id.secret;
  log::RankScope scope(rank);

  std::string stage = format("joining the rendezvous at %s, which rank 0 hosts", id.root.str().c_str());
  Waiter w(opts.timeout, &c->aborting, [&] { return stage; });
  BootstrapClient bs(id, rank, nranks, w);
  try {
    c->self_.address = cfg.socketIfname.empty() ? bs.localAddress() : chooseInterface(cfg.socketIfname, id.root.family());
    c->self_.address.setPort(0);
    stage = "opening this rank's listeners and transports";
    // The listener a shrink led by this rank will use (see comm.h): opened now, accepted from
    // only then.
    c->rejoin = listenSocket(c->self_.address);
    transport::Settings ts = transportSettings(cfg, rank, nranks, c->self_.address);
    ts.secret = id.secret;
    ts.commId = id.commId();
    ts.handshakeTimeout = std::min(opts.timeout, milliseconds(30000));
    // Every enabled transport of the build, in registry order; each adds its field.
    std::vector<std::unique_ptr<transport::Transport>> owned;
    std::vector<TransportOffer> offers;
    Record mine;
    mine.set("core", coreField(rank, cfg));
    mine.set("topo", topologyField(cfg));
    {
      uint8_t packed[SockAddr::kPackedBytes];
      localAddress(c->rejoin.get()).pack(packed);
      mine.set("rejoin", FieldWriter().raw(packed, sizeof packed).take());
    }
    for (const transport::Registration& reg : transport::registry()) {
      if (!enabled(reg, cfg)) continue;
      owned.push_back(reg.make(ts));
      offers.push_back(TransportOffer{reg.name, owned.back().get()});
      std::string field = owned.back()->field();
      if (!field.empty()) mine.set(reg.name, std::move(field));
    }

    stage = "every rank's peer record (bootstrap allgather)";
    std::vector<std::string> blobs = bs.allgather(mine.encode(), w);
    std::vector<CoreSettings> settings(static_cast<size_t>(nranks));
    for (int r = 0; r < nranks; ++r)
      c->self_.peers.push_back(decodePeer(blobs[static_cast<size_t>(r)], r, &settings[static_cast<size_t>(r)]));
    checkSettingsAgree(c->self_.peers, settings);

    // The transport of each peer, chosen alike on both ends; then each transport connects the
    // peers it won, in registry order (so no two ranks wait on each other in different ones).
    const std::vector<size_t> choice = chooseTransports(offers, c->self_.peers, rank);
    c->conns.resize(static_cast<size_t>(nranks));
    c->self_.linkNames.resize(static_cast<size_t>(nranks));
    const PeerInfo& me = c->self_.peers[static_cast<size_t>(rank)];
    transport::ConnectContext ctx{w, bs.fd(), [&] { bs.checkForFailure(); }};
    for (size_t i = 0; i < offers.size(); ++i) {
      const char* n = offers[i].name.c_str();
      std::vector<transport::PeerView> won;
      for (const PeerInfo& p : c->self_.peers)
        if (choice[static_cast<size_t>(p.rank)] == i) won.push_back(p.view(n));
      if (won.empty()) continue;
      stage = format("connecting to %zu rank(s) over %s", won.size(), n);
      std::vector<std::unique_ptr<transport::Connection>> links = offers[i].transport->connect(me.view(n), won, ctx);
      if (links.size() != won.size()) hora::fail(Errc::Internal, "transport %s made %zu links for %zu peers", n, links.size(), won.size());
      for (size_t k = 0; k < won.size(); ++k) {
        c->conns[static_cast<size_t>(won[k].rank)] = std::move(links[k]);
        c->self_.linkNames[static_cast<size_t>(won[k].rank)] = n;
      }
      if (auto st = offers[i].transport->stage()) c->stage = std::move(st);
    }
    owned.clear();
    for (auto& p : c->conns) c->connPtrs.push_back(p.get());
    if (c->self_.nranks > 1) {  // the call checks wait unread on the link from the predecessor
      const size_t pred = static_cast<size_t>((c->self_.rank + c->self_.nranks - 1) % c->self_.nranks);
      c->seq.linkChecks.window = std::max<uint64_t>(2 * kCheckBatch, c->conns[pred]->unreadMost());
    }
    stage = "every rank to finish connecting (bootstrap barrier)";
    bs.barrier(w);
    bs.finish(w);
  } catch (const RendezvousFailure&) {
    bs.close();  // the root knows: it told us
    throw;
  } catch (const Error& e) {
    // A peer that dropped us may have done so because the job failed elsewhere: prefer the
    // rendezvous's report of the first cause, if it comes promptly.
    // One that gave up waiting tells the root, whose verdict names what it was waiting for
    // (ranks that never joined, say).
    try {
      if (e.code() == Errc::Remote) bs.awaitFailureReport(milliseconds(1000));
      if (e.code() == Errc::Timeout) bs.giveUp(format("%s: %s", stage.c_str(), e.what()), milliseconds(1000));
    } catch (const RendezvousFailure&) {
      bs.close();
      throw;
    }
    bs.abandon(format("%s: %s", stage.c_str(), e.what()));
    throw;
  }
  {
    // Ranks of this host (whether or not they share memory) against its CPUs: with one CPU
    // each, a wait's spin costs no peer its core, and a yield would be a syscall per wait.
    long sameHost = 0;
    // Ranks in other network namespaces of this kernel (other hosts to the topology) share
    // these processors too.
    for (const PeerInfo& p : c->self_.peers) sameHost += p.machineId == c->self_.peers[static_cast<size_t>(rank)].machineId;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (sameHost <= cores) c->spinFor = Waiter::kSpinWhenAlone;
    // This host's ranks' processes, which a wait that times out looks at.
    for (const PeerInfo& p : c->self_.peers) {
      c->self_.localPids.push_back(p.hostId == c->self_.peers[static_cast<size_t>(rank)].hostId && p.rank != rank ? p.pid : 0);
      c->self_.localProcs.emplace_back(c->self_.localPids.back());
    }
    describeJob(c->self_, c->stage.get(), &c->seq.stageSeq, cfg, c->planner.costs, c->spinFor.count() > 0, c->shape,
                c->layout);
  }
  if (log::enabled(log::Level::Info, log::kInit)) {
    std::string links, listening = c->self_.address.str();
    if (listening.size() > 2 && listening.compare(listening.size() - 2, 2, ":0") == 0) listening.resize(listening.size() - 2);
    for (const transport::Registration& reg : transport::registry()) {
      int k = 0;
      for (int r = 0; r < nranks; ++r) k += r != rank && c->self_.linkNames[static_cast<size_t>(r)] == reg.name;
      if (k) links += format("%s%d over %s", links.empty() ? "" : ", ", k, reg.name);
    }
    HORA_INFO(log::kInit, "communicator %016llx%s%s: rank %d of %d ready (listening on %s): peers %s%s",
              static_cast<unsigned long long>(id.commId()), opts.name.empty() ? "" : " ", opts.name.c_str(), rank, nranks,
              listening.c_str(), links.empty() ? "none" : links.c_str(),
              c->stage ? format("; a shared stage of %d ranks", c->stage->size()).c_str() : "");
  }
  std::vector<trace::PeerId> ids;
  for (const PeerInfo& p : c->self_.peers) ids.push_back(trace::PeerId{p.rank, p.host, p.pid});
  c->trace->identify(id.commId(), std::move(ids));
  ready_ = true;
}

namespace {

std::shared_mutex gLiveMu;
std::unordered_set<const void*>& liveComms() {
  static auto* s = new std::unordered_set<const void*>();  // never destroyed: calls may come at exit
  return *s;
}
// Bumped (under gLiveMu) whenever a communicator stops being live: a thread's last handle found
// live stays so until then, without the lock (a shared lock and a hash lookup were about a tenth
// of a small call's instructions).
std::atomic<uint64_t> gLiveGeneration{0};
struct LastLive {
  const void* comm;
  uint64_t generation;
};
thread_local LastLive tLastLive{nullptr, 0};

}  // namespace

horaComm::horaComm() {
  std::unique_lock<std::shared_mutex> lock(gLiveMu);
  liveComms().insert(this);
}

horaComm::~horaComm() {
  joinBackground();
  device.reset();  // its worker and kernels' watchdog use the rest
  magic = kDead;
  std::unique_lock<std::shared_mutex> lock(gLiveMu);
  liveComms().erase(this);
  gLiveGeneration.fetch_add(1, std::memory_order_acq_rel);
}

bool horaComm::isLive(const void* p) noexcept {
  if (!p) return false;
  LastLive& last = tLastLive;
  const uint64_t generation = gLiveGeneration.load(std::memory_order_acquire);
  if (last.comm == p && last.generation == generation) return true;
  bool live;
  {
    std::shared_lock<std::shared_mutex> lock(gLiveMu);
    live = liveComms().count(p) != 0;
  }
  // Read before the lock: a communicator gone since then has bumped it, so this entry is stale.
  if (live) last = LastLive{p, generation};
  return live;
}

void horaComm::check() const {
  int e = asyncError_.load(std::memory_order_acquire);
  if (e == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  throw Error(static_cast<Errc>(e), "the communicator has failed: " + errorText_);
}

void horaComm::fail(const Error& e) noexcept {
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (asyncError_.load() != 0) return;
    errorText_ = e.what();
    asyncError_.store(static_cast<int>(e.code()), std::memory_order_release);
    // A failure reported by a peer goes on as it is, so every rank names the first cause. One
    // seen here: a peer that died or fell silent leads (the text names it), with who saw it;
    // this rank's own failure (a mismatch it found, say) is said to be this rank's.
    const std::string me = self_.peers.empty() ? std::string("a rank") : self_.peers[static_cast<size_t>(self_.rank)].name();
    if (dynamic_cast<const PeerFailure*>(&e)) reason = errorText_;
    else if (e.code() == Errc::Remote || e.code() == Errc::Timeout) reason = errorText_ + "; reported by " + me;
    else reason = me + " failed: " + errorText_;
  }
  HORA_WARN(log::kColl, "%s", reason.c_str());
  // The caller's text is short; what this rank waited for, all of it, is said here and dumped.
  if (!e.detail().empty()) HORA_WARN(log::kColl, "the failed call waited for: %s", e.detail().c_str());
  if (trace) trace->failed(e.code(), reason, e.detail());
  if (stage) stage->markFailed(reason, e.code());  // before the links close: peers look here then
  // Inside the failing call its buffers are valid: messages partly out are completed (briefly)
  // so that each abort frame can follow on the wire.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  // Not towards a rank of this host that is stopped or gone: it would take the whole budget.
  for (size_t r = 0; r < conns.size(); ++r)
    if (conns[r] && (r >= self_.localProcs.size() || !self_.localProcs[r] || self_.localProcs[r].stalled().empty()))
      conns[r]->finishPartial(until);
  for (auto& c : conns)
    if (c) c->shutdown(reason, e.code());
  // Once the peers have been told: the calls of this process, for hora-inspect.
  if (trace && trace->on()) {
    const std::string dump = trace::dumpProcess("failure");
    if (!dump.empty()) HORA_WARN(log::kColl, "the calls of this process's communicators are in %s (hora-inspect reads it)", dump.c_str());
  }
}

void horaComm::failInit(const Error& e) noexcept {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (asyncError_.load() != 0) return;
    errorText_ = e.what();
    lastError_ = e.what();
    asyncError_.store(static_cast<int>(e.code()), std::memory_order_release);
  }
  if (trace) trace->failed(e.code(), e.what());
  HORA_WARN(log::kInit, "rank %d of %d%s%s: %s", self_.rank, self_.nranks, opts.name.empty() ? "" : " of ", opts.name.c_str(),
            e.what());
  conns.clear();  // whatever an init that failed half way had connected
  connPtrs.clear();
  rejoin.reset();
}

void horaComm::runInBackground(std::function<void()> work) {
  joinBackground();
  pending_.store(true, std::memory_order_release);
  background_ = std::thread([this, work = std::move(work)] {
    log::RankScope scope(self_.rank);
    // A failure before the communicator was ever ready is its init's (nothing to tell peers);
    // one after (a finalize) fails it as a call would.
    auto failed = [this](const Error& e) {
      if (ready_) fail(e);
      else failInit(e);
    };
    try {
      work();
    } catch (const Error& e) {
      failed(e);
    } catch (const std::exception& e) {
      failed(Error(Errc::Internal, std::string("internal error: ") + e.what()));
    }
    pending_.store(false, std::memory_order_release);
  });
}

void horaComm::joinBackground() {
  if (background_.joinable() && background_.get_id() != std::this_thread::get_id()) background_.join();
}

void horaComm::setLastError(const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  lastError_ = text;
}

const char* horaComm::lastError() {
  std::lock_guard<std::mutex> lock(mu_);
  return lastError_.c_str();
}

bool horaComm::abort() noexcept {
  aborting.store(true);
  if (trace) trace->aborted();
  uint64_t one = 1;
  if (wakeFd.valid()) (void)!::write(wakeFd.get(), &one, sizeof one);
  // Work queued on host streams fails at once now; wait until it has all left the queues.
  {
    std::unique_lock<std::mutex> lock(streamMu);
    streamIdle.wait(lock, [this] { return streamWork.load() == 0; });
  }
  // Calls in other threads see the flag at their next idle round; the links are theirs until
  // they have left.
  try {
    Waiter w(opts.timeout, nullptr, [] { return std::string("other threads to leave their calls on the aborted communicator"); });
    while (busy.load() || callers.load() > 0) w.idle();
  } catch (const Error& e) {
    HORA_WARN(log::kColl, "horaCommAbort: %s; the communicator is left allocated", e.what());
    return false;
  }
  const std::string why =
      "the communicator of " + (self_.peers.empty() ? std::string("a rank") : self_.peers[static_cast<size_t>(self_.rank)].name()) + " was aborted";
  if (stage) stage->markFailed(why, Errc::Remote);  // for peers that wait on this rank in the stage
  for (auto& c : conns)
    if (c) c->shutdown(why, Errc::Remote);
  return true;
}

int horaComm::addPreMulOp(const PreMulOp& op) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < preMulOps_.size(); ++i)
    if (!preMulOps_[i].used) {
      preMulOps_[i] = op;
      preMulOps_[i].used = true;
      return static_cast<int>(i);
    }
  if (preMulOps_.size() >= 1024) return -1;
  preMulOps_.push_back(op);
  preMulOps_.back().used = true;
  return static_cast<int>(preMulOps_.size() - 1);
}

void horaComm::resolveOp(int op, DataType dt, coll::Args& a) const {
  if (op >= 0 && op < horaNumOps) {
    a.op = static_cast<RedOp>(op);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = static_cast<size_t>(op - horaNumOps);
  if (op < horaNumOps || i >= preMulOps_.size() || !preMulOps_[i].used)
    hora::fail(Errc::InvalidArgument, "invalid reduction op %d (not a horaRedOp_t, nor an op created on this communicator)", op);
  if (preMulOps_[i].dtype != dt)
    hora::fail(Errc::InvalidArgument, "reduction op %d was created for %s, not %s", op, dataTypeName(preMulOps_[i].dtype),
         dataTypeName(dt));
  a.op = RedOp::PreMulSum;
  a.scalar = preMulOps_[i].scalar;
  a.scalarAt = preMulOps_[i].at;
}

bool horaComm::destroyPreMulOp(int op) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = static_cast<size_t>(op - horaNumOps);
  if (op < horaNumOps || i >= preMulOps_.size() || !preMulOps_[i].used) return false;
  preMulOps_[i].used = false;
  return true;
}

std::string horaComm::describeCall() const {
  return format("call #%llu on rank %d of %d%s%s", static_cast<unsigned long long>(seq.calls.load()), self_.rank, self_.nranks,
                opts.name.empty() ? "" : " of ", opts.name.c_str());
}
