#include "base/host.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>

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

std::string processStalled(int pid) {
  // Without a /proc of this pid namespace (not mounted, or hidden) nothing can be said.
  static const bool procOk = ::access("/proc/self/stat", R_OK) == 0;
  if (pid <= 0 || !procOk) return std::string();
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const std::string line = readLine(path);
  if (line.empty()) return ::access(path, F_OK) != 0 && errno == ENOENT ? "has exited" : "";
  // "pid (comm) S ...": the state follows the last ')' (comm may hold anything).
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size() || line[close + 1] != ' ') return std::string();
  switch (line[close + 2]) {
    case 'T': return "is stopped (SIGSTOP or job control: its process is in state T)";
    case 't': return "is stopped by a debugger (its process is in state t)";
    case 'Z':
    case 'X': return "has exited";
    default: return std::string();
  }
}

}  // namespace hora
