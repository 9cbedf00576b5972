// The pure half of the topology module: the wire encoding, JSON and text, and the choice of
// CPUs for a rank. Nothing here calls hwloc.
//
// Wire form, version 1 (integers little-endian; str = u8 length, then that many printable
// ASCII bytes):
//   u8 version
//   str host name; i32 packages, numa nodes, cores, PUs (0..kMaxCount)
//   u8 cache levels (<= kMaxCacheLevels), then u64 bytes per level
//   u8 NICs (<= kMaxDevices), each: str name, str kind, str PCI bus id, i32 numa, i32 package
//   u8 GPUs (<= kMaxDevices), each: str name, str PCI bus id, i32 numa, i32 package
//   i32 place's package, numa, core
// numa, package and core are -1..kMaxCount-1; kind is ethernet, infiniband or other.
#include <algorithm>
#include <cstdio>

#include "topo/topology.h"

namespace hora::topo {

namespace {

bool printable(char c) { return c >= 0x20 && c <= 0x7e; }

bool knownKind(const std::string& k) { return k == "ethernet" || k == "infiniband" || k == "other"; }

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void i32(int v, int lo, int hi) {
    uint32_t u = static_cast<uint32_t>(std::clamp(v, lo, hi));
    for (int i = 0; i < 4; ++i) u8(static_cast<uint8_t>(u >> (8 * i)));
  }
  // Longer strings are cut, unprintable bytes become '?', so that decode() accepts the result.
  void str(const std::string& s) {
    size_t n = std::min(s.size(), kMaxNameBytes);
    u8(static_cast<uint8_t>(n));
    for (size_t i = 0; i < n; ++i) out_.push_back(printable(s[i]) ? s[i] : '?');
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads fields in order; the first failure records why and every later read fails too.
class Reader {
 public:
  explicit Reader(const std::string& b) : b_(b) {}

  bool u8(uint8_t* v, const char* what) {
    if (!need(1, what)) return false;
    *v = static_cast<uint8_t>(b_[pos_++]);
    return true;
  }
  bool u64(uint64_t* v, const char* what) {
    if (!need(8, what)) return false;
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x |= static_cast<uint64_t>(static_cast<uint8_t>(b_[pos_ + i])) << (8 * i);
    pos_ += 8;
    *v = x;
    return true;
  }
  bool i32(int* v, int lo, int hi, const char* what) {
    if (!need(4, what)) return false;
    uint32_t u = 0;
    for (int i = 0; i < 4; ++i) u |= static_cast<uint32_t>(static_cast<uint8_t>(b_[pos_ + i])) << (8 * i);
    pos_ += 4;
    int64_t x = u >= 0x80000000u ? static_cast<int64_t>(u) - (int64_t{1} << 32) : static_cast<int64_t>(u);
    if (x < lo || x > hi) return bad(std::string(what) + " is " + std::to_string(x) + ", outside " +
                                     std::to_string(lo) + ".." + std::to_string(hi));
    *v = static_cast<int>(x);
    return true;
  }
  bool count(size_t* n, size_t max, const char* what) {
    uint8_t v = 0;
    if (!u8(&v, what)) return false;
    if (v > max) return bad(std::string(what) + " is " + std::to_string(v) + ", more than " + std::to_string(max));
    *n = v;
    return true;
  }
  bool str(std::string* s, const char* what) {
    uint8_t n = 0;
    if (!u8(&n, what) || !need(n, what)) return false;
    std::string v = b_.substr(pos_, n);
    if (!std::all_of(v.begin(), v.end(), printable)) return bad(std::string(what) + " has an unprintable byte");
    pos_ += n;
    *s = std::move(v);
    return true;
  }
  bool bad(const std::string& why) {
    if (why_.empty()) why_ = why;
    return false;
  }
  bool atEnd() {
    if (pos_ == b_.size()) return true;
    return bad(std::to_string(b_.size() - pos_) + " unexpected byte(s) after the end");
  }
  const std::string& why() const { return why_; }

 private:
  bool need(size_t n, const char* what) {
    if (!why_.empty()) return false;
    if (b_.size() - pos_ >= n) return true;
    return bad(std::string("truncated: ") + what + " needs " + std::to_string(n) + " byte(s) at offset " +
               std::to_string(pos_) + " of " + std::to_string(b_.size()));
  }

  const std::string& b_;
  size_t pos_ = 0;
  std::string why_;
};

bool readLocality(Reader& r, int* numa, int* package) {
  return r.i32(numa, -1, kMaxCount - 1, "a device's NUMA node") &&
         r.i32(package, -1, kMaxCount - 1, "a device's package");
}

}  // namespace

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

namespace {

template <typename T, typename F>
std::string jsonList(const std::vector<T>& items, F each) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + each(items[i]);
  return out + "]";
}

std::string bytesText(uint64_t b) {
  if (b != 0 && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b != 0 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::string indexText(int i) { return i < 0 ? "?" : std::to_string(i); }

}  // namespace

std::string encode(const Host& host, const Place& place) {
  Writer w;
  w.u8(kEncodingVersion);
  w.str(host.name);
  for (int n : {host.packages, host.numaNodes, host.cores, host.pus}) w.i32(n, 0, kMaxCount);
  size_t levels = std::min(host.cacheBytes.size(), kMaxCacheLevels);
  w.u8(static_cast<uint8_t>(levels));
  for (size_t i = 0; i < levels; ++i) w.u64(host.cacheBytes[i]);
  size_t nics = std::min(host.nics.size(), kMaxDevices);
  w.u8(static_cast<uint8_t>(nics));
  for (size_t i = 0; i < nics; ++i) {
    const Nic& n = host.nics[i];
    w.str(n.name);
    w.str(knownKind(n.kind) ? n.kind : "other");
    w.str(n.pciBusId);
    w.i32(n.numa, -1, kMaxCount - 1);
    w.i32(n.package, -1, kMaxCount - 1);
  }
  size_t gpus = std::min(host.gpus.size(), kMaxDevices);
  w.u8(static_cast<uint8_t>(gpus));
  for (size_t i = 0; i < gpus; ++i) {
    const Gpu& g = host.gpus[i];
    w.str(g.name);
    w.str(g.pciBusId);
    w.i32(g.numa, -1, kMaxCount - 1);
    w.i32(g.package, -1, kMaxCount - 1);
  }
  for (int i : {place.package, place.numa, place.core}) w.i32(i, -1, kMaxCount - 1);
  return w.take();
}

bool decode(const std::string& bytes, Host* host, Place* place, std::string* why) {
  Reader r(bytes);
  Host h;
  Place p;
  uint8_t version = 0;
  bool ok = r.u8(&version, "the version");
  if (ok && version != kEncodingVersion)
    ok = r.bad("version " + std::to_string(version) + ", expected " + std::to_string(kEncodingVersion));
  ok = ok && r.str(&h.name, "the host name") && r.i32(&h.packages, 0, kMaxCount, "the number of packages") &&
       r.i32(&h.numaNodes, 0, kMaxCount, "the number of NUMA nodes") &&
       r.i32(&h.cores, 0, kMaxCount, "the number of cores") && r.i32(&h.pus, 0, kMaxCount, "the number of PUs");
  size_t n = 0;
  ok = ok && r.count(&n, kMaxCacheLevels, "the number of cache levels");
  for (size_t i = 0; ok && i < n; ++i) {
    h.cacheBytes.push_back(0);
    ok = r.u64(&h.cacheBytes.back(), "a cache size");
  }
  ok = ok && r.count(&n, kMaxDevices, "the number of NICs");
  for (size_t i = 0; ok && i < n; ++i) {
    Nic nic;
    ok = r.str(&nic.name, "a NIC's name") && r.str(&nic.kind, "a NIC's kind") &&
         (knownKind(nic.kind) || r.bad("a NIC's kind is '" + nic.kind + "'")) &&
         r.str(&nic.pciBusId, "a NIC's PCI bus id") && readLocality(r, &nic.numa, &nic.package);
    h.nics.push_back(std::move(nic));
  }
  ok = ok && r.count(&n, kMaxDevices, "the number of GPUs");
  for (size_t i = 0; ok && i < n; ++i) {
    Gpu gpu;
    ok = r.str(&gpu.name, "a GPU's name") && r.str(&gpu.pciBusId, "a GPU's PCI bus id") &&
         readLocality(r, &gpu.numa, &gpu.package);
    h.gpus.push_back(std::move(gpu));
  }
  ok = ok && r.i32(&p.package, -1, kMaxCount - 1, "the place's package") &&
       r.i32(&p.numa, -1, kMaxCount - 1, "the place's NUMA node") &&
       r.i32(&p.core, -1, kMaxCount - 1, "the place's core") && r.atEnd();
  if (!ok) {
    if (why != nullptr) *why = "malformed topology record: " + r.why();
    return false;
  }
  if (host != nullptr) *host = std::move(h);
  if (place != nullptr) *place = p;
  return true;
}

std::string toJson(const std::vector<HostEntry>& hosts) {
  auto host = [](const HostEntry& e) {
    const Host& h = e.host;
    std::string out = "{\"name\": " + jsonString(h.name) + ", \"packages\": " + std::to_string(h.packages) +
                      ", \"numa_nodes\": " + std::to_string(h.numaNodes) + ", \"cores\": " + std::to_string(h.cores) +
                      ", \"pus\": " + std::to_string(h.pus);
    out += ", \"caches\": " + jsonList(h.cacheBytes, [](uint64_t b) { return std::to_string(b); });
    out += ", \"nics\": " + jsonList(h.nics, [](const Nic& n) {
             return "{\"name\": " + jsonString(n.name) + ", \"kind\": " + jsonString(n.kind) +
                    ", \"pci\": " + jsonString(n.pciBusId) + ", \"numa\": " + std::to_string(n.numa) + "}";
           });
    out += ", \"gpus\": " + jsonList(h.gpus, [](const Gpu& g) {
             return "{\"name\": " + jsonString(g.name) + ", \"pci\": " + jsonString(g.pciBusId) +
                    ", \"numa\": " + std::to_string(g.numa) + "}";
           });
    out += ", \"ranks\": " + jsonList(e.ranks, [](int r) { return std::to_string(r); });
    return out + "}";
  };
  return "{\"hosts\": " + jsonList(hosts, host) + "}";
}

std::string toText(const std::vector<HostEntry>& hosts) {
  std::string out;
  for (const HostEntry& e : hosts) {
    const Host& h = e.host;
    out += "host " + (h.name.empty() ? std::string("(unnamed)") : h.name) + ": " + std::to_string(h.packages) +
           " package(s), " + std::to_string(h.numaNodes) + " NUMA node(s), " + std::to_string(h.cores) +
           " core(s), " + std::to_string(h.pus) + " PU(s)\n";
    out += "  caches:";
    for (size_t i = 0; i < h.cacheBytes.size(); ++i)
      out += (i ? ", L" : " L") + std::to_string(i + 1) + " " + (h.cacheBytes[i] ? bytesText(h.cacheBytes[i]) : "?");
    out += h.cacheBytes.empty() ? " unknown\n" : "\n";
    if (h.nics.empty()) out += "  nics: none\n";
    for (const Nic& n : h.nics)
      out += "  nic " + n.name + ": " + n.kind + ", pci " + (n.pciBusId.empty() ? "-" : n.pciBusId) + ", NUMA node " +
             indexText(n.numa) + ", package " + indexText(n.package) + "\n";
    if (h.gpus.empty()) out += "  gpus: none\n";
    for (const Gpu& g : h.gpus)
      out += "  gpu " + g.name + ": pci " + (g.pciBusId.empty() ? "-" : g.pciBusId) + ", NUMA node " +
             indexText(g.numa) + ", package " + indexText(g.package) + "\n";
    for (size_t i = 0; i < e.ranks.size(); ++i) {
      out += "  rank " + std::to_string(e.ranks[i]);
      if (i < e.places.size()) {
        const Place& p = e.places[i];
        out += ": package " + indexText(p.package) + ", NUMA node " + indexText(p.numa) + ", core " + indexText(p.core);
      }
      out += "\n";
    }
  }
  return out;
}

CpuLayout withoutCpus(const CpuLayout& layout, const std::set<int>& taken) {
  auto keep = [&taken](const std::vector<int>& cpus) {
    std::vector<int> kept;
    for (int cpu : cpus)
      if (taken.count(cpu) == 0) kept.push_back(cpu);
    return kept;
  };
  CpuLayout out;
  std::vector<std::vector<int>> shared;
  for (const std::vector<int>& core : layout.cores) {
    std::vector<int> kept = keep(core);
    if (kept.empty()) continue;
    (kept.size() == core.size() ? out.cores : shared).push_back(kept);
  }
  out.cores.insert(out.cores.end(), shared.begin(), shared.end());
  for (const std::vector<int>& node : layout.numa) {
    std::vector<int> kept = keep(node);
    if (!kept.empty()) out.numa.push_back(kept);
  }
  return out;
}

std::vector<int> cpusetFor(const CpuLayout& layout, Bind bind, int rank) {
  if (rank < 0) return {};
  if (bind == Bind::Numa) {
    if (layout.numa.empty()) return {};
    return layout.numa[static_cast<size_t>(rank) % layout.numa.size()];
  }
  // The first PU of every core, then the second of every core, and so on.
  std::vector<int> order;
  for (size_t k = 0;; ++k) {
    size_t before = order.size();
    for (const std::vector<int>& core : layout.cores)
      if (k < core.size()) order.push_back(core[k]);
    if (order.size() == before) break;
  }
  if (order.empty()) return {};
  return {order[static_cast<size_t>(rank) % order.size()]};
}

}  // namespace hora::topo
