// The machine's topology as hwloc sees it: packages, NUMA nodes, cores, PUs, caches, and the
// NICs and GPUs with the NUMA node and package they hang off. This is a layer below the
// communicator: it knows nothing of communicators, transports or algorithms, only of one host
// and of where a process runs on it.
//
// Indexes (numa, package, core) are hwloc's logical indexes: 0..n-1 in topology order. A
// topology can come from this machine or from an hwloc XML file (`lstopo --of xml FILE`), so
// that a test or an operator can describe a machine that is not this one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace hora::topo {

struct Nic {
  std::string name;     // the OS device: eth0, ib0, mlx5_0
  std::string kind;     // "ethernet", "infiniband" or "other"
  std::string pciBusId; // "0000:81:00.0", or "" when not on PCI
  int numa = -1;        // the nearest NUMA node, -1 if unknown
  int package = -1;     // the package it is attached to, -1 if unknown
};

struct Gpu {
  std::string name;     // an OS device (cuda0, card1) or the PCI device's name
  std::string pciBusId;
  int numa = -1;
  int package = -1;
};

struct Host {
  std::string name;  // the host name ("" if the XML file does not say)
  int packages = 0;
  int numaNodes = 0;
  int cores = 0;
  int pus = 0;
  // Cache bytes per level, index 0 = L1 (data or unified), 1 = L2, ...: the caches above the
  // first PU; 0 for a level hwloc does not report. Empty if it reports none.
  std::vector<uint64_t> cacheBytes;
  std::vector<Nic> nics;
  std::vector<Gpu> gpus;
};

// Where a thread is bound: the package, NUMA node and core its CPU binding lies within, each -1
// when the binding spans more than one of them (or is unknown).
struct Place {
  int package = -1;
  int numa = -1;
  int core = -1;
};

// This machine (xmlFile empty) or the machine an hwloc XML file describes, with its I/O
// devices. A missing or malformed file is an Error(InvalidArgument) naming the file.
Host discover(const std::string& xmlFile = "");

// Where the calling thread is bound (a process's threads start with its binding). With an XML
// file, whose CPUs need not be this machine's, the place is unknown (all -1) unless the process
// is bound to some of this machine's CPUs, which are then matched to the file's by their
// operating-system indexes.
Place place(const std::string& xmlFile = "");

// The wire form peers exchange at init (layout in format.cc): versioned, little-endian, every
// count and string length bounded. encode() cuts what exceeds the bounds (longer names, more
// devices or cache levels) and writes unprintable bytes as '?', so that its output always
// decodes. decode() rejects anything that is not exactly one valid encoding (short, long, wrong
// version, out-of-range values), saying why, leaves its outputs alone then, and never
// allocates more than the bounds allow.
constexpr uint8_t kEncodingVersion = 1;
constexpr size_t kMaxNameBytes = 255;  // per string
constexpr size_t kMaxDevices = 64;     // NICs, and GPUs
constexpr size_t kMaxCacheLevels = 8;
constexpr int kMaxCount = 1 << 22;     // packages, NUMA nodes, cores, PUs, indexes
std::string encode(const Host& host, const Place& place);
bool decode(const std::string& bytes, Host* host, Place* place, std::string* why);

// One host of a job and its ranks; places[i] is where ranks[i] runs.
struct HostEntry {
  Host host;
  std::vector<int> ranks;
  std::vector<Place> places;
};

// s as a JSON string, quoted (toJson's strings; hora-info's too).
std::string jsonString(const std::string& s);

// {"hosts": [{"name": ..., "packages": N, "numa_nodes": N, "cores": N, "pus": N,
//   "caches": [...], "nics": [{"name", "kind", "pci", "numa"}...],
//   "gpus": [{"name", "pci", "numa"}...], "ranks": [...]}]} on one line.
std::string toJson(const std::vector<HostEntry>& hosts);
// The same for people, several lines per host, ending with a newline.
std::string toText(const std::vector<HostEntry>& hosts);

// Placement for a launcher. The CPUs (operating-system indexes) a launcher may bind ranks to,
// grouped by physical core and by NUMA node, both in topology order.
struct CpuLayout {
  std::vector<std::vector<int>> cores;  // per core: its PUs
  std::vector<std::vector<int>> numa;   // per NUMA node that has any: its PUs
};

// The layout of this machine (or of an XML file) restricted to `allowed`; CPUs of `allowed`
// that hwloc does not place are each taken as a core of their own, in one more node.
CpuLayout cpuLayout(const std::vector<int>& allowed, const std::string& xmlFile = "");

// The layout without `taken` (CPUs another job has). Cores that keep all their PUs come first,
// then those that lost some, so that Bind::Core puts ranks on cores no other job uses while there
// are any; cores and nodes left with no PU are dropped.
CpuLayout withoutCpus(const CpuLayout& layout, const std::set<int>& taken);

enum class Bind { Core, Numa };

// The CPUs for rank `rank`. Core: one PU, taking the first PU of every core before any core's
// second, so that ranks share no core (no hyperthread pair) while there are cores enough, and
// wrapping round when ranks outnumber PUs. Numa: every PU of NUMA node rank mod nodes. Empty
// when the layout has no CPUs.
std::vector<int> cpusetFor(const CpuLayout& layout, Bind bind, int rank);

}  // namespace hora::topo
