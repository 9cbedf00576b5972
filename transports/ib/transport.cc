// The ib transport's registration: RDMA (InfiniBand or RoCE) through libibverbs between two
// ranks whose usable ports reach each other (device.h: HORA_IB_HCA, the port's state and GID);
// preferred to TCP between hosts, and used within a host only when HORA_TRANSPORTS leaves
// nothing else (TCP and shared memory win there).
//
// Its field of the peer record (little-endian): u32 version, u32 queue pairs per peer, u32 link
// (1 Ethernet/RoCE, 2 InfiniBand), u32 MTU enum, u32 LID, 16-byte GID, u64 and u32: address and
// rkey of the landing word, str device description, u32 ranks; then for every rank r, per
// queue pair, u32 QP number and u32 first PSN of this rank's queue pair towards r (0 for itself).
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "base/record.h"
#include "transports/ib/connection.h"
#include "transports/ib/device.h"
#include "transports/registry.h"

namespace hora::ib {

namespace {

constexpr uint32_t kFieldVersion = 1;

struct Field {
  uint32_t nqps = 0;
  bool ethernet = false;
  PeerEnd end;          // everything but qps
  std::string device;   // its description
  std::vector<QpAddress> toMe;
};

Field parseField(const transport::PeerView& p, int myRank) {
  FieldReader r(*p.field);
  Field f;
  uint32_t version = 0, link = 0, mtu = 0, lid = 0, nranks = 0;
  bool ok = r.u32(&version) && version == kFieldVersion && r.u32(&f.nqps) && f.nqps >= 1 && f.nqps <= 16 &&
            r.u32(&link) && (link == 1 || link == 2) && r.u32(&mtu) && mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 &&
            r.u32(&lid) && lid <= 0xffff && r.raw(f.end.gid.raw, sizeof f.end.gid.raw) && r.u64(&f.end.landingAddr) &&
            r.u32(&f.end.landingRkey) && r.str(&f.device, 256) && r.u32(&nranks) && myRank >= 0 &&
            static_cast<uint32_t>(myRank) < nranks && nranks <= (1u << 20);
  for (uint32_t k = 0; ok && k < nranks; ++k)
    for (uint32_t q = 0; ok && q < f.nqps; ++q) {
      QpAddress a;
      ok = r.u32(&a.qpn) && r.u32(&a.psn);
      if (ok && k == static_cast<uint32_t>(myRank)) f.toMe.push_back(a);
    }
  if (!ok || !r.atEnd()) fail(Errc::Remote, "%s sent no valid ib field in its peer record", p.name.c_str());
  f.ethernet = link == 1;
  f.end.ethernet = f.ethernet;
  f.end.mtu = static_cast<ibv_mtu>(mtu);
  f.end.lid = static_cast<uint16_t>(lid);
  f.end.qps = f.toMe;
  return f;
}

class IbTransport final : public transport::Transport {
 public:
  explicit IbTransport(const transport::Settings& s) : rank_(s.rank), nranks_(s.nranks), nqps_(s.ibQpsPerPeer) {
    const HcaFilter filter = parseHcaFilter(s.ibHca);
    std::string seen;
    const std::vector<PortChoice> ports = usablePorts(filter, s.ibGidIndex, s.topoFile, &seen);
    if (ports.empty()) {
      if (!s.ibHca.empty() && !s.ibHcaLenient)
        fail(Errc::InvalidArgument, "HORA_IB_HCA='%s' leaves no usable RDMA port on this host: %s", s.ibHca.c_str(),
             seen.c_str());
      off_ = s.ibHca.empty() ? seen : format("NCCL_IB_HCA='%s' leaves no usable RDMA port: %s", s.ibHca.c_str(), seen.c_str());
      HORA_INFO(log::kNet, "ib: off on this rank: %s", off_.c_str());
      return;
    }
    dev_ = Device::open(ports[0]);
  }

  std::string offReason() const override { return off_; }

  std::string field() override {
    if (!dev_) return "";
    qps_.resize(static_cast<size_t>(nranks_));
    const PortChoice& p = dev_->port();
    FieldWriter w;
    w.u32(kFieldVersion).u32(static_cast<uint32_t>(nqps_)).u32(p.ethernet ? 1 : 2).u32(static_cast<uint32_t>(p.mtu))
        .u32(p.lid).raw(p.gid.raw, sizeof p.gid.raw).u64(dev_->landingAddr()).u32(dev_->landingRkey())
        .str(dev_->describe()).u32(static_cast<uint32_t>(nranks_));
    for (int r = 0; r < nranks_; ++r) {
      if (r != rank_) qps_[static_cast<size_t>(r)] = std::make_unique<QueuePairs>(dev_, nqps_);
      for (int q = 0; q < nqps_; ++q) {
        QpAddress a;
        if (r != rank_) a = qps_[static_cast<size_t>(r)]->addresses()[static_cast<size_t>(q)];
        w.u32(a.qpn).u32(a.psn);
      }
    }
    return w.take();
  }

  int canConnect(const transport::PeerView& self, const transport::PeerView& peer) const override {
    if (self.rank == peer.rank || !dev_) return 0;
    const Field theirs = parseField(peer, self.rank);
    if (static_cast<int>(theirs.nqps) != nqps_)
      fail(Errc::InvalidUsage, "HORA_IB_QPS_PER_PEER differs across ranks: %s has %u, this rank %d", peer.name.c_str(),
           theirs.nqps, nqps_);
    if (theirs.ethernet != dev_->port().ethernet) return 0;  // RoCE and InfiniBand do not meet
    return peer.hostId != self.hostId ? 3 : 1;  // between hosts above TCP; within one, TCP (first) wins a tie
  }

  std::vector<std::unique_ptr<transport::Connection>> connect(const transport::PeerView& self,
                                                             const std::vector<transport::PeerView>& peers,
                                                             transport::ConnectContext& ctx) override {
    (void)ctx;
    std::vector<std::unique_ptr<transport::Connection>> out;
    for (const transport::PeerView& p : peers) {
      const Field f = parseField(p, self.rank);
      out.push_back(std::make_unique<Connection>(std::move(qps_[static_cast<size_t>(p.rank)]), f.end, p.name));
      HORA_INFO(log::kNet, "ib: %s over %s, %d queue pair(s); it uses %s", p.name.c_str(), dev_->describe().c_str(),
                nqps_, f.device.c_str());
    }
    return out;
  }

 private:
  int rank_, nranks_, nqps_;
  std::string off_;
  std::shared_ptr<Device> dev_;
  std::vector<std::unique_ptr<QueuePairs>> qps_;  // towards each rank, until connected
};

}  // namespace

transport::Registration registration() {
  return {"ib", "RDMA verbs (InfiniBand, RoCE) between hosts (HORA_IB_HCA, HORA_IB_QPS_PER_PEER)", true,
                            [](const transport::Settings& s) -> std::unique_ptr<transport::Transport> {
                              return std::make_unique<IbTransport>(s);
                            },
                            // Placeholders of the order of a 100 Gb/s HCA: 2 us, 10 GB/s.
                            2.0, 10.0};
}

}  // namespace hora::ib
