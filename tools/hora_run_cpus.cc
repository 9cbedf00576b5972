// hora-run's placement: the CPUs each rank gets, claimed from the other Hora jobs of this host
// so that two jobs started side by side do not pin their ranks to the same CPUs.
//
// The claim file (HORA_RUN_CPU_CLAIMS, by default /dev/shm/hora-run.cpus) is a 16-byte header
// and then one 16-byte record per CPU, CPU c's at offset 16 * (c + 1). A job holds CPU c while
// it holds an open-file-description write lock (F_OFD_SETLK) on c's record; the record's text is
// the pid of the hora-run that wrote it, for messages only (a record nobody locks means
// nothing). Claims are made under a lock on the header, so that two jobs starting at once claim
// one after the other instead of splitting the CPUs between them. The locks belong to hora-run's
// open file (O_CLOEXEC: the ranks do not share it) and the kernel drops them when hora-run exits,
// even by SIGKILL, so no claim outlives its job.
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/error.h"
#include "hora_run.h"
#include "topo/topology.h"

namespace hora::run {
namespace {

constexpr off_t kRecord = 16;
constexpr char kHeader[] = "hora-run claims\n";  // kRecord bytes
static_assert(sizeof(kHeader) - 1 == kRecord);
constexpr char kDefaultPath[] = "/dev/shm/hora-run.cpus";
constexpr char kFallbackPath[] = "/tmp/hora-run.cpus";  // where there is no /dev/shm
// How long to wait for another job that is claiming CPUs (a few system calls) before going on
// without the header's lock; the records' locks alone still keep the jobs apart.
constexpr std::chrono::seconds kGateWait{5};

off_t recordOf(int cpu) { return kRecord * (static_cast<off_t>(cpu) + 1); }

// The CPUs hora-run may run on (its affinity mask: taskset, a cgroup cpuset), in order.
std::vector<int> allowedCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// The allowed CPUs by core and NUMA node, from hwloc; if hwloc cannot read this machine, each
// CPU as a core of its own in one node.
topo::CpuLayout layoutOf(const std::vector<int>& cpus) {
  try {
    return topo::cpuLayout(cpus);
  } catch (const Error& e) {
    printError(std::string("binding without the topology: ") + e.what());
    topo::CpuLayout flat;
    for (int cpu : cpus) flat.cores.push_back({cpu});
    if (!cpus.empty()) flat.numa.push_back(cpus);
    return flat;
  }
}

// "0-1,4", as Cpus_allowed_list writes it.
std::string cpuList(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::string text;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(cpus[i]);
    if (j > i) text += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return text;
}

std::string count(size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

// hora-run's own INFO lines follow the library's HORA_DEBUG.
bool infoEnabled() {
  const char* level = std::getenv("HORA_DEBUG");
  if (level == nullptr) return false;
  std::string upper;
  for (const char* c = level; *c != '\0'; ++c) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(*c)));
  return upper == "INFO" || upper == "TRACE";
}

std::string claimPath() {
  const char* path = std::getenv("HORA_RUN_CPU_CLAIMS");
  if (path != nullptr && *path != '\0') return path;
  struct stat st {};
  return stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? kDefaultPath : kFallbackPath;
}

bool setLock(int fd, short type, off_t start, off_t length) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = start;
  lock.l_len = length;
  return fcntl(fd, F_OFD_SETLK, &lock) == 0;
}

bool heldByAnother(int err) { return err == EAGAIN || err == EACCES; }

// Creates the claim file readable and writable by every user whatever the umask, since the
// jobs of different users must see each other's claims: made under a temporary name and linked
// into place, so that no one ever opens it with fewer permissions. Returns why not, or "".
std::string createClaimFile(const std::string& path) {
  std::string temporary = path + ".XXXXXX";
  Fd fd(mkostemp(temporary.data(), O_CLOEXEC));
  if (!fd.valid()) return temporary + ": " + std::strerror(errno);
  std::string why;
  if (fchmod(fd.get(), 0666) != 0 || !writeAll(fd.get(), kHeader, kRecord))
    why = temporary + ": " + std::strerror(errno);
  else if (link(temporary.c_str(), path.c_str()) != 0 && errno != EEXIST)  // EEXIST: another job's
    why = path + ": " + std::strerror(errno);
  unlink(temporary.c_str());
  return why;
}

// The claim file open for reading and writing; invalid, with *why set, if it cannot be.
Fd openClaimFile(const std::string& path, std::string* why) {
  for (int attempt = 0;; ++attempt) {
    Fd fd(open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    if (fd.valid()) {
      struct stat st {};
      if (fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode)) return fd;
      *why = path + ": not a regular file";
      return Fd();
    }
    if (errno != ENOENT || attempt > 0) {
      *why = path + ": " + std::strerror(errno);
      return Fd();
    }
    *why = createClaimFile(path);
    if (!why->empty()) return Fd();
  }
}

// Holds the header's lock while this job claims; see kGateWait.
class Gate {
 public:
  explicit Gate(int fd) : fd_(fd) {
    auto giveUp = std::chrono::steady_clock::now() + kGateWait;
    while (!(held_ = setLock(fd_, F_WRLCK, 0, kRecord)) && heldByAnother(errno) &&
           std::chrono::steady_clock::now() < giveUp)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Gate() {
    if (held_) setLock(fd_, F_UNLCK, 0, kRecord);
  }
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

 private:
  int fd_;
  bool held_ = false;
};

// The pid in cpu's record; 0 if there is none.
long holderOf(int fd, int cpu) {
  char text[kRecord + 1] = {};
  ssize_t n = pread(fd, text, kRecord, recordOf(cpu));
  return n > 0 ? std::strtol(text, nullptr, 10) : 0;
}

// Writes pid (0: none) into cpu's record, space-padded, ending in a newline.
void writeHolder(int fd, int cpu, long pid) {
  char text[kRecord + 1];
  std::memset(text, ' ', kRecord);
  if (pid > 0) {
    int n = std::snprintf(text, sizeof text, "%ld", pid);
    if (n > 0 && n < kRecord) text[n] = ' ';
  }
  text[kRecord - 1] = '\n';
  ssize_t ignored = pwrite(fd, text, kRecord, recordOf(cpu));  // only for messages
  (void)ignored;
}

struct Taken {
  int cpu;
  long pid;  // 0: unknown
};

// "CPUs 0-1 are taken by another Hora job (pid 1234)".
std::string takenText(const std::vector<Taken>& taken) {
  std::vector<int> cpus;
  std::set<long> pids;
  for (const Taken& t : taken) {
    cpus.push_back(t.cpu);
    if (t.pid > 0) pids.insert(t.pid);
  }
  std::string text = (cpus.size() == 1 ? "CPU " : "CPUs ") + cpuList(cpus) +
                     (cpus.size() == 1 ? " is" : " are") +
                     (pids.size() > 1 ? " taken by other Hora jobs" : " taken by another Hora job");
  if (pids.empty()) return text;
  text += pids.size() == 1 ? " (pid " : " (pids ";
  bool first = true;
  for (long pid : pids) {
    text += (first ? "" : ", ") + std::to_string(pid);
    first = false;
  }
  return text + ")";
}

std::string placementText(const std::vector<std::vector<int>>& cpus) {
  std::string text;
  for (size_t r = 0; r < cpus.size(); ++r)
    text += std::string(r > 0 ? ", " : "") + "rank " + std::to_string(r) +
            (cpus[r].size() == 1 ? " on CPU " : " on CPUs ") + cpuList(cpus[r]);
  return text;
}

}  // namespace

// Each rank on a CPU of its own when every rank can have one (ranks that wait by spinning or
// yielding keep their caches and never share a core), on a NUMA node's CPUs with --bind numa;
// unbound when ranks outnumber the CPUs, unless --bind asks otherwise. The CPUs are those of
// hora-run's mask that no other job holds; when other jobs hold so many that the ranks would
// share CPUs, they run unbound, the kernel spreading them over the whole mask (two ranks pinned
// to one CPU wait on each other for every time slice), except with an explicit --bind core,
// which shares the CPUs left as it would share too few CPUs of a machine.
Placement placeRanks(int nranks, BindMode bind) {
  Placement placement;
  placement.cpus.resize(static_cast<size_t>(nranks));
  std::vector<int> allowed = allowedCpus();
  size_t n = static_cast<size_t>(nranks);
  bool pin = bind == BindMode::Core || bind == BindMode::Numa ||
             (bind == BindMode::Auto && n <= allowed.size());
  std::string unbound = "running " + count(n, "rank") + " unbound";
  if (!pin || allowed.empty()) {
    if (infoEnabled())
      printError(unbound + (bind == BindMode::None ? " (binding is off)" : " (more ranks than CPUs)"));
    return placement;
  }
  std::string path = claimPath(), why;
  Fd fd = openClaimFile(path, &why);
  if (!fd.valid()) {
    printError("cannot claim CPUs: " + why + "; " + unbound);
    return placement;
  }
  Gate gate(fd.get());
  // Take every CPU of the mask that no one holds, and see who holds the others.
  std::vector<int> free;
  std::vector<Taken> taken;
  for (int cpu : allowed) {
    if (setLock(fd.get(), F_WRLCK, recordOf(cpu), kRecord)) {
      free.push_back(cpu);
    } else if (heldByAnother(errno)) {
      taken.push_back({cpu, holderOf(fd.get(), cpu)});
    } else {
      printError("cannot claim CPUs in " + path + ": " + std::strerror(errno) + "; " + unbound);
      return placement;
    }
  }
  std::string others = taken.empty() ? "" : takenText(taken);
  if (free.empty() || (bind == BindMode::Auto && free.size() < n)) {
    std::string left = free.empty() ? "" : ", leaving " + count(free.size(), "CPU") + " (" + cpuList(free) +
                                               ") for " + count(n, "rank");
    printError(others + left + "; " + unbound);
    return placement;  // closing the file drops the locks
  }
  std::set<int> takenCpus;
  for (const Taken& t : taken) takenCpus.insert(t.cpu);
  topo::CpuLayout layout = topo::withoutCpus(layoutOf(allowed), takenCpus);
  topo::Bind how = bind == BindMode::Numa ? topo::Bind::Numa : topo::Bind::Core;
  std::set<int> used;
  for (size_t r = 0; r < n; ++r) {
    placement.cpus[r] = topo::cpusetFor(layout, how, static_cast<int>(r));
    used.insert(placement.cpus[r].begin(), placement.cpus[r].end());
  }
  // Keep the CPUs the ranks use; give back the others.
  long pid = static_cast<long>(getpid());
  for (int cpu : free) {
    bool keep = used.count(cpu) != 0;
    writeHolder(fd.get(), cpu, keep ? pid : 0);
    if (!keep) setLock(fd.get(), F_UNLCK, recordOf(cpu), kRecord);
  }
  if (!taken.empty() && how == topo::Bind::Core && free.size() < n)
    printError(others + "; binding " + count(n, "rank") + " to the " + count(free.size(), "CPU") + " left (" +
               cpuList(free) + ")");
  else if (infoEnabled())
    printError(placementText(placement.cpus) + " (claimed in " + path + (others.empty() ? "" : "; " + others) +
               ")");
  placement.claim = std::move(fd);
  return placement;
}

}  // namespace hora::run
