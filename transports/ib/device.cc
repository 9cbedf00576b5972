#include "transports/ib/device.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "base/error.h"
#include "base/log.h"
#include "topo/topology.h"
#include "transports/ib/mrcache.h"

namespace hora::ib {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

const char* linkLayerName(uint8_t l) {
  switch (l) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
    default: return "unknown link layer";
  }
}

bool ipv4Mapped(const ibv_gid& g) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g.raw, prefix, sizeof prefix) == 0;
}

bool zeroGid(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

// The RoCE GID of the port: the one asked for, or the first RoCE v2 GID with an IPv4-mapped
// address (routable, and what rdma_cm would pick), else the first RoCE v2 one, else the first
// RoCE v1 one. -1 and a reason when none fits.
int chooseGid(ibv_context* ctx, int port, int tableLen, int asked, ibv_gid* gid, std::string* why) {
  int best = -1, bestScore = 0;
  for (int i = 0; i < tableLen; ++i) {
    if (asked >= 0 && i != asked) continue;
    ibv_gid_entry e{};
    if (ibv_query_gid_ex(ctx, static_cast<uint32_t>(port), static_cast<uint32_t>(i), &e, 0) != 0) continue;
    ibv_gid g;
    memcpy(g.raw, e.gid.raw, sizeof g.raw);
    if (zeroGid(g)) continue;
    int score = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? (ipv4Mapped(g) ? 3 : 2) : 1;
    if (asked >= 0) score = 3;
    if (score > bestScore) {
      best = i;
      bestScore = score;
      *gid = g;
    }
    if (score == 3) break;
  }
  if (best < 0)
    *why = asked >= 0 ? format("GID index %d (HORA_IB_GID_INDEX) is empty or out of its table of %d", asked, tableLen)
                      : "no GID is configured (no IP address on its network interface?)";
  return best;
}

}  // namespace

bool HcaFilter::matches(const std::string& device, int port) const {
  if (items.empty()) return true;
  bool hit = false;
  for (const Item& it : items) {
    const bool name = exact ? device == it.device : device.compare(0, it.device.size(), it.device) == 0;
    if (name && (it.port < 0 || it.port == port)) hit = true;
  }
  return exclude ? !hit : hit;
}

HcaFilter parseHcaFilter(const std::string& spec) {
  HcaFilter f;
  std::string s = trim(spec);
  if (s.empty()) return f;
  auto bad = [&](const std::string& what) {
    fail(Errc::InvalidArgument, "HORA_IB_HCA='%s' is invalid: %s (expected device[:port],... with an optional "
         "leading ^ to exclude or = for exact names, e.g. mlx5_0:1,mlx5_1)", spec.c_str(), what.c_str());
  };
  if (s[0] == '^') {
    f.exclude = true;
    s = s.substr(1);
  }
  if (!s.empty() && s[0] == '=') {
    f.exact = true;
    s = s.substr(1);
  }
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    std::string item = trim(s.substr(pos, comma - pos));
    pos = comma + 1;
    if (item.empty()) bad("an empty device name");
    HcaFilter::Item it;
    size_t colon = item.find(':');
    it.device = item.substr(0, colon);
    if (it.device.empty()) bad("an empty device name");
    if (colon != std::string::npos) {
      const std::string p = item.substr(colon + 1);
      char* end = nullptr;
      long v = strtol(p.c_str(), &end, 10);
      if (p.empty() || *end || v < 1 || v > 255) bad("port '" + p + "' of " + it.device + " is not a number from 1 to 255");
      it.port = static_cast<int>(v);
    }
    f.items.push_back(it);
  }
  return f;
}

std::string gidText(const ibv_gid& gid) {
  char buf[INET6_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET6, gid.raw, buf, sizeof buf);
  return buf;
}

int mtuBytes(ibv_mtu mtu) { return 128 << static_cast<int>(mtu); }

std::vector<PortChoice> usablePorts(const HcaFilter& filter, int gidIndex, const std::string& topoFile,
                                    std::string* seen) {
  std::vector<PortChoice> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    *seen = format("no RDMA device: the verbs library finds none (%s: no RDMA support in this kernel?)", errnoText(errno).c_str());
    return out;
  }
  if (n == 0) *seen = "this machine has no RDMA device (none under /sys/class/infiniband)";
  for (int d = 0; d < n; ++d) {
    const std::string name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    auto note = [&](const std::string& what) { *seen += (seen->empty() ? "" : "; ") + what; };
    if (!ctx) {
      note(format("%s: cannot be opened (%s)", name.c_str(), errnoText(errno).c_str()));
      continue;
    }
    ibv_device_attr da{};
    if (ibv_query_device(ctx, &da) != 0) {
      note(format("%s: cannot be queried", name.c_str()));
      ibv_close_device(ctx);
      continue;
    }
    for (int port = 1; port <= da.phys_port_cnt; ++port) {
      if (!filter.matches(name, port)) {
        note(format("%s port %d: left out by HORA_IB_HCA", name.c_str(), port));
        continue;
      }
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, static_cast<uint8_t>(port), &pa) != 0) {
        note(format("%s port %d: cannot be queried", name.c_str(), port));
        continue;
      }
      if (pa.state != IBV_PORT_ACTIVE) {
        note(format("%s port %d: %s, not active", name.c_str(), port, ibv_port_state_str(pa.state)));
        continue;
      }
      PortChoice c;
      c.device = name;
      c.port = port;
      c.mtu = pa.active_mtu;
      c.ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
      if (c.ethernet) {
        std::string why;
        c.gidIndex = chooseGid(ctx, port, pa.gid_tbl_len, gidIndex, &c.gid, &why);
        if (c.gidIndex < 0) {
          note(format("%s port %d (RoCE): %s", name.c_str(), port, why.c_str()));
          continue;
        }
      } else if (pa.link_layer == IBV_LINK_LAYER_INFINIBAND || pa.link_layer == IBV_LINK_LAYER_UNSPECIFIED) {
        if (pa.lid == 0) {
          note(format("%s port %d (InfiniBand): no LID assigned (is a subnet manager running?)", name.c_str(), port));
          continue;
        }
        c.lid = pa.lid;
      } else {
        note(format("%s port %d: %s", name.c_str(), port, linkLayerName(pa.link_layer)));
        continue;
      }
      out.push_back(c);
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (out.size() > 1) {
    // Nearest first: a device on the rank's NUMA node, then its package, then the others.
    try {
      const topo::Host host = topo::discover(topoFile);
      const topo::Place at = topo::place(topoFile);
      for (PortChoice& c : out) {
        for (const topo::Nic& nic : host.nics)
          if (nic.name == c.device) c.numa = nic.numa;
      }
      auto distance = [&](const PortChoice& c) {
        if (c.numa >= 0 && c.numa == at.numa) return 0;
        for (const topo::Nic& nic : host.nics)
          if (nic.name == c.device && nic.package >= 0 && nic.package == at.package) return 1;
        return 2;
      };
      std::stable_sort(out.begin(), out.end(),
                       [&](const PortChoice& a, const PortChoice& b) { return distance(a) < distance(b); });
    } catch (const Error& e) {
      HORA_INFO(log::kNet, "ib: no topology to order the devices by distance (%s); first found first", e.what());
    }
  }
  return out;
}

std::shared_ptr<Device> Device::open(const PortChoice& port) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<Device>> open;
  std::lock_guard<std::mutex> g(mu);
  const std::string key = format("%s:%d:%d", port.device.c_str(), port.port, port.gidIndex);
  if (auto d = open[key].lock()) return d;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n && !ctx; ++i)
    if (port.device == ibv_get_device_name(list[i])) ctx = ibv_open_device(list[i]);
  if (list) ibv_free_device_list(list);
  if (!ctx) fail(Errc::System, "cannot open the RDMA device %s: %s", port.device.c_str(), errnoText(errno).c_str());
  std::shared_ptr<Device> d(new Device());
  d->ctx_ = ctx;
  d->port_ = port;
  d->pd_ = ibv_alloc_pd(ctx);
  if (!d->pd_) fail(Errc::System, "%s: cannot allocate a protection domain: %s", port.device.c_str(), errnoText(errno).c_str());
  ibv_device_attr da{};
  if (ibv_query_device(ctx, &da) != 0) fail(Errc::System, "%s: cannot be queried", port.device.c_str());
  d->maxQpWr_ = static_cast<uint32_t>(da.max_qp_wr);
  ibv_port_attr pa{};
  if (ibv_query_port(ctx, static_cast<uint8_t>(port.port), &pa) != 0) fail(Errc::System, "%s: port cannot be queried", port.device.c_str());
  d->maxMsg_ = pa.max_msg_sz;
  // On-demand paging for RC writes and receives, where the device has it.
  bool odp = false;
  ibv_device_attr_ex dx{};
  if (ibv_query_device_ex(ctx, nullptr, &dx) == 0) {
    const uint32_t need = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE;
    odp = (dx.odp_caps.general_caps & IBV_ODP_SUPPORT) && (dx.odp_caps.per_transport_caps.rc_odp_caps & need) == need;
  }
  d->cache_ = std::make_unique<MrCache>(d->pd_, odp);
  if (posix_memalign(&d->landing_, 4096, 4096) != 0) fail(Errc::System, "ib: out of memory");
  d->landingMr_ = ibv_reg_mr(d->pd_, d->landing_, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!d->landingMr_) fail(Errc::System, "%s: cannot register memory: %s", port.device.c_str(), errnoText(errno).c_str());
  const MrCache::Stats s = d->cache_->stats();
  HORA_INFO(log::kNet, "ib: opened %s; registration cache %s", d->describe().c_str(),
            s.odp ? "on (on-demand paging)" : s.caching ? "on (memory hooks)" : "off (no ODP, memory hooks inactive: "
            "libhora is not first in the program's symbol lookup)");
  open[key] = d;
  return d;
}

Device::~Device() {
  cache_.reset();
  if (landingMr_) ibv_dereg_mr(landingMr_);
  free(landing_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
}

std::string Device::describe() const {
  if (port_.ethernet)
    return format("%s port %d (RoCE GID %d %s, MTU %d)", port_.device.c_str(), port_.port, port_.gidIndex,
                  gidText(port_.gid).c_str(), mtuBytes(port_.mtu));
  return format("%s port %d (InfiniBand LID %u, MTU %d)", port_.device.c_str(), port_.port, port_.lid, mtuBytes(port_.mtu));
}

}  // namespace hora::ib
