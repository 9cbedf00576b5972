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
  for (const Variable& v : variables())
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
  for (const Variable& v : variables())
    if (*v.nccl) out.push_back({v.name ? v.name : "", splitList(v.nccl), v.ncclNote});
  return out;
}

std::vector<std::string> unreadNcclVariables(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (n.compare(0, 5, "NCCL_") != 0) continue;
    bool read = false;
    for (const Variable& v : variables())
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
    for (const Variable& v : variables()) {
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
