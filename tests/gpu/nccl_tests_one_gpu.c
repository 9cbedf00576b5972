/* LD_PRELOAD shim for NVIDIA's nccl-tests, so that its ranks as threads (-t N -g 1) can all run on
 * the one GPU of a machine that has one.
 *
 * nccl-tests gives rank i of a process the device (localRank * nThreads * nGpus) + i, and refuses to
 * start when that is not below cudaGetDeviceCount(). Rather than change nccl-tests, this shim,
 * preloaded into its binaries (built against the shared CUDA runtime, libcudart.so), reports
 * NCCL_TESTS_FOLD_DEVICES devices (64 by default) where there are fewer, and folds every device
 * ordinal the binaries pass to the runtime onto the real ones (ordinal % real count): cudaSetDevice,
 * cudaGetDeviceProperties and cudaDeviceGetAttribute. The library under test (Hora's or NVIDIA's
 * libnccl.so.2, each with the CUDA runtime linked statically) sees none of this: it reads the
 * current device from the context the folded cudaSetDevice made current, so all the ranks are on
 * device 0 of a one-GPU machine, as two ranks of one GPU are in Hora's own gpu tests.
 *
 * Built by tests/gpu/run-nccl-clients.sh --pack:  cc -shared -fPIC -O2 -o ... nccl_tests_one_gpu.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

typedef int cuda_error_t; /* cudaError_t: an enum, cudaSuccess == 0 */

static void* next(const char* name) {
  return dlsym(RTLD_NEXT, name);
}

static int real_count(void) {
  static int count; /* 0 until known; a race only stores the same value twice */
  if (count <= 0) {
    cuda_error_t (*f)(int*) = (cuda_error_t(*)(int*))next("cudaGetDeviceCount");
    int n = 0;
    if (f == NULL || f(&n) != 0 || n <= 0) return 1;
    count = n;
  }
  return count;
}

static int fold(int device) {
  return device < 0 ? device : device % real_count();
}

cuda_error_t cudaGetDeviceCount(int* count) {
  cuda_error_t (*f)(int*) = (cuda_error_t(*)(int*))next("cudaGetDeviceCount");
  if (f == NULL) return 35; /* cudaErrorInsufficientDriver */
  cuda_error_t r = f(count);
  if (r == 0 && *count > 0) {
    const char* e = getenv("NCCL_TESTS_FOLD_DEVICES");
    int want = e != NULL ? atoi(e) : 64;
    if (*count < want) *count = want;
  }
  return r;
}

cuda_error_t cudaSetDevice(int device) {
  cuda_error_t (*f)(int) = (cuda_error_t(*)(int))next("cudaSetDevice");
  return f != NULL ? f(fold(device)) : 35;
}

cuda_error_t cudaGetDeviceProperties(void* prop, int device) {
  cuda_error_t (*f)(void*, int) = (cuda_error_t(*)(void*, int))next("cudaGetDeviceProperties");
  return f != NULL ? f(prop, fold(device)) : 35;
}

cuda_error_t cudaGetDeviceProperties_v2(void* prop, int device) {
  cuda_error_t (*f)(void*, int) = (cuda_error_t(*)(void*, int))next("cudaGetDeviceProperties_v2");
  return f != NULL ? f(prop, fold(device)) : 35;
}

cuda_error_t cudaDeviceGetAttribute(int* value, int attr, int device) {
  cuda_error_t (*f)(int*, int, int) = (cuda_error_t(*)(int*, int, int))next("cudaDeviceGetAttribute");
  return f != NULL ? f(value, attr, fold(device)) : 35;
}
