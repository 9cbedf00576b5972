// RDMA devices for the ib transport: which ports this rank may use (HORA_IB_HCA, port state,
// GID), in the order of their distance from the rank (the topology's PCI locality), and the
// device objects that every communicator of the process shares (one verbs context and
// protection domain per device, so that a registered buffer serves all of them).
#pragma once
#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

namespace hora::ib {

// HORA_IB_HCA in NCCL's syntax: a comma list of device[:port]; a device name is a prefix
// unless the list starts with '='; a list that starts with '^' names what to leave out.
struct HcaFilter {
  struct Item {
    std::string device;
    int port = -1;  // -1: every port
  };
  std::vector<Item> items;  // empty: everything
  bool exclude = false;
  bool exact = false;

  bool matches(const std::string& device, int port) const;
};
// Throws Error(InvalidArgument) naming HORA_IB_HCA and what is wrong.
HcaFilter parseHcaFilter(const std::string& spec);

// A port this rank may use.
struct PortChoice {
  std::string device;
  int port = 0;
  bool ethernet = false;  // RoCE: addressed by GID; InfiniBand: by LID
  int gidIndex = -1;      // RoCE: the GID index used; InfiniBand: -1 (no GRH)
  ibv_gid gid{};
  uint16_t lid = 0;
  ibv_mtu mtu = IBV_MTU_1024;  // the port's active MTU
  int numa = -1;          // where the topology puts the device (-1: unknown)
};

// The usable ports of this machine that pass the filter, nearest first; `seen` describes
// every device and port looked at and why one was left out (for the error when none is left).
// gidIndex: HORA_IB_GID_INDEX, or -1 to choose per port.
std::vector<PortChoice> usablePorts(const HcaFilter& filter, int gidIndex, const std::string& topoFile,
                                    std::string* seen);

class MrCache;

// An opened device: its context, protection domain, the port chosen, its limits and its
// registration cache. Shared by every communicator of the process that uses the port.
class Device {
 public:
  ~Device();
  // The process's Device for this port, opened on first use.
  static std::shared_ptr<Device> open(const PortChoice& port);

  ibv_context* ctx() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const PortChoice& port() const { return port_; }
  uint32_t maxQpWr() const { return maxQpWr_; }
  uint64_t maxMsgBytes() const { return maxMsg_; }
  MrCache& cache() { return *cache_; }
  // A word peers may write into (the liveness probe of connection.h).
  uint64_t landingAddr() const { return reinterpret_cast<uintptr_t>(landing_); }
  uint32_t landingRkey() const { return landingMr_->rkey; }
  // "rxe0 port 1 (RoCE v2 GID 1 ::ffff:169.254.0.1, MTU 4096)"
  std::string describe() const;

 private:
  Device() = default;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  PortChoice port_;
  uint32_t maxQpWr_ = 0;
  uint64_t maxMsg_ = 0;
  std::unique_ptr<MrCache> cache_;
  void* landing_ = nullptr;
  ibv_mr* landingMr_ = nullptr;
};

std::string gidText(const ibv_gid& gid);
int mtuBytes(ibv_mtu mtu);

}  // namespace hora::ib
