// Accepts connections on a listening socket and runs their server-side handshakes
// concurrently, without blocking: a silent or hostile client never holds up the others.
// A connection whose handshake fails or does not finish in time is logged and closed.
//
// What a stranger can do to it is bounded: on a Unix socket a connection from another user is
// closed at once (SO_PEERCRED); at most kMaxPending connections (and an eighth of the process's
// descriptor limit) wait for their handshake, the oldest idle one dropped to make room; and running out of descriptors (EMFILE) drops the oldest pending
// one, or takes the connection with a descriptor kept in reserve and closes it, instead of
// failing the listener: the backlog keeps draining, so a flood cannot keep a real peer out.
#pragma once
#include <memory>
#include <vector>

#include "base/handshake.h"
#include "base/socket.h"
#include "base/wait.h"

namespace hora {

class Acceptor {
 public:
  struct Accepted {
    Fd fd;
    SockAddr peer;
    uint8_t payload[kHandshakePayloadBytes];
  };

  Acceptor(Fd listener, const Secret& secret, LinkKind kind, milliseconds handshakeTimeout,
           uint32_t logSubsys);
  ~Acceptor();

  const SockAddr& address() const { return addr_; }
  // Appends the listener and the pending handshakes; events are filled in.
  void addPollFds(std::vector<pollfd>& fds) const;
  // Accepts and advances handshakes; appends finished ones to out. True if anything moved.
  bool advance(std::vector<Accepted>& out);
  size_t rejected() const { return rejected_; }
  static constexpr size_t kMaxPending = 128;
  void close();

 private:
  struct Pending;
  Fd listener_;
  SockAddr addr_;
  Secret secret_;
  LinkKind kind_;
  milliseconds handshakeTimeout_;
  uint32_t subsys_;
  std::vector<std::unique_ptr<Pending>> pending_;
  size_t rejected_ = 0;
  Fd reserve_;  // a spare descriptor, given up to accept (and close) a connection when out of them
  bool unixSocket_ = false;
  size_t strangers_ = 0;  // other users' connections closed (logged once)

  void drop(size_t i, const std::string& why);
  size_t victim() const;
  int acceptWithoutDescriptors();  // 1: made room or drained one; 0: nothing to accept; -1: cannot
  size_t maxPending_ = kMaxPending;
};

}  // namespace hora
