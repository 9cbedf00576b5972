// The memory hooks of the registration cache (mrcache.h): libhora's own free, realloc, munmap,
// mremap and madvise. In a program linked with libhora they come before the C library's in the
// symbol lookup, so every call the program and its libraries make goes through them: each drops
// the cached registrations that overlap the memory being given back, then calls the next
// definition (the C library's, or an allocator's that comes after libhora). The C library's own
// internal calls (free returning a chunk with munmap) do not come here, which is why free itself
// is hooked. Where the lookup finds another definition first (libhora loaded with dlopen, an
// allocator preloaded), the hooks never run: memoryHooksActive() says so and the cache is off.
// This file is not in the library's archive, which sanitizer and fuzzing builds link (their
// allocators must keep free): it is linked into libhora.so, and into the test programs that
// check the cache (tests/meson.build).
#include <dlfcn.h>
#include <malloc.h>
#include <stdarg.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>

#include "transports/ib/mrcache.h"

extern "C" void __libc_free(void*);  // glibc's, for the calls made while the next free is looked up
extern "C" void* __libc_realloc(void*, size_t);

namespace {

using FreeFn = void (*)(void*);
using ReallocFn = void* (*)(void*, size_t);
using UsableFn = size_t (*)(void*);
using MunmapFn = int (*)(void*, size_t);
using MremapFn = void* (*)(void*, size_t, size_t, int, ...);
using MadviseFn = int (*)(void*, size_t, int);

thread_local bool tResolving = false;

template <typename F>
F next(const char* name, std::atomic<F>& slot) {
  F f = slot.load(std::memory_order_acquire);
  if (f) return f;
  tResolving = true;
  f = reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
  tResolving = false;
  slot.store(f, std::memory_order_release);
  return f;
}

std::atomic<FreeFn> gFree{nullptr};
std::atomic<ReallocFn> gRealloc{nullptr};
std::atomic<UsableFn> gUsable{nullptr};
std::atomic<MunmapFn> gMunmap{nullptr};
std::atomic<MremapFn> gMremap{nullptr};
std::atomic<MadviseFn> gMadvise{nullptr};

void dropChunk(void* p) {
  if (!p || tResolving || !hora::ib::MrCache::anyCached()) return;
  UsableFn usable = next("malloc_usable_size", gUsable);
  if (usable) hora::ib::MrCache::invalidateAll(reinterpret_cast<uintptr_t>(p), usable(p));
}

}  // namespace

extern "C" {

// Each hook is an internal function and an exported alias of the C library's name: the
// internal address is what memoryHooksActive() compares the program's lookup with (an address
// taken of the exported name could be another object's, through this one's GOT).
static void horaHookFree(void* p) {
  if (!p) return;
  if (tResolving) {
    __libc_free(p);
    return;
  }
  dropChunk(p);
  FreeFn f = next("free", gFree);
  if (f) f(p);
}

static void* horaHookRealloc(void* p, size_t n) {
  if (tResolving) return __libc_realloc(p, n);
  dropChunk(p);  // it may move, or shrink
  ReallocFn f = next("realloc", gRealloc);
  return f ? f(p, n) : nullptr;
}

static int horaHookMunmap(void* addr, size_t len) {
  hora::ib::MrCache::invalidateAll(reinterpret_cast<uintptr_t>(addr), len);
  MunmapFn f = next("munmap", gMunmap);
  return f(addr, len);
}

static void* horaHookMremap(void* old, size_t oldLen, size_t newLen, int flags, ...) {
  hora::ib::MrCache::invalidateAll(reinterpret_cast<uintptr_t>(old), oldLen);
  void* newAddr = nullptr;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    newAddr = va_arg(ap, void*);
    va_end(ap);
    hora::ib::MrCache::invalidateAll(reinterpret_cast<uintptr_t>(newAddr), newLen);
  }
  MremapFn f = next("mremap", gMremap);
  return (flags & MREMAP_FIXED) ? f(old, oldLen, newLen, flags, newAddr) : f(old, oldLen, newLen, flags);
}

static int horaHookMadvise(void* addr, size_t len, int advice) {
  if (advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE)
    hora::ib::MrCache::invalidateAll(reinterpret_cast<uintptr_t>(addr), len);
  MadviseFn f = next("madvise", gMadvise);
  return f(addr, len, advice);
}

__attribute__((visibility("default"))) void free(void*) __attribute__((alias("horaHookFree")));
__attribute__((visibility("default"))) void* realloc(void*, size_t) __attribute__((alias("horaHookRealloc")));
__attribute__((visibility("default"))) int munmap(void*, size_t) __attribute__((alias("horaHookMunmap")));
__attribute__((visibility("default"))) void* mremap(void*, size_t, size_t, int, ...) __attribute__((alias("horaHookMremap")));
__attribute__((visibility("default"))) int madvise(void*, size_t, int) __attribute__((alias("horaHookMadvise")));

}  // extern "C"

namespace {
// Tells the cache (mrcache.cc) that the hooks are linked into this program, and where they are.
struct Announce {
  Announce() {
    hora::ib::announceMemoryHooks({reinterpret_cast<void*>(&horaHookFree), reinterpret_cast<void*>(&horaHookRealloc),
                                   reinterpret_cast<void*>(&horaHookMunmap), reinterpret_cast<void*>(&horaHookMremap),
                                   reinterpret_cast<void*>(&horaHookMadvise)});
  }
} gAnnounce;
}  // namespace
