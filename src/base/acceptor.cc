#include "base/acceptor.h"

#include <sys/socket.h>

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
  while (listener_.valid()) {
    SockAddr peer;
    peer.len = sizeof peer.ss;
    int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&peer.ss), &peer.len,
                       SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // Out of descriptors or memory: the connection waits in the backlog and poll() would
      // report it forever, so this is a failure of this process, not of the client.
      fail(Errc::System, "accept on %s: %s%s", addr_.str().c_str(), errnoText(errno).c_str(),
           errno == EMFILE || errno == ENFILE ? " (raise the limit on open files: ulimit -n)" : "");
    }
    trackSocket(fd);
    setNoDelay(fd);
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
      HORA_WARN(subsys_, "dropped a connection from %s to %s: %s", p.peer.str().c_str(),
                addr_.str().c_str(), why.c_str());
      ++rejected_;
      pending_.erase(pending_.begin() + static_cast<long>(i));
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
