// Shared-memory segments: each rank owns one, made with memfd_create (so it never has a name
// in /dev/shm and vanishes with the last process that maps it, kill -9 included), sealed
// against shrinking and growing (so a peer can never make us fault on a truncated mapping),
// and handed to the other ranks of the host over a Unix socket (SCM_RIGHTS).
//
// Layout of rank r's segment (L = ranks on this host, r's local index i):
//
//   Header       magic, version, L, i, sizes; the single copy's probe; the owner's `sleeping` flag (it is blocked in
//                poll and wants its doorbell rung); counters for the direct algorithms
//   RingCtl[L]   for each local receiver j: head (bytes r has published to j), tail (bytes j
//                has consumed; written by j), closed flags of both ends
//   ring[L]      ringBytes of frame data from r to j (transports/frame.h frames)
//   stage        stageBytes: this rank's region of the shared stage (transports/stage.h,
//                src/coll/stage.cc), then its kCells cells of kCellBytes, then its kCells
//                notes of kNoteBytes
//
// The sender of a ring owns it; its receiver writes only `tail` and `receiverClosed`.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/socket.h"

namespace hora::shm {

inline constexpr uint64_t kSegmentMagic = 0x474553414d524f48ull;  // "HORAMSEG"
inline constexpr uint32_t kSegmentVersion = 8;
inline constexpr int kCounters = 4;

// Why the owner failed (World::markFailed), for ranks that wait on its counters rather than
// read its rings; `failed` is set, to the code of the cause (Errc), once the text is complete.
inline constexpr size_t kFailureText = 448;
struct alignas(64) Failure {
  std::atomic<uint32_t> failed;
  char text[kFailureText];
};

// One announcement of the history (World::announce): `no` is 0 while the entry is rewritten.
struct Announced {
  std::atomic<uint64_t> no;
  std::atomic<uint64_t> tag;
};
inline constexpr int kHistory = 128;  // transport::SharedStage::kHistory
inline constexpr int kCells = 64;
inline constexpr size_t kCellBytes = size_t(32) << 10;
inline constexpr size_t kNoteBytes = 128;  // a transport::SharedStage::Note

struct alignas(64) Header {
  uint64_t magic;
  uint32_t version;
  uint32_t nlocal;
  uint32_t localIndex;
  uint32_t pad;
  uint64_t ringBytes;
  uint64_t stageBytes;
  // For the single copy (World::readMember): where the owner maps this header, and a random
  // word that a peer reads at that address through the kernel (process_vm_readv) and compares
  // with what it sees here, to learn whether it may read the owner's memory.
  uint64_t ownAddress;
  uint64_t probe;
  alignas(64) std::atomic<uint32_t> sleeping;  // the owner is (about to be) blocked in poll
  // Written by the owner only, and on one cache line: a rank that has just read a peer's
  // counter reads its announcement for free.
  alignas(64) std::atomic<uint64_t> counters[kCounters];
  // The collective the owner is in, and its previous one (World::announce): a seqlock, odd
  // while being written.
  std::atomic<uint64_t> callLock;
  std::atomic<uint64_t> callNo;
  std::atomic<uint64_t> callTag;
  std::atomic<uint64_t> prevTag;
  Failure failure;
  alignas(64) std::atomic<uint64_t> unchecked;  // World::publishUnchecked
  alignas(64) std::atomic<uint32_t> running;  // World::running: the calls the owner runs now (nested)
  alignas(64) Announced history[kHistory];  // call no at no % kHistory
};
static_assert(offsetof(Header, callLock) == 128 + kCounters * 8, "counters and announcement share one cache line");

struct alignas(64) RingCtl {
  std::atomic<uint64_t> head;  // bytes published by the sender
  alignas(64) std::atomic<uint64_t> tail;  // bytes consumed by the receiver
  alignas(64) std::atomic<uint32_t> senderClosed;
  std::atomic<uint32_t> receiverClosed;
};

// Allocates and maps [p, p + bytes) of a shared mapping now, in one call, rather than a page
// fault at a time as it is first touched (MADV_POPULATE_WRITE or _READ, Linux 5.14; elsewhere
// nothing). Errors are ignored: the pages then fault in as they are used, as without it.
void populate(const void* p, size_t bytes, bool write = true);

// A mapping of one rank's segment.
class Segment {
 public:
  Segment() = default;
  ~Segment();
  Segment(Segment&& o) noexcept;
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  static size_t sizeFor(uint32_t nlocal, uint64_t ringBytes, uint64_t stageBytes);
  // Creates, sizes, seals and maps this rank's segment.
  static Segment create(uint32_t nlocal, uint32_t localIndex, uint64_t ringBytes, uint64_t stageBytes);
  // Maps a peer's segment from its descriptor; checks the seals, the size and the header
  // against what this rank expects (Errc::Remote naming `who` if anything is off).
  static Segment attach(Fd fd, uint32_t nlocal, uint32_t localIndex, uint64_t ringBytes, uint64_t stageBytes,
                        const std::string& who);

  int fd() const { return fd_.get(); }
  Header* header() const { return reinterpret_cast<Header*>(base_); }
  RingCtl* ctl(uint32_t receiver) const;
  uint8_t* ring(uint32_t receiver) const;
  // A peer's segment, attached: maps now the header, the ring controls and (on a host of up to
  // 16 ranks) the first page of each slot and cell, which small calls read (attach() leaves
  // every page to fault in; the rest faults in as it is first used).
  void populateFor() const;
  uint8_t* stage() const;
  uint8_t* cells() const;  // after the stage: kCells of kCellBytes
  uint8_t* notes() const;  // after the cells: kCells of kNoteBytes
  uint64_t ringBytes() const { return header()->ringBytes; }

 private:
  Fd fd_;
  uint8_t* base_ = nullptr;
  size_t size_ = 0;
};


}  // namespace hora::shm
