#include "transports/shm/world.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/error.h"
#include "base/log.h"

namespace hora::shm {

namespace {
int membarrier(int cmd) { return static_cast<int>(::syscall(__NR_membarrier, cmd, 0, 0)); }
}  // namespace

std::string registerHeavyBarrier() {
  const int supported = membarrier(MEMBARRIER_CMD_QUERY);
  if (supported < 0) return "membarrier: " + errnoText(errno);
  if (!(supported & MEMBARRIER_CMD_GLOBAL_EXPEDITED)) return "membarrier has no global expedited command";
  if (membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) != 0) return "membarrier register: " + errnoText(errno);
  return "";
}

namespace {
// The publisher's side of the doorbells' ordering (world.h): a full fence, or with the
// sleepers' membarrier (asymmetric) only the compiler's.
void publisherFence(bool asymmetric) {
  if (asymmetric) std::atomic_signal_fence(std::memory_order_seq_cst);
  else std::atomic_thread_fence(std::memory_order_seq_cst);
}

// After the caller's fence: rings the doorbell of a peer that said it is going to sleep. The
// first publisher to see the flag takes it and rings; the sleeper looks at everything once it
// wakes, and sets the flag again before it sleeps again, so the others need not. (Each post
// rang while the flag stayed up: a rank that posts in a loop, a Reduce's sender running ahead,
// paid a write(2) a call for as long as the woken peer waited for a core, 10 us a call where
// 0.5 was the rest.)
void ringIfSleeping(const Peer& p) {
  std::atomic<uint32_t>& sleeping = p.segment.header()->sleeping;
  if (sleeping.load(std::memory_order_relaxed) && sleeping.exchange(0, std::memory_order_relaxed)) {
    uint64_t one = 1;
    (void)!::write(p.doorbell.get(), &one, sizeof one);
  }
}
}  // namespace

void World::wake(uint32_t peer) const {
  publisherFence(asymmetric);
  ringIfSleeping(peers[peer]);
}

void World::wakeAll() const {
  publisherFence(asymmetric);
  for (uint32_t p = 0; p < nlocal; ++p)
    if (p != localIndex) ringIfSleeping(peers[p]);
}

void World::armDoorbell() const {
  own.header()->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Every publisher that has not seen `sleeping` yet has its post visible once this returns.
  // (It cannot fail once registered; if it ever did, a wake-up could be missed, and the
  // sleeper's poll, never longer than Waiter::kMaxBlock, would find the post late, not never.)
  if (asymmetric && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0) {
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) HORA_WARN(log::kNet, "membarrier: %s; a wake-up may come late", errnoText(errno).c_str());
  }
}

void World::disarmDoorbell() const {
  own.header()->sleeping.store(0, std::memory_order_relaxed);
  uint64_t v;
  (void)!::read(doorbell.get(), &v, sizeof v);  // nonblocking: clears a ring, if any
}

void World::markFailed(const std::string& why, Errc code) const {
  Failure& f = own.header()->failure;
  if (f.failed.load(std::memory_order_relaxed)) return;
  const size_t n = std::min(why.size(), kFailureText - 1);
  memcpy(f.text, why.data(), n);
  f.text[n] = '\0';
  f.failed.store(static_cast<uint32_t>(code == Errc::Success ? Errc::Remote : code), std::memory_order_release);
}

namespace {
// Copies between this process and peer's (process_vm_readv or process_vm_writev: `read` says
// which way), the whole of it, or throws naming the peer.
void copyWith(const Peer& p, bool read, uint64_t remoteAt, void* local, size_t bytes) {
  auto* l = static_cast<uint8_t*>(local);
  while (bytes) {
    iovec mine{l, bytes};
    iovec theirs{reinterpret_cast<void*>(static_cast<uintptr_t>(remoteAt)), bytes};
    const ssize_t n = read ? process_vm_readv(p.process.pid(), &mine, 1, &theirs, 1, 0)
                           : process_vm_writev(p.process.pid(), &mine, 1, &theirs, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EFAULT;
      if (e == ESRCH || !p.process.alive())
        fail(Errc::Remote, "%s exited or crashed (its process is gone); while %s its buffer", p.name.c_str(),
             read ? "reading" : "writing");
      fail(Errc::Remote, "%s published a buffer that this rank cannot %s (%zu bytes at 0x%llx): %s", p.name.c_str(),
           read ? "read" : "write", bytes, static_cast<unsigned long long>(remoteAt), errnoText(e).c_str());
    }
    l += n;
    remoteAt += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

// Whether a rank of this process is reached with a plain memcpy. ThreadSanitizer cannot see the
// order the stage's counters give (each rank maps the segments at an address of its own, so a
// counter's release and its acquire are at two addresses), and so reads a memcpy from another
// rank's buffer as a race with the rank's own writes before and after the call; under it the
// kernel makes the same copy, out of its sight.
bool plainCopy(const World& w, int member) {
#if defined(__SANITIZE_THREAD__)
  return static_cast<uint32_t>(member) == w.localIndex;
#else
  return static_cast<uint32_t>(member) == w.localIndex || w.peers[static_cast<size_t>(member)].sameProcess;
#endif
}
}  // namespace

// A rank of this process publishes its own buffer's address: the program's own pointer.
void World::readMember(int member, uint64_t from, void* dst, size_t bytes) const {
  if (plainCopy(*this, member))
    memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(from)), bytes);
  else
    copyWith(peers[static_cast<size_t>(member)], true, from, dst, bytes);
}

void World::writeMember(int member, uint64_t to, const void* src, size_t bytes) const {
  if (plainCopy(*this, member))
    memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(to)), src, bytes);
  else
    copyWith(peers[static_cast<size_t>(member)], false, to, const_cast<void*>(src), bytes);
}

void World::mapStage() {
  std::vector<uint8_t*> regions;
  std::vector<std::atomic<uint64_t>*> counters;
  std::vector<uint8_t*> cells;
  std::vector<Note*> notes;
  for (uint32_t p = 0; p < nlocal; ++p) {
    const Segment& seg = p == localIndex ? own : peers[p].segment;
    regions.push_back(seg.stage());
    counters.push_back(seg.header()->counters);
    cells.push_back(seg.cells());
    notes.push_back(reinterpret_cast<Note*>(seg.notes()));
  }
  map(std::move(regions), std::move(counters), static_cast<size_t>(own.header()->stageBytes), static_cast<int>(localIndex),
      std::move(cells), std::move(notes));
}

std::string World::arm(int only, Errc* relayed, std::vector<pollfd>& fds) const {
  armDoorbell();
  std::string gone;
  *relayed = Errc::Success;
  for (uint32_t p = 0; p < nlocal && *relayed == Errc::Success; ++p) {
    if (p == localIndex || (only >= 0 && p != static_cast<uint32_t>(only))) continue;
    // A rank that failed says why before it closes its rings or exits: that text names where
    // the failure began, and wins over any symptom (relayed unchanged, as abort frames are).
    Errc code = Errc::Success;
    std::string why = failureOf(p, &code);
    if (!why.empty()) {
      gone = why;
      *relayed = code;
    } else if (!gone.empty()) {
      continue;
    } else if (peers[p].segment.ctl(localIndex)->senderClosed.load(std::memory_order_acquire)) {
      // A rank that left closes its rings: it will not post again (and may have exited since).
      gone = format("%s closed its communicator; while waiting for it in shared memory", peers[p].name.c_str());
    } else if (!peers[p].process.alive()) {
      gone = format("%s exited or crashed (its process is gone); while waiting for it in shared memory",
                    peers[p].name.c_str());
    }
    // It may have failed between the look at its failure and the one at its process or rings
    // (it says why before it closes or exits): then its account wins after all.
    if (!gone.empty() && *relayed == Errc::Success) {
      why = failureOf(p, &code);
      if (!why.empty()) {
        gone = why;
        *relayed = code;
      }
    }
  }
  fds.push_back(pollfd{doorbell.get(), POLLIN, 0});
  for (uint32_t p = 0; p < nlocal; ++p)
    if (p != localIndex && peers[p].process.pidfd() >= 0) fds.push_back(pollfd{peers[p].process.pidfd(), POLLIN, 0});
  return gone;
}

std::string World::failureOf(uint32_t peer, Errc* code) const {
  const Failure& f = peers[peer].segment.header()->failure;
  const uint32_t failed = f.failed.load(std::memory_order_acquire);
  if (!failed) return std::string();
  *code = peerCode(failed);  // the field holds the code of the cause (any other value: Remote)
  // The peer's memory: take at most the field, and only printable characters.
  const std::string s = peerText(f.text, strnlen(f.text, kFailureText));
  return s.empty() ? peers[peer].name + " failed" : s;
}

void World::announce(uint64_t no, uint64_t tag) const {
  Header* h = own.header();
  uint64_t lock = h->callLock.load(std::memory_order_relaxed);
  h->callLock.store(lock + 1, std::memory_order_relaxed);  // odd: being written
  std::atomic_thread_fence(std::memory_order_release);
  h->prevTag.store(h->callTag.load(std::memory_order_relaxed), std::memory_order_relaxed);
  h->callNo.store(no, std::memory_order_relaxed);
  h->callTag.store(tag, std::memory_order_relaxed);
  h->callLock.store(lock + 2, std::memory_order_release);
  // The history: invalid while rewritten, then the number once the tag is in.
  Announced& e = h->history[no % kHistory];
  e.no.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.tag.store(tag, std::memory_order_relaxed);
  e.no.store(no, std::memory_order_release);
}

bool World::announced(int member, uint64_t no, uint64_t* tag) const {
  const Header* h = (static_cast<uint32_t>(member) == localIndex ? own : peers[static_cast<size_t>(member)].segment).header();
  const Announced& e = h->history[no % kHistory];
  if (no == 0 || e.no.load(std::memory_order_acquire) != no) return false;
  const uint64_t t = e.tag.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (e.no.load(std::memory_order_relaxed) != no) return false;  // rewritten meanwhile
  *tag = t;
  return true;
}

void World::publishUnchecked(uint64_t from) const { own.header()->unchecked.store(from, std::memory_order_release); }

uint64_t World::checkedThrough(int member) const {
  const Header* h = (static_cast<uint32_t>(member) == localIndex ? own : peers[static_cast<size_t>(member)].segment).header();
  // Its pending calls are published before it announces the first of them: the number first.
  const uint64_t last = h->callNo.load(std::memory_order_acquire);
  const uint64_t from = h->unchecked.load(std::memory_order_acquire);
  return from ? from - 1 : last;
}

bool World::closed(int member) const {
  return static_cast<uint32_t>(member) != localIndex &&
         peers[static_cast<size_t>(member)].segment.ctl(localIndex)->senderClosed.load(std::memory_order_acquire);
}

void World::running(bool on) const {
  // Written by the owner only: a load and a store, no atomic read-modify-write on a call's path.
  std::atomic<uint32_t>& n = own.header()->running;
  const uint32_t now = n.load(std::memory_order_relaxed);
  n.store(on ? now + 1 : (now ? now - 1 : 0), std::memory_order_release);
}

bool World::runs(int member) const {
  const Header* h = (static_cast<uint32_t>(member) == localIndex ? own : peers[static_cast<size_t>(member)].segment).header();
  return h->running.load(std::memory_order_acquire) != 0;
}

uint64_t World::lastCall(int member) const {
  const Header* h = (static_cast<uint32_t>(member) == localIndex ? own : peers[static_cast<size_t>(member)].segment).header();
  return h->callNo.load(std::memory_order_acquire);
}

int World::mismatch(uint64_t no, uint64_t tag, uint64_t* theirs, int only) const {
  // One member (a rooted call's reader looks at its root's call alone, usually calls ahead of
  // it): its history has the call once it has announced it, in one read.
  uint64_t known = 0;
  if (only >= 0 && static_cast<uint32_t>(only) != localIndex && announced(only, no, &known)) {
    if (known == tag) return -1;
    *theirs = known;
    return only;
  }
  for (uint32_t p = 0; p < nlocal; ++p) {
    if (p == localIndex || (only >= 0 && p != static_cast<uint32_t>(only))) continue;
    const Header* h = peers[p].segment.header();
    uint64_t before = h->callLock.load(std::memory_order_acquire);
    if (before & 1) continue;
    uint64_t n = h->callNo.load(std::memory_order_relaxed);
    uint64_t t = h->callTag.load(std::memory_order_relaxed);
    uint64_t prev = h->prevTag.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h->callLock.load(std::memory_order_relaxed) != before) continue;  // changed meanwhile
    if (n == no + 1) {
      t = prev;
    } else if (n > no + 1) {
      // It ran further ahead (a rank that only gives does not wait): its history still has it.
      if (!announced(static_cast<int>(p), no, &t)) continue;
    } else if (n != no) {
      continue;
    }
    if (t != tag) {
      *theirs = t;
      return static_cast<int>(p);
    }
  }
  return -1;
}

}  // namespace hora::shm
