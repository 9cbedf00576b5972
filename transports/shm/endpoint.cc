#include "transports/shm/endpoint.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "base/mesh.h"

namespace hora::shm {

namespace {

constexpr uint32_t kSwapMagic = 0x50415753;  // "SWAP"

struct SwapInfo {
  uint32_t magic;
  uint32_t rank;
};

// Sends this rank's segment and doorbell descriptors with a small record.
void sendDescriptors(int link, int segment, int doorbell, int rank, Waiter& w, const std::string& who) {
  SwapInfo info{kSwapMagic, static_cast<uint32_t>(rank)};
  iovec iov{&info, sizeof info};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  int fds[2] = {segment, doorbell};
  memcpy(CMSG_DATA(c), fds, sizeof fds);
  for (;;) {
    ssize_t n = ::sendmsg(link, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof info)) return;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      fail(Errc::Remote, "sending shared-memory descriptors to %s: %s", who.c_str(), errnoText(errno).c_str());
    if (n >= 0) fail(Errc::Remote, "sending shared-memory descriptors to %s: short write", who.c_str());
    w.idle([&](milliseconds most) {
      pollfd p{link, POLLOUT, 0};
      pollFor(&p, 1, static_cast<int>(most.count()));
    });
  }
}

// Receives a peer's two descriptors; anything else it sends is closed and refused.
void recvDescriptors(int link, int expectRank, Fd* segment, Fd* doorbell, Waiter& w, const std::string& who) {
  for (;;) {
    SwapInfo info{};
    iovec iov{&info, sizeof info};
    alignas(cmsghdr) char control[CMSG_SPACE(8 * sizeof(int))] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(link, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      w.idle([&](milliseconds most) {
        pollfd p{link, POLLIN, 0};
        pollFor(&p, 1, static_cast<int>(most.count()));
      });
      continue;
    }
    std::vector<Fd> got;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        for (size_t i = 0; i + sizeof(int) <= c->cmsg_len - CMSG_LEN(0); i += sizeof(int)) {
          int fd;
          memcpy(&fd, CMSG_DATA(c) + i, sizeof fd);
          got.emplace_back(fd);
        }
    if (n == 0) fail(Errc::Remote, "%s closed the link before sending its shared memory", who.c_str());
    if (n < 0) fail(Errc::Remote, "receiving shared memory from %s: %s", who.c_str(), errnoText(errno).c_str());
    if (n != static_cast<ssize_t>(sizeof info) || info.magic != kSwapMagic || static_cast<int>(info.rank) != expectRank ||
        got.size() != 2 || (m.msg_flags & MSG_CTRUNC))
      fail(Errc::Remote, "%s sent a malformed shared-memory record (%zd bytes, %zu descriptors)", who.c_str(), n,
           got.size());
    *segment = std::move(got[0]);
    *doorbell = std::move(got[1]);
    return;
  }
}

// The host's agreement: a word per peer, its magic and what the sender can (kMayRead: read the
// memory of every rank of the host, for the single copy; kHeavyBarrier: make every rank's
// posts fence-free, World::asymmetric).
constexpr uint32_t kCanReadMagic = 0x44414552;  // "READ"
constexpr uint32_t kMayRead = 1, kHeavyBarrier = 2;
struct CanRead {
  uint32_t magic;
  uint32_t ok;
};

void sendCanRead(int link, uint32_t flags, Waiter& w, const std::string& who) {
  const CanRead word{kCanReadMagic, flags};
  for (;;) {
    const ssize_t n = ::send(link, &word, sizeof word, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof word)) return;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      fail(Errc::Remote, "sending the shared-memory agreement to %s: %s", who.c_str(), errnoText(errno).c_str());
    if (n >= 0) fail(Errc::Remote, "sending the shared-memory agreement to %s: short write", who.c_str());
    w.idle([&](milliseconds most) {
      pollfd p{link, POLLOUT, 0};
      pollFor(&p, 1, static_cast<int>(most.count()));
    });
  }
}

uint32_t recvCanRead(int link, Waiter& w, const std::string& who) {
  for (;;) {
    CanRead word{};
    const ssize_t n = ::recv(link, &word, sizeof word, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      w.idle([&](milliseconds most) {
        pollfd p{link, POLLIN, 0};
        pollFor(&p, 1, static_cast<int>(most.count()));
      });
      continue;
    }
    if (n == 0) fail(Errc::Remote, "%s closed the link before the shared-memory agreement", who.c_str());
    if (n < 0) fail(Errc::Remote, "receiving the shared-memory agreement from %s: %s", who.c_str(), errnoText(errno).c_str());
    if (n != static_cast<ssize_t>(sizeof word) || word.magic != kCanReadMagic || word.ok > (kMayRead | kHeavyBarrier))
      fail(Errc::Remote, "%s sent a malformed shared-memory agreement (%zd bytes)", who.c_str(), n);
    return word.ok;
  }
}

// Whether this rank may read and write peer's memory through the kernel: it reads the probe
// word of the peer's segment at the peer's own address of it, compares it with the word as
// mapped here, and writes it back there (the same value: every rank of the host may be doing
// the same). "" if it may, else why not.
std::string probeAccess(const Peer& peer) {
  const Header* h = peer.segment.header();
  uint64_t got = 0;
  iovec local{&got, sizeof got};
  iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(h->ownAddress + offsetof(Header, probe))), sizeof got};
  ssize_t n = process_vm_readv(peer.process.pid(), &local, 1, &remote, 1, 0);
  if (n < 0) return format("reading %s's memory: %s", peer.name.c_str(), errnoText(errno).c_str());
  if (n != static_cast<ssize_t>(sizeof got) || got != h->probe)
    return format("%s's memory, read through the kernel, is not what its segment holds", peer.name.c_str());
  n = process_vm_writev(peer.process.pid(), &local, 1, &remote, 1, 0);
  if (n < 0) return format("writing %s's memory: %s", peer.name.c_str(), errnoText(errno).c_str());
  if (n != static_cast<ssize_t>(sizeof got)) return format("writing %s's memory: a short write", peer.name.c_str());
  return std::string();
}

}  // namespace

Endpoint::Endpoint(const Secret& secret, uint64_t commId, int rank, int nranks, Options opts)
    : secret_(secret), commId_(commId), rank_(rank), nranks_(nranks), opts_(opts) {
  uint8_t nonce[8];
  randomBytes(nonce, sizeof nonce);
  socketName_ = format("hora-%016llx-%d-%02x%02x%02x%02x%02x%02x%02x%02x", static_cast<unsigned long long>(commId), rank,
                       nonce[0], nonce[1], nonce[2], nonce[3], nonce[4], nonce[5], nonce[6], nonce[7]);
  acceptor_ = std::make_unique<Acceptor>(listenSocket(SockAddr::abstractUnix(socketName_), 64), secret, LinkKind::Local,
                                         opts.handshakeTimeout, log::kNet);
}

Endpoint::~Endpoint() = default;

std::shared_ptr<World> Endpoint::connectAll(std::vector<int> localRanks, const std::vector<LocalPeer>& peers,
                                            Waiter& w, int watchFd, const std::function<void()>& onWatch) {
  world_ = std::make_shared<World>();
  World& wd = *world_;
  wd.localRanks = std::move(localRanks);
  wd.nlocal = static_cast<uint32_t>(wd.localRanks.size());
  auto me = std::find(wd.localRanks.begin(), wd.localRanks.end(), rank_);
  if (me == wd.localRanks.end()) fail(Errc::Internal, "rank %d is not among its host's ranks", rank_);
  wd.localIndex = static_cast<uint32_t>(me - wd.localRanks.begin());
  wd.own = Segment::create(wd.nlocal, wd.localIndex, opts_.ringBytes, opts_.stageBytes);
  wd.doorbell = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wd.doorbell.valid()) fail(Errc::System, "eventfd: %s", errnoText(errno).c_str());
  wd.peers.resize(wd.nlocal);
  MeshSpec spec;
  spec.kind = LinkKind::Local;
  spec.secret = secret_;
  spec.commId = commId_;
  spec.rank = rank_;
  spec.nranks = nranks_;
  spec.perPeer = 1;
  std::vector<MeshPeer> mesh;
  for (const LocalPeer& p : peers) {
    SockAddr addr = SockAddr::abstractUnix(p.socketName);
    mesh.push_back(MeshPeer{p.rank, p.name, [addr] { return startConnect(addr); }, addr.str()});
  }
  std::vector<std::vector<Fd>> links = connectMesh(*acceptor_, spec, mesh, w, watchFd, onWatch);
  acceptor_.reset();

  // Every rank sends first, then receives: small records, so no link can block the other.
  for (const LocalPeer& p : peers)
    sendDescriptors(links[static_cast<size_t>(p.rank)][0].get(), wd.own.fd(), wd.doorbell.get(), rank_, w, p.name);
  for (const LocalPeer& p : peers) {
    int link = links[static_cast<size_t>(p.rank)][0].get();
    auto it = std::find(wd.localRanks.begin(), wd.localRanks.end(), p.rank);
    if (it == wd.localRanks.end()) fail(Errc::Internal, "%s is not among this host's ranks", p.name.c_str());
    Peer& peer = wd.peers[static_cast<size_t>(it - wd.localRanks.begin())];
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(link, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
      fail(Errc::System, "SO_PEERCRED on the link to %s: %s", p.name.c_str(), errnoText(errno).c_str());
    Fd segment;
    recvDescriptors(link, p.rank, &segment, &peer.doorbell, w, p.name);
    peer.rank = p.rank;
    peer.name = p.name;
    peer.segment = Segment::attach(std::move(segment), wd.nlocal, static_cast<uint32_t>(it - wd.localRanks.begin()),
                                   opts_.ringBytes, opts_.stageBytes, p.name);
    peer.segment.populateFor();
    peer.process = ProcessRef(cred.pid);
    peer.sameProcess = cred.pid == getpid();
    HORA_INFO(log::kNet, "%s: shared memory (pid %d, %s)", p.name.c_str(), cred.pid,
              peer.process.pidfd() >= 0 ? "pidfd" : "pid and start time");
  }
  // The single copy: on where every rank may read every other's memory (threads of one process
  // may; processes may where the kernel allows one to read the other, as it does between
  // processes of one user, unless a security module or a seccomp filter forbids it).
  std::string whyNot = opts_.singleCopy ? "" : "HORA_SHM_SINGLE_COPY=0 on this rank";
  for (size_t i = 0; i < wd.peers.size() && whyNot.empty(); ++i)
    if (i != wd.localIndex && !wd.peers[i].sameProcess) whyNot = probeAccess(wd.peers[i]);
  bool all = whyNot.empty();
  // Fence-free posts (World::asymmetric), where every rank of the host could register for the
  // heavy barrier that its sleeps then take instead.
  std::string heavyWhyNot = wd.nlocal > 1 ? registerHeavyBarrier() : "one rank on the host";
  bool heavy = heavyWhyNot.empty();
  for (const LocalPeer& p : peers)
    sendCanRead(links[static_cast<size_t>(p.rank)][0].get(), (all ? kMayRead : 0) | (heavy ? kHeavyBarrier : 0), w, p.name);
  for (const LocalPeer& p : peers) {
    const uint32_t theirs = recvCanRead(links[static_cast<size_t>(p.rank)][0].get(), w, p.name);
    if (!(theirs & kMayRead) && all) {
      all = false;
      whyNot = p.name + " cannot read and write every rank's memory";
    }
    if (!(theirs & kHeavyBarrier) && heavy) {
      heavy = false;
      heavyWhyNot = p.name + " could not register for membarrier";
    }
  }
  wd.asymmetric = heavy;
  if (wd.nlocal > 1)
    HORA_INFO(log::kNet, "doorbells between the ranks of this host: %s",
              heavy ? "fence-free posts, a sleeping rank's membarrier orders them"
                    : ("a fence per post (" + heavyWhyNot + ")").c_str());
  const bool oneProcess =
      std::all_of(wd.peers.begin(), wd.peers.end(), [&](const Peer& p) { return &p == &wd.peers[wd.localIndex] || p.sameProcess; });
  wd.access = !all ? World::Access::None : oneProcess ? World::Access::Direct : World::Access::Kernel;
  if (wd.nlocal > 1)
    HORA_INFO(log::kNet, "single copy between the ranks of this host: %s",
              !all ? ("off (" + whyNot + ")").c_str()
                   : oneProcess ? "on (threads of one process)" : "on (process_vm_readv and process_vm_writev)");
  wd.mapStage();
  return world_;
}

}  // namespace hora::shm
