// Thin, RAII, nonblocking socket helpers shared by the bootstrap and the TCP transport.
#pragma once
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hora {

class Waiter;

// Owns a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// An IPv4 or IPv6 socket address.
struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;

  int family() const { return ss.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  bool isLoopback() const;
  std::string str() const;  // "1.2.3.4:5" or "[::1]:5"

  // "host:port", "[v6]:port" or "v6addr" with a separate port; host names are resolved.
  // Throws Errc::InvalidArgument on a bad text.
  static SockAddr parse(const std::string& hostPort);
  // A Unix socket in Linux's abstract namespace: no file, gone with its last descriptor.
  static SockAddr abstractUnix(const std::string& name);
  // Packs into / unpacks from 18 bytes (family tag, 16 address bytes... see socket.cc) for
  // ids and peer tables.
  static constexpr size_t kPackedBytes = 20;
  void pack(uint8_t out[kPackedBytes]) const;
  static bool unpack(const uint8_t in[kPackedBytes], SockAddr* out);
};

struct Interface {
  std::string name;
  SockAddr addr;
};
std::vector<Interface> listInterfaces();

// Picks the interface address for this process to listen on. spec is HORA_SOCKET_IFNAME's
// syntax: comma-separated names; "=name" matches exactly, "^name" excludes, otherwise a
// prefix match. Without a spec the caller's fallback is used. Throws when nothing matches.
SockAddr chooseInterface(const std::string& spec, int preferFamily);
bool interfaceMatches(const std::string& spec, const std::string& name);

Fd listenSocket(const SockAddr& addr, int backlog = 512);  // nonblocking, cloexec
SockAddr localAddress(int fd);

// Starts a nonblocking connect; returns the socket (connect may still be in progress), or no
// socket (!valid()) when the listener's backlog is full (EAGAIN: a Unix socket says so at once):
// a transient state to retry, as a flood of idle connections can cause. A connect refused at
// once (a Unix socket nobody listens on) throws Errc::Remote: it is the far side's state.
Fd startConnect(const SockAddr& addr);
// Whether a connect's errno says that nobody listens at the address, or cannot be reached
// (refused, reset, unreachable, timed out), rather than that this host failed.
bool peerNotThere(int err);
// 0 when connected, EINPROGRESS while pending, else the errno of the failure.
int connectStatus(int fd);
// Connects with retries (ECONNREFUSED, ETIMEDOUT: the listener may not be up yet) until the
// waiter gives up.
Fd connectWithRetry(const SockAddr& addr, Waiter& w);

void setNoDelay(int fd);
void setNonBlocking(int fd);

// Nonblocking I/O. Returns bytes moved (> 0), 0 if it would block; throws Errc::Remote on
// EOF or a connection error, naming `who`.
size_t readSome(int fd, void* buf, size_t n, const char* who);
size_t writeSome(int fd, const void* buf, size_t n, const char* who);
size_t writevSome(int fd, const iovec* iov, int iovcnt, const char* who);

// Whole transfers for setup paths: loop with the waiter until done.
void writeAll(int fd, const void* buf, size_t n, Waiter& w, const char* who);
void readAll(int fd, void* buf, size_t n, Waiter& w, const char* who);

// Sockets made by these helpers are remembered so that a child made by fork() closes them
// (installForkHandler in comm/bootstrap.h): a child must not keep a parent's links alive.
void trackSocket(int fd);
void closeTrackedSocketsInChild();

// poll() that retries on EINTR and ignores other failures (the next I/O reports them).
void pollFor(pollfd* fds, size_t n, int timeoutMs);

}  // namespace hora
