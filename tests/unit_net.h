// Helpers shared by the unit tests that use real sockets (test_frame.cc, test_tcp_connection.cc,
// test_handshake.cc, test_acceptor.cc, test_executor.cc): socket pairs, raw whole writes/reads
// with a guard against hangs, a deterministic byte pattern, and a search in error texts.
// Nothing here depends on timing except the guards, which only turn a hang into a failure.
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/socket.h"

namespace unit {

// Generous: only to turn a bug that hangs into a failure.
inline constexpr std::chrono::seconds kGuard{30};

struct Guard {
  std::chrono::steady_clock::time_point end = std::chrono::steady_clock::now() + kGuard;
  bool expired() const { return std::chrono::steady_clock::now() > end; }
};

// A connected AF_UNIX stream pair, both ends nonblocking.
inline std::pair<hora::Fd, hora::Fd> socketPair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0)
    throw std::runtime_error("socketpair failed");
  return {hora::Fd(sv[0]), hora::Fd(sv[1])};
}

// Writes all of buf to a nonblocking fd (polling when full); throws on error or guard expiry.
inline void rawWrite(int fd, const void* buf, size_t n) {
  Guard g;
  const auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      throw std::runtime_error(std::string("rawWrite: ") + strerror(errno));
    if (g.expired()) throw std::runtime_error("rawWrite: guard expired");
    pollfd pf{fd, POLLOUT, 0};
    ::poll(&pf, 1, 100);
  }
}

// Reads exactly n bytes; throws on EOF, error or guard expiry.
inline void rawRead(int fd, void* buf, size_t n) {
  Guard g;
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) throw std::runtime_error("rawRead: EOF");
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      throw std::runtime_error(std::string("rawRead: ") + strerror(errno));
    if (g.expired()) throw std::runtime_error("rawRead: guard expired");
    pollfd pf{fd, POLLIN, 0};
    ::poll(&pf, 1, 100);
  }
}

// Whether s contains part (error texts name what went wrong).
inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Deterministic bytes for message `id`: differ between messages and positions.
inline std::vector<uint8_t> pattern(size_t n, uint32_t id) {
  std::vector<uint8_t> v(n);
  uint32_t x = id * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

}  // namespace unit
