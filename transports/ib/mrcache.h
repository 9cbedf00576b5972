// The memory-registration cache of one protection domain. Registering a buffer pins its pages
// and costs a system call and a page walk (tens of microseconds per MiB): a collective that
// sends from the same buffer every step should pay that once. A cached registration must never
// outlive the memory it describes, or an RDMA write would land in pages the process no longer
// owns at that address. Three ways to keep that promise, the first that this process allows:
//   - on-demand paging (the device's ODP): the kernel follows the address space, so a
//     registration stays right whatever the process does with its memory;
//   - memory hooks (memhooks.cc): libhora defines free, realloc, munmap, mremap and madvise,
//     which drop every registration overlapping the memory being released before passing the
//     call on. They see those calls only when libhora comes before the C library in the
//     program's symbol lookup (a program linked with it); checked at run time;
//   - neither: no cache. Each message registers its buffer and deregisters it when it
//     completes.
// Registrations cover whole pages; at most kMaxEntries are kept, the least recently used
// unused one evicted first.
#pragma once
#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace hora::ib {

class MrCache {
 public:
  static constexpr size_t kMaxEntries = 256;

  MrCache(ibv_pd* pd, bool odp);
  ~MrCache();
  MrCache(const MrCache&) = delete;
  MrCache& operator=(const MrCache&) = delete;

  // A registration that covers [addr, addr + bytes); it stays valid until release(). Cached ones
  // allow local and remote write; a buffer that only goes out (remoteWrite false) and cannot be
  // registered for writing (read-only memory) gets one of its own. Throws Error(System) naming
  // the range when the device refuses it.
  struct Handle {
    ibv_mr* mr = nullptr;
    uint64_t id = 0;  // 0: not cached (deregistered by release)
  };
  Handle acquire(const void* addr, size_t bytes, bool remoteWrite);
  void release(const Handle& h) noexcept;
  // Deregisters now (a buffer a peer must no longer write into), whoever else uses it: their
  // later release() is then only a count.
  void discard(const Handle& h) noexcept;

  struct Stats {
    uint64_t hits = 0, misses = 0, invalidations = 0, evictions = 0;
    size_t entries = 0;
    bool caching = false;  // ODP or hooks: registrations are kept across messages
    bool odp = false;
  };
  Stats stats() const;

  // Called by the memory hooks: [addr, addr + bytes) is being released.
  static void invalidateAll(uintptr_t addr, size_t bytes) noexcept;
  // Whether any cache of the process holds a registration (one relaxed load: the hooks' fast path).
  static bool anyCached() noexcept;

 private:
  struct Entry {
    uintptr_t end;
    // The bytes asked for when it was made. Only releasing one of them can take its pages away
    // (every page it covers holds some of them), so only that invalidates it: the allocations
    // that share its first and last pages come and go without touching it.
    uintptr_t userStart, userEnd;
    ibv_mr* mr;
    uint64_t id;
    int users;
    uint64_t lastUse;
  };
  void invalidate(uintptr_t addr, size_t bytes) noexcept;
  void counted(long delta);
  void evictOne();

  ibv_pd* pd_;
  bool odp_;
  bool caching_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Entry> entries_;  // by start
  std::map<uint64_t, Entry> dead_;      // invalidated while in use, by id
  size_t longest_ = 0;                  // of any entry: bounds the overlap search
  uint64_t nextId_ = 1, clock_ = 0;
  Stats stats_;
};

// Whether libhora's free, munmap, ... are linked in (memhooks.cc) and are the ones this process
// calls.
bool memoryHooksActive();
// Called once by memhooks.cc, when it is linked in: the addresses of its five hooks.
void announceMemoryHooks(const std::array<void*, 5>& hooks);

}  // namespace hora::ib
