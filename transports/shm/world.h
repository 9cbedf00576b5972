// Everything a rank shares with the other ranks of its host: its own segment and doorbell, and
// each local peer's mapped segment, doorbell and liveness descriptor. Made by shm::Endpoint;
// the communicator owns it, and the shared-memory connections and direct algorithms use it.
//
// Doorbells. A rank that has nothing to do blocks in poll() on its own doorbell (an eventfd).
// Before it does, it sets `sleeping` in its segment and looks once more for work; a rank that
// publishes something then rings the doorbell of a peer it sees sleeping. Both sides order their
// store before their load with a full fence, so a wake-up is never lost and a busy rank never
// pays for a syscall.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/socket.h"
#include "transports/shm/segment.h"

namespace hora::shm {

struct Peer {
  int rank = -1;
  int pid = 0;
  std::string name;  // "rank 3 (host, pid 123)"
  Segment segment;
  Fd doorbell;
  Fd pidfd;
};

struct World {
  uint32_t nlocal = 1;
  uint32_t localIndex = 0;
  std::vector<int> localRanks;  // comm ranks by local index
  Segment own;
  Fd doorbell;
  std::vector<Peer> peers;  // by local index; peers[localIndex] is unused

  // Rings `peer`'s doorbell if it is sleeping; call after publishing something it may wait for.
  void wake(uint32_t peer) const;
  // The same for every peer, with one fence.
  void wakeAll() const;
  // Marks this rank as about to sleep / awake again (drains the doorbell).
  void arm() const;
  void disarm() const;

  // Collectives on one host check that every rank is in the same call without a message: each
  // rank announces (call number, tag) as it starts a collective, and compares with the peers'
  // once it has seen them all post (they announced before) or has waited a while. A peer may
  // already be one call further, so the previous call's tag is kept too. Returns the local
  // index of a peer whose call `no` has another tag (its tag in *theirs), or -1.
  void announce(uint64_t no, uint64_t tag) const;

  // Publishes why this rank failed, for peers waiting on its counters (once; the first wins).
  void markFailed(const std::string& why) const;
  // The text a peer published, printable and bounded, or "" if it has not failed.
  std::string failureOf(uint32_t peer) const;
  int mismatch(uint64_t no, uint64_t tag, uint64_t* theirs) const;
};

}  // namespace hora::shm
