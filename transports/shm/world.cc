#include "transports/shm/world.h"

#include <unistd.h>

#include <atomic>

namespace hora::shm {

void World::wake(uint32_t peer) const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const Peer& p = peers[peer];
  if (p.segment.header()->sleeping.load(std::memory_order_relaxed)) {
    uint64_t one = 1;
    (void)!::write(p.doorbell.get(), &one, sizeof one);
  }
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

}  // namespace hora::shm
