#include "transports/tcp/endpoint.h"

#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "transports/tcp/connection.h"

namespace hora::tcp {

Endpoint::Endpoint(const SockAddr& bindAddr, const Secret& secret, uint64_t commId, int rank,
                   int nranks, Options opts)
    : acceptor_(listenSocket(bindAddr), secret, LinkKind::Data, opts.handshakeTimeout, log::kNet),
      secret_(secret), commId_(commId), rank_(rank), nranks_(nranks), opts_(opts) {}

Endpoint::~Endpoint() = default;

std::vector<std::unique_ptr<transport::Connection>> Endpoint::connectAll(
    const std::vector<PeerAddress>& peers, Waiter& w, int watchFd, const std::function<void()>& onWatch) {
  MeshSpec spec;
  spec.kind = LinkKind::Data;
  spec.secret = secret_;
  spec.commId = commId_;
  spec.rank = rank_;
  spec.nranks = nranks_;
  spec.perPeer = opts_.nsocks;
  spec.perPeerSetting = "HORA_NSOCKS_PERPEER";
  std::vector<MeshPeer> mesh;
  for (const PeerAddress& p : peers) {
    SockAddr addr = p.addr;
    mesh.push_back(MeshPeer{p.rank, p.name, [addr] { return startConnect(addr); }, p.addr.str()});
  }
  std::vector<std::vector<Fd>> links = connectMesh(acceptor_, spec, mesh, w, watchFd, onWatch);
  std::vector<std::unique_ptr<transport::Connection>> out(static_cast<size_t>(nranks_));
  for (const PeerAddress& p : peers) {
    if (p.rank == rank_) continue;
    out[static_cast<size_t>(p.rank)] = std::make_unique<Connection>(std::move(links[static_cast<size_t>(p.rank)]), p.name);
    HORA_INFO(log::kNet, "%s: TCP (%s, %d socket%s)", p.name.c_str(), p.addr.str().c_str(), opts_.nsocks,
              opts_.nsocks > 1 ? "s" : "");
  }
  return out;
}

}  // namespace hora::tcp
