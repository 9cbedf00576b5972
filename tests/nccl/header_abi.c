/* Compiled by header_compiles.sh in every C and C++ standard, with and without the CUDA
 * headers: nccl.h must compile cleanly (-Wall -Wextra -pedantic -Werror), and its enums,
 * constants and struct layouts must be NCCL 2.28's, which these checks spell out. */
#include <nccl.h>
#include <limits.h>
#include <stddef.h>

#define ABI_CHECK(name, cond) typedef char abi_##name[(cond) ? 1 : -1]

ABI_CHECK(version, NCCL_VERSION_CODE == 22803 && NCCL_MAJOR == 2 && NCCL_MINOR == 28 && NCCL_PATCH == 3);
ABI_CHECK(version_macro, NCCL_VERSION(2, 8, 4) == 2804 && NCCL_VERSION(2, 28, 3) == 22803);
ABI_CHECK(results, ncclSuccess == 0 && ncclUnhandledCudaError == 1 && ncclSystemError == 2 &&
                       ncclInternalError == 3 && ncclInvalidArgument == 4 && ncclInvalidUsage == 5 &&
                       ncclRemoteError == 6 && ncclInProgress == 7 && ncclNumResults == 8);
ABI_CHECK(types, ncclInt8 == 0 && ncclChar == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclInt == 2 &&
                     ncclUint32 == 3 && ncclInt64 == 4 && ncclUint64 == 5 && ncclFloat16 == 6 && ncclHalf == 6 &&
                     ncclFloat32 == 7 && ncclFloat == 7 && ncclFloat64 == 8 && ncclDouble == 8 &&
                     ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 && ncclFloat8e5m2 == 11 && ncclNumTypes == 12);
ABI_CHECK(ops, ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4 && ncclNumOps == 5 &&
                   ncclMaxRedOp == 0x7fffffff && sizeof(ncclRedOp_t) == sizeof(int));
ABI_CHECK(residence, ncclScalarDevice == 0 && ncclScalarHostImmediate == 1);
ABI_CHECK(constants, NCCL_UNIQUE_ID_BYTES == 128 && NCCL_CONFIG_UNDEF_INT == INT_MIN && NCCL_SPLIT_NOCOLOR == -1 &&
                         NCCL_SHRINK_DEFAULT == 0 && NCCL_SHRINK_ABORT == 1 && NCCL_WIN_DEFAULT == 0 &&
                         NCCL_WIN_COLL_SYMMETRIC == 1 && NCCL_WIN_REQUIRED_ALIGNMENT == 4096 &&
                         NCCL_CTA_POLICY_DEFAULT == 0 && NCCL_CTA_POLICY_EFFICIENCY == 1 && NCCL_CTA_POLICY_ZERO == 2);
ABI_CHECK(id, sizeof(ncclUniqueId) == 128);
/* ncclConfig_v22800 on LP64. */
ABI_CHECK(config_size, sizeof(ncclConfig_t) == 80);
ABI_CHECK(config_head, offsetof(ncclConfig_t, magic) == 8 && offsetof(ncclConfig_t, version) == 12 &&
                           offsetof(ncclConfig_t, blocking) == 16 && offsetof(ncclConfig_t, cgaClusterSize) == 20 &&
                           offsetof(ncclConfig_t, minCTAs) == 24 && offsetof(ncclConfig_t, maxCTAs) == 28 &&
                           offsetof(ncclConfig_t, netName) == 32 && offsetof(ncclConfig_t, splitShare) == 40);
ABI_CHECK(config_tail, offsetof(ncclConfig_t, trafficClass) == 44 && offsetof(ncclConfig_t, commName) == 48 &&
                           offsetof(ncclConfig_t, collnetEnable) == 56 && offsetof(ncclConfig_t, CTAPolicy) == 60 &&
                           offsetof(ncclConfig_t, shrinkShare) == 64 && offsetof(ncclConfig_t, nvlsCTAs) == 68 &&
                           offsetof(ncclConfig_t, nChannelsPerNetPeer) == 72 &&
                           offsetof(ncclConfig_t, nvlinkCentricSched) == 76);
ABI_CHECK(siminfo, sizeof(ncclSimInfo_t) == 24 && offsetof(ncclSimInfo_t, estimatedTime) == 16);

int header_abi_initializers(void);
int header_abi_initializers(void) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
  cudaStream_t stream = NULL;
  ncclComm_t comm = NCCL_COMM_NULL;
  ncclWindow_t win = NULL;
  int ok = c.size == sizeof(ncclConfig_t) && c.magic == 0xcafebeef && c.version == 22803 &&
           c.blocking == NCCL_CONFIG_UNDEF_INT && c.netName == NCCL_CONFIG_UNDEF_PTR &&
           c.nvlinkCentricSched == NCCL_CONFIG_UNDEF_INT && s.size == sizeof(ncclSimInfo_t) &&
           s.magic == 0x74685283 && s.version == 22803 && s.estimatedTime == NCCL_UNDEF_FLOAT;
  (void)stream;
  (void)comm;
  (void)win;
  return ok;
}
