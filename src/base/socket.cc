#include "base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <sys/un.h>

#include <cstddef>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/log.h"
#include "base/wait.h"

namespace hora {

namespace {
constexpr int kMaxTracked = 1 << 16;
std::atomic<uint8_t> gTracked[kMaxTracked];
}  // namespace

void trackSocket(int fd) {
  if (fd >= 0 && fd < kMaxTracked) gTracked[fd].store(1, std::memory_order_relaxed);
}

void closeTrackedSocketsInChild() {
  for (int fd = 0; fd < kMaxTracked; ++fd)
    if (gTracked[fd].load(std::memory_order_relaxed)) {
      gTracked[fd].store(0, std::memory_order_relaxed);
      ::close(fd);
    }
}

void Fd::reset(int fd) {
  if (fd_ >= 0) {
    if (fd_ < kMaxTracked) gTracked[fd_].store(0, std::memory_order_relaxed);
    ::close(fd_);
  }
  fd_ = fd;
}

uint16_t SockAddr::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

void SockAddr::setPort(uint16_t p) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(p);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(p);
}

bool SockAddr::isLoopback() const {
  if (family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr) >> 24) == 127;
  if (family() == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr);
  return false;
}

SockAddr SockAddr::abstractUnix(const std::string& name) {
  SockAddr a;
  auto* u = reinterpret_cast<sockaddr_un*>(&a.ss);
  u->sun_family = AF_UNIX;
  size_t n = std::min(name.size(), sizeof(u->sun_path) - 1);
  u->sun_path[0] = '\0';
  memcpy(u->sun_path + 1, name.data(), n);
  a.len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

std::string SockAddr::str() const {
  char host[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_UNIX) {
    const auto* u = reinterpret_cast<const sockaddr_un*>(&ss);
    size_t n = len > offsetof(sockaddr_un, sun_path) ? len - offsetof(sockaddr_un, sun_path) : 0;
    if (n > 1 && u->sun_path[0] == '\0') return "unix:@" + std::string(u->sun_path + 1, n - 1);
    return "unix";
  }
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
    return format("%s:%u", host, port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, host, sizeof host);
    return format("[%s]:%u", host, port());
  }
  return "(no address)";
}

SockAddr SockAddr::parse(const std::string& text) {
  std::string host, port;
  if (!text.empty() && text[0] == '[') {
    size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      fail(Errc::InvalidArgument, "bad address '%s': expected [ipv6]:port", text.c_str());
    host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0)
      fail(Errc::InvalidArgument, "bad address '%s': expected host:port", text.c_str());
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  char* end = nullptr;
  long p = strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 0 || p > 65535)
    fail(Errc::InvalidArgument, "bad port in address '%s'", text.c_str());
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr)
    fail(Errc::InvalidArgument, "cannot resolve '%s': %s", host.c_str(), gai_strerror(rc));
  SockAddr a;
  memcpy(&a.ss, res->ai_addr, res->ai_addrlen);
  a.len = res->ai_addrlen;
  freeaddrinfo(res);
  a.setPort(static_cast<uint16_t>(p));
  return a;
}

// Packed form: byte 0 = 4 or 6, bytes 2..3 = port (big endian), bytes 4..19 = address.
void SockAddr::pack(uint8_t out[kPackedBytes]) const {
  memset(out, 0, kPackedBytes);
  uint16_t p = htons(port());
  memcpy(out + 2, &p, 2);
  if (family() == AF_INET) {
    out[0] = 4;
    memcpy(out + 4, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, 4);
  } else if (family() == AF_INET6) {
    out[0] = 6;
    memcpy(out + 4, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, 16);
  }
}

bool SockAddr::unpack(const uint8_t in[kPackedBytes], SockAddr* out) {
  SockAddr a;
  uint16_t p;
  memcpy(&p, in + 2, 2);
  if (in[0] == 4) {
    auto* s = reinterpret_cast<sockaddr_in*>(&a.ss);
    s->sin_family = AF_INET;
    memcpy(&s->sin_addr, in + 4, 4);
    s->sin_port = p;
    a.len = sizeof(sockaddr_in);
  } else if (in[0] == 6) {
    auto* s = reinterpret_cast<sockaddr_in6*>(&a.ss);
    s->sin6_family = AF_INET6;
    memcpy(&s->sin6_addr, in + 4, 16);
    s->sin6_port = p;
    a.len = sizeof(sockaddr_in6);
  } else {
    return false;
  }
  *out = a;
  return true;
}

std::vector<Interface> listInterfaces() {
  std::vector<Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (fam == AF_INET6) {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&s6->sin6_addr)) continue;  // needs a scope id; skip
    }
    Interface itf;
    itf.name = i->ifa_name;
    itf.addr.len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    memcpy(&itf.addr.ss, i->ifa_addr, itf.addr.len);
    out.push_back(itf);
  }
  freeifaddrs(list);
  return out;
}

static std::vector<std::string> splitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool interfaceMatches(const std::string& spec, const std::string& name) {
  bool anyInclude = false, included = false;
  for (const std::string& item : splitCommas(spec)) {
    if (item[0] == '^') {
      if (name.compare(0, item.size() - 1, item, 1, std::string::npos) == 0) return false;
    } else if (item[0] == '=') {
      anyInclude = true;
      if (name == item.substr(1)) included = true;
    } else {
      anyInclude = true;
      if (name.compare(0, item.size(), item) == 0) included = true;
    }
  }
  return anyInclude ? included : true;
}

SockAddr chooseInterface(const std::string& spec, int preferFamily) {
  std::vector<Interface> all = listInterfaces();
  const Interface* pick = nullptr;
  for (const Interface& i : all) {
    if (!interfaceMatches(spec, i.name)) continue;
    if (!pick || (pick->addr.family() != preferFamily && i.addr.family() == preferFamily)) pick = &i;
  }
  if (!pick) {
    std::string names;
    for (const Interface& i : all) names += (names.empty() ? "" : ", ") + i.name;
    fail(Errc::InvalidArgument, "HORA_SOCKET_IFNAME='%s' matches no interface (have: %s)",
         spec.c_str(), names.c_str());
  }
  SockAddr a = pick->addr;
  a.setPort(0);
  return a;
}

static void setCloexecNonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

void setNonBlocking(int fd) { setCloexecNonblock(fd); }

void setNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Fd listenSocket(const SockAddr& addr, int backlog) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) fail(Errc::System, "socket(): %s", errnoText(errno).c_str());
  trackSocket(fd.get());
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.ss), addr.len) != 0)
    fail(Errc::System, "bind(%s): %s", addr.str().c_str(), errnoText(errno).c_str());
  if (::listen(fd.get(), backlog) != 0)
    fail(Errc::System, "listen(%s): %s", addr.str().c_str(), errnoText(errno).c_str());
  return fd;
}

SockAddr localAddress(int fd) {
  SockAddr a;
  a.len = sizeof a.ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a.ss), &a.len) != 0) a.len = 0;
  return a;
}

bool peerNotThere(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == ECONNRESET || err == EHOSTUNREACH || err == ENETUNREACH;
}

Fd startConnect(const SockAddr& addr) {
  Fd fd(::socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid())
    fail(Errc::System, "socket(): %s%s", errnoText(errno).c_str(),
         errno == EMFILE || errno == ENFILE ? " (raise the limit on open files: ulimit -n)" : "");
  trackSocket(fd.get());
  setNoDelay(fd.get());
  int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.ss), addr.len);
  if (rc != 0 && errno == EAGAIN) return Fd();
  // A Unix socket says at once what TCP says later: nobody listens there (any more). That is
  // the far side's state, not this host's failure.
  if (rc != 0 && peerNotThere(errno)) fail(Errc::Remote, "connect(%s): %s", addr.str().c_str(), errnoText(errno).c_str());
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR)
    fail(Errc::System, "connect(%s): %s", addr.str().c_str(), errnoText(errno).c_str());
  return fd;
}

int connectStatus(int fd) {
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, 0) <= 0) return EINPROGRESS;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

Fd connectWithRetry(const SockAddr& addr, Waiter& w) {
  // Every 10 s without a connection, a warning says where this rank is still trying, and why.
  auto nextWarn = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int lastErr = 0;
  auto warn = [&] {
    if (std::chrono::steady_clock::now() < nextWarn) return;
    HORA_WARN(log::kBootstrap, "still waiting to reach %s: %s (is the rank that listens there running, and is "
              "the address right?)", addr.str().c_str(), lastErr ? errnoText(lastErr).c_str() : "no answer yet");
    nextWarn = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  };
  for (;;) {
    Fd fd;
    try {
      fd = startConnect(addr);
      if (!fd.valid()) lastErr = EAGAIN;  // its backlog is full: a flood, or many ranks at once; retry
    } catch (const Error& e) {
      if (e.code() != Errc::Remote) throw;
      lastErr = ECONNREFUSED;  // refused at once (a Unix socket): not listening yet
    }
    if (!fd.valid()) warn();
    for (; fd.valid();) {
      warn();
      int st = connectStatus(fd.get());
      if (st == 0) return fd;
      if (st != EINPROGRESS) {
        if (!peerNotThere(st)) fail(Errc::System, "connect(%s): %s", addr.str().c_str(), errnoText(st).c_str());
        lastErr = st;
        break;  // not listening yet: retry after a pause
      }
      w.idle([&](milliseconds most) {
        pollfd p{fd.get(), POLLOUT, 0};
        pollFor(&p, 1, static_cast<int>(most.count()));
      });
    }
    // A refused connect: back off, without counting it as progress.
    w.idle([](milliseconds most) { ::poll(nullptr, 0, static_cast<int>(std::min<long long>(most.count(), 20))); });
  }
}

static size_t ioResult(ssize_t n, int err, const char* op, const char* who) {
  if (n > 0) return static_cast<size_t>(n);
  if (n == 0) fail(Errc::Remote, "connection closed by %s (it exited, crashed or closed its communicator)", who);
  if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return 0;
  fail(Errc::Remote, "%s %s failed: %s", op, who, errnoText(err).c_str());
}

size_t readSome(int fd, void* buf, size_t n, const char* who) {
  if (n == 0) return 0;
  ssize_t r = ::recv(fd, buf, n, MSG_DONTWAIT);
  return ioResult(r, errno, "recv from", who);
}

size_t writeSome(int fd, const void* buf, size_t n, const char* who) {
  if (n == 0) return 0;
  ssize_t r = ::send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (r == 0) return 0;
  return ioResult(r, errno, "send to", who);
}

size_t writevSome(int fd, const iovec* iov, int iovcnt, const char* who) {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(iovcnt);
  ssize_t r = ::sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (r == 0) return 0;
  return ioResult(r, errno, "send to", who);
}

void pollFor(pollfd* fds, size_t n, int timeoutMs) {
  while (::poll(fds, n, timeoutMs) < 0 && errno == EINTR) {
  }
}

// Moves all n bytes in one direction, waiting through w whenever the socket is not ready.
static void transferAll(int fd, uint8_t* p, size_t n, Waiter& w, const char* who, bool out) {
  while (n > 0) {
    size_t k = out ? writeSome(fd, p, n, who) : readSome(fd, p, n, who);
    if (k > 0) {
      p += k;
      n -= k;
      w.progressed();
      continue;
    }
    w.idle([&](milliseconds most) {
      pollfd pf{fd, static_cast<short>(out ? POLLOUT : POLLIN), 0};
      pollFor(&pf, 1, static_cast<int>(most.count()));
    });
  }
}

void writeAll(int fd, const void* buf, size_t n, Waiter& w, const char* who) {
  transferAll(fd, static_cast<uint8_t*>(const_cast<void*>(buf)), n, w, who, true);
}

void readAll(int fd, void* buf, size_t n, Waiter& w, const char* who) {
  transferAll(fd, static_cast<uint8_t*>(buf), n, w, who, false);
}

}  // namespace hora
