// copy_paths: which way of moving bytes between two processes of one host is fastest, by size.
// Not a Hora benchmark: the floor under the shared-memory transport's choices.
//
//   memcpy    one process copies its own buffer (the machine's copy bandwidth, for scale)
//   staged    A copies into a shared slot, B copies out of it (two copies, pipelined over two
//             slots of --slot bytes): what the shared-memory rings and stage do
//   cma       B reads A's private buffer with process_vm_readv (one copy, by the kernel, with
//             a syscall and page pinning per call): cross-memory attach
//
// usage: copy_paths [-b MIN] [-e MAX] [-f FACTOR] [-s SLOT] [-n ITERS]
// Prints one row per size: GB/s of each path (bytes moved from A's buffer to B's buffer / time).
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  if (v < 1) {
    std::fprintf(stderr, "copy_paths: bad size %s\n", s);
    std::exit(2);
  }
  return static_cast<size_t>(v);
}

// Shared between the two processes.
struct Shared {
  alignas(64) std::atomic<uint64_t> go;         // A: round r may start
  alignas(64) std::atomic<uint64_t> filled[2];  // A: chunk number in slot k
  alignas(64) std::atomic<uint64_t> drained[2]; // B: chunk number read out of slot k
  alignas(64) std::atomic<uint64_t> done;       // B: round r finished
  alignas(64) std::atomic<uint64_t> reported;   // B: the cma figure of size number r is in
  double cmaBw;
  uintptr_t srcAddr;                            // A's buffer, for process_vm_readv
};

void spinUntil(const std::atomic<uint64_t>& a, uint64_t v) {
  while (a.load(std::memory_order_acquire) < v) __builtin_ia32_pause();
}

}  // namespace

int main(int argc, char** argv) {
  size_t minB = 4096, maxB = size_t(64) << 20, factor = 4, slot = size_t(512) << 10;
  int iters = 20;
  int c;
  while ((c = getopt(argc, argv, "b:e:f:s:n:h")) != -1) {
    switch (c) {
      case 'b': minB = parseSize(optarg); break;
      case 'e': maxB = parseSize(optarg); break;
      case 'f': factor = std::max<size_t>(2, parseSize(optarg)); break;
      case 's': slot = parseSize(optarg); break;
      case 'n': iters = std::max(1, atoi(optarg)); break;
      default:
        std::fprintf(c == 'h' ? stdout : stderr, "usage: copy_paths [-b MIN] [-e MAX] [-f FACTOR] [-s SLOT] [-n ITERS]\n");
        return c == 'h' ? 0 : 2;
    }
  }
  auto* sh = static_cast<Shared*>(mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  auto* slots = static_cast<uint8_t*>(mmap(nullptr, 2 * slot, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED || slots == MAP_FAILED) return 1;
  new (sh) Shared{};
  std::vector<uint8_t> buf(maxB, 1);  // A's source, B's destination (each process its own copy)
  std::vector<uint8_t> tmp(maxB, 0);
  sh->srcAddr = reinterpret_cast<uintptr_t>(buf.data());
  const int ncpu = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  pid_t a = getpid();
  pid_t b = fork();
  if (b < 0) return 1;
  const bool isA = b > 0;
  if (ncpu >= 2) {  // one core each, as hora-run places two ranks
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(isA ? 0 : 1, &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  if (isA) std::printf("# copy_paths: GB/s from one process's buffer to another's; slot %zu bytes\n"
                       "# %12s %10s %10s %10s\n", slot, "bytes", "memcpy", "staged", "cma");
  uint64_t round = 0, chunkSeq = 0, sizeNo = 0;
  for (size_t bytes = minB; bytes <= maxB; bytes *= factor) {
    const int n = bytes < (size_t(1) << 20) ? iters * 20 : iters;
    // memcpy, in A alone.
    double memcpyBw = 0;
    if (isA) {
      memcpy(tmp.data(), buf.data(), bytes);
      auto t0 = Clock::now();
      for (int i = 0; i < n; ++i) memcpy(tmp.data(), buf.data(), bytes);
      memcpyBw = static_cast<double>(bytes) * n / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
    }
    // staged, pipelined over two slots.
    auto t0 = Clock::now();
    for (int i = -1; i < n; ++i) {  // round -1 warms up
      ++round;
      if (isA) sh->go.store(round, std::memory_order_release);
      else spinUntil(sh->go, round);
      for (size_t off = 0; off < bytes; off += slot) {
        const size_t len = std::min(slot, bytes - off);
        const uint64_t k = ++chunkSeq;  // both sides count the same chunks
        const int s = static_cast<int>(k % 2);
        if (isA) {
          if (k > 2) spinUntil(sh->drained[s], k - 2);
          memcpy(slots + s * slot, buf.data() + off, len);
          sh->filled[s].store(k, std::memory_order_release);
        } else {
          spinUntil(sh->filled[s], k);
          memcpy(buf.data() + off, slots + s * slot, len);
          sh->drained[s].store(k, std::memory_order_release);
        }
      }
      if (!isA) sh->done.store(round, std::memory_order_release);
      else spinUntil(sh->done, round);
      if (i == -1) t0 = Clock::now();
    }
    const double stagedBw = static_cast<double>(bytes) * n / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
    // cma: B reads A's buffer (A waits: its buffer must not change meanwhile).
    ++sizeNo;
    if (!isA) {
      double cmaBw = 0;
      iovec local{buf.data(), bytes}, remote{reinterpret_cast<void*>(sh->srcAddr), bytes};
      if (process_vm_readv(a, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(bytes)) {
        std::perror("process_vm_readv");
      } else {
        auto t1 = Clock::now();
        for (int i = 0; i < n; ++i) (void)!process_vm_readv(a, &local, 1, &remote, 1, 0);
        cmaBw = static_cast<double>(bytes) * n / std::chrono::duration<double>(Clock::now() - t1).count() / 1e9;
      }
      sh->cmaBw = cmaBw;
      sh->reported.store(sizeNo, std::memory_order_release);
    } else {
      spinUntil(sh->reported, sizeNo);
      std::printf("  %12zu %10.2f %10.2f %10.2f\n", bytes, memcpyBw, stagedBw, sh->cmaBw);
      std::fflush(stdout);
    }
  }
  if (isA) {
    int st = 0;
    waitpid(b, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  }
  return 0;
}
