// Accepts connections on a listening socket and runs their server-side handshakes
// concurrently, without blocking: a silent or hostile client never holds up the others.
// A connection whose handshake fails or does not finish in time is logged and closed.
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
};

}  // namespace hora
