// The shared stage: a capability that a transport may offer to the ranks it connects when they
// can all address one another's memory (shared memory between the processes of one host; the
// ranks' GPU memory mapped through CUDA IPC, a RegionStage over the host's). The shared-stage
// algorithms (src/coll/stage.cc) and
// the executor's Signal and Wait ops use it through this interface alone, without knowing which
// transport is under it.
//
// What the stage holds, per member rank (members are numbered 0..size()-1 in rank order):
//   - a region of regionBytes() bytes that its owner writes and every member may read;
//   - kCounters counters that only the owner writes (post) and every member reads (reached),
//     each only ever growing: a release store and an acquire load, so whatever the owner wrote
//     before a post is visible to a member that has seen the post;
//   - an announcement of the collective the owner is in (announce / mismatch), so that members
//     can check they are all in the same call without a message;
//   - the text of the owner's failure (markFailed), for members that wait on its counters;
//   - where the transport has them, kCells cells of kCellBytes: the small rooted calls (a
//     Broadcast's root, a Reduce's senders, ...) put their data in the cell of their sequence
//     number, so that a rank that only gives may run up to kCells calls ahead of its readers;
//   - where the transport has them, kCells notes of two cache lines each: a one-step call's
//     sequence number, call number and tag, and its input where that is at most kNoteBytes, so
//     that a rank reading a small call learns that its peer has posted, that their calls agree
//     and what it put, from one or two cache lines rather than three (the counters, the
//     announcement, the slot) read one after another;
//   - the history of the owner's last kHistory announcements, so that a member that ran ahead
//     can still be compared (announced());
//   - where the transport can, a way to read a member's own memory (readMember: the single
//     copy of a large Broadcast, src/coll/stage.cc).
//
// Waiting: a member that finds nothing to do calls arm() before it blocks in poll() on the
// descriptors arm() added, then disarm() after; a member that posts calls wakeAll() afterwards
// (only members that armed pay a system call).
#pragma once
#include <poll.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"

namespace hora::transport {

class SharedStage {
 public:
  static constexpr int kCounters = 4;
  // Each member's region holds kSlots slots of regionBytes() / kSlots bytes: two for inputs and
  // two for outputs, used alternately by consecutive chunks (src/coll/stage_layout.h).
  static constexpr int kSlots = 4;
  static constexpr int kCells = 64;
  static constexpr size_t kCellBytes = size_t(32) << 10;
  // A note (see above): written by its owner, data first, then seq (a release); a member that
  // reads seq (an acquire) equal to the sequence number it expects finds the rest complete.
  // Rewritten kCells stage calls on, so only after every member has read it (InFree). An input
  // of up to kNoteLine bytes lies in the first line with seq; a larger one reaches into the
  // second, whose last word (seq2) the owner sets to the sequence number too, so that a member
  // may read it while it looks for seq, and have both lines on the way at once.
  static constexpr size_t kNoteLine = 40;
  static constexpr size_t kNoteBytes = 96;
  struct alignas(64) Note {
    std::atomic<uint64_t> seq;
    uint64_t callNo;
    uint64_t tag;
    uint8_t data[kNoteBytes];
    std::atomic<uint64_t> seq2;
  };
  static_assert(sizeof(Note) == 128 && offsetof(Note, data) + kNoteLine == 64, "a note is two cache lines");
  // More than a member can run ahead of another (kCells stage calls, see src/coll/stage_now.cc).
  static constexpr int kHistory = 128;

  virtual ~SharedStage() = default;

  virtual int size() const = 0;   // member ranks
  virtual int index() const = 0;  // this rank's place among them
  virtual const std::vector<int>& ranks() const = 0;  // communicator rank of each member
  virtual const std::string& memberName(int member) const = 0;  // "rank 3 (host, pid 123)"

  // The regions and counters are on the latency path of every small collective, so they are
  // plain loads and stores through the addresses the implementation lays out once (map()),
  // not virtual calls.
  size_t regionBytes() const { return regionBytes_; }
  size_t slotBytes() const { return regionBytes_ / kSlots; }
  uint8_t* region(int member) const { return regions_[static_cast<size_t>(member)]; }  // writable for this rank's own

  void post(int counter, uint64_t value) const {
    counters_[static_cast<size_t>(self_)][counter].store(value, std::memory_order_release);
  }
  // Whether every member (this one included), or only member `only` when it is >= 0, has
  // posted at least `value` on `counter`.
  // What a member posted is remembered where this rank read it: a counter already seen at or
  // past `value` is not read again, so a rank does not pull a peer's cache line, which the peer
  // writes at every call, to learn what it knew (the wait before a slot or cell is rewritten
  // mostly asks about a call long done).
  bool reached(int counter, uint64_t value, int only = -1) const {
    if (only >= 0) return reachedBy(static_cast<size_t>(only), counter, value);
    for (size_t m = 0; m < counters_.size(); ++m)
      if (!reachedBy(m, counter, value)) return false;
    return true;
  }
  // What member has posted on `counter` so far (for the text of a wait that timed out).
  uint64_t posted(int member, int counter) const {
    return counters_[static_cast<size_t>(member)][counter].load(std::memory_order_acquire);
  }
  // The cell of sequence number `seq` of member's cells (only where hasCells()).
  bool hasCells() const { return !cells_.empty(); }
  uint8_t* cell(int member, uint64_t seq) const {
    return cells_[static_cast<size_t>(member)] + (seq % kCells) * kCellBytes;
  }
  // The note of sequence number `seq` of member's notes (only where hasNotes()).
  bool hasNotes() const { return !notes_.empty(); }
  Note* note(int member, uint64_t seq) const { return notes_[static_cast<size_t>(member)] + seq % kCells; }
  // Wakes the members that armed; call after the posts of a pass.
  virtual void wakeAll() const = 0;

  // Before blocking: asks to be woken, appends what to poll() on, and returns why a member
  // (every one, or only `only`) will never post again ("" if none): its process is gone, it
  // closed its communicator, or it failed, in which case *relayed is the code of its failure
  // (else Errc::Success) and the text is its own account of it, to be passed on unchanged.
  virtual std::string arm(int only, Errc* relayed, std::vector<pollfd>& fds) const = 0;
  virtual void disarm() const = 0;

  // Each member announces (call number, tag) as it starts a collective; mismatch() returns a
  // member (any, or `only`) whose call `no` has another tag (its tag in *theirs), or -1. A member may already
  // be one call further, so the previous call's tag is kept too.
  virtual void announce(uint64_t no, uint64_t tag) const = 0;
  virtual int mismatch(uint64_t no, uint64_t tag, uint64_t* theirs, int only = -1) const = 0;
  // The tag member announced for its call `no` (true), or false where it has not announced that
  // call yet (or, had it run kHistory calls further, no longer knows it). lastCall: the number
  // of the last call it announced.
  virtual bool announced(int member, uint64_t no, uint64_t* tag) const = 0;
  virtual uint64_t lastCall(int member) const = 0;
  // The first call this rank has not yet compared with its neighbour's (0: none, so every call
  // it announced is compared); checkedThrough: the last call through which member has.
  virtual void publishUnchecked(uint64_t from) const = 0;
  virtual uint64_t checkedThrough(int member) const = 0;
  // Whether member closed its communicator (it compares no more calls).
  virtual bool closed(int member) const = 0;
  // Whether this rank runs a call of the communicator now (from its start to its return, failed
  // or not; running(true) at the start, running(false) at the end), and whether member does. A
  // rank whose wait times out on a member that runs no call and has not begun the one waited in
  // knows that member cannot say why it is stuck (core::Executor::absentMembers). A stage that
  // cannot tell says every member runs one.
  virtual void running(bool on) const { (void)on; }
  virtual bool runs(int member) const {
    (void)member;
    return true;
  }
  // running(true) now, running(false) when it goes (none if stage is null).
  class Running {
   public:
    explicit Running(const SharedStage* stage) : stage_(stage) {
      if (stage_) stage_->running(true);
    }
    ~Running() {
      if (stage_) stage_->running(false);
    }
    Running(const Running&) = delete;
    Running& operator=(const Running&) = delete;

   private:
    const SharedStage* stage_;
  };

  // Publishes why this rank failed, and the code of that cause (once; the first wins), before
  // its links close.
  virtual void markFailed(const std::string& why, Errc code) const = 0;

  // The single copy: a member reads another's buffer where it lies, in the other's process,
  // instead of the other copying it into its region first (and may write into another's buffer
  // likewise). memberAccess: whether every member may read and write every other's memory, and
  // how: Direct where the members are threads of one process (a memcpy), Kernel where they are
  // processes between which the kernel allows cross-memory access (process_vm_readv and
  // process_vm_writev, which pin the pages they copy: a system call and a page-table walk per
  // copy). Agreed by the members when the stage is set up, so that it is the same on every one
  // of them.
  enum class Access : uint8_t { None, Direct, Kernel };
  virtual Access memberAccess() const { return Access::None; }
  // Copies `bytes` from member's memory at `from`, an address in its process, to dst (read), or
  // from src to member's memory at `to` (write). Throws Errc::Remote naming the member where it
  // cannot: its process is gone, or the address is not one it maps (what it published was not
  // a buffer of its own).
  virtual void readMember(int member, uint64_t from, void* dst, size_t bytes) const {
    (void)from, (void)dst, (void)bytes;
    fail(Errc::Internal, "the shared stage cannot read %s's memory", memberName(member).c_str());
  }
  virtual void writeMember(int member, uint64_t to, const void* src, size_t bytes) const {
    (void)to, (void)src, (void)bytes;
    fail(Errc::Internal, "the shared stage cannot write %s's memory", memberName(member).c_str());
  }
  // What a member publishes in its region for the others to read or write: `bytes` at
  // `address` in its process, for chunk `chunk` of the stage's sequence; of which it writes the
  // last `put` bytes into the reader's buffer itself (a reader reads the rest). A writer writes
  // at `result` where it is not 0 (a Reduce's root reads from its input and is written its
  // result), at `address` otherwise.
  struct Published {
    uint64_t chunk, address, bytes, put, result = 0;
  };

 protected:
  // For the implementation, once its members' memory is mapped: each member's region and
  // counters (kCounters of them), by member, and this rank's place.
  void map(std::vector<uint8_t*> regions, std::vector<std::atomic<uint64_t>*> counters, size_t regionBytes,
           int self, std::vector<uint8_t*> cells = {}, std::vector<Note*> notes = {}) {
    regions_ = std::move(regions);
    cells_ = std::move(cells);
    notes_ = std::move(notes);
    counters_ = std::move(counters);
    seen_ = std::make_unique<std::atomic<uint64_t>[]>(counters_.size() * kCounters);
    regionBytes_ = regionBytes;
    self_ = self;
  }
  // For a stage that shares another's counters (and place) with regions of its own.
  void mapCountersOf(const SharedStage& other, std::vector<uint8_t*> regions, size_t regionBytes) {
    map(std::move(regions), other.counters_, regionBytes, other.self_);
  }

 private:
  // Seen at or past value: from what this rank last read of member's counter, or by reading it
  // (acquire, as a post is a release) and remembering it (release and acquire here too, so that
  // a thread that finds it remembered sees what the post published, whichever thread read it).
  bool reachedBy(size_t member, int counter, uint64_t value) const {
    std::atomic<uint64_t>& seen = seen_[member * kCounters + static_cast<size_t>(counter)];
    if (seen.load(std::memory_order_acquire) >= value) return true;
    const uint64_t now = counters_[member][counter].load(std::memory_order_acquire);
    if (now < value) return false;
    seen.store(now, std::memory_order_release);
    return true;
  }

  std::vector<uint8_t*> regions_;
  std::vector<uint8_t*> cells_;  // each member's first cell; empty where the transport has none
  std::vector<Note*> notes_;     // each member's first note; likewise
  std::vector<std::atomic<uint64_t>*> counters_;
  std::unique_ptr<std::atomic<uint64_t>[]> seen_;  // by member and counter: reachedBy
  size_t regionBytes_ = 0;
  int self_ = 0;
};

// A stage whose regions are given (the members' device memory, each mapped by the others through
// CUDA IPC, or the pointer itself between ranks of one process: transports/cuda_ipc) over
// another stage of the same members: its counters, call announcements, failure records and
// wake-ups are that host stage's, so a dead or stopped member is found exactly as there. The
// shared-stage algorithms run on it unchanged; their reductions and copies then read the peers'
// regions, as kernels on a device engine (core/device_engine.h).
class RegionStage : public SharedStage {
 public:
  // host: the ranks' stage; regions: each member's region (this rank's own and the others'
  // mappings), regionBytes each.
  RegionStage(std::shared_ptr<const SharedStage> host, std::vector<uint8_t*> regions, size_t regionBytes)
      : host_(std::move(host)) {
    mapCountersOf(*host_, std::move(regions), regionBytes);
  }
  int size() const override { return host_->size(); }
  int index() const override { return host_->index(); }
  const std::vector<int>& ranks() const override { return host_->ranks(); }
  const std::string& memberName(int member) const override { return host_->memberName(member); }
  void wakeAll() const override { host_->wakeAll(); }
  std::string arm(int only, Errc* relayed, std::vector<pollfd>& fds) const override {
    return host_->arm(only, relayed, fds);
  }
  void disarm() const override { host_->disarm(); }
  void announce(uint64_t no, uint64_t tag) const override { host_->announce(no, tag); }
  int mismatch(uint64_t no, uint64_t tag, uint64_t* theirs, int only = -1) const override {
    return host_->mismatch(no, tag, theirs, only);
  }
  bool announced(int member, uint64_t no, uint64_t* tag) const override { return host_->announced(member, no, tag); }
  uint64_t lastCall(int member) const override { return host_->lastCall(member); }
  void publishUnchecked(uint64_t from) const override { host_->publishUnchecked(from); }
  uint64_t checkedThrough(int member) const override { return host_->checkedThrough(member); }
  bool closed(int member) const override { return host_->closed(member); }
  void running(bool on) const override { host_->running(on); }
  bool runs(int member) const override { return host_->runs(member); }
  void markFailed(const std::string& why, Errc code) const override { host_->markFailed(why, code); }

 private:
  std::shared_ptr<const SharedStage> host_;
};

}  // namespace hora::transport
