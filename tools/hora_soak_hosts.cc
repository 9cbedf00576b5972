// hora-soak --chaos --hosts: the hosts, network namespaces made with iproute2's `ip` (the layout
// of tools/hora-netns), and removed as `ip netns del` does (a lazy unmount and an unlink: calls
// that a signal handler may make, so that an interrupted soak leaves nothing behind).
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "hora_soak_chaos.h"

namespace hora_soak {
namespace {

constexpr const char* kNetnsDir = "/run/netns/";

// The hosts to remove when a signal ends the soak (one set at a time).
std::atomic<Hosts*> gToRemove{nullptr};

void onSignal(int signo) {
  if (Hosts* h = gToRemove.exchange(nullptr)) h->unmount();
  ::signal(signo, SIG_DFL);
  ::raise(signo);
}

}  // namespace

bool Hosts::ip(const std::vector<std::string>& args, std::string* why) {
  std::vector<std::string> all{"ip"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  int err[2];
  if (::pipe2(err, O_CLOEXEC) != 0) {
    *why = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(err[1], 1);
    ::dup2(err[1], 2);
    ::execvp("ip", argv.data());
    ::_exit(127);
  }
  ::close(err[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(err[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(err[0]);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string cmd;
    for (const std::string& a : all) cmd += (cmd.empty() ? "" : " ") + a;
    while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
    *why = cmd + ": " + (pid < 0 ? std::string("fork: ") + std::strerror(errno)
                         : WIFEXITED(status) && WEXITSTATUS(status) == 127 ? std::string("cannot run 'ip' (iproute2)")
                         : out.empty() ? "failed" : out);
    return false;
  }
  return true;
}

Hosts::Made Hosts::make(int hosts, std::string* why) {
  prefix_ = "hs" + std::to_string(::getpid());
  if (::geteuid() != 0) {
    *why = "network namespaces need root (CAP_NET_ADMIN)";
    return Made::Cannot;
  }
  const std::string br = prefix_ + "br";
  // The first namespace says whether there can be any.
  made_.reserve(static_cast<size_t>(hosts) + 1);  // never moved while a signal handler may read it
  names_.reserve(static_cast<size_t>(hosts));
  if (!ip({"netns", "add", br}, why)) return Made::Cannot;
  made_.push_back(kNetnsDir + br);
  gToRemove.store(this);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) ::signal(s, onSignal);
  bool ok = ip({"-n", br, "link", "set", "lo", "up"}, why) && ip({"-n", br, "link", "add", "br0", "type", "bridge"}, why) &&
            ip({"-n", br, "link", "set", "br0", "up"}, why);
  for (int h = 0; ok && h < hosts; ++h) {
    const std::string ns = prefix_ + "h" + std::to_string(h), cable = "c" + std::to_string(h);
    names_.push_back(ns);
    ok = ip({"netns", "add", ns}, why);
    if (!ok) break;
    made_.push_back(kNetnsDir + ns);
    ok = ip({"-n", ns, "link", "set", "lo", "up"}, why) &&
         ip({"-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", cable, "netns", br}, why) &&
         ip({"-n", ns, "addr", "add", address(h) + "/24", "dev", "eth0"}, why) && ip({"-n", ns, "link", "set", "eth0", "up"}, why) &&
         ip({"-n", br, "link", "set", cable, "master", "br0"}, why) && ip({"-n", br, "link", "set", cable, "up"}, why);
    const int fd = ok ? ::open((kNetnsDir + ns).c_str(), O_RDONLY | O_CLOEXEC) : -1;
    if (ok && fd < 0) {
      *why = kNetnsDir + ns + ": " + std::strerror(errno);
      ok = false;
    }
    if (ok) fds_.push_back(fd);
  }
  if (!ok) {
    remove();
    return Made::Failed;
  }
  return Made::Yes;
}

void Hosts::unmount() const {
  for (int fd : fds_) ::close(fd);
  for (const std::string& path : made_) {
    ::umount2(path.c_str(), MNT_DETACH);
    ::unlink(path.c_str());
  }
}

void Hosts::remove() {
  Hosts* self = this;
  gToRemove.compare_exchange_strong(self, nullptr);
  unmount();
  fds_.clear();
  made_.clear();
  names_.clear();
}

bool Hosts::link(int h, bool up, std::string* why) {
  return ip({"-n", prefix_ + "br", "link", "set", "c" + std::to_string(h), up ? "up" : "down"}, why);
}

bool Hosts::enter(int h) const {
  if (h < 0 || h >= count() || ::setns(fds_[static_cast<size_t>(h)], CLONE_NEWNET) != 0) return false;
  // Its own host name, as a host has (the library tells hosts apart by their namespaces).
  const std::string& n = names_[static_cast<size_t>(h)];
  return ::unshare(CLONE_NEWUTS) == 0 && ::sethostname(n.c_str(), n.size()) == 0;
}

}  // namespace hora_soak
