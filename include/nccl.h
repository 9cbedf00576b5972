/*
 * nccl.h: NCCL's C API (version 2.28.3), served by Hora.
 *
 * Programs written against NVIDIA's NCCL build against this header and link against Hora's
 * libnccl.so.2 unchanged: the functions, their arguments, the enums and their values, the
 * sizes and layouts of the structs and the initializers are NCCL 2.28's. Every function is also
 * there with the prefix `pnccl` (the entry points profiling tools call through).
 *
 * Beyond NCCL: buffers may be host memory as well as device memory (mixed freely), so the same
 * program runs on a machine without a GPU; several ranks may share one GPU (as threads or as
 * processes); and Hora's timeouts end a wait for a dead or silent peer with ncclRemoteError,
 * the timeout and the peer named in ncclGetLastError's text.
 *
 * The header is plain C (C89 to C17) and C++ (C++11 to C++20). Where the CUDA headers are on
 * the include path it includes them as NCCL's does (cuda_runtime.h, cuda_fp16.h, cuda_bf16.h,
 * and cuda_fp8.h in C++); elsewhere (or with HORA_NCCL_NO_CUDA defined) it declares
 * cudaStream_t itself, as the same type the CUDA headers give it.
 */
#ifndef NCCL_H_
#define NCCL_H_

#if !defined(HORA_NCCL_NO_CUDA) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define HORA_NCCL_CUDA_HEADERS 1
#endif
#endif

#ifdef HORA_NCCL_CUDA_HEADERS
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#else
/* The CUDA runtime's own definition: a cudaStream_t from a CUDA program passes unchanged. */
typedef struct CUstream_st* cudaStream_t;
#endif

#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 3
#define NCCL_SUFFIX ""

/* Releases up to 2.8 count minor versions by hundreds, later ones by ten-thousands. */
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE 22803

/* This nccl.h is Hora's: a program can tell it from NVIDIA's. */
#define HORA_NCCL 1

#ifdef __cplusplus
extern "C" {
#endif

/* Handles: a communicator, and a registered window of memory. */
typedef struct ncclComm* ncclComm_t;
typedef struct ncclWindow_vidmem* ncclWindow_t;
#define NCCL_COMM_NULL NULL

/* The rendezvous id every rank of a new communicator is given (ncclGetUniqueId). */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Result codes. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6, /* a peer died or fell silent past the timeout, or the network failed */
  ncclInProgress = 7,  /* a non-blocking communicator's operation has not finished yet */
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* ncclCommWindowRegister's flags. */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy (accepted; Hora has no CTAs to budget). */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* ncclCommShrink's flags. */
#define NCCL_SHRINK_DEFAULT 0x00 /* the parent is healthy, nothing in flight on it */
#define NCCL_SHRINK_ABORT 0x01   /* stop what is in flight on the parent first (after a failure) */

/* A communicator's configuration: initialise with NCCL_CONFIG_INITIALIZER, then set fields.
 * Fields left undefined take their defaults (and the environment's NCCL_* / HORA_* values).
 * Hora honours blocking (0: init, split, shrink and finalize return ncclInProgress and finish in
 * the background; ncclCommGetAsyncError says when) and commName (shown in logs and errors); the
 * others are checked and accepted. Older NCCL versions' (smaller) structs are read by their size
 * and version. */
typedef struct ncclConfig_v22800 {
  size_t size;          /* set by the initializer */
  unsigned int magic;   /* set by the initializer */
  unsigned int version; /* set by the initializer */
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                \
  {                                                                                            \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH),        \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                   \
        NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT                                           \
  }

/* What ncclGroupSimulateEnd reports: estimatedTime, the planner's prediction for the group. */
typedef struct ncclSimInfo_v22200 {
  size_t size;          /* set by the initializer */
  unsigned int magic;   /* set by the initializer */
  unsigned int version; /* set by the initializer */
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER \
  { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

/* ---- memory ----------------------------------------------------------------------- */

/* Device memory of the current device (ncclUnhandledCudaError where there is no usable GPU). */
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);
ncclResult_t ncclMemFree(void* ptr);
ncclResult_t pncclMemFree(void* ptr);

/* ---- version, ids, communicators ---------------------------------------------------- */

/* Stores NCCL_VERSION_CODE (of the NCCL API this library serves) in *version. */
ncclResult_t ncclGetVersion(int* version);
ncclResult_t pncclGetVersion(int* version);

/* Makes a rendezvous id (its listener runs in the calling process); hand it to every rank. */
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);

/* The communicator of `rank` among `nranks` ranks sharing commId; config may be NULL. */
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config);

/* As ncclCommInitRankConfig with the default configuration. Collective: each rank calls it from
 * its own thread or process (or several from one thread inside a group). */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);

/* ndev communicators of one job in this process (comm has room for ndev); devlist (NULL: devices
 * 0..ndev-1 where there are GPUs) gives each rank's device. */
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);

/* Waits until the work issued on comm is done (non-blocking: returns ncclInProgress at once). */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);

/* Frees comm. */
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);

/* Stops everything in flight on comm (never waiting for a peer) and frees it. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

/* Ranks passing one color form a communicator, ordered by key then rank; NCCL_SPLIT_NOCOLOR
 * gives *newcomm = NULL. config NULL: the parent's configuration. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config);

/* The communicator of comm's ranks without those listed, renumbered in order; called by each of
 * the others (not the excluded), with no new unique id, also after a peer failed
 * (NCCL_SHRINK_ABORT). */
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                             ncclConfig_t* config, int shrinkFlags);

/* As ncclCommInitRankConfig, given nId ids (the same, in the same order, on every rank). */
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                      ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId* commIds, ncclConfig_t* config);

/* A short static text for a result code. */
const char* ncclGetErrorString(ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result);

/* What went wrong last, in words: on comm (NULL: the calling thread's last failed call). */
const char* ncclGetLastError(ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm);

/* Reads the logging variables (NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE, and Hora's) again.
 * Deprecated in NCCL, as here. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((deprecated("ncclResetDebugInit is not part of NCCL's supported API")))
#endif
void ncclResetDebugInit(void);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((deprecated("pncclResetDebugInit is not part of NCCL's supported API")))
#endif
void pncclResetDebugInit(void);

/* ncclSuccess, the error that stopped comm, or ncclInProgress while a non-blocking operation runs. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);

/* Registers a buffer for later calls (local): a handle for ncclCommDeregister. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);

/* Registers a window collectively (every rank, in the same order as its collectives). */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* ---- reduction operators ------------------------------------------------------------ */

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
/* Built-in operators; values from ncclNumOps up are operators made by ncclRedOpCreatePreMulSum,
 * valid on the communicator that made them. */
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where ncclRedOpCreatePreMulSum's scalar is: device memory read when each call runs, or host
 * memory read once, before the function returns. */
typedef enum {
  ncclScalarDevice = 0,
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/* An operator for comm and datatype only: each rank multiplies its input by its scalar, then
 * the products are summed. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
/* Frees an operator made on comm, once the calls that use it have returned. */
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- collectives and point to point --------------------------------------------------
 * Each is called by every rank of comm (or, for send and receive, by the two ranks). On a CUDA
 * stream it returns once the work is queued there; with stream NULL (host or device buffers) it
 * returns once its work is done. In place: sendbuff == recvbuff, or the rank's own block of the
 * larger buffer (AllGather, ReduceScatter, Gather and Scatter on the root). */

/* The reduction of every rank's sendbuff into the root's recvbuff (recvbuff unused elsewhere). */
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);

/* The root's buff into every rank's buff, in place (deprecated in NCCL for ncclBroadcast). */
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                        cudaStream_t stream);

/* The root's sendbuff into every rank's recvbuff. */
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                            ncclComm_t comm, cudaStream_t stream);

/* The reduction of every rank's sendbuff into every rank's recvbuff. */
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                            ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

/* sendbuff holds nranks * recvcount elements; rank i gets block i of the reduction. */
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);

/* recvbuff holds nranks * sendcount elements; rank i's sendbuff lands at offset i * sendcount. */
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                            ncclComm_t comm, cudaStream_t stream);

/* Block j (count elements) of sendbuff goes to rank j; block i of recvbuff comes from rank i. */
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);

/* Every rank's sendbuff into block i of the root's recvbuff (recvbuff unused elsewhere). */
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream);

/* Block i of the root's sendbuff into rank i's recvbuff (sendbuff unused elsewhere). */
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                          ncclComm_t comm, cudaStream_t stream);

/* count elements to rank peer, which receives them with the same count and datatype. Several
 * sends and receives that must progress together go in one group. */
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);

/* ---- groups --------------------------------------------------------------------------
 * Calls between ncclGroupStart and ncclGroupEnd (on any communicators, and communicator inits)
 * are issued together at the outermost ncclGroupEnd: one thread may drive several ranks, and
 * sends and receives that depend on each other complete. */
ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);

/* Ends the group without running it: simInfo->estimatedTime gets the planner's prediction (us). */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
