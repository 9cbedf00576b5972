// The device-initiated protocol (protocol.h) on the host: how the emulated GPU runs the kernel of
// a device-initiated collective. One thread (the emulated stream's) is the whole block; blocks
// run one after the other, which cannot deadlock since a block waits only for the same block of
// other ranks, which run their blocks in the same order; the reductions are the CPU kernels, which the CUDA kernels match bit for bit.
#include "gpu/protocol_host.h"

#include <sched.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/cpu/reduce.h"

namespace hora::gpu {

namespace {

struct HostX {
  int tid() const { return 0; }
  int nthreads() const { return 1; }
  void sync() const {}
  bool agree(bool ok) const { return ok; }
  uint64_t share(uint64_t v) const { return v; }
  void copy(void* dst, const void* src, size_t bytes) const {
    if (bytes && dst != src) memcpy(dst, src, bytes);
  }
  static kernels::ReduceSpec spec(const Desc& d) {
    kernels::ReduceSpec s;
    s.dtype = static_cast<DataType>(d.dtype);
    s.op = d.op == 4 ? RedOp::Sum : static_cast<RedOp>(d.op);
    s.divide = d.divide;
    s.divisor = d.divisor;
    return s;
  }
  void reduce(void* dst, const void* const* srcs, int n, size_t count, const Desc& d) const {
    if (count) kernels::reduce(&dst, 1, srcs, n, count, spec(d));
  }
  void reduce2(void* a, void* b, const void* const* srcs, int n, size_t count, const Desc& d) const {
    void* dsts[2] = {a, b};
    if (count) kernels::reduce(dsts, a == b ? 1 : 2, srcs, n, count, spec(d));
  }
  // Into m destinations, through a buffer of its own (a destination may be a source).
  void reduceN(void* const* dsts, int m, const void* const* srcs, int n, size_t count, const Desc& d) const {
    if (!count) return;
    std::vector<uint8_t> out(count * d.esize);
    void* to = out.data();
    kernels::reduce(&to, 1, srcs, n, count, spec(d));
    for (int k = 0; k < m; ++k) memcpy(dsts[k], out.data(), out.size());
  }
  static uint64_t load64(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  static void store64(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  static uint32_t load32(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
  static void store32(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
  static bool claim(uint64_t* p) {
    uint64_t none = 0;
    return __atomic_compare_exchange_n(p, &none, 1, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  }
  static void fenceSystem() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
  static void fenceDevice() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
  static uint64_t now() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
  }
  // More emulated streams than cores: from spinning to yielding to sleeping.
  static void pause(unsigned spins) {
    if (spins < 32) return;
    if (spins < 256) sched_yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(spins < 4096 ? 20 : 200));
  }
  static uint32_t read32(const uint8_t* p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  static void write32(uint8_t* p, uint32_t v) { memcpy(p, &v, 4); }
};

}  // namespace

void runOnHost(const Desc& d) {
  HostX x;
  for (int b = 0; b < d.blocks; ++b) Run<HostX>{x, d, b}();
}

void runOnHost(const Batch& t) {
  HostX x;
  for (int b = 0; b < t.blocks; ++b) runBatch(x, t, b);
}

}  // namespace hora::gpu
