// Setting up TCP connections for one communicator: listen, publish the address (through the
// bootstrap), then connect every pair. Rank i dials every lower rank j with nsocks sockets and
// accepts the sockets of every higher rank; all of it runs concurrently and without blocking,
// each socket opened by the authenticated handshake (base/handshake.h), whose payload says which
// communicator, which pair and which socket of the pair it is.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/acceptor.h"
#include "base/handshake.h"
#include "base/mesh.h"
#include "base/socket.h"
#include "base/wait.h"
#include "transports/transport.h"

namespace hora::tcp {

struct PeerAddress {
  int rank = -1;
  SockAddr addr;
  std::string name;  // "rank 3 (host, pid 123)", for messages
};

struct Options {
  int nsocks = 1;
  milliseconds handshakeTimeout{30000};
};

class Endpoint {
 public:
  Endpoint(const SockAddr& bindAddr, const Secret& secret, uint64_t commId, int rank, int nranks,
           Options opts);
  ~Endpoint();

  const SockAddr& address() const { return acceptor_.address(); }

  // Returns one connection per rank (nullptr for this rank and for ranks absent from peers).
  // Every peer in `peers` must call connectAll at the same time. While it waits it also polls
  // watchFd (if >= 0) and calls onWatch() when that is readable, so that the caller can stop
  // it (by throwing) when it learns that the job has failed elsewhere.
  std::vector<std::unique_ptr<transport::Connection>> connectAll(const std::vector<PeerAddress>& peers,
                                                                Waiter& w, int watchFd = -1,
                                                                const std::function<void()>& onWatch = {});

 private:
  Acceptor acceptor_;
  Secret secret_;
  uint64_t commId_;
  int rank_, nranks_;
  Options opts_;
};

}  // namespace hora::tcp
