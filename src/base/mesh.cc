#include "base/mesh.h"

#include <cstring>
#include <map>
#include <memory>

#include "base/error.h"

namespace hora {

namespace {
struct LinkPayload {
  uint64_t commId;
  uint32_t fromRank, toRank, index, perPeer;
};
static_assert(sizeof(LinkPayload) <= kHandshakePayloadBytes, "payload too big");

struct Dial {
  const MeshPeer* peer;
  int index;
  Fd fd;
  std::unique_ptr<Handshake> hs;  // set once the connect completed
  bool done = false;
  Clock::time_point retryAt{};  // with no fd: when to dial again (the listener's backlog was full)
};

// A dial that found the listener's backlog full tries again after this long, within the
// waiter's deadline: the listener drains its backlog as soon as it runs (base/acceptor.h).
constexpr milliseconds kRedial{20};
}  // namespace

std::vector<std::vector<Fd>> connectMesh(Acceptor& acceptor, const MeshSpec& spec,
                                         const std::vector<MeshPeer>& peers, Waiter& w, int watchFd,
                                         const std::function<void()>& onWatch) {
  const int per = spec.perPeer;
  std::vector<std::vector<Fd>> links(static_cast<size_t>(spec.nranks));
  std::map<int, const MeshPeer*> byRank;
  std::vector<Dial> dials;
  size_t expectAccepts = 0;
  // A peer that refuses at once (a Unix socket: it failed and closed its listener) is named, as
  // one whose refusal comes later is: its failure, which the caller may learn the cause of.
  auto dial = [](const Dial& d) {
    try {
      return d.peer->dial();
    } catch (const Error& e) {
      if (e.code() != Errc::Remote) throw;
      fail(Errc::Remote, "cannot connect to %s: %s", d.peer->name.c_str(), e.what());
    }
  };
  for (const MeshPeer& p : peers) {
    if (p.rank == spec.rank) continue;
    byRank[p.rank] = &p;
    links[static_cast<size_t>(p.rank)].resize(static_cast<size_t>(per));
    if (p.rank < spec.rank) {
      for (int i = 0; i < per; ++i) {
        dials.push_back(Dial{&p, i, Fd(), nullptr});
        dials.back().fd = dial(dials.back());
      }
    } else {
      expectAccepts += static_cast<size_t>(per);
    }
  }

  size_t accepted = 0, dialled = 0;
  std::vector<Acceptor::Accepted> fresh;
  std::vector<pollfd> fds;
  while (accepted < expectAccepts || dialled < dials.size()) {
    bool moved = false;
    bool redialPending = false;
    for (Dial& d : dials) {
      if (d.done) continue;
      if (!d.fd.valid()) {
        if (Clock::now() < d.retryAt || !(d.fd = dial(d)).valid()) {
          if (Clock::now() >= d.retryAt) d.retryAt = Clock::now() + kRedial;
          redialPending = true;
          continue;
        }
      }
      if (!d.hs) {
        int st = connectStatus(d.fd.get());
        if (st == EINPROGRESS) continue;
        if (st != 0)
          fail(Errc::Remote, "cannot connect to %s at %s: %s", d.peer->name.c_str(), d.peer->where.c_str(),
               errnoText(st).c_str());
        LinkPayload lp{spec.commId, static_cast<uint32_t>(spec.rank), static_cast<uint32_t>(d.peer->rank),
                       static_cast<uint32_t>(d.index), static_cast<uint32_t>(per)};
        uint8_t payload[kHandshakePayloadBytes] = {0};
        memcpy(payload, &lp, sizeof lp);
        d.hs = std::make_unique<Handshake>(Handshake::Role::Client, d.fd.get(), spec.secret, spec.kind, payload);
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
        links[static_cast<size_t>(d.peer->rank)][static_cast<size_t>(d.index)] = std::move(d.fd);
      }
    }
    fresh.clear();
    moved |= acceptor.advance(fresh);
    for (Acceptor::Accepted& a : fresh) {
      LinkPayload lp;
      memcpy(&lp, a.payload, sizeof lp);
      // The handshake proved the peer holds our secret; still check every field before use.
      if (lp.commId != spec.commId || static_cast<int>(lp.toRank) != spec.rank)
        fail(Errc::Remote, "a link from %s is for another communicator or rank", a.peer.str().c_str());
      int from = static_cast<int>(lp.fromRank);
      if (from <= spec.rank || from >= spec.nranks || !byRank.count(from))
        fail(Errc::Remote, "a link from %s claims to be from rank %u, which must not dial rank %d",
             a.peer.str().c_str(), lp.fromRank, spec.rank);
      if (static_cast<int>(lp.perPeer) != per)
        fail(Errc::InvalidUsage, "%s opens %u links per peer and this rank %d: set %s alike on every rank",
             byRank[from]->name.c_str(), lp.perPeer, per, spec.perPeerSetting);
      if (lp.index >= static_cast<uint32_t>(per) || links[static_cast<size_t>(from)][lp.index].valid())
        fail(Errc::Remote, "%s opened link %u twice or out of range", byRank[from]->name.c_str(), lp.index);
      links[static_cast<size_t>(from)][lp.index] = std::move(a.fd);
      ++accepted;
    }
    if (moved) {
      w.progressed();
      continue;
    }
    w.idle([&](milliseconds most) {
      fds.clear();
      acceptor.addPollFds(fds);
      for (const Dial& d : dials)
        if (!d.done && d.fd.valid()) fds.push_back(pollfd{d.fd.get(), d.hs ? d.hs->events() : short(POLLOUT), 0});
      if (watchFd >= 0) fds.push_back(pollfd{watchFd, POLLIN, 0});
      pollFor(fds.data(), fds.size(), static_cast<int>(redialPending ? std::min(most, kRedial).count() : most.count()));
      if (watchFd >= 0 && (fds.back().revents & (POLLIN | POLLHUP | POLLERR)) && onWatch) onWatch();
    });
  }
  acceptor.close();
  return links;
}

}  // namespace hora
