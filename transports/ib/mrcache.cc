#include "transports/ib/mrcache.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>

#include "base/error.h"
#include "base/log.h"

namespace hora::ib {

namespace {
// Every cache of the process, for the hooks. A thread that holds a cache's lock (or is inside
// the hooks already) frees memory of its own (map nodes, the verbs library's): that never
// concerns a registration and must not take the lock again.
std::mutex gAllMu;
std::vector<MrCache*>& allCaches() {
  static auto* v = new std::vector<MrCache*>();  // never destroyed: hooks may run at exit
  return *v;
}
std::atomic<size_t> gCachedEntries{0};
thread_local int tInCache = 0;

struct InCache {
  InCache() { ++tInCache; }
  ~InCache() { --tInCache; }
};

uintptr_t pageSize() {
  static const uintptr_t p = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return p;
}
}  // namespace

MrCache::MrCache(ibv_pd* pd, bool odp) : pd_(pd), odp_(odp), caching_(odp || memoryHooksActive()) {
  stats_.caching = caching_;
  stats_.odp = odp_;
  InCache in;  // the vector may reallocate: its free must not come back for gAllMu
  std::lock_guard<std::mutex> g(gAllMu);
  allCaches().push_back(this);
}

MrCache::~MrCache() {
  InCache in;
  {
    std::lock_guard<std::mutex> g(gAllMu);
    auto& v = allCaches();
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i] == this) {
        v.erase(v.begin() + static_cast<long>(i));
        break;
      }
  }
  std::lock_guard<std::mutex> g(mu_);
  for (auto& kv : entries_) ibv_dereg_mr(kv.second.mr);
  for (auto& kv : dead_)
    if (kv.second.mr) ibv_dereg_mr(kv.second.mr);
  counted(-static_cast<long>(entries_.size()));
  entries_.clear();
}

void MrCache::counted(long delta) {
  // Only registrations the hooks must drop are counted: with ODP the hooks have nothing to do.
  if (!odp_) gCachedEntries += static_cast<size_t>(delta);
}

MrCache::Handle MrCache::acquire(const void* addr, size_t bytes, bool remoteWrite) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  const uintptr_t start = a & ~(pageSize() - 1);
  const uintptr_t end = (a + std::max<size_t>(bytes, 1) + pageSize() - 1) & ~(pageSize() - 1);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | (odp_ ? IBV_ACCESS_ON_DEMAND : 0);
  InCache in;
  std::unique_lock<std::mutex> g(mu_);
  if (caching_) {
    // The entry that starts at or below start and reaches end (entries may overlap: a buffer
    // that grew is registered again, the smaller registration ages out).
    auto it = entries_.upper_bound(start);
    while (it != entries_.begin()) {
      --it;
      if (it->first + longest_ < start) break;
      Entry& e = it->second;
      if (e.end >= end) {
        ++e.users;
        e.lastUse = ++clock_;
        ++stats_.hits;
        return Handle{e.mr, e.id};
      }
    }
  }
  ++stats_.misses;
  ibv_mr* mr = ibv_reg_mr(pd_, reinterpret_cast<void*>(start), end - start, access);
  if (!mr && caching_ && !entries_.empty()) {
    // Out of pinnable memory, perhaps: give back what is unused and try once more.
    for (size_t before = entries_.size() + 1; !entries_.empty() && entries_.size() < before;) {
      before = entries_.size();
      evictOne();
    }
    mr = ibv_reg_mr(pd_, reinterpret_cast<void*>(start), end - start, access);
  }
  if (!mr && !remoteWrite && (errno == EFAULT || errno == EACCES || errno == EPERM)) {
    // Read-only memory that only goes out: a registration of its own, for reading.
    mr = ibv_reg_mr(pd_, reinterpret_cast<void*>(start), end - start, odp_ ? IBV_ACCESS_ON_DEMAND : 0);
    if (mr) return Handle{mr, 0};
  }
  if (!mr)
    fail(Errc::System, "registering %zu bytes at %p with the RDMA device failed: %s (RLIMIT_MEMLOCK, `ulimit -l`, "
         "limits how much memory a process may pin)", static_cast<size_t>(end - start), reinterpret_cast<void*>(start),
         errnoText(errno).c_str());
  if (!caching_) return Handle{mr, 0};
  if (entries_.size() >= kMaxEntries) evictOne();
  const uint64_t id = nextId_++;
  // Another entry may start at the same page (a shorter registration of the same buffer).
  auto old = entries_.find(start);
  if (old != entries_.end()) {
    if (old->second.users == 0) {
      ibv_dereg_mr(old->second.mr);
      entries_.erase(old);
      counted(-1);
    } else {
      return Handle{mr, 0};  // in use: this one serves only this message
    }
  }
  entries_.emplace(start, Entry{end, a, a + std::max<size_t>(bytes, 1), mr, id, 1, ++clock_});
  longest_ = std::max<size_t>(longest_, end - start);
  counted(1);
  return Handle{mr, id};
}

void MrCache::release(const Handle& h) noexcept {
  if (!h.mr) return;
  InCache in;
  if (h.id == 0) {
    ibv_dereg_mr(h.mr);
    return;
  }
  std::lock_guard<std::mutex> g(mu_);
  const uintptr_t start = reinterpret_cast<uintptr_t>(h.mr->addr);
  auto it = entries_.find(start);
  if (it != entries_.end() && it->second.id == h.id) {
    --it->second.users;
    return;
  }
  // Invalidated while in use: kept until its last user is done.
  auto d = dead_.find(h.id);
  if (d != dead_.end() && --d->second.users == 0) {
    if (d->second.mr) ibv_dereg_mr(d->second.mr);  // null: discarded already
    dead_.erase(d);
  }
}

void MrCache::discard(const Handle& h) noexcept {
  if (!h.mr) return;
  InCache in;
  if (h.id != 0) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = entries_.find(reinterpret_cast<uintptr_t>(h.mr->addr));
    if (it != entries_.end() && it->second.id == h.id) {
      // Other users keep a count in dead_, with no registration left to drop.
      if (it->second.users > 1) {
        Entry e = it->second;
        --e.users;
        e.mr = nullptr;
        dead_.emplace(e.id, e);
      }
      entries_.erase(it);
      counted(-1);
    } else {
      auto d = dead_.find(h.id);
      if (d == dead_.end() || !d->second.mr) return;  // discarded by another user already
      d->second.mr = nullptr;
      if (--d->second.users == 0) dead_.erase(d);
    }
  }
  ibv_dereg_mr(h.mr);
}

void MrCache::evictOne() {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->second.users == 0 && (victim == entries_.end() || it->second.lastUse < victim->second.lastUse)) victim = it;
  if (victim == entries_.end()) return;
  ibv_dereg_mr(victim->second.mr);
  entries_.erase(victim);
  counted(-1);
  ++stats_.evictions;
}

void MrCache::invalidate(uintptr_t addr, size_t bytes) noexcept {
  if (odp_) return;  // the kernel follows the mappings
  std::lock_guard<std::mutex> g(mu_);
  if (entries_.empty()) return;
  const uintptr_t end = addr + bytes;
  auto it = entries_.lower_bound(addr > longest_ ? addr - longest_ : 0);
  while (it != entries_.end() && it->first < end) {
    if (it->second.userEnd <= addr || it->second.userStart >= end) {
      ++it;
      continue;
    }
    ++stats_.invalidations;
    // An entry in use keeps its registration until its message completes (the caller freed a
    // buffer that a message still uses: its own mistake, but the pages stay pinned, not reused).
    if (it->second.users == 0)
      ibv_dereg_mr(it->second.mr);
    else
      dead_.emplace(it->second.id, it->second);
    it = entries_.erase(it);
    counted(-1);
  }
}

bool MrCache::anyCached() noexcept { return gCachedEntries.load(std::memory_order_relaxed) != 0; }

void MrCache::invalidateAll(uintptr_t addr, size_t bytes) noexcept {
  if (gCachedEntries.load(std::memory_order_relaxed) == 0 || tInCache > 0 || bytes == 0) return;
  InCache in;
  std::lock_guard<std::mutex> g(gAllMu);
  for (MrCache* c : allCaches()) c->invalidate(addr, bytes);
}

MrCache::Stats MrCache::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  Stats s = stats_;
  s.entries = entries_.size();
  return s;
}

namespace {
std::array<void*, 5> gHooks{};
}

void announceMemoryHooks(const std::array<void*, 5>& hooks) { gHooks = hooks; }

bool memoryHooksActive() {
  // The program's lookup finds the hooks, not another object's definitions: then every call
  // (the program's, its libraries') reaches them.
  static const bool active = [] {
    static const char* const names[5] = {"free", "realloc", "munmap", "mremap", "madvise"};
    for (size_t i = 0; i < 5; ++i)
      if (!gHooks[i] || dlsym(RTLD_DEFAULT, names[i]) != gHooks[i]) return false;
    return true;
  }();
  return active;
}

}  // namespace hora::ib
