#include "transports/shm/world.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

namespace hora::shm {

namespace {
// After the caller's fence: rings the doorbell of a peer that said it is going to sleep.
void ringIfSleeping(const Peer& p) {
  if (p.segment.header()->sleeping.load(std::memory_order_relaxed)) {
    uint64_t one = 1;
    (void)!::write(p.doorbell.get(), &one, sizeof one);
  }
}
}  // namespace

void World::wake(uint32_t peer) const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  ringIfSleeping(peers[peer]);
}

void World::wakeAll() const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  for (uint32_t p = 0; p < nlocal; ++p)
    if (p != localIndex) ringIfSleeping(peers[p]);
}

void World::arm() const {
  own.header()->sleeping.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void World::disarm() const {
  own.header()->sleeping.store(0, std::memory_order_relaxed);
  uint64_t v;
  (void)!::read(doorbell.get(), &v, sizeof v);  // nonblocking: clears a ring, if any
}

void World::markFailed(const std::string& why) const {
  Failure& f = own.header()->failure;
  if (f.failed.load(std::memory_order_relaxed)) return;
  const size_t n = std::min(why.size(), kFailureText - 1);
  memcpy(f.text, why.data(), n);
  f.text[n] = '\0';
  f.failed.store(1, std::memory_order_release);
}

std::string World::failureOf(uint32_t peer) const {
  const Failure& f = peers[peer].segment.header()->failure;
  if (!f.failed.load(std::memory_order_acquire)) return std::string();
  // The peer's memory: take at most the field, and only printable characters.
  std::string s;
  for (size_t i = 0; i < kFailureText && f.text[i]; ++i)
    s += (f.text[i] >= 0x20 && f.text[i] < 0x7f) ? f.text[i] : '?';
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
}

int World::mismatch(uint64_t no, uint64_t tag, uint64_t* theirs) const {
  for (uint32_t p = 0; p < nlocal; ++p) {
    if (p == localIndex) continue;
    const Header* h = peers[p].segment.header();
    uint64_t before = h->callLock.load(std::memory_order_acquire);
    if (before & 1) continue;
    uint64_t n = h->callNo.load(std::memory_order_relaxed);
    uint64_t t = h->callTag.load(std::memory_order_relaxed);
    uint64_t prev = h->prevTag.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (h->callLock.load(std::memory_order_relaxed) != before) continue;  // changed meanwhile
    if (n == no + 1) t = prev;
    else if (n != no) continue;
    if (t != tag) {
      *theirs = t;
      return static_cast<int>(p);
    }
  }
  return -1;
}

}  // namespace hora::shm
