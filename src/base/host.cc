#include "base/host.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sodium.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hora {

namespace {

std::string readLine(const char* path) {
  // open/read rather than an ifstream: this runs in forked children and under sanitizers,
  // and needs nothing of iostreams.
  char buf[256];
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::string();
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  std::string s(buf, n > 0 ? static_cast<size_t>(n) : 0);
  size_t nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

std::string readLink(const char* path) {
  char buf[256];
  ssize_t n = readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

std::string digestHex(const std::string& id) {
  uint8_t digest[16];
  crypto_generichash(digest, sizeof digest, reinterpret_cast<const uint8_t*>(id.data()), id.size(), nullptr, 0);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

std::string computeHostIdentity() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  struct stat st {};
  stat("/dev/shm", &st);
  std::string id = readLine("/proc/sys/kernel/random/boot_id") + "|" + host + "|" +
                   std::to_string(static_cast<unsigned long long>(st.st_dev)) + "|" +
                   readLink("/proc/self/ns/pid") + "|" + readLink("/proc/self/ns/net");
  return digestHex(id);
}


}  // namespace

const std::string& hostIdentity() {
  static const std::string id = computeHostIdentity();
  return id;
}

const std::string& machineIdentity() {
  static const std::string id = [] {
    std::string boot = readLine("/proc/sys/kernel/random/boot_id");
    if (boot.empty()) {  // no /proc: the host name stands in
      char host[256] = {0};
      gethostname(host, sizeof host - 1);
      boot = host;
    }
    return digestHex("machine|" + boot);
  }();
  return id;
}

namespace {

// Process pid's state letter and start time from /proc/PID/stat. Returns "" when it is there,
// "has exited" when its pid is free, and "?" when nothing can be said (no /proc of this pid
// namespace, or a line that does not parse).
std::string readStat(int pid, char* state, unsigned long long* start) {
  static const bool procOk = ::access("/proc/self/stat", R_OK) == 0;
  if (pid <= 0 || !procOk) return "?";
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const std::string line = readLine(path);
  if (line.empty()) return ::access(path, F_OK) != 0 && errno == ENOENT ? "has exited" : "?";
  // "pid (comm) S ...": the state follows the last ')' (comm may hold anything); the start
  // time is the 22nd field, the 20th after the state.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size() || line[close + 1] != ' ') return "?";
  *state = line[close + 2];
  const char* p = line.c_str() + close + 2;
  for (int field = 3; p && field < 22; ++field) {
    p = strchr(p, ' ');
    if (p) ++p;
  }
  *start = p ? strtoull(p, nullptr, 10) : 0;
  return "";
}

std::string stateText(char state) {
  switch (state) {
    case 'T': return "is stopped (SIGSTOP or job control: its process is in state T)";
    case 't': return "is stopped by a debugger (its process is in state t)";
    case 'Z':
    case 'X': return "has exited";
    default: return std::string();
  }
}

}  // namespace

std::string processStalled(int pid) {
  // Without a /proc of this pid namespace (not mounted, or hidden) nothing can be said.
  char state = 0;
  unsigned long long start = 0;
  const std::string gone = readStat(pid, &state, &start);
  if (gone == "?") return std::string();
  return gone.empty() ? stateText(state) : gone;
}

ProcessRef::ProcessRef(int pid, bool usePidfd) : pid_(pid) {
  if (pid <= 0) return;
#ifdef SYS_pidfd_open
  if (usePidfd) {
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
    if (fd >= 0) {
      fcntl(fd, F_SETFD, FD_CLOEXEC);
      pidfd_ = Fd(fd);
      return;
    }
  }
#else
  (void)usePidfd;
#endif
  char state = 0;
  if (!readStat(pid, &state, &start_).empty()) start_ = 0;
}

bool ProcessRef::exited() const {
  pollfd p{pidfd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;
}

bool ProcessRef::alive() const {
  if (pid_ <= 0) return false;
  if (pidfd_.valid()) return !exited();
  if (kill(pid_, 0) != 0 && errno == ESRCH) return false;
  char state = 0;
  unsigned long long start = 0;
  const std::string gone = readStat(pid_, &state, &start);
  if (gone == "has exited") return false;
  return !(gone.empty() && start_ && start != start_);  // another process under its pid
}

std::string ProcessRef::stalled() const {
  if (pid_ <= 0) return std::string();
  if (pidfd_.valid()) {
    if (exited()) return "has exited";
    const std::string s = processStalled(pid_);
    return exited() ? "has exited" : s;  // it may have exited, and its pid gone to another, meanwhile
  }
  char state = 0;
  unsigned long long start = 0;
  const std::string gone = readStat(pid_, &state, &start);
  if (gone == "?") return std::string();
  if (!gone.empty()) return gone;
  if (start_ && start != start_) return "has exited";  // its pid now names another process
  return stateText(state);
}

}  // namespace hora
