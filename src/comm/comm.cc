#include "comm/comm.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "comm/config.h"
#include "transports/loopback/loopback.h"
#include "transports/shm/connection.h"
#include "transports/shm/endpoint.h"
#include "transports/tcp/endpoint.h"

namespace hora {

std::vector<int> sharedMemoryGroup(const std::vector<PeerInfo>& peers, int rank) {
  std::vector<int> group;
  const PeerInfo& me = peers[static_cast<size_t>(rank)];
  if (me.shmSocket.empty()) return group;
  for (const PeerInfo& p : peers)
    if (!p.shmSocket.empty() && p.hostId == me.hostId) group.push_back(p.rank);
  return group;
}

std::string PeerInfo::name() const { return format("rank %d (%s, pid %d)", rank, host.c_str(), pid); }

namespace {

// What every rank tells every other at init: identity, address, and the settings that must
// agree across ranks.
struct InfoWire {
  uint32_t magic;
  uint32_t rank;
  uint32_t pid;
  uint32_t nsocks;
  uint64_t chunkBytes;
  char host[64];
  uint8_t tcpAddr[SockAddr::kPackedBytes];
  uint32_t shm;          // 1: this rank may use shared memory
  char hostId[33];       // shm::hostIdentity()
  char shmSocket[64];    // its abstract Unix socket
};
constexpr uint32_t kInfoMagic = 0x4f464e49;  // "INFO"

std::string encodeInfo(int rank, const Config& cfg, const SockAddr& tcp, const std::string& hostId,
                       const std::string& shmSocket) {
  InfoWire w{};
  w.shm = shmSocket.empty() ? 0 : 1;
  strncpy(w.hostId, hostId.c_str(), sizeof w.hostId - 1);
  strncpy(w.shmSocket, shmSocket.c_str(), sizeof w.shmSocket - 1);
  w.magic = kInfoMagic;
  w.rank = static_cast<uint32_t>(rank);
  w.pid = static_cast<uint32_t>(getpid());
  w.nsocks = static_cast<uint32_t>(cfg.nsocksPerPeer);
  w.chunkBytes = cfg.chunkBytes;
  strncpy(w.host, log::hostName(), sizeof w.host - 1);
  tcp.pack(w.tcpAddr);
  return std::string(reinterpret_cast<const char*>(&w), sizeof w);
}

PeerInfo decodeInfo(const std::string& blob, int expectRank, const Config& cfg) {
  InfoWire w;
  if (blob.size() != sizeof w) hora::fail(Errc::Remote, "rank %d sent a peer record of %zu bytes", expectRank, blob.size());
  memcpy(&w, blob.data(), sizeof w);
  w.host[sizeof w.host - 1] = '\0';
  w.hostId[sizeof w.hostId - 1] = '\0';
  w.shmSocket[sizeof w.shmSocket - 1] = '\0';
  if (w.magic != kInfoMagic || static_cast<int>(w.rank) != expectRank)
    hora::fail(Errc::Remote, "rank %d sent a malformed peer record", expectRank);
  PeerInfo p;
  p.rank = expectRank;
  p.pid = static_cast<int>(w.pid);
  p.host = w.host;
  p.hostId = w.hostId;
  p.shmSocket = w.shm ? w.shmSocket : "";
  if (!SockAddr::unpack(w.tcpAddr, &p.tcpAddr)) hora::fail(Errc::Remote, "%s sent no valid address", p.name().c_str());
  if (static_cast<int>(w.nsocks) != cfg.nsocksPerPeer)
    hora::fail(Errc::InvalidUsage, "HORA_NSOCKS_PERPEER differs across ranks: %s has %u, this rank %d",
         p.name().c_str(), w.nsocks, cfg.nsocksPerPeer);
  if (w.chunkBytes != cfg.chunkBytes)
    hora::fail(Errc::InvalidUsage, "HORA_CHUNK_BYTES differs across ranks: %s has %llu, this rank %zu",
         p.name().c_str(), static_cast<unsigned long long>(w.chunkBytes), cfg.chunkBytes);
  return p;
}

}  // namespace

}  // namespace hora

using namespace hora;

std::unique_ptr<horaComm> horaComm::create(const UniqueId& id, int nranks, int rank, const CommOptions& opts) {
  const Config& cfg = config();
  transport::setTagDescriber(coll::describeTag);
  std::unique_ptr<horaComm> c(new horaComm());
  c->rank = rank;
  c->nranks = nranks;
  c->opts = opts;
  c->tuner.chunkBytes = cfg.chunkBytes;
  c->tuner.force = cfg.algo == "ring"     ? coll::TunerSettings::Force::Ring
                   : cfg.algo == "direct" ? coll::TunerSettings::Force::Direct
                   : cfg.algo == "rd"     ? coll::TunerSettings::Force::RecursiveDoubling
                   : cfg.algo == "shmflat" ? coll::TunerSettings::Force::ShmFlat
                   : cfg.algo == "shmslice" ? coll::TunerSettings::Force::ShmSlice
                                          : coll::TunerSettings::Force::Auto;
  log::RankScope scope(rank);
  c->wakeFd = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!c->wakeFd.valid()) hora::fail(Errc::System, "eventfd: %s", errnoText(errno).c_str());

  std::string stage = "joining the rendezvous";
  Waiter w(opts.timeout, &c->aborting, [&] { return stage; });
  BootstrapClient bs(id, rank, nranks, w);
  try {
    SockAddr bindAddr = cfg.socketIfname.empty() ? bs.localAddress()
                                                 : chooseInterface(cfg.socketIfname, id.root.family());
    bindAddr.setPort(0);
    tcp::Options topts;
    topts.nsocks = cfg.nsocksPerPeer;
    topts.handshakeTimeout = std::min(opts.timeout, milliseconds(30000));
    tcp::Endpoint ep(bindAddr, id.secret, id.commId(), rank, nranks, topts);
    const bool shmOn = std::find(cfg.transports.begin(), cfg.transports.end(), "shm") != cfg.transports.end();
    const bool tcpOn = std::find(cfg.transports.begin(), cfg.transports.end(), "tcp") != cfg.transports.end();
    std::unique_ptr<shm::Endpoint> sep;
    if (shmOn) {
      shm::Options so;
      so.ringBytes = kShmRingBytes;
      so.stageBytes = 4 * cfg.chunkBytes;
      so.handshakeTimeout = topts.handshakeTimeout;
      sep = std::make_unique<shm::Endpoint>(id.secret, id.commId(), rank, nranks, so);
    }
    static const std::string hostId = shm::hostIdentity();

    stage = "every rank's peer record (bootstrap allgather)";
    std::vector<std::string> blobs =
        bs.allgather(encodeInfo(rank, cfg, ep.address(), hostId, sep ? sep->socketName() : std::string()), w);
    for (int r = 0; r < nranks; ++r) c->peers.push_back(decodeInfo(blobs[static_cast<size_t>(r)], r, cfg));

    // The transport of each pair, decided alike on both sides: shared memory between ranks of
    // one host that both allow it, TCP otherwise.
    std::vector<int> local = sharedMemoryGroup(c->peers, rank);
    c->conns.resize(static_cast<size_t>(nranks));
    if (local.size() > 1) {
      stage = "shared memory with this host's ranks";
      std::vector<shm::LocalPeer> lp;
      for (int r : local)
        if (r != rank) lp.push_back(shm::LocalPeer{r, c->peers[static_cast<size_t>(r)].shmSocket, c->peers[static_cast<size_t>(r)].name()});
      c->shmWorld = sep->connectAll(local, lp, w, bs.fd(), [&] { bs.checkForFailure(); });
      for (uint32_t i = 0; i < c->shmWorld->nlocal; ++i)
        if (i != c->shmWorld->localIndex)
          c->conns[static_cast<size_t>(local[i])] = std::make_unique<shm::Connection>(*c->shmWorld, i);
    }
    sep.reset();
    std::vector<tcp::PeerAddress> remote;
    for (const PeerInfo& p : c->peers)
      if (p.rank != rank && !c->conns[static_cast<size_t>(p.rank)]) {
        if (!tcpOn)
          hora::fail(Errc::InvalidUsage, "%s is not reachable with HORA_TRANSPORTS=%s (it is on another host, or "
                     "does not allow shared memory)", p.name().c_str(), "shm");
        remote.push_back(tcp::PeerAddress{p.rank, p.tcpAddr, p.name()});
      }
    stage = "TCP connections to every other host's ranks";
    std::vector<std::unique_ptr<transport::Connection>> tcpConns = ep.connectAll(remote, w, bs.fd(), [&] { bs.checkForFailure(); });
    for (const tcp::PeerAddress& p : remote) c->conns[static_cast<size_t>(p.rank)] = std::move(tcpConns[static_cast<size_t>(p.rank)]);
    c->conns[static_cast<size_t>(rank)] =
        std::make_unique<loopback::Connection>(c->peers[static_cast<size_t>(rank)].name());
    for (auto& p : c->conns) c->connPtrs.push_back(p.get());
    stage = "every rank to finish connecting (bootstrap barrier)";
    bs.barrier(w);
    bs.finish(w);
  } catch (const RendezvousFailure&) {
    bs.close();  // the root knows: it told us
    throw;
  } catch (const Error& e) {
    // A peer that dropped us may have done so because the job failed elsewhere: prefer the
    // rendezvous's report of the first cause, if it comes promptly.
    if (e.code() == Errc::Remote) {
      try {
        bs.awaitFailureReport(milliseconds(1000));
      } catch (const RendezvousFailure&) {
        bs.close();
        throw;
      }
    }
    bs.abandon(format("%s: %s", stage.c_str(), e.what()));
    throw;
  }
  {
    // Ranks of this host (whether or not they share memory) against its CPUs: with one CPU
    // each, a wait's spin costs no peer its core, and a yield would be a syscall per wait.
    long sameHost = 0;
    for (const PeerInfo& p : c->peers) sameHost += p.hostId == c->peers[static_cast<size_t>(rank)].hostId;
    if (sameHost <= sysconf(_SC_NPROCESSORS_ONLN)) c->spinFor = Waiter::kSpinWhenAlone;
  }
  const int viaShm = c->shmWorld ? static_cast<int>(c->shmWorld->nlocal) - 1 : 0;
  HORA_INFO(log::kInit, "communicator %016llx%s%s: rank %d of %d ready: %d peer(s) over shared memory, %d over TCP",
            static_cast<unsigned long long>(id.commId()), opts.name.empty() ? "" : " ", opts.name.c_str(), rank, nranks,
            viaShm, nranks - 1 - viaShm);
  return c;
}

horaComm::~horaComm() { magic = kDead; }

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
    // A failure reported by a peer goes on as it is, so every rank names the first cause.
    reason = dynamic_cast<const PeerFailure*>(&e)
                 ? errorText_
                 : format("%s failed: %s", peers.empty() ? "a rank" : peers[static_cast<size_t>(rank)].name().c_str(),
                          errorText_.c_str());
  }
  HORA_WARN(log::kColl, "%s", reason.c_str());
  if (shmWorld) shmWorld->markFailed(reason);  // before the rings close: peers look here then
  for (auto& c : conns)
    if (c) c->shutdown(reason);
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
  for (auto& c : conns)
    if (c) c->shutdown("the communicator of " + (peers.empty() ? std::string("a rank") : peers[static_cast<size_t>(rank)].name()) +
                       " was aborted");
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

bool horaComm::resolveOp(int op, DataType dt, coll::Args& a) const {
  if (op >= 0 && op < 5) {
    a.op = static_cast<RedOp>(op);
    return true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = static_cast<size_t>(op - 5);
  if (op < 5 || i >= preMulOps_.size() || !preMulOps_[i].used)
    hora::fail(Errc::InvalidArgument, "invalid reduction op %d (not a horaRedOp_t, nor an op created on this communicator)", op);
  if (preMulOps_[i].dtype != dt)
    hora::fail(Errc::InvalidArgument, "reduction op %d was created for %s, not %s", op, dataTypeName(preMulOps_[i].dtype),
         dataTypeName(dt));
  a.op = RedOp::PreMulSum;
  a.scalar = preMulOps_[i].scalar;
  return true;
}

bool horaComm::destroyPreMulOp(int op) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = static_cast<size_t>(op - 5);
  if (op < 5 || i >= preMulOps_.size() || !preMulOps_[i].used) return false;
  preMulOps_[i].used = false;
  return true;
}

std::string horaComm::describeCall() const {
  return format("call #%llu on rank %d of %d%s%s", static_cast<unsigned long long>(calls.load()), rank, nranks,
                opts.name.empty() ? "" : " of ", opts.name.c_str());
}
