#include "comm/launch.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "base/error.h"

namespace hora {

namespace {

// One launcher's claim: this process is `rank` of `size`.
struct Claim {
  const char* name;     // "torchrun", "Open MPI (mpirun)", ...
  const char* rankVar;  // the variables it came from
  const char* sizeVar;
  int level;  // nesting: higher is further in
  int rank;
  int size;
  std::string values() const {
    return format("%s=%d, %s=%d", rankVar, rank, sizeVar, size);
  }
  std::string says() const { return format("%s says rank %d of %d (%s)", name, rank, size, values().c_str()); }
};

constexpr int kMaxRanks = 1 << 20;

struct Reader {
  const EnvLookup& env;
  std::vector<Claim> claims;

  std::optional<std::string> get(const char* n) const {
    auto v = env(n);
    if (v && trimBlanks(*v).empty()) return std::nullopt;  // set but empty: as if unset
    return v;
  }
  // A launcher that gives a rank and a size: both, or an error naming the missing one (unless
  // `optional`: the names are generic, so half of them is not a launcher's doing).
  void claim(const char* name, const char* rankVar, const char* sizeVar, int level, bool optional = false,
             const char* sizeFallback = nullptr) {
    auto r = get(rankVar);
    auto s = get(sizeVar);
    if (!s && sizeFallback && (s = get(sizeFallback))) sizeVar = sizeFallback;
    if (!r && !s) return;
    if (!r || !s) {
      if (optional) return;
      fail(Errc::InvalidArgument, "%s=%s is set but %s is not: %s gives both or neither", r ? rankVar : sizeVar,
           trimBlanks(r ? *r : *s).c_str(), r ? sizeVar : rankVar, name);
    }
    Claim c{name, rankVar, sizeVar, level, 0, 0};
    c.size = static_cast<int>(parseIntVariable(sizeVar, *s, 1, kMaxRanks, "a positive number of ranks"));
    c.rank = static_cast<int>(parseIntVariable(rankVar, *r, 0, kMaxRanks - 1, "a rank >= 0"));
    if (c.rank >= c.size)
      fail(Errc::InvalidArgument, "%s=%d is out of range for %s=%d (%s)", rankVar, c.rank, sizeVar, c.size, name);
    claims.push_back(c);
  }
};

std::string withPort(std::string host, int port) {
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  return host + ":" + std::to_string(port);
}

unsigned long long parseId(const char* name, const std::string& v) {
  return static_cast<unsigned long long>(parseIntVariable(name, v, 0, (1LL << 62), "a number"));
}

std::string readSecretFile(const std::string& path, std::vector<std::string>& warnings) {
  std::ifstream f(path);
  if (!f)
    fail(Errc::InvalidArgument, "HORA_SECRET_FILE='%s' cannot be read: %s", path.c_str(), strerror(errno));
  // At most a page: a file of 64 hex digits is all it may hold (and /dev/zero must not be
  // read for ever).
  std::string s(4097, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(f.gcount()));
  if (s.size() > 4096)
    fail(Errc::InvalidArgument, "HORA_SECRET_FILE='%s' is larger than 4096 bytes: it should hold 64 hex digits",
         path.c_str());
  while (!s.empty() && isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t a = 0;
  while (a < s.size() && isspace(static_cast<unsigned char>(s[a]))) ++a;
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
    warnings.push_back(format("HORA_SECRET_FILE '%s' is readable by other users (mode %03o): anyone who reads it "
                              "can join this job; chmod 600 it", path.c_str(), st.st_mode & 0777));
  return s.substr(a);
}

}  // namespace

std::string firstSlurmHost(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets; each bracket holds ranges, of which the
  // first range's start (with its zero padding) names the first host.
  std::string out;
  int depth = 0;
  for (size_t i = 0; i < nodelist.size(); ++i) {
    const char c = nodelist[i];
    if (c == '[') {
      ++depth;
      size_t j = i + 1;
      while (j < nodelist.size() && isdigit(static_cast<unsigned char>(nodelist[j]))) out += nodelist[j++];
      size_t close = nodelist.find(']', i);
      if (close == std::string::npos)
        fail(Errc::InvalidArgument, "the Slurm host list '%s' has an unclosed '['", nodelist.c_str());
      i = close;
      --depth;
      continue;
    }
    if (c == ',' && depth == 0) break;
    if (isspace(static_cast<unsigned char>(c))) continue;
    out += c;
  }
  if (out.empty()) fail(Errc::InvalidArgument, "the Slurm host list '%s' names no host", nodelist.c_str());
  return out;
}

int portBesideMasterPort(int masterPort) { return masterPort + 10000 <= 65535 ? masterPort + 10000 : masterPort - 10000; }

int slurmStepPort(unsigned long long jobId, unsigned long long stepId) {
  return 12000 + static_cast<int>((jobId * 97 + stepId) % 20000);
}

LaunchEnv parseLaunchEnv(const EnvLookup& env) {
  LaunchEnv l;
  Reader rd{env, {}};
  rd.claim("HORA_RANK/HORA_SIZE (hora-run)", "HORA_RANK", "HORA_SIZE", 4);
  const bool torchrun = rd.get("TORCHELASTIC_RUN_ID").has_value();
  rd.claim(torchrun ? "torchrun" : "torch's env:// variables", "RANK", "WORLD_SIZE", 3, /*optional=*/!torchrun);
  rd.claim("Open MPI (mpirun)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", 2);
  rd.claim("MPICH/PMI (mpiexec)", "PMI_RANK", "PMI_SIZE", 2);
  // srun's variables count only inside a step: a batch script has SLURM_PROCID=0 and the
  // allocation's SLURM_NTASKS, but it is one process, not rank 0 of a job.
  std::string slurmNote;
  if (rd.get("SLURM_STEP_ID")) {
    rd.claim("Slurm (srun)", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", 1, false, "SLURM_NTASKS");
  } else if (auto job = rd.get("SLURM_JOB_ID")) {
    slurmNote = format("SLURM_JOB_ID=%s without SLURM_STEP_ID: a Slurm batch script or allocation, not a step "
                       "(start the ranks with srun)", trimBlanks(*job).c_str());
  }

  const Claim* chosen = nullptr;
  for (const Claim& c : rd.claims)
    if (!chosen || c.level > chosen->level) chosen = &c;
  std::vector<std::string> ignored;
  if (chosen) {
    for (const Claim& c : rd.claims) {
      if (&c == chosen) continue;
      if (c.level == chosen->level && (c.rank != chosen->rank || c.size != chosen->size))
        fail(Errc::InvalidArgument, "launchers disagree: %s, but %s; one process cannot be both (unset the "
             "variables the other launcher left behind, or set HORA_RANK and HORA_SIZE)", chosen->says().c_str(),
             c.says().c_str());
      if (c.level < chosen->level && chosen->level != 4 && chosen->size == 1 && c.size > 1)
        fail(Errc::InvalidArgument, "launchers disagree: %s, but it runs inside %s with %d ranks (%s): every one "
             "of them would run as a separate one-rank job and reduce nothing; give the inner launcher the whole "
             "job (e.g. torchrun --nnodes), or set HORA_RANK and HORA_SIZE", chosen->says().c_str(), c.name,
             c.size, c.values().c_str());
      if (c.level < chosen->level && chosen->size < c.size)
        l.warnings.push_back(format("%s runs inside %s with %d ranks (%s): this job is one of several separate "
                                    "jobs", chosen->says().c_str(), c.name, c.size, c.values().c_str()));
      if (c.level < chosen->level) ignored.push_back(format("%s rank %d of %d", c.name, c.rank, c.size));
    }
    l.rank = chosen->rank;
    l.size = chosen->size;
    l.launcher = format("%s (%s, %s)", chosen->name, chosen->rankVar, chosen->sizeVar);
  }

  // The rendezvous.
  if (auto v = rd.get("HORA_ID")) l.idHex = trimBlanks(*v);
  std::string rootNote;
  if (!l.idHex.empty()) {
    rootNote = "rendezvous from HORA_ID";
  } else if (auto v = rd.get("HORA_ROOT")) {
    l.root = trimBlanks(*v);
    l.rootFrom = "HORA_ROOT";
  } else if (auto a = rd.get("MASTER_ADDR")) {
    auto p = rd.get("MASTER_PORT");
    if (!p) fail(Errc::InvalidArgument, "MASTER_ADDR=%s is set but MASTER_PORT is not", trimBlanks(*a).c_str());
    const int mp = static_cast<int>(parseIntVariable("MASTER_PORT", *p, 1, 65535, "a port from 1 to 65535"));
    l.root = withPort(trimBlanks(*a), portBesideMasterPort(mp));
    l.rootFrom = "MASTER_ADDR and MASTER_PORT";
    rootNote = format("MASTER_PORT %d %s 10000: %s holds MASTER_PORT itself", mp, mp + 10000 <= 65535 ? "+" : "-",
                      torchrun ? "torchrun's agent" : "torch's store");
  } else if (chosen && chosen->level == 1) {
    auto nodes = rd.get("SLURM_STEP_NODELIST");
    const char* nodesVar = "SLURM_STEP_NODELIST";
    if (!nodes) nodes = rd.get(nodesVar = "SLURM_JOB_NODELIST");
    auto job = rd.get("SLURM_JOB_ID");
    auto step = rd.get("SLURM_STEP_ID");
    if (nodes && job && step) {
      const std::string host = firstSlurmHost(trimBlanks(*nodes));
      l.root = withPort(host, slurmStepPort(parseId("SLURM_JOB_ID", *job), parseId("SLURM_STEP_ID", *step)));
      l.rootFrom = format("%s and SLURM_JOB_ID/SLURM_STEP_ID", nodesVar);
      rootNote = format("the step's first node %s, a port from job %s step %s", host.c_str(),
                        trimBlanks(*job).c_str(), trimBlanks(*step).c_str());
    }
  }
  if (l.idHex.empty() && l.root.empty()) {
    if (chosen && chosen->level == 2)
      l.rendezvousHint = "mpirun gives rank and size but no rendezvous: pass rank 0's host and a free port, and a "
                         "secret, to every rank (mpirun -x HORA_ROOT=host:port -x HORA_SECRET=$(openssl rand -hex 32)), "
                         "or create a unique id on rank 0 and broadcast it with MPI (horaGetUniqueId, horaCommInitRank)";
    else if (!slurmNote.empty())
      l.rendezvousHint = slurmNote;
    else
      l.rendezvousHint = "set HORA_ID (hora-run does), or HORA_ROOT=host:port (or MASTER_ADDR/MASTER_PORT) "
                         "with HORA_SECRET";
  }

  // The secret.
  auto sec = rd.get("HORA_SECRET");
  auto secFile = rd.get("HORA_SECRET_FILE");
  if (sec && secFile) fail(Errc::InvalidArgument, "HORA_SECRET and HORA_SECRET_FILE are both set: set one");
  if (sec) {
    l.secretHex = trimBlanks(*sec);
    l.secretFrom = "HORA_SECRET";
  } else if (secFile) {
    const std::string path = trimBlanks(*secFile);
    l.secretHex = readSecretFile(path, l.warnings);
    l.secretFrom = "HORA_SECRET_FILE (" + path + ")";
  }

  // What INFO says.
  std::vector<std::string> parts;
  if (chosen) parts.push_back(format("rank %d of %d from %s", l.rank, l.size, l.launcher.c_str()));
  else parts.push_back(slurmNote.empty() ? "no launcher's rank and size" : slurmNote);
  if (!l.root.empty())
    parts.push_back(format("rendezvous at %s from %s%s%s%s", l.root.c_str(), l.rootFrom.c_str(),
                           rootNote.empty() ? "" : " (", rootNote.c_str(), rootNote.empty() ? "" : ")"));
  else if (!rootNote.empty())
    parts.push_back(rootNote);
  if (!ignored.empty()) {
    std::string s = "outer launchers, ignored: ";
    for (size_t i = 0; i < ignored.size(); ++i) s += (i ? ", " : "") + ignored[i];
    parts.push_back(s);
  }
  for (const std::string& p : parts) l.source += (l.source.empty() ? "" : "; ") + p;
  return l;
}

Secret parseSecret(const LaunchEnv& l) {
  const char* from = l.secretFrom.empty() ? "HORA_SECRET" : l.secretFrom.c_str();
  if (l.secretHex.empty())
    fail(Errc::InvalidArgument, "the rendezvous at %s (from %s) needs a secret shared by every rank: set HORA_SECRET "
         "to %zu hex digits (e.g. from `openssl rand -hex 32`), or HORA_SECRET_FILE to a file holding them",
         l.root.c_str(), l.rootFrom.c_str(), 2 * kSecretBytes);
  if (l.secretHex.size() != 2 * kSecretBytes)
    fail(Errc::InvalidArgument, "%s has %zu hex digits; it needs %zu (e.g. from `openssl rand -hex 32`)", from,
         l.secretHex.size(), 2 * kSecretBytes);
  Secret s{};
  for (size_t i = 0; i < 2 * kSecretBytes; ++i) {
    const char c = l.secretHex[i];
    if (!isxdigit(static_cast<unsigned char>(c)))
      fail(Errc::InvalidArgument, "%s holds '%c' at position %zu, not a hex digit", from, c, i + 1);
    const int v = isdigit(static_cast<unsigned char>(c)) ? c - '0' : (tolower(c) - 'a' + 10);
    s.bytes[i / 2] = static_cast<uint8_t>(i % 2 ? (s.bytes[i / 2] | v) : (v << 4));
  }
  return s;
}

}  // namespace hora
