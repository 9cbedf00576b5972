// Setting up shared memory among the ranks of one host: make this rank's segment and doorbell,
// listen on an abstract Unix socket (published through the bootstrap), then open one
// authenticated link per local peer (base/mesh.h) and swap segment and doorbell descriptors
// over it (SCM_RIGHTS). The peer's pid comes from the kernel (SO_PEERCRED), not from the peer.
// Over the same links the ranks then agree whether each may read every other's memory (the
// single copy, World::readMember): each probes every peer and says whether it could, and the
// single copy is on where all could. The links close afterwards: from then on only memory and
// doorbells are used.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/acceptor.h"
#include "base/handshake.h"
#include "base/wait.h"
#include "transports/shm/world.h"

namespace hora::shm {

struct Options {
  uint64_t ringBytes = 1 << 20;
  uint64_t stageBytes = 2 << 20;
  milliseconds handshakeTimeout{30000};
  bool singleCopy = true;  // HORA_SHM_SINGLE_COPY: offer to read peers' buffers (World::readMember)
};

struct LocalPeer {
  int rank = -1;
  std::string socketName;  // its abstract Unix socket
  std::string name;        // "rank 3 (host, pid 123)"
};

class Endpoint {
 public:
  // Listens; socketName() is what peers need (published through the bootstrap).
  Endpoint(const Secret& secret, uint64_t commId, int rank, int nranks, Options opts);
  ~Endpoint();

  const std::string& socketName() const { return socketName_; }

  // localRanks: the communicator ranks of this host, ascending, this rank among them; peers:
  // one per local rank other than this one. Every local peer must call it at the same time.
  std::shared_ptr<World> connectAll(std::vector<int> localRanks, const std::vector<LocalPeer>& peers, Waiter& w,
                                    int watchFd, const std::function<void()>& onWatch);

 private:
  Secret secret_;
  uint64_t commId_;
  int rank_, nranks_;
  Options opts_;
  std::shared_ptr<World> world_;
  std::string socketName_;
  std::unique_ptr<Acceptor> acceptor_;
};

}  // namespace hora::shm
