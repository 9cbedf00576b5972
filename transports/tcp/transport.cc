// The TCP transport's registration: any two ranks whose addresses reach each other, with
// HORA_NSOCKS_PERPEER sockets per pair (endpoint.h).
//
// Its field of the peer record: u32 sockets per peer, then the listening address (packed).
#include "base/error.h"
#include "base/record.h"
#include "transports/registry.h"
#include "transports/tcp/endpoint.h"

namespace hora::tcp {

namespace {

class TcpTransport final : public transport::Transport {
 public:
  explicit TcpTransport(const transport::Settings& s) : nsocks_(s.socketsPerPeer) {
    Options o;
    o.nsocks = s.socketsPerPeer;
    o.handshakeTimeout = s.handshakeTimeout;
    endpoint_ = std::make_unique<Endpoint>(s.bindAddr, s.secret, s.commId, s.rank, s.nranks, o);
  }

  std::string field() override {
    uint8_t packed[SockAddr::kPackedBytes];
    endpoint_->address().pack(packed);
    return FieldWriter().u32(static_cast<uint32_t>(nsocks_)).raw(packed, sizeof packed).take();
  }

  int canConnect(const transport::PeerView& self, const transport::PeerView& peer) const override {
    if (self.rank == peer.rank) return 0;
    uint32_t theirs = 0;
    addressOf(peer, &theirs);
    const SockAddr theirAddress = addressOf(peer, &theirs);
    if (static_cast<int>(theirs) != nsocks_)
      fail(Errc::InvalidUsage, "HORA_NSOCKS_PERPEER differs across ranks: %s has %u, this rank %d", peer.name.c_str(),
           theirs, nsocks_);
    // A loopback address reaches only its own host: a rank on another host would connect to
    // itself (or to nobody) there. Both ends of the pair say it alike, naming the rank that
    // advertised it (the lower one, if both did).
    const SockAddr mine = endpoint_->address();
    if (peer.hostId != self.hostId && (mine.isLoopback() || theirAddress.isLoopback())) {
      const bool selfAdvertised = mine.isLoopback() && (!theirAddress.isLoopback() || self.rank < peer.rank);
      const transport::PeerView& adv = selfAdvertised ? self : peer;
      const transport::PeerView& other = selfAdvertised ? peer : self;
      fail(Errc::InvalidUsage, "%s advertised the loopback address %s for TCP to %s, on another host, which cannot "
           "reach it: choose with HORA_SOCKET_IFNAME an interface that every host reaches", adv.name.c_str(),
           (selfAdvertised ? mine : theirAddress).str().c_str(), other.name.c_str());
    }
    return 1;
  }

  std::vector<std::unique_ptr<transport::Connection>> connect(const transport::PeerView& self,
                                                             const std::vector<transport::PeerView>& peers,
                                                             transport::ConnectContext& ctx) override {
    std::vector<PeerAddress> remote;
    uint32_t n = 0;
    for (const transport::PeerView& p : peers) remote.push_back(PeerAddress{p.rank, addressOf(p, &n), p.name});
    std::vector<std::unique_ptr<transport::Connection>> byRank =
        endpoint_->connectAll(remote, ctx.waiter, ctx.watchFd, ctx.onWatch);
    std::vector<std::unique_ptr<transport::Connection>> out;
    for (const transport::PeerView& p : peers) out.push_back(std::move(byRank[static_cast<size_t>(p.rank)]));
    (void)self;
    return out;
  }

 private:
  static SockAddr addressOf(const transport::PeerView& p, uint32_t* nsocks) {
    FieldReader r(*p.field);
    uint8_t packed[SockAddr::kPackedBytes];
    SockAddr a;
    if (!r.u32(nsocks) || !r.raw(packed, sizeof packed) || !r.atEnd() || !SockAddr::unpack(packed, &a))
      fail(Errc::Remote, "%s sent no valid TCP address in its peer record", p.name.c_str());
    return a;
  }

  int nsocks_;
  std::unique_ptr<Endpoint> endpoint_;
};

}  // namespace

transport::Registration registration() {
  return {"tcp", "TCP between any two ranks (HORA_NSOCKS_PERPEER sockets each)", true,
          [](const transport::Settings& s) -> std::unique_ptr<transport::Transport> {
            return std::make_unique<TcpTransport>(s);
          },
          // Loopback on a 2-core VM: 4.5 us for 8 bytes between 2 ranks, fitted with the ring's
          // crossover (src/coll/cost.h).
          4.7, 3.1};
}

}  // namespace hora::tcp
