// Opening the links between one rank and its peers, for any stream socket (TCP, Unix): the rank
// dials every peer below it and accepts every peer above it, `perPeer` links each, all at once
// and without blocking. Every link opens with the authenticated handshake (handshake.h) whose
// payload names the communicator, both ranks and the link's index; an accepted link whose
// payload does not fit the job is an error (the peer proved it holds the secret, so it is one of
// ours and something is wrong), a stray one is dropped by the acceptor.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "base/acceptor.h"
#include "base/handshake.h"
#include "base/socket.h"
#include "base/wait.h"

namespace hora {

struct MeshPeer {
  int rank = -1;
  std::string name;            // "rank 3 (host, pid 123)", for messages
  std::function<Fd()> dial;    // starts a nonblocking connect (used for peers below this rank)
  std::string where;           // the peer's address, for messages
};

struct MeshSpec {
  LinkKind kind = LinkKind::Data;
  Secret secret{};
  uint64_t commId = 0;
  int rank = 0;
  int nranks = 1;
  int perPeer = 1;
  const char* perPeerSetting = "";  // the variable that sets perPeer, for a mismatch message
};

// Returns links[rank][i] for every peer in `peers` (empty vectors for other ranks). While it
// waits it also polls watchFd (if >= 0) and calls onWatch() when that is readable.
std::vector<std::vector<Fd>> connectMesh(Acceptor& acceptor, const MeshSpec& spec,
                                         const std::vector<MeshPeer>& peers, Waiter& w, int watchFd,
                                         const std::function<void()>& onWatch);

}  // namespace hora
