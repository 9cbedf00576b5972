#include "comm/config.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/error.h"
#include "gpu/cuda.h"
#include "build_info.h"
#include "comm/config_nccl.h"
#include "kernels/cpu/reduce.h"
#include "transports/registry.h"

extern char** environ;

namespace hora {

namespace {

// Every HORA_* variable, with the NCCL_* variables each also reads (whichever ABI the program
// uses; HORA_* wins where both are set), then the NCCL_* variables Hora knows and ignores. The
// configuration reference (docs/configuration.md) is generated from this table
// (tools/hora_config_doc.cc, `ninja docs-configuration`), and a test keeps the two alike and checks
// that every HORA_* name the code reads is here. The table is the one list of every variable, so
// it stays here, NCCL column included; config_nccl.cc translates that column's values
// (config_nccl.h). Columns: name, topic, type, default, values, meaning, NCCL twins, how read.
const Variable kVariables[] = {
    // Core: logging, timeouts, algorithms, the pipeline.
    {"HORA_DEBUG", Topic::Core, "keyword", "WARN", "NONE, WARN, INFO or TRACE (any case)",
     "log level; lines name host, pid, thread and rank. At INFO the first line of a process names the build "
     "(version, build type, kernels, transports)",
     "NCCL_DEBUG", "VERSION: WARN, and the version banner; ABORT: WARN. Unset, Hora warns (NCCL is silent)"},
    {"HORA_DEBUG_SUBSYS", Topic::Core, "list", "ALL", "comma list of INIT, BOOTSTRAP, NET, COLL, ENV, ALL; ^X excludes X",
     "the subsystems that log", "NCCL_DEBUG_SUBSYS",
     "NCCL's syntax (a leading ^ excludes the whole list); P2P and SHM as NET, GRAPH and TUNING as COLL (in an "
     "exclusion only NET and COLL themselves exclude those); ALLOC, CALL, PROXY, NVLS, REG, PROFILE, RAS ignored. "
     "Unset, Hora logs ALL (NCCL: INIT,BOOTSTRAP,ENV)"},
    {"HORA_DEBUG_FILE", Topic::Core, "path pattern", "(stderr)", "a file name; %h: host name, %p: pid, %%: a %",
     "file the log is appended to, e.g. /tmp/hora.%h.%p; a file that cannot be opened is a warning, and the log "
     "stays where it was",
     "NCCL_DEBUG_FILE", "as it is (%h, %p); appended to, where NCCL truncates"},
    {"HORA_TIMEOUT_MS", Topic::Core, "integer (ms)", "600000", "1 to 31536000000",
     "milliseconds without progress before a wait fails with horaTimeout (horaConfig_t.timeoutMs overrides it "
     "per communicator); a transfer that keeps moving never times out. The torch.distributed backend takes it "
     "over init_process_group's default timeout, and hora.torch's stall shutdown defaults to it"},
    {"HORA_ALGO", Topic::Core, "list", "auto",
     "auto; an algorithm's name (forced for every collective that has it); or collective:name pairs, comma "
     "separated, collective one of allreduce, broadcast, reduce, allgather, reducescatter, alltoall, gather, "
     "scatter, barrier (an unknown name is an error listing the names)",
     "the algorithm of each collective: auto lets the planner choose, e.g. allreduce:ring,broadcast:chain",
     "NCCL_ALGO",
     "NCCL's syntax (lists, ^, collective:list;...): per collective, the one of Ring (ring) and Tree (tree) it leaves "
     "that Hora's has is forced; Hora's planner chooses where it leaves both or neither; other algorithms (NVLS, PAT, "
     "CollNet...) are ignored with a warning"},
    {"HORA_TUNE_FILE", Topic::Core, "path", "(built-in costs)", "a file written by hora-tune",
     "the planner's cost model, instead of the built-in costs; a file that cannot be read or parsed is an error"},
    {"HORA_CHUNK_BYTES", Topic::Core, "size", "524288", "4096 to 64M bytes (K and M suffixes)",
     "pipeline chunk and shared-stage slot; must agree on every rank"},
    {"HORA_HIER_STAGE", Topic::Core, "0 or 1", "1", "0 or 1",
     "across hosts: hier's phases within a host through the shared stage (1) or shared-memory messages (0); must "
     "agree on every rank"},
    {"HORA_CALL_CHECK", Topic::Core, "0 or 1", "1", "0 or 1",
     "1: a mismatched call fails on every rank: a rank that only gives (a Broadcast's root, a Reduce's senders, "
     "count-0 calls) compares its call with its neighbour's later, through the shared stage or by a one-byte "
     "message, and fails at a later call (its predecessor's failure reaches it within 48 calls through the stage, "
     "1024 over TCP, 256 over shared memory, 48 over verbs) or at its finalize; 0: such ranks hear of a mismatch only if a peer that found it fails the "
     "communicator; must agree on every rank"},
    {"HORA_KERNEL_ISA", Topic::Core, "keyword", "auto", "auto, scalar, avx2 or avx512",
     "the reduction kernels; one this CPU or build does not support is an error"},
    {"HORA_TOPO_FILE", Topic::Core, "path", "(this machine)", "an hwloc XML file",
     "read the topology from this file instead of this machine (hora-topo shows it)"},
    {"HORA_TRACE_CALLS", Topic::Core, "integer", "2000", "0 to 1000000",
     "the calls each communicator's flight recorder keeps (what each asked for, its plan, its state and what it "
     "waits for), dumped on a failure, on SIGUSR1 and by horaCommDump for hora-inspect; 0 records none and writes "
     "no dump on a failure"},
    {"HORA_DUMP_DIR", Topic::Core, "path", "(the working directory)", "a directory (created if missing)",
     "where the flight recorder's dumps go, one file per process: hora-dump.<host>.<pid>.json"},
    {"HORA_DUMP_SIGNAL", Topic::Core, "0 or 1", "1", "0 or 1",
     "1: SIGUSR1 makes the process write its dump (a handler installed before it is kept and called too); 0 "
     "leaves SIGUSR1 alone"},
    {"HORA_COMM_BLOCKING", Topic::Core, "0 or 1", "1", "0 or 1",
     "the default of horaConfig_t.blocking: 0 makes init, split, shrink and finalize return horaInProgress at once",
     "NCCL_COMM_BLOCKING", "as it is (0 or 1)"},
    // Transports.
    {"HORA_TRANSPORTS", Topic::Transports, "list", "(every transport built in)",
     "comma list of the transports built in: shm (ranks of one host), tcp, ib (where libibverbs was found at build "
     "time); ^X excludes X; the list must leave one",
     "transports to use; HORA_DEBUG=INFO prints each rank's links", "NCCL_IB_DISABLE,NCCL_SHM_DISABLE,NCCL_NET",
     "NCCL_IB_DISABLE (not 0) leaves out ib, NCCL_SHM_DISABLE=1 shm; NCCL_NET=IB leaves out tcp (ignored in a build without ib), NCCL_NET=Socket ib; other networks ignored"},
    {"HORA_SHM_SINGLE_COPY", Topic::Transports, "0 or 1", "1", "0 or 1",
     "1: a large Broadcast between the ranks of one host is read by each rank straight from the root's buffer "
     "(threads of one process; processes through process_vm_readv, where the kernel allows it, which is probed at "
     "init and agreed by the host's ranks); 0: through the root's slots of the shared stage. HORA_DEBUG=INFO says "
     "which, and why"},
    {"HORA_SOCKET_IFNAME", Topic::Transports, "list", "(the route to the rendezvous)",
     "comma list of interface name prefixes, =exact names, ^excluded ones",
     "interfaces for TCP", "NCCL_SOCKET_IFNAME",
     "NCCL's syntax (a leading ^ or = applies to the whole list; :port is dropped); ^= is ignored"},
    {"HORA_NSOCKS_PERPEER", Topic::Transports, "integer", "2", "1 to 16",
     "TCP sockets per peer (2: a MiB both ways at once takes 1.3-2x less time over loopback than on one; more "
     "helps on fast NICs); must agree on every rank",
     "NCCL_SOCKET_NTHREADS,NCCL_NSOCKS_PERTHREAD", "their product (an unset one counts 1), clamped to 1..16"},
    // The ib transport.
    {"HORA_IB_HCA", Topic::Ib, "list", "(every active port, nearest first)",
     "mlx5_0:1,mlx5_1: name prefixes with an optional :port; a leading = for exact names, ^ to exclude the list",
     "RDMA devices and ports for the ib transport; a filter that leaves no usable port is an error naming it and "
     "every port seen",
     "NCCL_IB_HCA", "the same syntax; one that leaves no usable port turns ib off, as NCCL falls back to sockets (from "
     "HORA_IB_HCA it is an error)"},
    {"HORA_IB_GID_INDEX", Topic::Ib, "integer", "(the first RoCE v2 GID with an IPv4-mapped address)", "0 to 255",
     "the GID index of RoCE ports (InfiniBand ports are addressed by LID)", "NCCL_IB_GID_INDEX",
     "-1: chosen per port"},
    {"HORA_IB_QPS_PER_PEER", Topic::Ib, "integer", "1", "1 to 16",
     "queue pairs per peer for the ib transport; a message of 64 KiB or more per queue pair is striped across "
     "them; must agree on every rank",
     "NCCL_IB_QPS_PER_CONNECTION", "clamped to 1..16"},
    // CUDA.
    {"HORA_CUDA", Topic::Cuda, "keyword", "auto", "auto, off, emulate or emulate-shared",
     "device buffers and CUDA streams: auto (where the build has CUDA and the machine a driver and a GPU), off "
     "(every pointer is host memory; the driver is never loaded), emulate (an emulated GPU in host memory, each "
     "process's own, for tests; the Python package reads it too), emulate-shared (the same, one GPU that the "
     "processes of the host share)"},
    {"HORA_CUDA_STREAM_WAIT", Topic::Cuda, "keyword", "memop", "memop or kernel",
     "how a CUDA stream waits for a call's worker: memop (cuStreamWaitValue32; the polling kernel where the "
     "driver refuses it) or kernel (a one-thread kernel polls the word)"},
    {"HORA_CUDA_IPC", Topic::Cuda, "0 or 1", "1", "0 or 1",
     "0: device buffers of the ranks of one host are bounced through host memory instead of the CUDA IPC stage; "
     "must agree on every rank",
     "NCCL_P2P_DISABLE", "1 as 0 (stage through host memory)"},
    {"HORA_CUDA_BOUNCE_CHUNK", Topic::Cuda, "size", "1M", "0, or 4096 to 256M bytes (K and M suffixes)",
     "device buffers bounced through host memory (across hosts, or with HORA_CUDA_IPC=0) are copied in and out "
     "in chunks of this size (at most 32 each way, larger chunks for larger buffers), each copy an op of the "
     "call's program, so that the copies, the wire and the reductions overlap; 0: each buffer is copied whole, "
     "in before the call and out after it; may differ between ranks"},
    {"HORA_CUDA_KERNELS", Topic::Cuda, "0 or 1", "1", "0 or 1",
     "1: a collective whose buffers are all on the device, between ranks of one host, is a kernel on the "
     "caller's stream that moves and reduces the data itself through the ranks' mapped device memory (no host "
     "hand-off); 0: such calls go through the communicator's worker thread (the CUDA IPC stage for an AllReduce, "
     "bouncing for the rest); must agree on every rank; needs HORA_CUDA_IPC=1"},
    // How a rank finds its job (horaCommInitFromEnv, hora.torch's init).
    {"HORA_RANK", Topic::Launch, "integer", "", "0 to HORA_SIZE-1",
     "this rank (horaCommInitFromEnv; set by hora-run)"},
    {"HORA_SIZE", Topic::Launch, "integer", "", "1 or more", "number of ranks (set by hora-run)"},
    {"HORA_LOCAL_RANK", Topic::Launch, "integer", "", "0 to HORA_LOCAL_SIZE-1",
     "rank among this host's ranks (set by hora-run for the program; the library does not read it)"},
    {"HORA_LOCAL_SIZE", Topic::Launch, "integer", "", "1 or more",
     "number of ranks on this host (set by hora-run for the program; the library does not read it)"},
    {"HORA_ID", Topic::Launch, "hex", "", "256 hex digits", "the job's unique id (set by hora-run)"},
    {"HORA_ROOT", Topic::Launch, "host:port", "(under torchrun and srun: derived from their variables)",
     "host:port of one of rank 0's host's addresses",
     "where rank 0 hosts the rendezvous, instead of HORA_ID. Rank 0 refuses an address that is not its host's; "
     "the other ranks warn every 10 s while they cannot reach it"},
    {"HORA_SECRET", Topic::Launch, "hex", "", "64 hex digits, the same on every rank",
     "the rendezvous' shared secret; required with HORA_ROOT and with the rendezvous torchrun's (MASTER_ADDR) and "
     "srun's variables imply"},
    {"HORA_SECRET_FILE", Topic::Launch, "path", "", "a file holding 64 hex digits (mode 600)",
     "HORA_SECRET from a file (e.g. on a shared file system)"},
    // hora-run.
    {"HORA_RUN_GRACE_S", Topic::HoraRun, "number (s)", "5", "seconds, 0 or more",
     "hora-run: seconds between SIGTERM and SIGKILL when it stops ranks"},
    {"HORA_RUN_BIND", Topic::HoraRun, "keyword", "(core when every rank can have a CPU of its own, else none)",
     "core, numa or none", "hora-run: --bind's default"},
    {"HORA_RUN_CPU_CLAIMS", Topic::HoraRun, "path", "/dev/shm/hora-run.cpus", "a file name",
     "hora-run: the file in which the jobs of a host claim the CPUs they bind to"},
    // Python: the hora package and hora.torch.
    {"HORA_LIBRARY", Topic::Python, "path", "(the path recorded at install time, then the build tree)",
     "the path of libhora.so", "the Python package: the library to load"},
    {"HORA_CYCLE_TIME", Topic::Python, "number (ms)", "1", "more than 0",
     "hora.torch: milliseconds between the engine's rounds"},
    {"HORA_FUSION_THRESHOLD", Topic::Python, "integer (bytes)", "67108864", "0 or more",
     "hora.torch: bytes of a fusion buffer; 0 reduces every tensor by itself"},
    {"HORA_CACHE_CAPACITY", Topic::Python, "integer", "1024", "0 or more",
     "hora.torch: operations the response cache remembers; 0 turns it off"},
    {"HORA_TIMELINE", Topic::Python, "path", "", "a file name",
     "hora.torch: rank 0 writes a Chrome-trace timeline to this file"},
    {"HORA_TIMELINE_MARK_CYCLES", Topic::Python, "0 or 1", "0", "0 or 1",
     "hora.torch: 1 marks every engine round that starts work in the timeline"},
    {"HORA_STALL_CHECK_TIME_SECONDS", Topic::Python, "number (s)", "60", "0 or more",
     "hora.torch: warn about an operation some ranks have not submitted after this long (0: never)"},
    {"HORA_STALL_SHUTDOWN_TIME_SECONDS", Topic::Python, "number (s)", "(HORA_TIMEOUT_MS / 1000)", "0 or more",
     "hora.torch: then cancel it on every rank with ValueError (0: never)"},
    // The torch.distributed backend.
    {"HORA_TORCH_ANY_SOURCE", Topic::TorchBackend, "0 or 1", "0", "0 or 1, on every rank, when the group is made",
     "backend hora: 1 lets recv() omit the source in groups of 3+ ranks; each send then first announces itself in "
     "the group's store (0.1-0.2 ms)"},
    // The perf scripts.
    {"HORA_RUN", Topic::Perf, "path", "(build/tools/hora-run, else hora-run on PATH)", "the path of hora-run",
     "perf/table1.py and perf/py_overhead.py: the hora-run to start ranks with (not passed on to the ranks)"},
    {"HORA_BUILD", Topic::Perf, "path", "(build of the checkout)", "a build directory",
     "perf/compare: the build whose tools it runs (its -B option's default)"},
    // NCCL's variables that Hora knows and ignores (any other NCCL_* is ignored too).
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_BUFFSIZE,NCCL_CHUNK_SIZE,NCCL_P2P_NET_CHUNKSIZE,NCCL_P2P_NVL_CHUNKSIZE,NCCL_P2P_PCI_CHUNKSIZE",
     "NCCL's buffer of all a connection's pipeline steps and its send/recv chunks, not HORA_CHUNK_BYTES' chunk"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_PROTO,NCCL_MIN_NCHANNELS,NCCL_MAX_NCHANNELS,NCCL_MIN_CTAS,NCCL_MAX_CTAS,NCCL_NTHREADS",
     "protocols, channels and thread counts of NCCL's kernels"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_P2P_LEVEL,NCCL_NET_GDR_LEVEL,NCCL_NET_GDR_READ,NCCL_CROSS_NIC,NCCL_NVLS_ENABLE,NCCL_COLLNET_ENABLE,NCCL_PXN_DISABLE,NCCL_CUMEM_ENABLE",
     "GPU and fabric features Hora does not have"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_IB_TIMEOUT,NCCL_IB_RETRY_CNT,NCCL_IB_SL,NCCL_IB_TC,NCCL_IB_SPLIT_DATA_ON_QPS,NCCL_SOCKET_FAMILY",
     "link settings Hora leaves at their defaults"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_TOPO_FILE", "NCCL's own topology XML (HORA_TOPO_FILE reads hwloc's)"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_COMM_ID", "a rendezvous without a secret: use HORA_ROOT with HORA_SECRET"},
    {nullptr, Topic::NcclIgnored, "", "", "", "", "NCCL_CONF_FILE,NCCL_DEBUG_TIMESTAMP_FORMAT,NCCL_DEBUG_TIMESTAMP_LEVELS,NCCL_NET_PLUGIN,NCCL_TUNER_PLUGIN,NCCL_PROFILER_PLUGIN",
     "Hora reads no configuration file (nor /etc/nccl.conf), stamps no time on log lines and loads no plugins"},
};

}  // namespace

const char* topicTitle(Topic t) {
  switch (t) {
    case Topic::Core: return "Core: logging, timeouts, algorithms";
    case Topic::Transports: return "Transports";
    case Topic::Ib: return "The ib transport (RDMA)";
    case Topic::Cuda: return "CUDA";
    case Topic::Launch: return "Launching: rank, size and rendezvous";
    case Topic::HoraRun: return "hora-run";
    case Topic::Python: return "Python: the hora package and hora.torch";
    case Topic::TorchBackend: return "The torch.distributed backend";
    case Topic::Perf: return "The perf scripts";
    case Topic::NcclIgnored: return "NCCL variables Hora knows and ignores";
  }
  return "";
}

const std::vector<Variable>& variables() {
  static const std::vector<Variable> all(std::begin(kVariables), std::end(kVariables));
  return all;
}

namespace {

std::string bannerFor(const Config& c) {
  std::string transports;
  for (const std::string& t : c.transports) transports += (transports.empty() ? "" : ",") + t;
  return format("Hora %s (%s, kernels: %s, cuda: %s, transports: %s)", HORA_VERSION_STRING, HORA_BUILD_TYPE,
                kernels::isaName(kernels::activeIsa()),
                c.cuda.rfind("emulate", 0) == 0 ? "emulated" : !cuda::built() ? "not built" : c.cuda == "off" ? "off" : "built",
                transports.c_str());
}

[[noreturn]] void bad(const char* name, const std::string& value, const char* expected) {
  fail(Errc::InvalidArgument, "%s='%s' is invalid: expected %s", name, value.c_str(), expected);
}

}  // namespace

std::string trimBlanks(const std::string& s) {
  size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

long long parseIntVariable(const char* name, const std::string& v, long long lo, long long hi,
                           const char* expected) {
  std::string t = trimBlanks(v);
  char* end = nullptr;
  errno = 0;
  long long x = strtoll(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0' || errno != 0 || x < lo || x > hi) bad(name, v, expected);
  return x;
}

std::vector<std::string> splitList(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = trimBlanks(s.substr(start, end - start));
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string joined(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

namespace {

long long parseBytes(const char* name, const std::string& v, long long lo, long long hi,
                     const char* expected) {
  std::string t = trimBlanks(v);
  long long mult = 1;
  if (!t.empty()) {
    char last = static_cast<char>(toupper(static_cast<unsigned char>(t.back())));
    if (last == 'K') mult = 1LL << 10;
    if (last == 'M') mult = 1LL << 20;
    if (mult != 1) t.pop_back();
  }
  char* end = nullptr;
  errno = 0;
  long long x = strtoll(t.c_str(), &end, 10);
  if (t.empty() || *end != '\0' || errno != 0 || x < 0 || x > hi / mult || x * mult < lo) bad(name, v, expected);
  return x * mult;
}

const Variable& row(const char* hora) {
  for (const Variable& v : kVariables)
    if (v.name && strcmp(v.name, hora) == 0) return v;
  fail(Errc::Internal, "%s is not in the table of variables", hora);
}

// The HORA_* variable `hora` and its NCCL_* twins of the table (config_nccl.h).
KnobSource source(const EnvLookup& env, const char* hora, Config& c) { return readKnob(env, hora, row(hora).nccl, c); }

const std::pair<const char*, uint32_t> kSubsysNames[] = {
    {"INIT", log::kInit}, {"BOOTSTRAP", log::kBootstrap}, {"NET", log::kNet},
    {"COLL", log::kColl}, {"ENV", log::kEnv},             {"ALL", log::kAll}};

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string subsysText(uint32_t mask) {
  std::vector<std::string> on;
  bool all = true;
  for (const auto& [name, bit] : kSubsysNames) {
    if (bit == log::kAll) continue;
    if (mask & bit) on.push_back(name);
    else all = false;
  }
  return all ? "ALL" : on.empty() ? "(none: warnings only)" : joined(on, ",");
}
EnvLookup processEnv() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = getenv(name);
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

Config parseConfig(const EnvLookup& env) {
  Config c;
  if (KnobSource s = source(env, "HORA_DEBUG", c); s.value) {
    std::string u = upper(trimBlanks(*s.value));
    if (u == "NONE") c.debugLevel = log::Level::None;
    else if (u == "WARN") c.debugLevel = log::Level::Warn;
    else if (u == "INFO") c.debugLevel = log::Level::Info;
    else if (u == "TRACE") c.debugLevel = log::Level::Trace;
    else bad("HORA_DEBUG", *s.value, "NONE, WARN, INFO or TRACE");
  } else {
    readNcclDebug(c, s);
  }
  if (KnobSource s = source(env, "HORA_DEBUG_SUBSYS", c); s.value) {
    const std::string* v = &*s.value;
    std::vector<std::string> items = splitList(upper(*v));
    if (items.empty()) bad("HORA_DEBUG_SUBSYS", *v, "a comma list of INIT, BOOTSTRAP, NET, COLL, ENV, ALL");
    bool anyInclude = false;
    uint32_t include = 0, exclude = 0;
    for (const std::string& it : items) {
      bool neg = it[0] == '^';
      std::string n = neg ? it.substr(1) : it;
      uint32_t bit = 0;
      for (const auto& [name, b] : kSubsysNames)
        if (n == name) bit = b;
      if (!bit) bad("HORA_DEBUG_SUBSYS", *v, "a comma list of INIT, BOOTSTRAP, NET, COLL, ENV, ALL (^X excludes)");
      if (neg) exclude |= bit;
      else { include |= bit; anyInclude = true; }
    }
    c.debugSubsys = (anyInclude ? include : log::kAll) & ~exclude;
  } else {
    readNcclDebugSubsys(c, s);
  }
  if (KnobSource s = source(env, "HORA_DEBUG_FILE", c); s.value) {
    if (trimBlanks(*s.value).empty()) bad("HORA_DEBUG_FILE", *s.value, "a file name (%h: host name, %p: pid)");
    c.debugFile = *s.value;
  } else {
    readNcclDebugFile(c, s);
  }
  if (auto v = env("HORA_TIMEOUT_MS"))
    c.timeout = std::chrono::milliseconds(parseIntVariable("HORA_TIMEOUT_MS", *v, 1, 365LL * 24 * 3600 * 1000,
                                                   "a positive number of milliseconds"));
  if (KnobSource s = source(env, "HORA_SOCKET_IFNAME", c); s.value) {
    const std::string* v = &*s.value;
    std::vector<std::string> items = splitList(*v);
    if (items.empty() || std::any_of(items.begin(), items.end(), [](const std::string& i) { return i == "^" || i == "="; }))
      bad("HORA_SOCKET_IFNAME", *v, "interface names (prefix, =exact, ^exclude)");
    c.socketIfname = trimBlanks(*v);
  } else {
    readNcclSocketIfname(c, s);
  }
  {
    // The transports of this build (transports/registry.h) that HORA_TRANSPORTS may name.
    std::vector<std::string> known;
    for (const transport::Registration& r : transport::registry())
      if (r.optional) known.push_back(r.name);
    c.transports = known;
    if (KnobSource s = source(env, "HORA_TRANSPORTS", c); s.value) {
      const std::string* v = &*s.value;
      const std::string expected =
          "a comma list of transports built in: " + transport::optionalTransportNames() + " (^X excludes X)";
      std::vector<std::string> include, exclude;
      if (splitList(*v).empty()) bad("HORA_TRANSPORTS", *v, expected.c_str());
      for (const std::string& it : splitList(*v)) {
        bool neg = it[0] == '^';
        std::string n = neg ? it.substr(1) : it;
        if (std::find(known.begin(), known.end(), n) == known.end()) bad("HORA_TRANSPORTS", *v, expected.c_str());
        (neg ? exclude : include).push_back(n);
      }
      std::vector<std::string> result;
      for (const std::string& k : known) {
        bool in = include.empty() || std::find(include.begin(), include.end(), k) != include.end();
        bool out = std::find(exclude.begin(), exclude.end(), k) != exclude.end();
        if (in && !out) result.push_back(k);
      }
      if (result.empty())
        bad("HORA_TRANSPORTS", *v, ("a list that leaves at least one transport (" + transport::optionalTransportNames() + ")").c_str());
      c.transports = result;
    } else {
      readNcclTransports(c, s, known);
    }
  }
  if (KnobSource s = source(env, "HORA_ALGO", c); s.value) {
    c.algoForced = coll::parseForced(*s.value);  // throws, naming what is available
    c.algo = trimBlanks(*s.value);
    for (char& ch : c.algo) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
  } else {
    readNcclAlgo(c, s);
  }
  if (auto v = env("HORA_TUNE_FILE")) {
    c.tuneFile = trimBlanks(*v);
    FILE* f = fopen(c.tuneFile.c_str(), "re");
    if (!f) fail(Errc::InvalidArgument, "HORA_TUNE_FILE='%s' cannot be read: %s", v->c_str(), strerror(errno));
    std::string text;
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1u << 20);) text.append(buf, n);
    fclose(f);
    c.costs = coll::parseCosts(text, "HORA_TUNE_FILE " + c.tuneFile);
  }
  if (KnobSource s = source(env, "HORA_NSOCKS_PERPEER", c); s.value) {
    c.nsocksPerPeer = static_cast<int>(parseIntVariable("HORA_NSOCKS_PERPEER", *s.value, 1, 16, "an integer from 1 to 16"));
  } else {
    readNcclNsocksPerPeer(c, s);
  }
  if (auto v = env("HORA_CHUNK_BYTES"))
    c.chunkBytes = static_cast<size_t>(parseBytes("HORA_CHUNK_BYTES", *v, 4096, 64LL << 20,
                                                  "a size from 4096 to 64M (K and M suffixes allowed)"));
  if (auto v = env("HORA_HIER_STAGE")) {
    const std::string b = trimBlanks(*v);
    if (b != "0" && b != "1") bad("HORA_HIER_STAGE", *v, "0 or 1");
    c.hierStage = b == "1";
  }
  if (auto v = env("HORA_SHM_SINGLE_COPY")) {
    const std::string b = trimBlanks(*v);
    if (b != "0" && b != "1") bad("HORA_SHM_SINGLE_COPY", *v, "0 or 1");
    c.shmSingleCopy = b == "1";
  }
  if (auto v = env("HORA_CALL_CHECK")) {
    const std::string b = trimBlanks(*v);
    if (b != "0" && b != "1") bad("HORA_CALL_CHECK", *v, "0 or 1");
    c.callCheck = b == "1";
  }
  if (auto v = env("HORA_KERNEL_ISA")) {
    std::string a = trimBlanks(*v);
    for (char& ch : a) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
    if (a != "auto" && a != "scalar" && a != "avx2" && a != "avx512")
      bad("HORA_KERNEL_ISA", *v, "auto, scalar, avx2 or avx512");
    c.kernelIsa = a;
  }
  if (KnobSource s = source(env, "HORA_IB_HCA", c); s.value) {
    c.ibHca = trimBlanks(*s.value);
  } else {
    readNcclIbHca(c, s);
  }
  if (KnobSource s = source(env, "HORA_IB_GID_INDEX", c); s.value) {
    c.ibGidIndex = static_cast<int>(parseIntVariable("HORA_IB_GID_INDEX", *s.value, 0, 255, "an integer from 0 to 255"));
  } else {
    readNcclIbGidIndex(c, s);
  }
  if (KnobSource s = source(env, "HORA_IB_QPS_PER_PEER", c); s.value) {
    c.ibQpsPerPeer = static_cast<int>(parseIntVariable("HORA_IB_QPS_PER_PEER", *s.value, 1, 16, "an integer from 1 to 16"));
  } else {
    readNcclIbQpsPerPeer(c, s);
  }
  if (auto v = env("HORA_CUDA")) {
    std::string m = trimBlanks(*v);
    for (char& ch : m) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
    if (m != "auto" && m != "off" && m != "emulate" && m != "emulate-shared")
      bad("HORA_CUDA", *v, "auto, off, emulate or emulate-shared");
    c.cuda = m;
  }
  if (auto v = env("HORA_CUDA_STREAM_WAIT")) {
    std::string m = trimBlanks(*v);
    for (char& ch : m) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
    if (m != "memop" && m != "kernel") bad("HORA_CUDA_STREAM_WAIT", *v, "memop or kernel");
    c.cudaWaitKernel = m == "kernel";
  }
  if (KnobSource s = source(env, "HORA_CUDA_IPC", c); s.value) {
    c.cudaIpc = parseIntVariable("HORA_CUDA_IPC", *s.value, 0, 1, "0 or 1") != 0;
  } else {
    readNcclCudaIpc(c, s);
  }
  if (auto v = env("HORA_CUDA_BOUNCE_CHUNK")) {
    c.cudaBounceChunk = static_cast<size_t>(parseBytes("HORA_CUDA_BOUNCE_CHUNK", *v, 0, 256LL << 20,
                                                      "0, or a size from 4096 to 256M (K and M suffixes allowed)"));
    if (c.cudaBounceChunk && c.cudaBounceChunk < 4096)
      bad("HORA_CUDA_BOUNCE_CHUNK", *v, "0, or a size from 4096 to 256M (K and M suffixes allowed)");
  }
  if (auto v = env("HORA_CUDA_KERNELS")) c.cudaKernels = parseIntVariable("HORA_CUDA_KERNELS", *v, 0, 1, "0 or 1") != 0;
  if (KnobSource s = source(env, "HORA_COMM_BLOCKING", c); s.value) {
    c.commBlocking = parseIntVariable("HORA_COMM_BLOCKING", *s.value, 0, 1, "0 or 1") != 0;
  } else {
    readNcclCommBlocking(c, s);
  }
  if (auto v = env("HORA_TRACE_CALLS"))
    c.traceCalls = static_cast<int>(parseIntVariable("HORA_TRACE_CALLS", *v, 0, 1000000, "an integer from 0 to 1000000"));
  if (auto v = env("HORA_DUMP_DIR")) {
    if (trimBlanks(*v).empty()) bad("HORA_DUMP_DIR", *v, "a directory");
    c.dumpDir = *v;
  }
  if (auto v = env("HORA_DUMP_SIGNAL"))
    c.dumpSignal = parseIntVariable("HORA_DUMP_SIGNAL", *v, 0, 1, "0 or 1") != 0;
  if (auto v = env("HORA_TOPO_FILE")) {
    if (trimBlanks(*v).empty()) bad("HORA_TOPO_FILE", *v, "the path of an hwloc XML file");
    c.topoFile = *v;
  }
  return c;
}

std::vector<NcclVariables> ncclVariables() {
  std::vector<NcclVariables> out;
  for (const Variable& v : kVariables)
    if (*v.nccl) out.push_back({v.name ? v.name : "", splitList(v.nccl), v.ncclNote});
  return out;
}

std::vector<std::string> unreadNcclVariables(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (n.compare(0, 5, "NCCL_") != 0) continue;
    bool read = false;
    for (const Variable& v : kVariables)
      if (v.name) {
        const std::vector<std::string> twins = splitList(v.nccl);
        read |= std::find(twins.begin(), twins.end(), n) != twins.end();
      }
    if (!read && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

// Variables of earlier versions, no longer read, and what they are called now: flagged by name.
struct Renamed {
  const char* old;
  const char* now;
};
constexpr Renamed kRenamed[] = {
    {"HORA_CUDA_STAGE_CHUNK", "HORA_CUDA_BOUNCE_CHUNK"},
};

std::vector<std::string> unknownVariables(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (n.compare(0, 5, "HORA_") != 0) continue;
    const char* best = nullptr;
    size_t bestD = 1000;
    bool known = false;
    for (const Variable& v : kVariables) {
      if (!v.name) continue;
      if (n == v.name) known = true;
      size_t d = editDistance(n, v.name);
      if (d < bestD) { bestD = d; best = v.name; }
    }
    if (known) continue;
    const auto renamed = std::find_if(std::begin(kRenamed), std::end(kRenamed), [&](const Renamed& r) { return n == r.old; });
    if (renamed != std::end(kRenamed)) out.push_back(n + " (renamed " + renamed->now + ")");
    else if (best && bestD <= 3) out.push_back(n + " (did you mean " + best + "?)");
    else out.push_back(n);
  }
  return out;
}

namespace {
// The logging settings of c: level, subsystems and file.
void applyLogging(const Config& c) {
  log::configure(c.debugLevel, c.debugSubsys);
  if (!c.debugFile.empty()) {
    std::string why = log::toFile(c.debugFile);
    const char* from = c.ncclSource.count("HORA_DEBUG_FILE") ? "NCCL_DEBUG_FILE" : "HORA_DEBUG_FILE";
    if (!why.empty()) HORA_WARN(log::kEnv, "%s: %s; the log stays where it was", from, why.c_str());
  }
}
}  // namespace

void reloadLogging() { applyLogging(parseConfig(processEnv())); }

const Config& config() {
  static std::once_flag once;
  static Config cfg;
  static std::string error;
  std::call_once(once, [] {
    try {
      cfg = parseConfig(processEnv());
      applyLogging(cfg);
      if (cfg.kernelIsa != "auto") {
        kernels::Isa isa = cfg.kernelIsa == "scalar" ? kernels::Isa::Scalar
                           : cfg.kernelIsa == "avx2" ? kernels::Isa::Avx2 : kernels::Isa::Avx512;
        if (!kernels::setIsa(isa))
          fail(Errc::InvalidArgument, "HORA_KERNEL_ISA='%s' is invalid: this CPU or build does not support it",
               cfg.kernelIsa.c_str());
      }
      cuda::configure(cfg.cuda == "off"              ? cuda::Mode::Off
                      : cfg.cuda == "emulate"        ? cuda::Mode::Emulate
                      : cfg.cuda == "emulate-shared" ? cuda::Mode::EmulateShared
                                                     : cuda::Mode::Auto);
      log::setBanner(bannerFor(cfg));
      if (cfg.debugVersion) log::writeBanner(true);  // NCCL_DEBUG=VERSION
      std::vector<std::string> names;
      for (char** e = environ; e && *e; ++e) {
        std::string kv = *e;
        names.push_back(kv.substr(0, kv.find('=')));
      }
      for (const std::string& u : unknownVariables(names))
        HORA_WARN(log::kEnv, "%s is not a Hora variable; it is ignored", u.c_str());
      for (const std::string& w : cfg.ncclWarnings) HORA_WARN(log::kEnv, "%s", w.c_str());
      for (const std::string& n : cfg.ncclNotes) HORA_INFO(log::kEnv, "%s", n.c_str());
      const std::vector<std::string> unread = unreadNcclVariables(names);
      if (!unread.empty())
        HORA_INFO(log::kEnv, "NCCL variables Hora does not read, ignored: %s", joined(unread).c_str());
      HORA_INFO(log::kEnv, "kernels: %s; timeout %lld ms; %d socket(s) per peer; chunk %zu bytes",
                kernels::isaName(kernels::activeIsa()), static_cast<long long>(cfg.timeout.count()),
                cfg.nsocksPerPeer, cfg.chunkBytes);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw Error(Errc::InvalidArgument, error);
  return cfg;
}

std::string versionBanner() { return bannerFor(config()); }

}  // namespace hora
