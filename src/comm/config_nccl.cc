// The NCCL_* half of parseConfig (config_nccl.h): each readNccl* function translates the NCCL_*
// twins of one knob, set where its HORA_* variable is not, the way the table of variables
// (kVariables, config_table.cc) describes.
#include "comm/config_nccl.h"

#include <strings.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iterator>

#include "base/error.h"

namespace hora {

namespace {

bool sameLetters(const std::string& a, const char* b) { return strcasecmp(a.c_str(), b) == 0; }

// Notes that `hora` takes `value` from the NCCL variables `used`.
void readAs(Config& c, const char* hora, const std::vector<NcclSetting>& used, const std::string& value,
            const std::string& how = "") {
  std::vector<std::string> texts, names;
  for (const NcclSetting& u : used) {
    texts.push_back(u.first + "='" + u.second + "'");
    names.push_back(u.first);
  }
  c.ncclNotes.push_back(format("%s read as %s=%s%s", joined(texts).c_str(), hora, value.c_str(),
                               how.empty() ? "" : (" (" + how + ")").c_str()));
  c.ncclSource[hora] = joined(names, ",");
}

void ignoredNccl(Config& c, const std::string& name, const std::string& value, const std::string& why) {
  c.ncclWarnings.push_back(format("%s='%s' is ignored: %s", name.c_str(), value.c_str(), why.c_str()));
}

// An integer as NCCL reads one (strtoll, base 0), but the whole value.
std::optional<long long> ncclInt(const std::string& v) {
  const std::string t = trimBlanks(v);
  char* end = nullptr;
  errno = 0;
  const long long x = strtoll(t.c_str(), &end, 0);
  if (t.empty() || *end != '\0' || errno != 0) return std::nullopt;
  return x;
}

const char* levelText(log::Level l) {
  return l == log::Level::None ? "NONE" : l == log::Level::Warn ? "WARN" : l == log::Level::Info ? "INFO" : "TRACE";
}

// NCCL_DEBUG_SUBSYS: a comma list of NCCL's subsystems, all of it excluded by a leading ^; unknown
// names are skipped (as NCCL does, but said). Hora's subsystems are fewer and broader: P2P and
// SHM log under NET, GRAPH and TUNING (the planner) under COLL; an exclusion of one of those
// leaves the broader one on.
uint32_t ncclSubsys(const std::string& value, std::string& how, std::vector<std::string>& unknown, bool& any) {
  static const struct {
    const char* name;
    uint32_t bit;  // 0: no Hora subsystem
    bool same;     // the same as Hora's, not a part of a broader one
  } names[] = {{"INIT", log::kInit, true},    {"BOOTSTRAP", log::kBootstrap, true}, {"NET", log::kNet, true},
               {"COLL", log::kColl, true},    {"ENV", log::kEnv, true},             {"ALL", log::kAll, true},
               {"P2P", log::kNet, false},     {"SHM", log::kNet, false},            {"GRAPH", log::kColl, false},
               {"TUNING", log::kColl, false}, {"ALLOC", 0, false},                  {"CALL", 0, false},
               {"PROXY", 0, false},           {"NVLS", 0, false},                   {"REG", 0, false},
               {"PROFILE", 0, false},         {"RAS", 0, false}};
  std::string v = upper(trimBlanks(value));
  const bool invert = !v.empty() && v[0] == '^';
  if (invert) v.erase(0, 1);
  uint32_t mask = invert ? uint32_t(log::kAll) : 0u;
  std::vector<std::string> notes, none;
  any = false;
  for (const std::string& item : splitList(v)) {
    const auto* n = std::find_if(std::begin(names), std::end(names), [&](const auto& x) { return item == x.name; });
    if (n == std::end(names)) {
      unknown.push_back(item);
      continue;
    }
    any = true;
    const char* broader = n->bit == log::kNet ? "NET" : "COLL";  // of a name that is not the same as Hora's
    if (n->bit == 0) {
      none.push_back(item);
    } else if (n->same) {
      mask = invert ? mask & ~n->bit : mask | n->bit;
    } else if (invert) {
      notes.push_back(format("^%s left out: Hora logs it under %s", n->name, broader));
    } else {
      notes.push_back(format("%s as %s", n->name, broader));
      mask |= n->bit;
    }
  }
  if (!none.empty()) notes.push_back(joined(none, ", ") + (none.size() == 1 ? ": no such subsystem in Hora, ignored" : ": no such subsystems in Hora, ignored"));
  how = joined(notes, "; ");
  return mask;
}

// NCCL_SOCKET_IFNAME as HORA_SOCKET_IFNAME: NCCL's leading ^ (exclude) or = (exact names) applies
// to every name of the list, Hora's to one name each; NCCL drops a :port. Null where Hora cannot
// say it, with why.
std::optional<std::string> ncclIfname(const std::string& value, std::string& why, std::string& how) {
  std::string v = trimBlanks(value);
  const bool exclude = !v.empty() && v[0] == '^';
  if (exclude) v.erase(0, 1);
  const bool exact = !v.empty() && v[0] == '=';
  if (exact) v.erase(0, 1);
  if (exclude && exact) {
    why = "Hora excludes interfaces by prefix only (^=, excluding exact names, has no Hora form)";
    return std::nullopt;
  }
  std::vector<std::string> out, literal;
  for (const std::string& item : splitList(v)) {
    const std::string name = trimBlanks(item.substr(0, item.find(':')));
    if (name.empty()) continue;
    if (name[0] == '^' || name[0] == '=') literal.push_back(name);
    else out.push_back((exclude ? "^" : exact ? "=" : "") + name);
  }
  if (!literal.empty())
    how = "NCCL takes " + joined(literal) + " for names, as ^ and = apply only at the start of its list; left out";
  if (out.empty()) {
    why = "it names no interface";
    return std::nullopt;
  }
  return joined(out, ",");
}

// NCCL_IB_HCA, the same syntax as HORA_IB_HCA, checked here as the ib transport will (it fails on
// a bad HORA_IB_HCA) and with the empty names NCCL skips left out.
std::optional<std::string> ncclHca(const std::string& value, std::string& why) {
  std::string v = trimBlanks(value), prefix;
  if (!v.empty() && v[0] == '^') prefix += '^', v.erase(0, 1);
  if (!v.empty() && v[0] == '=') prefix += '=', v.erase(0, 1);
  std::vector<std::string> items;
  for (const std::string& item : splitList(v)) {
    const size_t colon = item.find(':');
    const std::string device = trimBlanks(item.substr(0, colon));
    if (device.empty()) {
      why = "'" + item + "' names no device";
      return std::nullopt;
    }
    if (colon == std::string::npos) {
      items.push_back(device);
      continue;
    }
    const std::string port = trimBlanks(item.substr(colon + 1));
    char* end = nullptr;
    const long p = strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 255) {
      why = "port '" + port + "' of " + device + " is not a number from 1 to 255";
      return std::nullopt;
    }
    items.push_back(device + ":" + std::to_string(p));
  }
  if (items.empty()) {
    why = "it names no device";
    return std::nullopt;
  }
  return prefix + joined(items, ",");
}

// NCCL_ALGO as HORA_ALGO. NCCL's value enables algorithms for its tuner to choose from: a comma
// list (a leading ^: all but those) for every collective, then `collective:list` entries
// separated by ';' (2.24 and later), the last that names a collective winning. Hora can only
// force one algorithm per collective: where the list named leaves exactly one of Ring and Tree
// that Hora's algorithm of that name implements, that one is forced (an exclusion, only where
// Hora has both for the collective); elsewhere Hora's planner chooses. Null, with why, where
// NCCL would reject the value; `lacking`: named algorithms Hora does not have.
std::optional<std::string> ncclAlgo(const std::string& value, std::string& why, std::vector<std::string>& lacking) {
  static const std::pair<const char*, coll::Kind> funcs[] = {
      {"Broadcast", coll::Kind::Broadcast}, {"Reduce", coll::Kind::Reduce},
      {"AllGather", coll::Kind::AllGather}, {"ReduceScatter", coll::Kind::ReduceScatter},
      {"AllReduce", coll::Kind::AllReduce}};
  static const char* const algos[] = {"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT",
                                      "CollNet"};  // CollNet: before 2.14
  struct State {
    bool set = false, exclude = false, ring = false, tree = false;
  };
  std::array<State, std::size(funcs)> state;
  bool first = true;
  size_t start = 0;
  const std::string v = trimBlanks(value);
  while (start <= v.size()) {
    size_t end = v.find(';', start);
    if (end == std::string::npos) end = v.size();
    const std::string entry = trimBlanks(v.substr(start, end - start));
    start = end + 1;
    if (entry.empty()) continue;
    const size_t colon = entry.find(':');
    const std::string prefix = colon == std::string::npos ? "" : trimBlanks(entry.substr(0, colon));
    std::string list = trimBlanks(colon == std::string::npos ? entry : entry.substr(colon + 1));
    if (prefix.empty() && !first) {
      why = "every entry but the first needs a collective: prefix";
      return std::nullopt;
    }
    first = false;
    State s;
    s.set = true;
    s.exclude = !list.empty() && list[0] == '^';
    if (s.exclude) list.erase(0, 1);
    const std::vector<std::string> items = splitList(list);
    if (items.empty() && !s.exclude) {
      why = "'" + entry + "' names no algorithm";
      return std::nullopt;
    }
    for (const std::string& item : items) {
      const char* const* a = std::find_if(std::begin(algos), std::end(algos), [&](const char* x) { return sameLetters(item, x); });
      if (a == std::end(algos)) {
        why = "'" + item + "' is not an algorithm of NCCL's (Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT)";
        return std::nullopt;
      }
      if (a == std::begin(algos)) s.tree = true;
      else if (a == std::begin(algos) + 1) s.ring = true;
      else if (!s.exclude && std::find(lacking.begin(), lacking.end(), *a) == lacking.end()) lacking.push_back(*a);
    }
    bool any = false;
    for (size_t i = 0; i < std::size(funcs); ++i)
      if (prefix.empty() || sameLetters(prefix, funcs[i].first)) state[i] = s, any = true;
    if (!any) {
      why = "'" + prefix + "' is not a collective NCCL_ALGO takes (Broadcast, Reduce, AllGather, ReduceScatter, AllReduce)";
      return std::nullopt;
    }
  }
  const coll::Algorithm* ring = coll::findAlgorithm("ring");
  const coll::Algorithm* tree = coll::findAlgorithm("tree");
  std::vector<std::string> forced;
  for (size_t i = 0; i < std::size(funcs); ++i) {
    const State& s = state[i];
    if (!s.set) continue;
    const bool ringHas = ring && ring->implements(funcs[i].second), treeHas = tree && tree->implements(funcs[i].second);
    const char* pick = nullptr;
    if (!s.exclude) {
      const bool r = s.ring && ringHas, t = s.tree && treeHas;
      if (r != t) pick = r ? "ring" : "tree";
    } else if (ringHas && treeHas && s.ring != s.tree) {
      pick = s.ring ? "tree" : "ring";
    }
    std::string name = funcs[i].first;
    for (char& ch : name) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
    if (pick) forced.push_back(name + ":" + pick);
  }
  return forced.empty() ? std::string("auto") : joined(forced, ",");
}

}  // namespace

bool KnobSource::fromNccl() const { return !value && !nccl.empty(); }

const std::string* KnobSource::ncclValue(const char* name) const {
  for (const NcclSetting& s : nccl)
    if (s.first == name) return &s.second;
  return nullptr;
}

KnobSource readKnob(const EnvLookup& env, const char* hora, const char* twins, Config& c) {
  KnobSource s;
  s.value = env(hora);
  for (const std::string& n : splitList(twins)) {
    std::optional<std::string> v = env(n.c_str());
    if (v && !trimBlanks(*v).empty()) s.nccl.emplace_back(n, *v);
  }
  if (s.value)
    for (const NcclSetting& n : s.nccl)
      c.ncclNotes.push_back(format("%s='%s' is overridden by %s='%s'", n.first.c_str(), n.second.c_str(), hora,
                                   s.value->c_str()));
  return s;
}

void readNcclDebug(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_DEBUG")) {
    // NCCL's levels: VERSION (the banner only), WARN, INFO, ABORT, TRACE; NONE is Hora's.
    static const std::pair<const char*, log::Level> levels[] = {
        {"NONE", log::Level::None}, {"VERSION", log::Level::Warn}, {"WARN", log::Level::Warn},
        {"INFO", log::Level::Info}, {"ABORT", log::Level::Warn},   {"TRACE", log::Level::Trace}};
    const std::string u = upper(trimBlanks(*v));
    const auto* l = std::find_if(std::begin(levels), std::end(levels), [&](const auto& x) { return u == x.first; });
    if (l == std::end(levels)) {
      ignoredNccl(c, "NCCL_DEBUG", *v, "expected VERSION, WARN, INFO, ABORT or TRACE");
    } else {
      c.debugLevel = l->second;
      c.debugVersion = u == "VERSION";
      readAs(c, "HORA_DEBUG", s.nccl, levelText(c.debugLevel),
             u == "VERSION" ? "and the version banner" : u == "ABORT" ? "Hora has no ABORT level" : "");
    }
  }
}

void readNcclDebugSubsys(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_DEBUG_SUBSYS")) {
    std::string how;
    std::vector<std::string> unknown;
    bool any = false;
    const uint32_t mask = ncclSubsys(*v, how, unknown, any);
    if (!any) {
      ignoredNccl(c, "NCCL_DEBUG_SUBSYS", *v, "it names none of NCCL's subsystems");
    } else {
      for (const std::string& u : unknown)
        c.ncclWarnings.push_back(format("NCCL_DEBUG_SUBSYS='%s': %s is not one of NCCL's subsystems; it is ignored",
                                        v->c_str(), u.c_str()));
      c.debugSubsys = mask;
      readAs(c, "HORA_DEBUG_SUBSYS", s.nccl, subsysText(mask), how);
    }
  }
}

void readNcclDebugFile(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_DEBUG_FILE")) {
    c.debugFile = *v;  // the same patterns; NCCL truncates the file, Hora appends to it
    readAs(c, "HORA_DEBUG_FILE", s.nccl, *v);
  }
}

void readNcclSocketIfname(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_SOCKET_IFNAME")) {
    std::string why, how;
    if (std::optional<std::string> h = ncclIfname(*v, why, how)) {
      c.socketIfname = *h;
      readAs(c, "HORA_SOCKET_IFNAME", s.nccl, *h, how);
    } else {
      ignoredNccl(c, "NCCL_SOCKET_IFNAME", *v, why);
    }
  }
}

void readNcclTransports(Config& c, const KnobSource& s, const std::vector<std::string>& known) {
  if (!s.fromNccl()) return;
  // NCCL_IB_DISABLE (not 0: no ib), NCCL_SHM_DISABLE (1: no shm), NCCL_NET (IB or Socket: the
  // one network transport, case as NCCL ignores it).
  std::vector<std::string> left = known;
  std::vector<NcclSetting> used;
  auto has = [&](const char* t) { return std::find(left.begin(), left.end(), t) != left.end(); };
  auto drop = [&](const char* t) { left.erase(std::remove(left.begin(), left.end(), t), left.end()); };
  if (const std::string* v = s.ncclValue("NCCL_IB_DISABLE")) {
    const std::optional<long long> x = ncclInt(*v);
    if (!x) {
      ignoredNccl(c, "NCCL_IB_DISABLE", *v, "expected 0 or 1");
    } else {
      used.emplace_back("NCCL_IB_DISABLE", *v);
      if (*x != 0) drop("ib");
    }
  }
  if (const std::string* v = s.ncclValue("NCCL_SHM_DISABLE")) {
    const std::optional<long long> x = ncclInt(*v);
    if (!x || (*x != 0 && *x != 1)) {
      ignoredNccl(c, "NCCL_SHM_DISABLE", *v, "expected 0 or 1");
    } else {
      used.emplace_back("NCCL_SHM_DISABLE", *v);
      if (*x == 1) drop("shm");
    }
  }
  if (const std::string* v = s.ncclValue("NCCL_NET")) {
    const std::string n = trimBlanks(*v);
    if (sameLetters(n, "Socket")) {
      drop("ib");
      used.emplace_back("NCCL_NET", *v);
    } else if (!sameLetters(n, "IB")) {
      ignoredNccl(c, "NCCL_NET", *v, "Hora's networks are IB (its ib transport) and Socket (tcp); it has no plugins");
    } else if (!has("ib")) {
      ignoredNccl(c, "NCCL_NET", *v,
                  std::find(known.begin(), known.end(), "ib") == known.end()
                      ? "this build has no ib transport (libibverbs was not found)"
                      : "NCCL_IB_DISABLE leaves ib out");
    } else {
      drop("tcp");
      used.emplace_back("NCCL_NET", *v);
    }
  }
  if (left.empty()) {
    for (const NcclSetting& u : used) ignoredNccl(c, u.first, u.second, "it would leave no transport");
  } else if (!used.empty()) {
    c.transports = left;
    readAs(c, "HORA_TRANSPORTS", used, joined(left, ","));
  }
}

void readNcclAlgo(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_ALGO")) {
    std::string why;
    std::vector<std::string> lacking;
    if (std::optional<std::string> h = ncclAlgo(*v, why, lacking)) {
      for (const std::string& a : lacking)
        c.ncclWarnings.push_back(
            format("NCCL_ALGO='%s': %s is not an algorithm Hora has; it is ignored", v->c_str(), a.c_str()));
      try {
        c.algoForced = coll::parseForced(*h);
        c.algo = *h;
        readAs(c, "HORA_ALGO", s.nccl, *h,
               *h == "auto" ? "it forces no algorithm of Hora's" : "Hora's planner chooses for the other collectives");
      } catch (const Error& e) {
        ignoredNccl(c, "NCCL_ALGO", *v, e.what());
      }
    } else {
      ignoredNccl(c, "NCCL_ALGO", *v, why);
    }
  }
}

void readNcclNsocksPerPeer(Config& c, const KnobSource& s) {
  if (!s.fromNccl()) return;
  // NCCL's sockets per connection: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD (at most 64).
  long long product = 1;
  std::vector<NcclSetting> used;
  for (const NcclSetting& n : s.nccl) {
    const std::optional<long long> x = ncclInt(n.second);
    if (!x || *x < 0 || *x > 64) {
      ignoredNccl(c, n.first, n.second, "expected a number from 0 to 64");
      continue;
    }
    product *= *x;
    used.push_back(n);
  }
  if (!used.empty()) {
    c.nsocksPerPeer = static_cast<int>(std::clamp(product, 1LL, 16LL));
    readAs(c, "HORA_NSOCKS_PERPEER", used, std::to_string(c.nsocksPerPeer),
           c.nsocksPerPeer != product ? format("%lld sockets, clamped to Hora's 1..16", product)
           : used.size() > 1          ? "their product"
                                      : "");
  }
}

void readNcclIbHca(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_IB_HCA")) {
    std::string why;
    if (std::optional<std::string> h = ncclHca(*v, why)) {
      c.ibHca = *h;
      readAs(c, "HORA_IB_HCA", s.nccl, *h);
    } else {
      ignoredNccl(c, "NCCL_IB_HCA", *v, why);
    }
  }
}

void readNcclIbGidIndex(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_IB_GID_INDEX")) {
    const std::optional<long long> x = ncclInt(*v);
    if (!x || *x < -1 || *x > 255) {
      ignoredNccl(c, "NCCL_IB_GID_INDEX", *v, "expected -1 (chosen per port) or an index from 0 to 255");
    } else {
      c.ibGidIndex = static_cast<int>(*x);
      readAs(c, "HORA_IB_GID_INDEX", s.nccl, *x < 0 ? "(unset)" : std::to_string(*x), *x < 0 ? "chosen per port" : "");
    }
  }
}

void readNcclIbQpsPerPeer(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_IB_QPS_PER_CONNECTION")) {
    const std::optional<long long> x = ncclInt(*v);
    if (!x || *x < 1) {
      ignoredNccl(c, "NCCL_IB_QPS_PER_CONNECTION", *v, "expected a positive number of queue pairs");
    } else {
      c.ibQpsPerPeer = static_cast<int>(std::min(*x, 16LL));
      readAs(c, "HORA_IB_QPS_PER_PEER", s.nccl, std::to_string(c.ibQpsPerPeer), *x > 16 ? "clamped to Hora's 1..16" : "");
    }
  }
}

void readNcclCudaIpc(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_P2P_DISABLE")) {
    const std::optional<long long> x = ncclInt(*v);
    if (!x || (*x != 0 && *x != 1)) {
      ignoredNccl(c, "NCCL_P2P_DISABLE", *v, "expected 0 or 1");
    } else {
      c.cudaIpc = *x == 0;
      readAs(c, "HORA_CUDA_IPC", s.nccl, c.cudaIpc ? "1" : "0");
    }
  }
}

void readNcclCommBlocking(Config& c, const KnobSource& s) {
  if (const std::string* v = s.ncclValue("NCCL_COMM_BLOCKING")) {
    const std::optional<long long> x = ncclInt(*v);
    if (!x || (*x != 0 && *x != 1)) {
      ignoredNccl(c, "NCCL_COMM_BLOCKING", *v, "expected 0 or 1");
    } else {
      c.commBlocking = *x == 1;
      readAs(c, "HORA_COMM_BLOCKING", s.nccl, c.commBlocking ? "1" : "0");
    }
  }
}

}  // namespace hora
