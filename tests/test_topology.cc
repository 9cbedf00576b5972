// Tests of the topology module (topo/topology.h) and of hora-topo: discovery from hwloc XML
// files (a synthetic machine that lstopo makes at test time, and a hand-written one with NICs
// and GPUs), this machine, the wire encoding and every way a peer's record can be malformed,
// JSON and text, the CPUs a launcher binds a rank to, and errors for missing or broken files.
#include <sched.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "comm/config.h"
#include "topo/topology.h"

using namespace hora;
using namespace hora::topo;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A directory of its own for one test, removed with the object.
class TempDir {
 public:
  TempDir() {
    std::string pattern = std::string(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp") + "/hora_topo_test.XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    REQUIRE(mkdtemp(buf.data()) != nullptr);
    path_ = buf.data();
  }
  ~TempDir() {
    int rc = std::system(("rm -rf '" + path_ + "'").c_str());
    (void)rc;
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct Output {
  int status = -1;  // the exit status, or -1
  std::string text;
};

// Runs a shell command and collects its standard output.
Output runCommand(const std::string& command) {
  Output out;
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.text.append(buf, n);
  int st = pclose(p);
  if (st != -1 && WIFEXITED(st)) out.status = WEXITSTATUS(st);
  return out;
}

// lstopo's name on this machine (hwloc has lstopo, hwloc-nox lstopo-no-graphics), or none.
std::optional<std::string> lstopo() {
  for (const char* name : {"lstopo-no-graphics", "lstopo"})
    if (runCommand(std::string("command -v ") + name + " >/dev/null 2>&1").status == 0) return std::string(name);
  return std::nullopt;
}

// The synthetic machine of the tests: 2 packages of 1 NUMA node and 8 cores of 2 PUs each.
std::optional<std::string> makeSynthetic(const TempDir& dir) {
  std::optional<std::string> tool = lstopo();
  if (!tool) {
    WARN("lstopo is not installed (scripts/install-deps.sh installs hwloc): synthetic-topology checks skipped");
    return std::nullopt;
  }
  std::string file = dir.file("synthetic.xml");
  Output made = runCommand(*tool + " --input 'pack:2 numa:1 core:8 pu:2' --of xml '" + file + "' 2>&1");
  INFO(made.text);
  REQUIRE(made.status == 0);
  return file;
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  REQUIRE(f.good());
}

// A two-package machine with an Ethernet NIC and a VGA controller on package 0, an
// InfiniBand HCA (ib0, mlx5_0) and a GPU (card1, cuda0) on package 1, and L1d/L2 caches.
std::string pciDev(int gp, const char* bus, const char* cls, const std::string& inner) {
  return "<object type=\"PCIDev\" gp_index=\"" + std::to_string(gp) + "\" pci_busid=\"" + bus + "\" pci_type=\"" +
         cls + " [1234:5678] [0000:0000] 00\" pci_link_speed=\"0.000000\">" + inner + "</object>\n";
}
std::string osDev(int gp, const char* name, int type, const std::string& inner = "") {
  return "<object type=\"OSDev\" gp_index=\"" + std::to_string(gp) + "\" name=\"" + name + "\" osdev_type=\"" +
         std::to_string(type) + "\">" + inner + "</object>";
}
std::string sets(const char* cpus, const char* nodes) {
  return std::string("cpuset=\"") + cpus + "\" complete_cpuset=\"" + cpus + "\" nodeset=\"" + nodes +
         "\" complete_nodeset=\"" + nodes + "\"";
}
std::string ioMachineXml() {
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n";
  x += "<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\" " + sets("0x0000000f", "0x00000003") +
       " allowed_cpuset=\"0x0000000f\" allowed_nodeset=\"0x00000003\" gp_index=\"1\">\n";
  x += "<info name=\"HostName\" value=\"node&quot;7\"/>\n";
  x += "<object type=\"Package\" os_index=\"0\" " + sets("0x00000003", "0x00000001") + " gp_index=\"2\">\n";
  x += "<object type=\"NUMANode\" os_index=\"0\" " + sets("0x00000003", "0x00000001") +
       " gp_index=\"3\" local_memory=\"1073741824\"/>\n";
  x += "<object type=\"L2Cache\" " + sets("0x00000003", "0x00000001") +
       " gp_index=\"4\" cache_size=\"1048576\" depth=\"2\" cache_linesize=\"64\" cache_associativity=\"0\" cache_type=\"0\">\n";
  x += "<object type=\"L1Cache\" " + sets("0x00000003", "0x00000001") +
       " gp_index=\"5\" cache_size=\"32768\" depth=\"1\" cache_linesize=\"64\" cache_associativity=\"0\" cache_type=\"1\">\n";
  x += "<object type=\"Core\" os_index=\"0\" " + sets("0x00000003", "0x00000001") + " gp_index=\"6\">\n";
  x += "<object type=\"PU\" os_index=\"0\" " + sets("0x00000001", "0x00000001") + " gp_index=\"7\"/>\n";
  x += "<object type=\"PU\" os_index=\"1\" " + sets("0x00000002", "0x00000001") + " gp_index=\"8\"/>\n";
  x += "</object></object></object>\n";
  x += "<object type=\"Bridge\" gp_index=\"20\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[00-03]\">\n";
  x += pciDev(21, "0000:00:02.0", "0300", "<info name=\"PCIDevice\" value=\"ASPEED Graphics Family\"/>");
  x += pciDev(22, "0000:03:00.0", "0200", osDev(23, "eth0", 2, "<info name=\"Address\" value=\"02:fc:00:00:00:01\"/>"));
  x += "</object></object>\n";
  x += "<object type=\"Package\" os_index=\"1\" " + sets("0x0000000c", "0x00000002") + " gp_index=\"9\">\n";
  x += "<object type=\"NUMANode\" os_index=\"1\" " + sets("0x0000000c", "0x00000002") +
       " gp_index=\"10\" local_memory=\"1073741824\"/>\n";
  x += "<object type=\"Core\" os_index=\"1\" " + sets("0x0000000c", "0x00000002") + " gp_index=\"11\">\n";
  x += "<object type=\"PU\" os_index=\"2\" " + sets("0x00000004", "0x00000002") + " gp_index=\"12\"/>\n";
  x += "<object type=\"PU\" os_index=\"3\" " + sets("0x00000008", "0x00000002") + " gp_index=\"13\"/>\n";
  x += "</object>\n";
  x += "<object type=\"Bridge\" gp_index=\"30\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[80-83]\">\n";
  x += pciDev(31, "0000:81:00.0", "0207",
              osDev(32, "ib0", 2,
                    "<info name=\"Address\" value=\"00:00:10:29:fe:80:00:00:00:00:00:00:b8:59:9f:03:00:aa:bb:cc\"/>") +
                  osDev(33, "mlx5_0", 3));
  x += pciDev(34, "0000:82:00.0", "0302", osDev(35, "card1", 1) + osDev(36, "cuda0", 5));
  x += "</object></object>\n</object>\n</topology>\n";
  return x;
}

const Nic* findNic(const Host& h, const std::string& name) {
  for (const Nic& n : h.nics)
    if (n.name == name) return &n;
  return nullptr;
}
const Gpu* findGpu(const Host& h, const std::string& pci) {
  for (const Gpu& g : h.gpus)
    if (g.pciBusId == pci) return &g;
  return nullptr;
}

// A host with every field set, for the wire tests.
Host sampleHost() {
  Host h;
  h.name = "gpu-node-17.example";
  h.packages = 2;
  h.numaNodes = 4;
  h.cores = 64;
  h.pus = 128;
  h.cacheBytes = {49152, 2097152, 0, 268435456};
  h.nics = {{"eth0", "ethernet", "0000:03:00.0", 0, 0},
            {"mlx5_0", "infiniband", "0000:81:00.0", 2, 1},
            {"ib0", "infiniband", "0000:81:00.0", 2, 1},
            {"virt0", "other", "", -1, -1}};
  h.gpus = {{"cuda0", "0000:17:00.0", 0, 0}, {"cuda1", "0000:b1:00.0", 3, 1}};
  return h;
}

void expectSame(const Host& a, const Host& b) {
  CHECK(a.name == b.name);
  CHECK(a.packages == b.packages);
  CHECK(a.numaNodes == b.numaNodes);
  CHECK(a.cores == b.cores);
  CHECK(a.pus == b.pus);
  CHECK(a.cacheBytes == b.cacheBytes);
  REQUIRE(a.nics.size() == b.nics.size());
  for (size_t i = 0; i < a.nics.size(); ++i) {
    CHECK(a.nics[i].name == b.nics[i].name);
    CHECK(a.nics[i].kind == b.nics[i].kind);
    CHECK(a.nics[i].pciBusId == b.nics[i].pciBusId);
    CHECK(a.nics[i].numa == b.nics[i].numa);
    CHECK(a.nics[i].package == b.nics[i].package);
  }
  REQUIRE(a.gpus.size() == b.gpus.size());
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    CHECK(a.gpus[i].name == b.gpus[i].name);
    CHECK(a.gpus[i].pciBusId == b.gpus[i].pciBusId);
    CHECK(a.gpus[i].numa == b.gpus[i].numa);
    CHECK(a.gpus[i].package == b.gpus[i].package);
  }
}

// decode() must refuse `bytes`, say why, and leave the outputs alone.
void expectRejected(const std::string& bytes, const std::string& reason = "") {
  Host h;
  h.name = "untouched";
  Place p;
  p.core = 99;
  std::string why;
  CHECK_FALSE(decode(bytes, &h, &p, &why));
  CHECK(!why.empty());
  if (!reason.empty()) {
    INFO(why);
    CHECK(contains(why, reason));
  }
  CHECK(h.name == "untouched");
  CHECK(p.core == 99);
}

// hora-topo's path, from the test's environment (tests/meson.build).
std::string horaTopo() {
  const char* p = getenv("TEST_HORA_TOPO");
  REQUIRE(p != nullptr);
  return p;
}

}  // namespace

TEST_CASE("topology: a synthetic machine from an XML file", "[topo]") {
  TempDir dir;
  std::optional<std::string> file = makeSynthetic(dir);
  if (!file) return;
  Host h = discover(*file);
  CHECK(h.packages == 2);
  CHECK(h.numaNodes == 2);
  CHECK(h.cores == 16);
  CHECK(h.pus == 32);
  CHECK(h.nics.empty());
  CHECK(h.gpus.empty());

  // Another machine's CPUs: unknown unless this process is bound, and then only by OS index.
  cpu_set_t mine;
  REQUIRE(sched_getaffinity(0, sizeof mine, &mine) == 0);
  if (CPU_COUNT(&mine) == sysconf(_SC_NPROCESSORS_ONLN)) {
    Place p = place(*file);
    CHECK(p.package == -1);
    CHECK(p.numa == -1);
    CHECK(p.core == -1);
  }

  std::vector<int> all;
  for (int c = 0; c < 32; ++c) all.push_back(c);
  CpuLayout layout = cpuLayout(all, *file);
  REQUIRE(layout.cores.size() == 16);
  REQUIRE(layout.numa.size() == 2);
  CHECK(layout.cores[3] == (std::vector<int>{6, 7}));
  CHECK(layout.numa[1].size() == 16);
  CHECK(layout.numa[1].front() == 16);
  // One PU per core first: ranks 0..15 on cores 0..15, then the second PUs.
  for (int r = 0; r < 16; ++r) CHECK(cpusetFor(layout, Bind::Core, r) == std::vector<int>{2 * r});
  CHECK(cpusetFor(layout, Bind::Core, 16) == std::vector<int>{1});
  CHECK(cpusetFor(layout, Bind::Core, 32) == std::vector<int>{0});
  CHECK(cpusetFor(layout, Bind::Numa, 0) == layout.numa[0]);
  CHECK(cpusetFor(layout, Bind::Numa, 1) == layout.numa[1]);
  CHECK(cpusetFor(layout, Bind::Numa, 2) == layout.numa[0]);

  // Restricted to a few CPUs: only cores and nodes with allowed CPUs, and unknown CPUs alone.
  CpuLayout some = cpuLayout({1, 2, 3, 17, 100}, *file);
  CHECK(some.cores == (std::vector<std::vector<int>>{{1}, {2, 3}, {17}, {100}}));
  CHECK(some.numa == (std::vector<std::vector<int>>{{1, 2, 3}, {17}, {100}}));
  CHECK(cpusetFor(CpuLayout{}, Bind::Core, 0).empty());
  CHECK(cpusetFor(CpuLayout{}, Bind::Numa, 0).empty());
}

TEST_CASE("withoutCpus: another job's CPUs are left out, its cores go last", "[topo]") {
  // Two cores of two PUs on node 0, two on node 1; another job has PU 0 (core 0) and core 2.
  CpuLayout layout;
  layout.cores = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  layout.numa = {{0, 1, 2, 3}, {4, 5, 6, 7}};
  CpuLayout left = withoutCpus(layout, {0, 4, 5});
  CHECK(left.cores == (std::vector<std::vector<int>>{{2, 3}, {6, 7}, {1}}));
  CHECK(left.numa == (std::vector<std::vector<int>>{{1, 2, 3}, {6, 7}}));
  // Ranks take the free cores first, and a core the other job uses only after them.
  CHECK(cpusetFor(left, Bind::Core, 0) == std::vector<int>{2});
  CHECK(cpusetFor(left, Bind::Core, 1) == std::vector<int>{6});
  CHECK(cpusetFor(left, Bind::Core, 2) == std::vector<int>{1});
  CHECK(cpusetFor(left, Bind::Numa, 1) == std::vector<int>{6, 7});
  // Nothing taken: the same layout; everything taken: none.
  CHECK(withoutCpus(layout, {}).cores == layout.cores);
  CpuLayout none = withoutCpus(layout, {0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(none.cores.empty());
  CHECK(none.numa.empty());
  CHECK(cpusetFor(none, Bind::Core, 0).empty());
}

TEST_CASE("hora-topo --json reads HORA_TOPO_FILE", "[topo]") {
  TempDir dir;
  std::optional<std::string> file = makeSynthetic(dir);
  if (!file) return;
  Output json = runCommand("HORA_TOPO_FILE='" + *file + "' '" + horaTopo() + "' --json");
  INFO(json.text);
  REQUIRE(json.status == 0);
  for (const char* field : {"\"packages\": 2,", "\"numa_nodes\": 2,", "\"cores\": 16,", "\"pus\": 32,", "\"ranks\": [0]"})
    CHECK(contains(json.text, field));
  HostEntry e;
  e.host = discover(*file);
  e.ranks = {0};
  CHECK(json.text == toJson({e}) + "\n");
  // And a JSON parser agrees.
  if (access("/usr/bin/python3", X_OK) == 0) {
    writeFile(dir.file("out.json"), json.text);
    Output checked = runCommand(
        "/usr/bin/python3 -c 'import json,sys; h=json.load(open(sys.argv[1]))[\"hosts\"]; "
        "assert len(h)==1; h=h[0]; "
        "assert (h[\"packages\"],h[\"numa_nodes\"],h[\"cores\"],h[\"pus\"])==(2,2,16,32), h; "
        "assert h[\"nics\"]==[] and h[\"gpus\"]==[] and h[\"ranks\"]==[0], h' '" +
        dir.file("out.json") + "' 2>&1");
    INFO(checked.text);
    CHECK(checked.status == 0);
  }

  Output text = runCommand("HORA_TOPO_FILE='" + *file + "' '" + horaTopo() + "'");
  INFO(text.text);
  CHECK(text.status == 0);
  CHECK(contains(text.text, "2 package(s), 2 NUMA node(s), 16 core(s), 32 PU(s)"));
  CHECK(contains(text.text, "rank 0"));
}

TEST_CASE("hora-topo: this machine, usage and a missing file", "[topo]") {
  Output here = runCommand("env -u HORA_TOPO_FILE '" + horaTopo() + "' --json");
  REQUIRE(here.status == 0);
  CHECK(contains(here.text, "{\"hosts\": [{\"name\": "));
  CHECK(runCommand("'" + horaTopo() + "' --help").status == 0);
  CHECK(runCommand("'" + horaTopo() + "' --bogus 2>/dev/null").status == 2);
  Output missing = runCommand("HORA_TOPO_FILE=/nonexistent/topo.xml '" + horaTopo() + "' 2>&1");
  CHECK(missing.status == 1);
  CHECK(contains(missing.text, "/nonexistent/topo.xml"));
}

TEST_CASE("topology: NICs and GPUs with their locality, from a hand-written XML file", "[topo]") {
  TempDir dir;
  std::string file = dir.file("io.xml");
  writeFile(file, ioMachineXml());
  Host h = discover(file);
  CHECK(h.name == "node\"7");
  CHECK(h.packages == 2);
  CHECK(h.numaNodes == 2);
  CHECK(h.cores == 2);
  CHECK(h.pus == 4);
  CHECK(h.cacheBytes == (std::vector<uint64_t>{32768, 1048576}));

  REQUIRE(h.nics.size() == 3);
  const Nic* eth = findNic(h, "eth0");
  const Nic* ib = findNic(h, "ib0");
  const Nic* hca = findNic(h, "mlx5_0");
  REQUIRE(eth != nullptr);
  REQUIRE(ib != nullptr);
  REQUIRE(hca != nullptr);
  CHECK(eth->kind == "ethernet");
  CHECK(eth->pciBusId == "0000:03:00.0");
  CHECK(eth->numa == 0);
  CHECK(eth->package == 0);
  CHECK(ib->kind == "infiniband");
  CHECK(hca->kind == "infiniband");
  CHECK(hca->pciBusId == "0000:81:00.0");
  CHECK(hca->numa == 1);
  CHECK(hca->package == 1);

  // The VGA controller has no OS device and is named by PCI; the GPU by its CUDA device.
  REQUIRE(h.gpus.size() == 2);
  const Gpu* vga = findGpu(h, "0000:00:02.0");
  const Gpu* gpu = findGpu(h, "0000:82:00.0");
  REQUIRE(vga != nullptr);
  REQUIRE(gpu != nullptr);
  CHECK(vga->name == "ASPEED Graphics Family");
  CHECK(vga->numa == 0);
  CHECK(gpu->name == "cuda0");
  CHECK(gpu->numa == 1);
  CHECK(gpu->package == 1);

  // What was discovered survives the wire.
  Host back;
  Place where;
  std::string why;
  REQUIRE(decode(encode(h, Place{1, 1, 1}), &back, &where, &why));
  expectSame(back, h);

  std::string json = toJson({HostEntry{h, {0, 1}, {}}});
  CHECK(contains(json, "\"name\": \"node\\\"7\""));
  CHECK(contains(json, "{\"name\": \"eth0\", \"kind\": \"ethernet\", \"pci\": \"0000:03:00.0\", \"numa\": 0}"));
  CHECK(contains(json, "{\"name\": \"cuda0\", \"pci\": \"0000:82:00.0\", \"numa\": 1}"));
  CHECK(contains(json, "\"caches\": [32768, 1048576]"));
  CHECK(contains(json, "\"ranks\": [0, 1]"));
  std::string text = toText({HostEntry{h, {0, 1}, {Place{0, 0, 0}, Place{}}}});
  CHECK(contains(text, "nic mlx5_0: infiniband, pci 0000:81:00.0, NUMA node 1, package 1"));
  CHECK(contains(text, "caches: L1 32 KiB, L2 1 MiB"));
  CHECK(contains(text, "rank 1: package ?, NUMA node ?, core ?"));
}

TEST_CASE("topology: this machine", "[topo]") {
  Host h = discover();
  CHECK(h.packages >= 1);
  CHECK(h.numaNodes >= 1);
  CHECK(h.cores >= 1);
  CHECK(h.pus >= h.cores);
  CHECK(!h.name.empty());
  for (const Nic& n : h.nics) CHECK((n.kind == "ethernet" || n.kind == "infiniband" || n.kind == "other"));

  // Bound to one CPU, this thread is on one core, NUMA node and package.
  cpu_set_t saved;
  REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &saved)) first = c;
  REQUIRE(first >= 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  Place p;
  try {
    p = place();
  } catch (...) {
    sched_setaffinity(0, sizeof saved, &saved);
    throw;
  }
  sched_setaffinity(0, sizeof saved, &saved);
  CHECK(p.core >= 0);
  CHECK(p.core < h.cores);
  CHECK(p.package >= 0);
  CHECK(p.numa >= 0);

  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &saved)) allowed.push_back(c);
  CpuLayout layout = cpuLayout(allowed);
  size_t placed = 0;
  for (const auto& core : layout.cores) placed += core.size();
  CHECK(placed == allowed.size());
  CHECK(!layout.numa.empty());
}

TEST_CASE("topology: the wire encoding round-trips", "[topo]") {
  Host h = sampleHost();
  Place p{1, 3, 42};
  std::string bytes = encode(h, p);
  Host back;
  Place where;
  std::string why;
  REQUIRE(decode(bytes, &back, &where, &why));
  expectSame(back, h);
  CHECK(where.package == 1);
  CHECK(where.numa == 3);
  CHECK(where.core == 42);
  CHECK(encode(back, where) == bytes);

  Host empty;
  REQUIRE(decode(encode(empty, Place{}), &back, &where, &why));
  expectSame(back, empty);
  CHECK(where.core == -1);

  // What exceeds the bounds is cut on the way out, so that the peer accepts it.
  Host big = sampleHost();
  big.name = std::string(300, 'x') + "\n";
  big.nics.resize(kMaxDevices + 5, Nic{"n", "weird", "", 0, 0});
  big.cacheBytes.resize(kMaxCacheLevels + 2, 1);
  big.cores = -7;
  REQUIRE(decode(encode(big, Place{-5, 0, 0}), &back, &where, &why));
  CHECK(back.name == std::string(kMaxNameBytes, 'x'));
  CHECK(back.nics.size() == kMaxDevices);
  CHECK(back.nics.back().kind == "other");
  CHECK(back.cacheBytes.size() == kMaxCacheLevels);
  CHECK(back.cores == 0);
  CHECK(where.package == -1);
}

TEST_CASE("topology: decode rejects malformed records", "[topo]") {
  std::string good = encode(sampleHost(), Place{0, 0, 0});
  // Every proper prefix.
  for (size_t n = 0; n < good.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    expectRejected(good.substr(0, n), n == 0 ? "" : "truncated");
  }
  expectRejected(good + '\0', "after the end");
  expectRejected(good + "garbage", "after the end");
  for (uint8_t v : {0, 2, 255}) {
    std::string b = good;
    b[0] = static_cast<char>(v);
    expectRejected(b, "version");
  }

  // A small record whose offsets are known: version, name "h", 4 counts, caches, NICs, GPUs, place.
  Host small;
  small.name = "h";
  small.packages = small.numaNodes = small.cores = small.pus = 1;
  const std::string base = encode(small, Place{});
  REQUIRE(base.size() == 1 + 2 + 16 + 1 + 1 + 1 + 12);
  const size_t packages = 3, caches = 19, nics = 20, gpus = 21, placeAt = 22;
  auto with = [&](size_t at, std::initializer_list<uint8_t> bytes) {
    std::string b = base;
    for (uint8_t x : bytes) b[at++] = static_cast<char>(x);
    return b;
  };
  expectRejected(with(caches, {kMaxCacheLevels + 1}), "cache levels");
  expectRejected(with(nics, {kMaxDevices + 1}), "NICs");
  expectRejected(with(nics, {255}), "NICs");
  expectRejected(with(gpus, {kMaxDevices + 1}), "GPUs");
  expectRejected(with(packages, {0xff, 0xff, 0xff, 0xff}), "packages");     // -1
  expectRejected(with(packages, {0xff, 0xff, 0xff, 0x7f}), "packages");     // 2^31-1
  expectRejected(with(placeAt, {0xfe, 0xff, 0xff, 0xff}), "place");         // -2
  expectRejected(with(placeAt + 8, {0x00, 0x00, 0x00, 0x80}), "place");     // -2^31
  expectRejected(with(1, {255}), "truncated");                              // a name longer than the record
  expectRejected(with(2, {0x07}), "unprintable");
  // A count that promises more NICs than the bytes hold.
  expectRejected(with(nics, {kMaxDevices}), "truncated");

  // A NIC whose kind is not one of the three.
  Host withNic = small;
  withNic.nics = {{"e", "ethernet", "", 0, 0}};
  std::string b = encode(withNic, Place{});
  size_t at = b.find("ethernet");
  REQUIRE(at != std::string::npos);
  b[at] = 'E';
  expectRejected(b, "kind");

  // Random damage never crashes; whatever decodes re-encodes to itself.
  std::mt19937 rng(12345);
  for (int i = 0; i < 20000; ++i) {
    std::string m = good;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) m[rng() % m.size()] = static_cast<char>(rng());
    if (rng() % 8 == 0) m.resize(rng() % (m.size() + 8), 'x');
    Host dh;
    Place dp;
    std::string w;
    if (decode(m, &dh, &dp, &w)) CHECK(encode(dh, dp) == m);
  }
  for (int i = 0; i < 2000; ++i) {
    std::string m(rng() % 64, '\0');
    for (char& c : m) c = static_cast<char>(rng());
    if (!m.empty()) m[0] = static_cast<char>(kEncodingVersion);
    Host dh;
    Place dp;
    std::string w;
    if (decode(m, &dh, &dp, &w)) CHECK(encode(dh, dp) == m);
  }
  // Null outputs are allowed.
  CHECK(decode(good, nullptr, nullptr, nullptr));
  CHECK_FALSE(decode("", nullptr, nullptr, nullptr));
}

TEST_CASE("topology: JSON is exact and escaped", "[topo]") {
  Host h;
  h.name = "a\"b\\c\x01";
  h.packages = 1;
  h.numaNodes = 1;
  h.cores = 2;
  h.pus = 4;
  h.cacheBytes = {32768, 0};
  h.nics = {{"eth0", "ethernet", "0000:00:03.0", 0, 0}};
  h.gpus = {{"cuda0", "0000:17:00.0", -1, -1}};
  std::string json = toJson({HostEntry{h, {0, 2}, {Place{}, Place{}}}, HostEntry{Host{}, {}, {}}});
  CHECK(json ==
        "{\"hosts\": [{\"name\": \"a\\\"b\\\\c\\u0001\", \"packages\": 1, \"numa_nodes\": 1, \"cores\": 2, "
        "\"pus\": 4, \"caches\": [32768, 0], "
        "\"nics\": [{\"name\": \"eth0\", \"kind\": \"ethernet\", \"pci\": \"0000:00:03.0\", \"numa\": 0}], "
        "\"gpus\": [{\"name\": \"cuda0\", \"pci\": \"0000:17:00.0\", \"numa\": -1}], \"ranks\": [0, 2]}, "
        "{\"name\": \"\", \"packages\": 0, \"numa_nodes\": 0, \"cores\": 0, \"pus\": 0, \"caches\": [], "
        "\"nics\": [], \"gpus\": [], \"ranks\": []}]}");
  CHECK(toJson({}) == "{\"hosts\": []}");
}

TEST_CASE("topology: a missing or malformed XML file is an error naming it", "[topo]") {
  TempDir dir;
  auto expectError = [](const std::string& file, const char* what) {
    INFO(what);
    try {
      discover(file);
      FAIL("no error for " << file);
    } catch (const Error& e) {
      CHECK(e.code() == Errc::InvalidArgument);
      CHECK(contains(e.what(), file));
    }
    CHECK_THROWS_AS(place(file), Error);
    CHECK_THROWS_AS(cpuLayout({0}, file), Error);
  };
  expectError(dir.file("absent.xml"), "missing");
  writeFile(dir.file("garbage.xml"), "this is not XML <<<");
  expectError(dir.file("garbage.xml"), "not XML");
  writeFile(dir.file("other.xml"), "<?xml version=\"1.0\"?>\n<html><body/></html>\n");
  expectError(dir.file("other.xml"), "XML, not a topology");
  writeFile(dir.file("empty.xml"), "");
  expectError(dir.file("empty.xml"), "empty");
}

TEST_CASE("config: HORA_TOPO_FILE", "[topo][config]") {
  auto parse = [](std::optional<std::string> v) {
    return parseConfig([v](const char* name) -> std::optional<std::string> {
      if (std::string(name) == "HORA_TOPO_FILE") return v;
      return std::nullopt;
    });
  };
  CHECK(parse(std::nullopt).topoFile.empty());
  CHECK(parse(std::string("/etc/machine.xml")).topoFile == "/etc/machine.xml");
  CHECK_THROWS_AS(parse(std::string("")), Error);
  CHECK_THROWS_AS(parse(std::string("  ")), Error);
  CHECK(unknownVariables({"HORA_TOPO_FILE"}).empty());
}
