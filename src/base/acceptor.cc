#include "base/acceptor.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/log.h"

namespace hora {

struct Acceptor::Pending {
  Fd fd;
  SockAddr peer;
  Handshake hs;
  Clock::time_point deadline;
  Pending(Fd f, SockAddr p, const Secret& s, LinkKind k, Clock::time_point d)
      : fd(std::move(f)), peer(p), hs(Handshake::Role::Server, fd.get(), s, k), deadline(d) {}
};

Acceptor::Acceptor(Fd listener, const Secret& secret, LinkKind kind,
                   milliseconds handshakeTimeout, uint32_t logSubsys)
    : listener_(std::move(listener)), secret_(secret), kind_(kind),
      handshakeTimeout_(handshakeTimeout), subsys_(logSubsys) {
  addr_ = localAddress(listener_.get());
  unixSocket_ = addr_.family() == AF_UNIX;
  reserve_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  // Connections in their handshake hold descriptors of the whole process: an eighth of its
  // limit at most (and kMaxPending), so that a flood never starves the rank's own work.
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    maxPending_ = std::clamp<size_t>(static_cast<size_t>(lim.rlim_cur) / 8, 4, kMaxPending);
}

void Acceptor::drop(size_t i, const std::string& why) {
  HORA_WARN(subsys_, "dropped a connection from %s to %s: %s", pending_[i]->peer.str().c_str(), addr_.str().c_str(),
            why.c_str());
  ++rejected_;
  pending_.erase(pending_.begin() + static_cast<long>(i));
}

size_t Acceptor::victim() const {
  // The oldest connection that has not said a word (a real peer sends its hello at once),
  // else the oldest still in its handshake.
  for (size_t i = 0; i < pending_.size(); ++i)
    if (pending_[i]->hs.state() == Handshake::State::RecvHello) return i;
  return 0;
}

int Acceptor::acceptWithoutDescriptors() {
  // Make room: an idle unauthenticated connection goes first (a real peer finishes its
  // handshake in milliseconds; what lingers is idle or hostile).
  if (!pending_.empty()) {
    drop(victim(), "out of file descriptors: the oldest idle unauthenticated connection makes room");
    return 1;
  }
  // Nothing to drop: take the connection with the reserve descriptor and close it, so the
  // backlog drains (poll would otherwise report it forever) and the listener lives on.
  if (!reserve_.valid()) return -1;
  reserve_.reset();
  int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
  const int err = errno;
  if (fd >= 0) ::close(fd);
  reserve_ = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (fd < 0) return err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED ? 0 : -1;
  ++rejected_;
  HORA_WARN(subsys_, "out of file descriptors on %s: closed a new connection unread (raise the limit on open "
            "files: ulimit -n)", addr_.str().c_str());
  return 1;
}

Acceptor::~Acceptor() = default;

void Acceptor::close() {
  pending_.clear();
  listener_.reset();
}

void Acceptor::addPollFds(std::vector<pollfd>& fds) const {
  if (listener_.valid()) fds.push_back(pollfd{listener_.get(), POLLIN, 0});
  for (const auto& p : pending_) fds.push_back(pollfd{p->fd.get(), p->hs.events(), 0});
}

bool Acceptor::advance(std::vector<Accepted>& out) {
  bool moved = false;
  // A bounded batch per round, then the handshakes step: a real peer accepted amid a flood
  // says its hello before the flood's newer connections could displace it.
  for (int batch = 0; listener_.valid() && batch < 16; ++batch) {
    SockAddr peer;
    peer.len = sizeof peer.ss;
    int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&peer.ss), &peer.len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        const int took = acceptWithoutDescriptors();
        if (took > 0) {
          moved = true;
          continue;
        }
        if (took == 0) break;
      }
      fail(Errc::System, "accept on %s: %s%s", addr_.str().c_str(), errnoText(errno).c_str(),
           errno == EMFILE || errno == ENFILE ? " (raise the limit on open files: ulimit -n)" : "");
    }
    trackSocket(fd);
    if (unixSocket_) {
      // Only this user's processes may be peers of a local link: another user's connection is
      // closed before it costs a handshake (or a place among the pending).
      ucred cred{};
      socklen_t len = sizeof cred;
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid()) {
        ::close(fd);
        ++rejected_;
        if (strangers_++ == 0)
          HORA_WARN(subsys_, "closed a connection to %s from another user (uid %u, pid %d); more are closed "
                    "silently", addr_.str().c_str(), cred.uid, cred.pid);
        moved = true;
        continue;
      }
    } else {
      setNoDelay(fd);
    }
    if (pending_.size() >= maxPending_)
      drop(victim(), format("more than %zu connections waiting for their handshake", maxPending_));
    pending_.push_back(std::make_unique<Pending>(Fd(fd), peer, secret_, kind_,
                                                 Clock::now() + handshakeTimeout_));
    moved = true;
  }
  auto now = Clock::now();
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = *pending_[i];
    std::string why;
    bool done = false;
    try {
      done = p.hs.step();
    } catch (const Error& e) {
      why = e.what();
    }
    if (why.empty() && !done && now > p.deadline)
      why = format("handshake not finished within %lld ms",
                   static_cast<long long>(handshakeTimeout_.count()));
    if (!why.empty()) {
      drop(i, why);
      moved = true;
      continue;
    }
    if (done) {
      Accepted a;
      a.fd = std::move(p.fd);
      a.peer = p.peer;
      memcpy(a.payload, p.hs.peerPayload(), kHandshakePayloadBytes);
      out.push_back(std::move(a));
      pending_.erase(pending_.begin() + static_cast<long>(i));
      moved = true;
      continue;
    }
    ++i;
  }
  return moved;
}

}  // namespace hora
