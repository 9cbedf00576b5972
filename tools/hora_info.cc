// hora-info: what this build of Hora and this machine can do: the version and the build's
// options, the CPU kernels, which transports are usable here (and why not, for those that are
// not), the topology, GPUs and RDMA ports, and every setting in effect with where it came from.
// --check runs a 2-rank job over each usable transport (tools/hora_info_check.cc).
//
//   hora-info [--check] [--json]
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#if HORA_CUDA
#include <cuda_runtime_api.h>
#endif
#if HORA_INFO_IB
#include <infiniband/verbs.h>
#endif

#include "gpu/cuda.h"
#include "base/error.h"
#include "build_info.h"
#include "comm/comm.h"
#include "comm/config.h"
#include "comm/config_nccl.h"
#include "hora.h"
#include "kernels/cpu/reduce.h"
#include "tools/hora_info.h"
#include "topo/topology.h"
#include "transports/registry.h"

extern char** environ;

namespace {

using hora::topo::jsonString;

const char kUsage[] =
    "usage: hora-info [--check] [--json]\n"
    "\n"
    "Prints what this build of Hora and this machine can do: the version and the build's options\n"
    "(CUDA, ib, MPI in the perf tools), the CPU reduction kernels, the transports usable here\n"
    "(and why the others are not), the topology (hwloc), GPUs, RDMA ports, and every setting in\n"
    "effect with where it came from (default, or the HORA_* or NCCL_* variable that set it).\n"
    "\n"
    "options:\n"
    "  --check     also run a 2-rank job (two ranks as threads of a child process, one allreduce\n"
    "              with a known result) over each usable transport, forced with HORA_TRANSPORTS;\n"
    "              each gets at most 20 s. Exit status 1 if one fails.\n"
    "  --json      one JSON object instead of the text:\n"
    "                version, version_code, build_type: the library's version and build\n"
    "                build: {cuda, ib, mpi}: what this build has (true or false; mpi: the perf\n"
    "                  tools, allreduce_perf and the others, built with MPI)\n"
    "                cuda: {built, usable, why, mode, gpus: [{index, name}]}\n"
    "                kernels: {active, auto, supported: [...], built: [...], cpu: {avx2, avx512f,\n"
    "                  avx512bw, avx512vl, avx512bf16, f16c, fma}}\n"
    "                transports: [{name, summary, built, enabled, usable, why}]: why is \"\" when\n"
    "                  usable, else the reason (e.g. HORA_TRANSPORTS='tcp' leaves it out)\n"
    "                topology: {hosts: [...]} as hora-topo --json prints it\n"
    "                rdma_ports: [{device, port, state, link_layer}] (empty where ib is not built)\n"
    "                settings: [{name, value, source, from}]: source is default or environment,\n"
    "                  from the variable that set it (HORA_* or an NCCL_* twin; \"\" by default);\n"
    "                  other HORA_* variables of the environment too, source environment\n"
    "                check (with --check): [{transport, ok, why}]\n"
    "  -h, --help  show this text\n"
    "\n"
    "Exit status: 0, or 1 when hora-info fails (e.g. an invalid HORA_* setting) or, with --check,\n"
    "when a usable transport fails its check.\n";

constexpr int kCheckSeconds = 20;

struct TransportInfo {
  std::string name, summary;
  bool built = true, enabled = true, usable = false;
  std::string why;
};

struct Setting {
  std::string name, value, source, from;
};

struct Port {
  std::string device, state, linkLayer;
  int port = 0;
};

struct Gpu {
  int index = 0;
  std::string name;
};

std::string yesNo(bool b) { return b ? "yes" : "no"; }
std::string jsonBool(bool b) { return b ? "true" : "false"; }

template <typename T, typename F>
std::string jsonList(const std::vector<T>& items, F each) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + each(items[i]);
  return out + "]";
}

// The variable that set a HORA_* knob, with its value: the HORA_* one, or the NCCL_* twins it
// was read from; "" when neither (the default).
std::string setBy(const hora::Config& c, const char* name) {
  if (const char* v = getenv(name)) return std::string(name) + "='" + v + "'";
  auto it = c.ncclSource.find(name);
  if (it == c.ncclSource.end()) return "";
  std::string out;
  for (const std::string& n : hora::splitList(it->second))
    if (const char* v = getenv(n.c_str())) out += (out.empty() ? "" : ", ") + n + "='" + v + "'";
  return out.empty() ? it->second : out;
}

// ---- transports ------------------------------------------------------------------------------

std::vector<TransportInfo> transports(const hora::Config& c) {
  std::vector<TransportInfo> out;
  bool ibBuilt = false;
  for (const hora::transport::Registration& r : hora::transport::registry()) {
    TransportInfo t;
    t.name = r.name;
    t.summary = r.summary;
    ibBuilt |= t.name == "ib";
    if (!r.optional) {
      t.usable = true;  // always on: a rank to itself
      out.push_back(t);
      continue;
    }
    t.enabled = std::find(c.transports.begin(), c.transports.end(), t.name) != c.transports.end();
    if (!t.enabled) {
      t.why = "left out by " + setBy(c, "HORA_TRANSPORTS");
      out.push_back(t);
      continue;
    }
    // Set the transport up as a communicator of two ranks would (listening on the interface
    // HORA_SOCKET_IFNAME chooses, else on loopback), and ask for its field of the peer record:
    // empty when it cannot serve this rank, with its reason.
    try {
      hora::SockAddr bind = c.socketIfname.empty() ? hora::SockAddr::parse("127.0.0.1:0")
                                                   : hora::chooseInterface(c.socketIfname, AF_INET);
      bind.setPort(0);
      std::unique_ptr<hora::transport::Transport> made = r.make(hora::transportSettings(c, 0, 2, bind));
      t.usable = !made->field().empty();
      if (!t.usable) t.why = made->offReason().empty() ? "off on this host" : made->offReason();
    } catch (const std::exception& e) {
      t.why = e.what();
    }
    out.push_back(t);
  }
  if (!ibBuilt)
    out.push_back({"ib", "RDMA (InfiniBand, RoCE) through libibverbs", false, false, false,
                   "not built: this build has no libibverbs (meson option ib)"});
  // Not a transport of the registry: device buffers between the ranks of one host, handed
  // over through CUDA IPC instead of bounced through host memory.
  TransportInfo ipc{"cuda_ipc", "device buffers between the ranks of one host through CUDA IPC",
                    hora::cuda::built() || hora::cuda::emulated(), c.cudaIpc, false, ""};
  if (!hora::cuda::usable()) ipc.why = hora::cuda::unusableWhy();
  else if (!c.cudaIpc) ipc.why = "off by " + setBy(c, "HORA_CUDA_IPC");
  else ipc.usable = true;
  out.push_back(ipc);
  return out;
}

// ---- GPUs and RDMA ports ---------------------------------------------------------------------

std::vector<Gpu> gpus() {
  std::vector<Gpu> out;
  if (!hora::cuda::usable()) return out;
  if (hora::cuda::emulated()) return {{0, "emulated GPU (HORA_CUDA=emulate)"}};
#if HORA_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return out;
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    out.push_back({i, cudaGetDeviceProperties(&p, i) == cudaSuccess ? p.name : "(unknown)"});
  }
#endif
  return out;
}

std::vector<Port> rdmaPorts(std::string* why) {
  std::vector<Port> out;
#if HORA_INFO_IB
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) {
    *why = std::string("no RDMA devices: ") + std::strerror(errno);
    return out;
  }
  for (int d = 0; d < n; ++d) {
    const char* name = ibv_get_device_name(list[d]);
    ibv_context* ctx = ibv_open_device(list[d]);
    if (!ctx) continue;
    ibv_device_attr attr{};
    if (ibv_query_device(ctx, &attr) == 0) {
      for (int p = 1; p <= attr.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, static_cast<uint8_t>(p), &pa) != 0) continue;
        out.push_back({name, ibv_port_state_str(pa.state),
                       pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "InfiniBand", p});
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  if (n == 0) *why = "no RDMA device on this machine";
#else
  *why = "ib not built";
#endif
  return out;
}

// ---- settings --------------------------------------------------------------------------------

const char* levelName(hora::log::Level l) {
  switch (l) {
    case hora::log::Level::None: return "NONE";
    case hora::log::Level::Warn: return "WARN";
    case hora::log::Level::Info: return "INFO";
    case hora::log::Level::Trace: return "TRACE";
  }
  return "?";
}

std::vector<Setting> settings(const hora::Config& c) {
  auto text = [](const std::string& v, const char* dflt) { return v.empty() ? std::string(dflt) : v; };
  auto bit = [](bool b) { return std::string(b ? "1" : "0"); };
  // Every knob of the library's configuration (comm/config.h), with its value in effect.
  const std::vector<std::pair<const char*, std::string>> knobs = {
      {"HORA_DEBUG", levelName(c.debugLevel)},
      {"HORA_DEBUG_SUBSYS", hora::subsysText(c.debugSubsys)},
      {"HORA_DEBUG_FILE", text(c.debugFile, "(stderr)")},
      {"HORA_TIMEOUT_MS", std::to_string(c.timeout.count())},
      {"HORA_SOCKET_IFNAME", text(c.socketIfname, "(the route to the rendezvous)")},
      {"HORA_TRANSPORTS", hora::joined(c.transports, ",")},
      {"HORA_ALGO", c.algo},
      {"HORA_HIER_STAGE", bit(c.hierStage)},
      {"HORA_CALL_CHECK", bit(c.callCheck)},
      {"HORA_TUNE_FILE", text(c.tuneFile, "(built-in costs)")},
      {"HORA_NSOCKS_PERPEER", std::to_string(c.nsocksPerPeer)},
      {"HORA_IB_HCA", text(c.ibHca, "(every active port, nearest first)")},
      {"HORA_IB_GID_INDEX", c.ibGidIndex < 0 ? "(chosen per port)" : std::to_string(c.ibGidIndex)},
      {"HORA_IB_QPS_PER_PEER", std::to_string(c.ibQpsPerPeer)},
      {"HORA_CHUNK_BYTES", std::to_string(c.chunkBytes)},
      {"HORA_KERNEL_ISA", c.kernelIsa},
      {"HORA_CUDA", c.cuda},
      {"HORA_CUDA_STREAM_WAIT", c.cudaWaitKernel ? "kernel" : "memop"},
      {"HORA_CUDA_IPC", bit(c.cudaIpc)},
      {"HORA_COMM_BLOCKING", bit(c.commBlocking)},
      {"HORA_TOPO_FILE", text(c.topoFile, "(this machine)")},
  };
  std::vector<Setting> out;
  std::vector<std::string> listed;
  for (const auto& [name, value] : knobs) {
    // The library's table of variables (comm/config.cc) must know every one listed here.
    if (!hora::unknownVariables({name}).empty())
      throw std::runtime_error(std::string("internal: ") + name + " is not a variable of this library");
    const std::string from = setBy(c, name);
    const char* own = getenv(name);
    out.push_back({name, value, from.empty() ? "default" : "environment",
                   own ? name : c.ncclSource.count(name) ? c.ncclSource.at(name) : ""});
    listed.push_back(name);
  }
  // The other HORA_* variables of the environment (the launch's, the Python package's), as
  // given; one Hora does not know says so.
  std::vector<std::string> names;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const std::string n = kv.substr(0, kv.find('='));
    if (n.compare(0, 5, "HORA_") != 0 || std::find(listed.begin(), listed.end(), n) != listed.end()) continue;
    const std::vector<std::string> unknown = hora::unknownVariables({n});
    std::string value = kv.substr(n.size() + 1);
    if (n == "HORA_SECRET" || n == "HORA_ID") value = "(set)";
    out.push_back({n, value, unknown.empty() ? "environment" : "environment, not a Hora variable: ignored", n});
  }
  return out;
}

// ---- output ----------------------------------------------------------------------------------

struct Report {
  std::string version;
  int versionCode = 0;
  bool cudaBuilt = false, ibBuilt = false, cudaUsable = false;
  std::string cudaWhy, cudaMode;
  std::string isaActive, isaAuto;
  std::vector<std::string> isaSupported, isaBuilt;
  std::vector<std::pair<std::string, bool>> cpu;
  std::vector<TransportInfo> transports;
  hora::topo::HostEntry host;
  std::vector<Gpu> gpus;
  std::vector<Port> ports;
  std::string portsWhy;
  std::vector<Setting> settings;
  bool checked = false;
  std::vector<std::pair<std::string, hora::info::CheckResult>> checks;
};

std::vector<std::pair<std::string, bool>> cpuFeatures() {
  std::vector<std::pair<std::string, bool>> out;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  out = {{"avx2", __builtin_cpu_supports("avx2")},         {"fma", __builtin_cpu_supports("fma")},
         {"f16c", __builtin_cpu_supports("f16c")},         {"avx512f", __builtin_cpu_supports("avx512f")},
         {"avx512bw", __builtin_cpu_supports("avx512bw")}, {"avx512vl", __builtin_cpu_supports("avx512vl")},
         {"avx512bf16", __builtin_cpu_supports("avx512bf16")}};
#endif
  return out;
}

Report gather(const hora::Config& c) {
  namespace k = hora::kernels;
  Report r;
  r.version = HORA_VERSION_STRING;
  horaGetVersion(&r.versionCode);
  r.cudaBuilt = hora::cuda::built();
  r.cudaUsable = hora::cuda::usable();
  r.cudaWhy = r.cudaUsable ? "" : hora::cuda::unusableWhy();
  r.cudaMode = c.cuda;
  r.isaActive = k::isaName(k::activeIsa());
  r.isaAuto = k::isaName(k::bestIsa());
  for (k::Isa isa : {k::Isa::Scalar, k::Isa::Avx2, k::Isa::Avx512}) {
    if (k::isaSupported(isa)) r.isaSupported.push_back(k::isaName(isa));
  }
#if defined(__x86_64__) || defined(__i386__)
  r.isaBuilt = {"scalar", "avx2", "avx512"};
#else
  r.isaBuilt = {"scalar"};
#endif
  r.cpu = cpuFeatures();
  r.transports = transports(c);
  for (const TransportInfo& t : r.transports) r.ibBuilt |= t.name == "ib" && t.built;
  r.host.host = hora::topo::discover(c.topoFile);
  r.host.ranks = {0};
  r.host.places = {hora::topo::place(c.topoFile)};
  r.gpus = gpus();
  r.ports = rdmaPorts(&r.portsWhy);
  r.settings = settings(c);
  return r;
}

std::string plural(int n, const char* one) { return std::to_string(n) + " " + one + (n == 1 ? "" : "s"); }

std::string text(const Report& r) {
  std::string o = "Hora " + r.version + " (" + HORA_BUILD_TYPE + ")\n";
  o += "build:       CUDA " + yesNo(r.cudaBuilt) + ", ib (verbs) " + yesNo(r.ibBuilt) + ", MPI (perf tools) " +
       yesNo(HORA_INFO_PERF_MPI) + ", CPU kernels " +
       hora::joined(r.isaBuilt, " ") + "\n";
  o += "CUDA:        " + (r.cudaUsable ? "usable (HORA_CUDA=" + r.cudaMode + ")" : "not usable: " + r.cudaWhy) + "\n";
  std::string cpu;
  for (const auto& [name, has] : r.cpu) cpu += " " + name + (has ? "+" : "-");
  o += "kernels:     " + r.isaActive + " active; HORA_KERNEL_ISA=auto picks " + r.isaAuto + "; supported here: " +
       hora::joined(r.isaSupported, " ") + (cpu.empty() ? "" : "; CPU:" + cpu) + "\n";
  o += "transports:\n";
  for (const TransportInfo& t : r.transports) {
    char line[64];
    std::snprintf(line, sizeof line, "  %-10s", t.name.c_str());
    o += line + (t.usable ? "usable: " + t.summary : "not usable: " + t.why) + "\n";
  }
  const hora::topo::Host& h = r.host.host;
  o += "topology:    " + (h.name.empty() ? std::string("this host") : h.name) + " has " + plural(h.packages, "package") +
       ", " + plural(h.numaNodes, "NUMA node") + ", " + plural(h.cores, "core") + " and " + plural(h.pus, "PU");
  std::string nics;
  for (const hora::topo::Nic& n : h.nics) nics += (nics.empty() ? "" : ", ") + n.name + " (" + n.kind + ")";
  o += "; NICs: " + (nics.empty() ? std::string("none") : nics);
  o += "; GPUs (hwloc): " + std::to_string(h.gpus.size()) + " (hora-topo lists the devices)\n";
  std::string g;
  for (const Gpu& x : r.gpus) g += (g.empty() ? "" : ", ") + std::to_string(x.index) + ": " + x.name;
  o += "GPUs:        " + std::to_string(r.gpus.size()) +
       (r.gpus.empty() ? (r.cudaUsable ? "" : " (CUDA not usable)") : " (" + g + ")") + "\n";
  o += "RDMA ports:";
  if (r.ports.empty()) o += "  none (" + r.portsWhy + ")\n";
  else o += "\n";
  for (const Port& p : r.ports)
    o += "  " + p.device + " port " + std::to_string(p.port) + ": " + p.state + ", " + p.linkLayer + "\n";
  o += "settings:\n";
  for (const Setting& s : r.settings) {
    char line[64];
    std::snprintf(line, sizeof line, "  %-23s", s.name.c_str());
    o += line + s.value + "  (" + s.source + (s.from.empty() || s.from == s.name ? "" : ": " + s.from) + ")\n";
  }
  if (r.checked) {
    o += "check (2 ranks, one allreduce, per transport):\n";
    for (const auto& [name, res] : r.checks) {
      char line[64];
      std::snprintf(line, sizeof line, "  %-10s", name.c_str());
      o += line + (res.ok ? std::string("ok") : "FAILED: " + res.why) + "\n";
    }
  }
  return o;
}

std::string json(const Report& r) {
  auto str = [](const std::string& s) { return jsonString(s); };
  std::string o = "{\"version\": " + str(r.version) + ", \"version_code\": " + std::to_string(r.versionCode) +
                  ", \"build_type\": " + str(HORA_BUILD_TYPE);
  o += ", \"build\": {\"cuda\": " + jsonBool(r.cudaBuilt) + ", \"ib\": " + jsonBool(r.ibBuilt) +
       ", \"mpi\": " + jsonBool(HORA_INFO_PERF_MPI) + "}";
  o += ", \"cuda\": {\"built\": " + jsonBool(r.cudaBuilt) + ", \"usable\": " + jsonBool(r.cudaUsable) +
       ", \"why\": " + str(r.cudaWhy) + ", \"mode\": " + str(r.cudaMode) + ", \"gpus\": " +
       jsonList(r.gpus, [&](const Gpu& g) {
         return "{\"index\": " + std::to_string(g.index) + ", \"name\": " + str(g.name) + "}";
       }) +
       "}";
  o += ", \"kernels\": {\"active\": " + str(r.isaActive) + ", \"auto\": " + str(r.isaAuto) +
       ", \"supported\": " + jsonList(r.isaSupported, str) + ", \"built\": " + jsonList(r.isaBuilt, str) +
       ", \"cpu\": {";
  for (size_t i = 0; i < r.cpu.size(); ++i) o += (i ? ", " : "") + str(r.cpu[i].first) + ": " + jsonBool(r.cpu[i].second);
  o += "}}";
  o += ", \"transports\": " + jsonList(r.transports, [&](const TransportInfo& t) {
         return "{\"name\": " + str(t.name) + ", \"summary\": " + str(t.summary) + ", \"built\": " + jsonBool(t.built) +
                ", \"enabled\": " + jsonBool(t.enabled) + ", \"usable\": " + jsonBool(t.usable) +
                ", \"why\": " + str(t.why) + "}";
       });
  o += ", \"topology\": " + hora::topo::toJson({r.host});
  o += ", \"rdma_ports\": " + jsonList(r.ports, [&](const Port& p) {
         return "{\"device\": " + str(p.device) + ", \"port\": " + std::to_string(p.port) + ", \"state\": " +
                str(p.state) + ", \"link_layer\": " + str(p.linkLayer) + "}";
       });
  o += ", \"settings\": " + jsonList(r.settings, [&](const Setting& s) {
         return "{\"name\": " + str(s.name) + ", \"value\": " + str(s.value) + ", \"source\": " + str(s.source) +
                ", \"from\": " + str(s.from) + "}";
       });
  if (r.checked)
    o += ", \"check\": " + jsonList(r.checks, [&](const std::pair<std::string, hora::info::CheckResult>& c) {
           return "{\"transport\": " + str(c.first) + ", \"ok\": " + jsonBool(c.second.ok) + ", \"why\": " +
                  str(c.second.why) + "}";
         });
  return o + "}\n";
}

// This program's own path, for the checks' child processes.
std::string selfPath(const char* argv0) {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : argv0;
}

int run(int argc, char** argv) {
  bool jsonOut = false, check = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      jsonOut = true;
    } else if (std::strcmp(argv[i], "--check") == 0) {
      check = true;
    } else if (std::strcmp(argv[i], "--check-one") == 0 && argc == 2) {
      return hora::info::checkOne();
    } else if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "hora-info: unknown argument '%s'\n%s", argv[i], kUsage);
      return 2;
    }
  }
  bool failed = false;
  try {
    const hora::Config& c = hora::config();
    Report r = gather(c);
    if (check) {
      r.checked = true;
      const std::string self = selfPath(argv[0]);
      for (const TransportInfo& t : r.transports) {
        if (!t.usable || t.name == "loopback" || t.name == "cuda_ipc") continue;
        r.checks.emplace_back(t.name, hora::info::checkTransport(self, t.name, kCheckSeconds));
        failed |= !r.checks.back().second.ok;
      }
    }
    std::fputs((jsonOut ? json(r) : text(r)).c_str(), stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hora-info: %s\n", e.what());
    return 1;
  }
  if (std::fflush(stdout) != 0) return 1;
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
