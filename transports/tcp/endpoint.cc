#include "transports/tcp/endpoint.h"

#include <cstring>
#include <map>

#include "base/error.h"
#include "base/log.h"
#include "transports/tcp/connection.h"

namespace hora::tcp {

namespace {
struct LinkPayload {
  uint64_t commId;
  uint32_t fromRank, toRank, sockIdx, nsocks;
};
static_assert(sizeof(LinkPayload) <= kHandshakePayloadBytes, "payload too big");

struct Dial {
  const PeerAddress* peer;
  int sockIdx;
  Fd fd;
  std::unique_ptr<Handshake> hs;  // set once the TCP connect completed
  bool done = false;
};
}  // namespace

Endpoint::Endpoint(const SockAddr& bindAddr, const Secret& secret, uint64_t commId, int rank,
                   int nranks, Options opts)
    : acceptor_(listenSocket(bindAddr), secret, LinkKind::Data, opts.handshakeTimeout, log::kNet),
      secret_(secret), commId_(commId), rank_(rank), nranks_(nranks), opts_(opts) {}

Endpoint::~Endpoint() = default;

std::vector<std::unique_ptr<transport::Connection>> Endpoint::connectAll(
    const std::vector<PeerAddress>& peers, Waiter& w, int watchFd, const std::function<void()>& onWatch) {
  const int ns = opts_.nsocks;
  std::vector<std::vector<Fd>> socks(static_cast<size_t>(nranks_));
  std::map<int, const PeerAddress*> byRank;
  std::vector<Dial> dials;
  size_t expectAccepts = 0;
  for (const PeerAddress& p : peers) {
    if (p.rank == rank_) continue;
    byRank[p.rank] = &p;
    socks[static_cast<size_t>(p.rank)].resize(static_cast<size_t>(ns));
    if (p.rank < rank_) {
      for (int i = 0; i < ns; ++i) dials.push_back(Dial{&p, i, startConnect(p.addr), nullptr});
    } else {
      expectAccepts += static_cast<size_t>(ns);
    }
  }

  size_t accepted = 0, dialled = 0;
  std::vector<Acceptor::Accepted> fresh;
  std::vector<pollfd> fds;
  while (accepted < expectAccepts || dialled < dials.size()) {
    bool moved = false;
    for (Dial& d : dials) {
      if (d.done) continue;
      if (!d.hs) {
        int st = connectStatus(d.fd.get());
        if (st == EINPROGRESS) continue;
        if (st != 0)
          fail(Errc::Remote, "cannot connect to %s at %s: %s", d.peer->name.c_str(),
               d.peer->addr.str().c_str(), errnoText(st).c_str());
        LinkPayload lp{commId_, static_cast<uint32_t>(rank_), static_cast<uint32_t>(d.peer->rank),
                       static_cast<uint32_t>(d.sockIdx), static_cast<uint32_t>(ns)};
        uint8_t payload[kHandshakePayloadBytes] = {0};
        memcpy(payload, &lp, sizeof lp);
        d.hs = std::make_unique<Handshake>(Handshake::Role::Client, d.fd.get(), secret_,
                                           LinkKind::Data, payload);
        moved = true;
      }
      bool finished;
      try {
        finished = d.hs->step();
      } catch (const Error& e) {
        fail(Errc::Remote, "connecting to %s: %s", d.peer->name.c_str(), e.what());
      }
      if (finished) {
        d.done = true;
        ++dialled;
        moved = true;
        socks[static_cast<size_t>(d.peer->rank)][static_cast<size_t>(d.sockIdx)] = std::move(d.fd);
      }
    }
    fresh.clear();
    moved |= acceptor_.advance(fresh);
    for (Acceptor::Accepted& a : fresh) {
      LinkPayload lp;
      memcpy(&lp, a.payload, sizeof lp);
      // The handshake proved the peer holds our secret; still check every field before use.
      if (lp.commId != commId_ || static_cast<int>(lp.toRank) != rank_)
        fail(Errc::Remote, "a data connection from %s is for another communicator or rank",
             a.peer.str().c_str());
      int from = static_cast<int>(lp.fromRank);
      if (from <= rank_ || from >= nranks_ || !byRank.count(from))
        fail(Errc::Remote, "a data connection from %s claims to be from rank %u, which must not dial rank %d",
             a.peer.str().c_str(), lp.fromRank, rank_);
      if (static_cast<int>(lp.nsocks) != ns)
        fail(Errc::InvalidUsage, "%s uses %u sockets per peer and this rank %d: set HORA_NSOCKS_PERPEER alike on every rank",
             byRank[from]->name.c_str(), lp.nsocks, ns);
      if (lp.sockIdx >= static_cast<uint32_t>(ns) ||
          socks[static_cast<size_t>(from)][lp.sockIdx].valid())
        fail(Errc::Remote, "%s opened socket %u twice or out of range", byRank[from]->name.c_str(), lp.sockIdx);
      socks[static_cast<size_t>(from)][lp.sockIdx] = std::move(a.fd);
      ++accepted;
    }
    if (moved) {
      w.progressed();
      continue;
    }
    w.idle([&](milliseconds most) {
      fds.clear();
      acceptor_.addPollFds(fds);
      for (const Dial& d : dials)
        if (!d.done) fds.push_back(pollfd{d.fd.get(), d.hs ? d.hs->events() : short(POLLOUT), 0});
      if (watchFd >= 0) fds.push_back(pollfd{watchFd, POLLIN, 0});
      pollFor(fds.data(), fds.size(), static_cast<int>(most.count()));
      if (watchFd >= 0 && (fds.back().revents & (POLLIN | POLLHUP | POLLERR)) && onWatch) onWatch();
    });
  }
  acceptor_.close();

  std::vector<std::unique_ptr<transport::Connection>> out(static_cast<size_t>(nranks_));
  for (auto& [r, p] : byRank) {
    out[static_cast<size_t>(r)] = std::make_unique<Connection>(std::move(socks[static_cast<size_t>(r)]), p->name);
    HORA_INFO(log::kNet, "connected to %s over TCP (%s, %d socket%s)", p->name.c_str(),
              p->addr.str().c_str(), ns, ns > 1 ? "s" : "");
  }
  return out;
}

}  // namespace hora::tcp
