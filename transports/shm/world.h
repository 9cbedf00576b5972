// Everything a rank shares with the other ranks of its host: its own segment and doorbell, and
// each local peer's mapped segment, doorbell and liveness descriptor. Made by shm::Endpoint;
// the shared-memory connections use it, and it is the shared stage (transports/stage.h) that
// this transport offers to the shared-stage algorithms: each segment's stage is its owner's
// region, and the segment header's counters, announcement and failure text are the stage's.
//
// Doorbells. A rank that has nothing to do blocks in poll() on its own doorbell (an eventfd).
// Before it does, it sets `sleeping` in its segment and looks once more for work; a rank that
// publishes something then rings the doorbell of a peer it sees sleeping. Both sides order their
// store before their load, so a wake-up is never lost and a busy rank never pays for a syscall:
// with a full fence on each side, or (World::asymmetric, where every rank of the host could
// register for membarrier(2)'s global expedited command) with none on the publisher's, whose
// posts are then plain stores, and a membarrier on the sleeper's, which makes every running
// thread of the host's ranks execute a full barrier before the sleeper looks once more. A post
// is on every call's path and a sleep follows a hundred microseconds of idling: the fence that
// waited for the post's cache line to leave the reader's core (a third of a 2-rank Gather's
// time at 8 bytes, measured with perf) moves to where it costs nothing that matters.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "base/host.h"
#include "base/socket.h"
#include "transports/shm/segment.h"
#include "transports/stage.h"

namespace hora::shm {

// Registers this process for membarrier(2)'s global expedited command (World::asymmetric):
// "" if it could, else why not (the kernel lacks it, or a seccomp filter forbids it).
std::string registerHeavyBarrier();

struct Peer {
  int rank = -1;
  std::string name;  // "rank 3 (host, pid 123)"
  Segment segment;
  Fd doorbell;
  ProcessRef process;  // by pidfd, or pid and start time
  bool sameProcess = false;  // a rank of this very process (ranks as threads)
};

class World final : public transport::SharedStage {
 public:
  uint32_t nlocal = 1;
  uint32_t localIndex = 0;
  std::vector<int> localRanks;  // comm ranks by local index
  Segment own;
  Fd doorbell;
  std::vector<Peer> peers;  // by local index; peers[localIndex] is unused

  // Rings `peer`'s doorbell if it is sleeping; call after publishing something it may wait for.
  void wake(uint32_t peer) const;
  // Marks this rank as about to sleep / awake again (drains the doorbell).
  void armDoorbell() const;
  void disarmDoorbell() const;

  // The shared stage.
  int size() const override { return static_cast<int>(nlocal); }
  int index() const override { return static_cast<int>(localIndex); }
  const std::vector<int>& ranks() const override { return localRanks; }
  const std::string& memberName(int member) const override { return peers[static_cast<size_t>(member)].name; }
  // Lays out the stage's regions and counters: every segment's stage and header counters.
  // Call once every peer's segment is mapped.
  void mapStage();
  void wakeAll() const override;  // every sleeping peer, with one fence
  std::string arm(int only, Errc* relayed, std::vector<pollfd>& fds) const override;
  void disarm() const override { disarmDoorbell(); }
  void announce(uint64_t no, uint64_t tag) const override;
  int mismatch(uint64_t no, uint64_t tag, uint64_t* theirs, int only = -1) const override;
  bool announced(int member, uint64_t no, uint64_t* tag) const override;
  uint64_t lastCall(int member) const override;
  void publishUnchecked(uint64_t from) const override;
  uint64_t checkedThrough(int member) const override;
  bool closed(int member) const override;
  void running(bool on) const override;
  bool runs(int member) const override;
  void markFailed(const std::string& why, Errc code) const override;
  Access memberAccess() const override { return access; }
  void readMember(int member, uint64_t from, void* dst, size_t bytes) const override;
  void writeMember(int member, uint64_t to, const void* src, size_t bytes) const override;
  Access access = Access::None;  // agreed by the host's ranks (Endpoint::connectAll)
  bool asymmetric = false;         // likewise: fence-free posts, sleeps through membarrier

  // The text a peer published, printable and bounded, or "" if it has not failed.
  std::string failureOf(uint32_t peer, Errc* code) const;
};

static_assert(transport::SharedStage::kCounters == kCounters, "the segment holds the stage's counters");
static_assert(transport::SharedStage::kHistory == kHistory && transport::SharedStage::kCells == kCells &&
                  transport::SharedStage::kCellBytes == kCellBytes && sizeof(transport::SharedStage::Note) == kNoteBytes,
              "the segment holds the stage's history, cells and notes");

}  // namespace hora::shm
