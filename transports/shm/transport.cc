// The shared-memory transport's registration: ranks of one host (the same host identity) that
// both allow it talk through segments handed over an abstract Unix socket (endpoint.h), and the
// segments' stages make the shared stage (world.h) of the host's ranks.
//
// Its field of the peer record: the name of this rank's abstract Unix socket.
#include <algorithm>

#include "base/error.h"
#include "base/record.h"
#include "transports/registry.h"
#include "transports/shm/connection.h"
#include "transports/shm/endpoint.h"

namespace hora::shm {

namespace {

// Bytes of each shared-memory ring (one per direction of each pair on a host).
constexpr uint64_t kRingBytes = 1 << 20;
// The longest socket name a peer may send (ours are about 40 characters).
constexpr size_t kMaxSocketName = 100;

class ShmTransport final : public transport::Transport {
 public:
  explicit ShmTransport(const transport::Settings& s) {
    Options o;
    o.ringBytes = kRingBytes;
    o.stageBytes = transport::SharedStage::kSlots * s.chunkBytes;  // a slot is a chunk
    o.handshakeTimeout = s.handshakeTimeout;
    o.singleCopy = s.shmSingleCopy;
    endpoint_ = std::make_unique<Endpoint>(s.secret, s.commId, s.rank, s.nranks, o);
  }

  std::string field() override { return FieldWriter().str(endpoint_->socketName()).take(); }

  int canConnect(const transport::PeerView& self, const transport::PeerView& peer) const override {
    if (self.rank == peer.rank || self.hostId != peer.hostId) return 0;
    socketOf(peer);  // a malformed field is an error, not "unreachable"
    return 2;        // above TCP: no system call per message
  }

  std::vector<std::unique_ptr<transport::Connection>> connect(const transport::PeerView& self,
                                                             const std::vector<transport::PeerView>& peers,
                                                             transport::ConnectContext& ctx) override {
    std::vector<int> local{self.rank};
    std::vector<LocalPeer> lp;
    for (const transport::PeerView& p : peers) {
      local.push_back(p.rank);
      lp.push_back(LocalPeer{p.rank, socketOf(p), p.name});
    }
    std::sort(local.begin(), local.end());
    world_ = endpoint_->connectAll(local, lp, ctx.waiter, ctx.watchFd, ctx.onWatch);
    endpoint_.reset();
    std::vector<std::unique_ptr<transport::Connection>> out;
    for (const transport::PeerView& p : peers) {
      const auto it = std::find(world_->localRanks.begin(), world_->localRanks.end(), p.rank);
      out.push_back(std::make_unique<Connection>(*world_, static_cast<uint32_t>(it - world_->localRanks.begin())));
    }
    return out;
  }

  std::shared_ptr<transport::SharedStage> stage() override { return world_; }

 private:
  static std::string socketOf(const transport::PeerView& p) {
    FieldReader r(*p.field);
    std::string name;
    if (!r.str(&name, kMaxSocketName) || name.empty() || !r.atEnd())
      fail(Errc::Remote, "%s sent a malformed shared-memory field in its peer record", p.name.c_str());
    return name;
  }

  std::unique_ptr<Endpoint> endpoint_;
  std::shared_ptr<World> world_;
};

}  // namespace

transport::Registration registration() {
  return {"shm", "shared memory between the ranks of one host", true,
          [](const transport::Settings& s) -> std::unique_ptr<transport::Transport> {
            return std::make_unique<ShmTransport>(s);
          },
          // Fitted to the measured crossovers on a 2-core VM (src/coll/cost.h).
          0.56, 20};
}

}  // namespace hora::shm
