// kernel_perf: the CUDA reduction kernels (kernels/cuda) against cudaMemcpy device to device on
// the same GPU. For each dtype: reduce (2 inputs to 1 output, Sum) and reduce-copy (2 inputs to
// 2 outputs), and the copy itself, each timed with CUDA events over -n launches of -b bytes per
// buffer. Bandwidth counts every byte read and written (a copy of N bytes moves 2N, a reduce
// 3N, a reduce-copy 4N), so the kernels' figures compare with the copy's directly; "vs copy" is
// the kernel's bandwidth over the copy's, and the reduce rows of float32, bfloat16, float16 and
// the fp8 types show their target beside it (90%, 80% for fp8) and whether it is met. Exits 77
// (skipped) without a GPU.
#include <cuda_runtime.h>
#include <getopt.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "base/types.h"
#include "kernels/cuda/reduce.h"

namespace {

void ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "kernel_perf: %s failed: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

size_t parseBytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  const std::string unit = end ? end : "";
  if (unit == "K" || unit == "k") v *= 1024;
  else if (unit == "M" || unit == "m") v *= 1024 * 1024;
  else if (unit == "G" || unit == "g") v *= 1024.0 * 1024 * 1024;
  else if (!unit.empty()) {
    std::fprintf(stderr, "kernel_perf: bad size '%s'\n", s);
    std::exit(2);
  }
  return static_cast<size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  size_t bytes = size_t(256) << 20;
  int iters = 20;
  for (int c; (c = getopt(argc, argv, "b:n:h")) != -1;) {
    if (c == 'b') bytes = parseBytes(optarg);
    else if (c == 'n') iters = std::max(1, std::atoi(optarg));
    else {
      std::printf("usage: kernel_perf [-b bytes per buffer, K/M/G (default 256M)] [-n launches (default 20)]\n");
      return c == 'h' ? 0 : 2;
    }
  }
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    std::printf("SKIP: kernel_perf needs a GPU: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
    return 77;
  }
  cudaDeviceProp prop{};
  ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  bytes = (bytes + 15) / 16 * 16;
  void *a, *b, *c, *d;
  for (void** p : {&a, &b, &c, &d}) {
    ok(cudaMalloc(p, bytes), "cudaMalloc");
    ok(cudaMemset(*p, 0, bytes), "cudaMemset");
  }
  cudaStream_t s;
  ok(cudaStreamCreate(&s), "cudaStreamCreate");
  // Load the kernels and size their grids as the library does before its first call.
  ok(static_cast<cudaError_t>(hora::kernels::cuda::preload()), "preload");
  cudaEvent_t t0, t1;
  ok(cudaEventCreate(&t0), "cudaEventCreate");
  ok(cudaEventCreate(&t1), "cudaEventCreate");
  // Microseconds per launch of fn, after one warm-up.
  auto time = [&](auto fn) {
    fn();
    ok(cudaStreamSynchronize(s), "warm-up");
    ok(cudaEventRecord(t0, s), "cudaEventRecord");
    for (int i = 0; i < iters; ++i) fn();
    ok(cudaEventRecord(t1, s), "cudaEventRecord");
    ok(cudaEventSynchronize(t1), "cudaEventSynchronize");
    float ms = 0;
    ok(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
    return 1000.0 * ms / iters;
  };
  const double copyUs = time([&] { ok(cudaMemcpyAsync(c, a, bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"); });
  const double copyGBps = 2.0 * bytes / copyUs / 1e3;
  std::printf("# kernel_perf: %s (sm_%d%d, %d SMs), %zu bytes per buffer, %d launches\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount, bytes, iters);
  std::printf("# bandwidth counts every byte read and written; cudaMemcpy device to device: %.1f us, %.1f GB/s\n",
              copyUs, copyGBps);
  std::printf("# %-12s %-10s %10s %10s %10s %8s\n", "kernel", "type", "time(us)", "GB/s", "vs copy", "target");
  struct Type {
    hora::DataType t;
    const char* name;
    int target;  // % of the copy's bandwidth the reduce kernel should reach (0: none set)
  };
  const Type types[] = {{hora::DataType::Float32, "float32", 90},     {hora::DataType::Bfloat16, "bfloat16", 90},
                        {hora::DataType::Float16, "float16", 90},     {hora::DataType::Float64, "float64", 0},
                        {hora::DataType::Int32, "int32", 0},          {hora::DataType::Int8, "int8", 0},
                        {hora::DataType::Float8e4m3, "fp8_e4m3", 80}, {hora::DataType::Float8e5m2, "fp8_e5m2", 80}};
  int missed = 0;
  for (const auto& [t, name, target] : types) {
    hora::kernels::ReduceSpec spec;
    spec.dtype = t;
    spec.op = hora::RedOp::Sum;
    const size_t count = bytes / hora::dataTypeSize(t);
    const void* srcs[2] = {a, b};
    for (int ndst : {1, 2}) {
      void* dsts[2] = {c, d};
      const double us = time([&] {
        ok(static_cast<cudaError_t>(hora::kernels::cuda::reduce(dsts, ndst, srcs, 2, count, spec, s)), "reduce");
      });
      const double gbps = (2.0 + ndst) * bytes / us / 1e3;
      const double pct = 100.0 * gbps / copyGBps;
      char goal[32] = "";
      if (ndst == 1 && target > 0) {
        std::snprintf(goal, sizeof goal, "%d%% %s", target, pct >= target ? "met" : "MISSED");
        missed += pct < target;
      }
      std::printf("  %-12s %-10s %10.1f %10.1f %9.0f%% %s\n", ndst == 1 ? "reduce" : "reduce-copy", name, us, gbps,
                  pct, goal);
    }
  }
  std::printf("# targets (reduce, 2 inputs, vs copy): %s\n", missed ? "some missed" : "all met");
  for (void* p : {a, b, c, d}) cudaFree(p);
  return 0;
}
