// Discovery with hwloc: what this machine (or an hwloc XML file) holds, where the calling
// thread is bound, and the CPUs a launcher may bind ranks to. The pure parts (wire encoding,
// JSON and text, cpusetFor) are in format.cc.
#include "topo/topology.h"

#include <hwloc.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "base/error.h"

static_assert(HWLOC_API_VERSION >= 0x00020100 && HWLOC_API_VERSION < 0x00030000,
              "src/topo is written for the hwloc 2.x API, from 2.1");

namespace hora::topo {

namespace {

std::string errText(int err) {
  char buf[128];
  return strerror_r(err, buf, sizeof buf);  // GNU: returns the text, in buf or not
}

// One loaded hwloc topology, destroyed with the object.
class Topology {
 public:
  // io: also keep the PCI and OS devices hwloc deems important (NICs, GPUs, storage).
  Topology(const std::string& xmlFile, bool io) {
    if (hwloc_topology_init(&t_) != 0)
      throw Error(Errc::System, "hwloc cannot make a topology: " + errText(errno));
    try {
      load(xmlFile, io);
    } catch (...) {
      hwloc_topology_destroy(t_);
      throw;
    }
  }
  ~Topology() { hwloc_topology_destroy(t_); }
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  hwloc_topology_t get() const { return t_; }
  bool thisSystem() const { return hwloc_topology_is_thissystem(t_) != 0; }

 private:
  void load(const std::string& xmlFile, bool io) {
    if (io) hwloc_topology_set_io_types_filter(t_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    // Linux's own discovery reads the PCI devices from sysfs. The libpciaccess plugin would
    // read them again (and leaks about 1 KB per load); the OpenCL and OpenGL plugins would
    // start OpenCL drivers or connect to X servers only to name devices the PCI scan lists.
    for (const char* redundant : {"pci", "opencl", "gl"})
      hwloc_topology_set_components(t_, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, redundant);
    if (!xmlFile.empty()) {
      // hwloc says little about a file it cannot open; say which file and why first.
      FILE* f = std::fopen(xmlFile.c_str(), "r");
      if (f == nullptr)
        throw Error(Errc::InvalidArgument, "topology file '" + xmlFile + "': " + errText(errno));
      std::fclose(f);
      if (hwloc_topology_set_xml(t_, xmlFile.c_str()) != 0)
        throw Error(Errc::InvalidArgument,
                    "topology file '" + xmlFile + "' is not an hwloc XML topology (hwloc: " + errText(errno) + ")");
    }
    if (hwloc_topology_load(t_) != 0) {
      int err = errno;
      if (!xmlFile.empty())
        throw Error(Errc::InvalidArgument,
                    "topology file '" + xmlFile + "' is not an hwloc XML topology (hwloc: " + errText(err) + ")");
      throw Error(Errc::System, "hwloc cannot read this machine's topology: " + errText(err));
    }
  }

  hwloc_topology_t t_ = nullptr;
};

// An hwloc bitmap, freed with the object.
class Bitmap {
 public:
  Bitmap() : b_(hwloc_bitmap_alloc()) {
    if (b_ == nullptr) throw Error(Errc::System, "hwloc cannot allocate a CPU set");
  }
  ~Bitmap() { hwloc_bitmap_free(b_); }
  Bitmap(const Bitmap&) = delete;
  Bitmap& operator=(const Bitmap&) = delete;
  hwloc_bitmap_t get() const { return b_; }

 private:
  hwloc_bitmap_t b_;
};

int count(hwloc_topology_t t, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_by_type(t, type);
  return n < 0 ? 0 : n;  // -1: objects of this type at several depths, which hwloc 2 never does
}

// The logical index of the first object of `type` whose CPUs include all of `set`, or -1.
int containing(hwloc_topology_t t, hwloc_obj_type_t type, hwloc_const_cpuset_t set) {
  if (set == nullptr || hwloc_bitmap_iszero(set)) return -1;
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(t, type, o)) != nullptr;)
    if (o->cpuset != nullptr && !hwloc_bitmap_iszero(o->cpuset) && hwloc_bitmap_isincluded(set, o->cpuset))
      return static_cast<int>(o->logical_index);
  return -1;
}

// The OS indexes of the CPUs of `set`.
std::vector<int> members(hwloc_const_cpuset_t set) {
  std::vector<int> out;
  if (set == nullptr) return out;
  for (int i = hwloc_bitmap_first(set); i >= 0; i = hwloc_bitmap_next(set, i)) out.push_back(i);
  return out;
}

// The NUMA node and package of an I/O object: those of its first non-I/O ancestor.
void locate(hwloc_topology_t t, hwloc_obj_t io, int* numa, int* package) {
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(t, io);
  hwloc_const_cpuset_t set = anchor != nullptr ? anchor->cpuset : nullptr;
  *numa = containing(t, HWLOC_OBJ_NUMANODE, set);
  *package = containing(t, HWLOC_OBJ_PACKAGE, set);
}

// The PCI device an OS device belongs to, or null.
hwloc_obj_t pciParent(hwloc_obj_t o) {
  for (hwloc_obj_t p = o->parent; p != nullptr && hwloc_obj_type_is_io(p->type); p = p->parent)
    if (p->type == HWLOC_OBJ_PCI_DEVICE) return p;
  return nullptr;
}

std::string busId(hwloc_obj_t pci) {
  if (pci == nullptr) return "";
  const auto& a = pci->attr->pcidev;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%01x", static_cast<unsigned>(a.domain), static_cast<unsigned>(a.bus),
                static_cast<unsigned>(a.dev), static_cast<unsigned>(a.func));
  return buf;
}

unsigned pciClass(hwloc_obj_t pci) { return pci != nullptr ? pci->attr->pcidev.class_id : 0; }

std::string info(hwloc_obj_t o, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(o, name);
  return v != nullptr ? v : "";
}

// A network device's kind from its hardware address (6 bytes: Ethernet, 20: IP over
// InfiniBand), else from its PCI class. An OpenFabrics device is a verbs device: InfiniBand,
// or RoCE on an Ethernet port, which verbs drive alike.
std::string nicKind(hwloc_obj_t osdev) {
  if (osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) return "infiniband";
  std::string address = info(osdev, "Address");
  if (!address.empty()) {
    size_t bytes = 1;
    for (char c : address) bytes += c == ':';
    if (bytes == 6) return "ethernet";
    if (bytes == 20) return "infiniband";
  }
  unsigned cls = pciClass(pciParent(osdev));
  if (cls == 0x0200) return "ethernet";
  if (cls == 0x0207) return "infiniband";
  return "other";
}

bool isGpuOsdev(hwloc_obj_t o) {
  return o->type == HWLOC_OBJ_OS_DEVICE &&
         (o->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU || o->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC);
}

void findNics(hwloc_topology_t t, Host* host) {
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_osdev(t, o)) != nullptr;) {
    hwloc_obj_osdev_type_t type = o->attr->osdev.type;
    if (type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) continue;
    Nic nic;
    nic.name = o->name != nullptr ? o->name : "";
    nic.kind = nicKind(o);
    nic.pciBusId = busId(pciParent(o));
    locate(t, o, &nic.numa, &nic.package);
    host->nics.push_back(nic);
  }
}

// One GPU per PCI device that is a display or 3D controller (class 03xx) or carries a GPU or
// co-processor OS device, named after that OS device (a co-processor's name, such as cuda0,
// first); then each GPU OS device that is not on PCI.
void findGpus(hwloc_topology_t t, Host* host) {
  for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(t, pci)) != nullptr;) {
    hwloc_obj_t best = nullptr;
    for (hwloc_obj_t c = pci->io_first_child; c != nullptr; c = c->next_sibling)
      if (isGpuOsdev(c) && (best == nullptr || (c->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC &&
                                                best->attr->osdev.type != HWLOC_OBJ_OSDEV_COPROC)))
        best = c;
    if (best == nullptr && (pciClass(pci) >> 8) != 0x03) continue;
    Gpu gpu;
    gpu.pciBusId = busId(pci);
    if (best != nullptr && best->name != nullptr) gpu.name = best->name;
    if (gpu.name.empty()) gpu.name = info(pci, "PCIDevice");
    if (gpu.name.empty()) gpu.name = "pci " + gpu.pciBusId;
    locate(t, pci, &gpu.numa, &gpu.package);
    host->gpus.push_back(gpu);
  }
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_osdev(t, o)) != nullptr;) {
    if (!isGpuOsdev(o) || pciParent(o) != nullptr) continue;
    Gpu gpu;
    gpu.name = o->name != nullptr ? o->name : "";
    locate(t, o, &gpu.numa, &gpu.package);
    host->gpus.push_back(gpu);
  }
}

// Data and unified caches above the first PU, by level.
std::vector<uint64_t> cachesOfFirstPu(hwloc_topology_t t) {
  std::vector<uint64_t> bytes;
  hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, 0);
  for (hwloc_obj_t o = pu != nullptr ? pu->parent : nullptr; o != nullptr; o = o->parent) {
    if (!hwloc_obj_type_is_cache(o->type) || o->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION) continue;
    unsigned level = o->attr->cache.depth;
    if (level < 1 || level > kMaxCacheLevels) continue;
    if (bytes.size() < level) bytes.resize(level, 0);
    if (bytes[level - 1] == 0) bytes[level - 1] = o->attr->cache.size;
  }
  return bytes;
}

std::string hostName(const Topology& topo) {
  std::string name = info(hwloc_get_root_obj(topo.get()), "HostName");
  if (name.empty() && topo.thisSystem()) {
    char buf[256] = {};
    if (gethostname(buf, sizeof buf - 1) == 0) name = buf;
  }
  if (name.size() > kMaxNameBytes) name.resize(kMaxNameBytes);
  return name;
}

}  // namespace

Host discover(const std::string& xmlFile) {
  Topology topo(xmlFile, true);
  hwloc_topology_t t = topo.get();
  Host host;
  host.name = hostName(topo);
  host.packages = count(t, HWLOC_OBJ_PACKAGE);
  host.numaNodes = count(t, HWLOC_OBJ_NUMANODE);
  host.cores = count(t, HWLOC_OBJ_CORE);
  host.pus = count(t, HWLOC_OBJ_PU);
  host.cacheBytes = cachesOfFirstPu(t);
  findNics(t, &host);
  findGpus(t, &host);
  return host;
}

Place place(const std::string& xmlFile) {
  Topology topo(xmlFile, false);
  hwloc_topology_t t = topo.get();
  Bitmap set;
  if (topo.thisSystem()) {
    if (hwloc_get_cpubind(t, set.get(), HWLOC_CPUBIND_THREAD) != 0) return Place{};
  } else {
    // Another machine's CPUs: only a binding to some of ours says anything.
    cpu_set_t mine;
    CPU_ZERO(&mine);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || online <= 0 || CPU_COUNT(&mine) >= online)
      return Place{};
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &mine)) hwloc_bitmap_set(set.get(), static_cast<unsigned>(c));
    if (!hwloc_bitmap_isincluded(set.get(), hwloc_topology_get_topology_cpuset(t))) return Place{};
  }
  Place p;
  p.package = containing(t, HWLOC_OBJ_PACKAGE, set.get());
  p.numa = containing(t, HWLOC_OBJ_NUMANODE, set.get());
  p.core = containing(t, HWLOC_OBJ_CORE, set.get());
  return p;
}

CpuLayout cpuLayout(const std::vector<int>& allowed, const std::string& xmlFile) {
  Topology topo(xmlFile, false);
  hwloc_topology_t t = topo.get();
  std::set<int> wanted(allowed.begin(), allowed.end());
  std::set<int> inCore, inNode;
  CpuLayout layout;
  auto keep = [&](hwloc_const_cpuset_t set, std::set<int>* seen) {
    std::vector<int> out;
    for (int cpu : members(set))
      if (wanted.count(cpu) != 0 && seen->insert(cpu).second) out.push_back(cpu);
    return out;
  };
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_CORE, o)) != nullptr;) {
    std::vector<int> pus = keep(o->cpuset, &inCore);
    if (!pus.empty()) layout.cores.push_back(pus);
  }
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_NUMANODE, o)) != nullptr;) {
    std::vector<int> pus = keep(o->cpuset, &inNode);
    if (!pus.empty()) layout.numa.push_back(pus);
  }
  std::vector<int> homeless;
  for (int cpu : wanted) {
    if (inCore.count(cpu) == 0) layout.cores.push_back({cpu});
    if (inNode.count(cpu) == 0) homeless.push_back(cpu);
  }
  if (!homeless.empty()) layout.numa.push_back(homeless);
  return layout;
}

}  // namespace hora::topo
