/*
 * hora.h: the public C ABI of Hora, a collective-communication library.
 *
 * The vocabulary, argument order and enum numbering are NCCL 2.x's host API with the
 * prefix `nccl` renamed `hora`, so porting a caller is a rename. This header is plain C
 * (C99 and C++), includes no CUDA header, and is the only public header of the library.
 *
 * Every function returns a horaResult_t, never throws, and never crashes on a bad
 * argument: it returns horaInvalidArgument (or horaInvalidUsage) and leaves a readable
 * text for horaGetLastError(). A failure of a peer or of the wire puts the communicator
 * in an error state that every later call on it and horaCommGetAsyncError() report until
 * it is aborted or destroyed.
 *
 * Buffers are host memory or, in a CUDA build on a machine with a GPU, device memory of the
 * communicator's device (horaCommCuDevice), told apart per call; the two may be mixed.
 *
 * Streams: a NULL stream means "synchronous": the call completes before it returns (after any
 * work already enqueued on that communicator through a stream; with device buffers, after the
 * work queued before it on the legacy default stream, and so on every blocking stream).
 * A stream made by horaStreamCreate is a host stream: a call on it checks its arguments
 * (a bad one, or a communicator already in its error state, fails at once and queues
 * nothing), enqueues the work and returns; the work runs in order on the stream's progress
 * thread. The buffers must stay valid until horaStreamSynchronize (or a horaStreamQuery that
 * returns horaSuccess) says the work is done. A CUDA stream (a cudaStream_t, in a CUDA build)
 * orders the call as NCCL does: it returns at once, its work starts after the work queued on
 * the stream before it, and the work queued after it waits for its result; a group may name
 * several CUDA streams. An error of that work is reported by the next call on the
 * communicator, horaCommGetAsyncError, and horaStreamSynchronize/horaStreamQuery on the stream.
 */
#ifndef HORA_H_
#define HORA_H_

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define HORA_MAJOR 0
#define HORA_MINOR 1
#define HORA_PATCH 0
#define HORA_SUFFIX ""
#define HORA_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define HORA_VERSION_CODE HORA_VERSION(HORA_MAJOR, HORA_MINOR, HORA_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handle to a communicator. */
typedef struct horaComm* horaComm_t;
#define HORA_COMM_NULL NULL

/* A stream. Declared so that a cudaStream_t passes unchanged; NULL means host, synchronous. */
typedef struct CUstream_st* horaStream_t;

#define HORA_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[HORA_UNIQUE_ID_BYTES];
} horaUniqueId;

typedef enum {
  horaSuccess = 0,
  horaUnhandledCudaError = 1,
  horaSystemError = 2,
  horaInternalError = 3,
  horaInvalidArgument = 4,
  horaInvalidUsage = 5,
  horaRemoteError = 6,
  horaInProgress = 7,
  horaTimeout = 8,
  horaNumResults = 9
} horaResult_t;

typedef enum {
  horaInt8 = 0,
  horaChar = 0,
  horaUint8 = 1,
  horaInt32 = 2,
  horaInt = 2,
  horaUint32 = 3,
  horaInt64 = 4,
  horaUint64 = 5,
  horaFloat16 = 6,
  horaHalf = 6,
  horaFloat32 = 7,
  horaFloat = 7,
  horaFloat64 = 8,
  horaDouble = 8,
  horaBfloat16 = 9,
  horaFloat8e4m3 = 10,
  horaFloat8e5m2 = 11,
  horaNumTypes = 12
} horaDataType_t;

/* Reduction operations. Values from horaNumOps up are handles returned by
 * horaRedOpCreatePreMulSum, valid only on the communicator that created them. */
typedef enum {
  horaSum = 0,
  horaProd = 1,
  horaMax = 2,
  horaMin = 3,
  horaAvg = 4,
  horaNumOps = 5,
  horaMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(int))
} horaRedOp_t;

/* Where the scalar of horaRedOpCreatePreMulSum lives. */
typedef enum {
  horaScalarDevice = 0,       /* memory the device can read (device memory, or host memory), read as
                                 each call that uses the op runs, in its stream's order: it must
                                 stay valid as long as the op is used */
  horaScalarHostImmediate = 1 /* host memory, read when the op is created */
} horaScalarResidence_t;

#define HORA_CONFIG_UNDEF_INT INT_MIN
#define HORA_CONFIG_UNDEF_PTR NULL
#define HORA_SPLIT_NOCOLOR -1

/* horaCommShrink's flags. */
#define HORA_SHRINK_DEFAULT 0x00 /* the parent is healthy: no call of it is in flight */
#define HORA_SHRINK_ABORT 0x01   /* first stop every call in flight on the parent (after a failure) */

/* horaCommWindowRegister's flags. */
#define HORA_WIN_DEFAULT 0x00
#define HORA_WIN_COLL_SYMMETRIC 0x01 /* every rank registers a window of the same size, collectively */
#define HORA_API_MAGIC 0x686f7261u /* "hora" */

/* Communicator configuration. Initialise with HORA_CONFIG_INITIALIZER, then set fields.
 * The first fields follow NCCL's ncclConfig_t; fields from timeoutMs on are Hora's own.
 * A field left at HORA_CONFIG_UNDEF_* takes its value from the environment (HORA_*). */
typedef struct horaConfig_v1 {
  size_t size;          /* sizeof(horaConfig_t): do not touch */
  unsigned int magic;   /* HORA_API_MAGIC: do not touch */
  unsigned int version; /* HORA_VERSION_CODE: do not touch */
  int blocking;         /* 0: init, split, shrink and finalize return horaInProgress at once and
                           finish in the background; horaCommGetAsyncError says when (default 1) */
  int cgaClusterSize;   /* accepted for compatibility, unused */
  int minCTAs;          /* accepted for compatibility, unused */
  int maxCTAs;          /* accepted for compatibility, unused */
  const char* netName;  /* accepted for compatibility, unused */
  int splitShare;       /* accepted for compatibility, unused */
  int trafficClass;     /* accepted for compatibility, unused */
  const char* commName; /* a name shown in log lines and error texts */
  int timeoutMs;        /* overrides HORA_TIMEOUT_MS for this communicator (> 0) */
} horaConfig_t;

#define HORA_CONFIG_INITIALIZER                                                         \
  {                                                                                     \
    sizeof(horaConfig_t), HORA_API_MAGIC, HORA_VERSION_CODE, HORA_CONFIG_UNDEF_INT,     \
        HORA_CONFIG_UNDEF_INT, HORA_CONFIG_UNDEF_INT, HORA_CONFIG_UNDEF_INT,            \
        HORA_CONFIG_UNDEF_PTR, HORA_CONFIG_UNDEF_INT, HORA_CONFIG_UNDEF_INT,            \
        HORA_CONFIG_UNDEF_PTR, HORA_CONFIG_UNDEF_INT                                    \
  }

/* ---- version, errors, ids ------------------------------------------------------- */

/* Stores HORA_VERSION_CODE of the loaded library in *version. */
horaResult_t horaGetVersion(int* version);

/* A short static description of a result code. */
const char* horaGetErrorString(horaResult_t result);

/* The text of the last error: that of `comm`'s last failed call, or with comm == NULL
 * that of the calling thread's last failed call. Never NULL; "" if there was none. The
 * pointer stays valid until the next failing call on the same comm (or thread). */
const char* horaGetLastError(horaComm_t comm);

/* Creates a rendezvous id and starts, in the calling process, the listener that all
 * ranks of the new communicator contact. Hand the id to every rank by any means. One id
 * makes one communicator. */
horaResult_t horaGetUniqueId(horaUniqueId* uniqueId);

/* ---- communicators -------------------------------------------------------------- */

/* Creates the communicator of `rank` among `nranks`; collective over all of them. */
horaResult_t horaCommInitRank(horaComm_t* comm, int nranks, horaUniqueId commId, int rank);

/* As horaCommInitRank, with a configuration (NULL: all defaults). */
horaResult_t horaCommInitRankConfig(horaComm_t* comm, int nranks, horaUniqueId commId, int rank,
                                    horaConfig_t* config);

/* Creates `ndev` communicators of one job in this process, one per future caller thread.
 * devlist (may be NULL) gives the device each rank reports from horaCommCuDevice. */
horaResult_t horaCommInitAll(horaComm_t* comm, int ndev, const int* devlist);

/* Creates the communicator from the launcher's environment: HORA_RANK, HORA_SIZE and
 * HORA_ID (a unique id in hex, as hora-run sets it) or HORA_ROOT=host:port with
 * HORA_SECRET (rank 0 then hosts the rendezvous at that address). */
horaResult_t horaCommInitFromEnv(horaComm_t* comm);

/* Waits until all work issued on comm is complete. */
horaResult_t horaCommFinalize(horaComm_t comm);

/* Frees the communicator. */
horaResult_t horaCommDestroy(horaComm_t comm);

/* Stops all work on comm (calls in other threads return an error), closes its
 * connections and frees it. Never waits for a peer. */
horaResult_t horaCommAbort(horaComm_t comm);

/* Splits comm: collective over all its ranks. Ranks passing the same color form a new
 * communicator, ranked by (key, rank in comm); a rank passing HORA_SPLIT_NOCOLOR gets
 * *newcomm = NULL. config (may be NULL) configures the new communicator; fields it leaves
 * undefined are inherited from comm. */
horaResult_t horaCommSplit(horaComm_t comm, int color, int key, horaComm_t* newcomm,
                           horaConfig_t* config);

/* Makes a communicator of comm's ranks but those in excludeRanksList (excludeRanksCount of
 * them), in the same order, renumbered from 0: called by every rank that is not excluded, each
 * with the same list, and by none of the excluded ones. No new unique id is needed, and comm's
 * links need not work: after a peer failed, the survivors call it with HORA_SHRINK_ABORT (which
 * first stops the calls in flight on comm) and get a working communicator without the failed
 * ranks. comm stays as it is (destroy or abort it afterwards). config as for horaCommSplit. */
horaResult_t horaCommShrink(horaComm_t comm, int* excludeRanksList, int excludeRanksCount, horaComm_t* newcomm,
                            horaConfig_t* config, int shrinkFlags);

/* As horaCommInitRankConfig, given nId unique ids (the same ones, in the same order, on every
 * rank) instead of one. The first id's rendezvous forms the communicator; the others are
 * accepted so that code written for several ids runs unchanged. */
horaResult_t horaCommInitRankScalable(horaComm_t* newcomm, int nranks, int myrank, int nId, horaUniqueId* commIds,
                                      horaConfig_t* config);

/* horaSuccess, or the error that put comm in its error state (including a failure of work
 * that ran on a host stream); horaInProgress while a non-blocking init, split, shrink or
 * finalize (config->blocking = 0) is still running. */
horaResult_t horaCommGetAsyncError(horaComm_t comm, horaResult_t* asyncError);

/* Writes comm's flight recorder as JSON: its rank, state and error, and its last calls
 * (HORA_TRACE_CALLS of them: each one's collective, count, type, op, root or peer, algorithm,
 * state, times, and what it waits for while it is blocked). path names the file, or a directory
 * to write hora-dump.<host>.<pid>.json in; NULL writes that file in HORA_DUMP_DIR (default the
 * working directory). Any thread may call it at any time, also while comm is in a call or has
 * failed; it reads only this process's memory and never waits for a peer. hora-inspect reads the
 * files of every rank. */
horaResult_t horaCommDump(horaComm_t comm, const char* path);

/* The number of ranks of comm. */
horaResult_t horaCommCount(const horaComm_t comm, int* count);
/* The CUDA device comm is on (the current one at init, or devlist's), -1 without one. */
horaResult_t horaCommCuDevice(const horaComm_t comm, int* device);
/* This process's rank in comm. */
horaResult_t horaCommUserRank(const horaComm_t comm, int* rank);

/* ---- reduction operators -------------------------------------------------------- */

/* Creates the op "sum of scalar * input": each rank multiplies its own input by its own
 * scalar (of type datatype) before the sum. */
horaResult_t horaRedOpCreatePreMulSum(horaRedOp_t* op, void* scalar, horaDataType_t datatype,
                                      horaScalarResidence_t residence, horaComm_t comm);
/* Frees an op made by horaRedOpCreatePreMulSum on comm (after the calls that use it). */
horaResult_t horaRedOpDestroy(horaRedOp_t op, horaComm_t comm);

/* ---- collectives ---------------------------------------------------------------- */

/* Every rank's recvbuff gets the reduction (op) of all ranks' sendbuff, count elements each;
 * every rank receives the same bits. In place: sendbuff == recvbuff. */
horaResult_t horaAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           horaDataType_t datatype, horaRedOp_t op, horaComm_t comm,
                           horaStream_t stream);

/* The root's sendbuff (count elements) lands in every rank's recvbuff; sendbuff is read on the
 * root only. In place: sendbuff == recvbuff. */
horaResult_t horaBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           horaDataType_t datatype, int root, horaComm_t comm,
                           horaStream_t stream);

/* The root's recvbuff gets the reduction (op) of all ranks' sendbuff; recvbuff is written on the
 * root only. */
horaResult_t horaReduce(const void* sendbuff, void* recvbuff, size_t count,
                        horaDataType_t datatype, horaRedOp_t op, int root, horaComm_t comm,
                        horaStream_t stream);

/* recvbuff holds nranks * sendcount elements; rank r's block lands at offset r * sendcount. */
horaResult_t horaAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           horaDataType_t datatype, horaComm_t comm, horaStream_t stream);

/* sendbuff holds nranks * recvcount elements; rank r receives the reduced block r. */
horaResult_t horaReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               horaDataType_t datatype, horaRedOp_t op, horaComm_t comm,
                               horaStream_t stream);

/* sendbuff and recvbuff hold nranks * count elements: block j of sendbuff goes to rank j,
 * and block i of recvbuff comes from rank i. In place (sendbuff == recvbuff) is allowed. */
horaResult_t horaAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          horaDataType_t datatype, horaComm_t comm, horaStream_t stream);

/* Returns (or, on a host stream, completes) once every rank of comm has called it. */
horaResult_t horaBarrier(horaComm_t comm, horaStream_t stream);

/* On the root, recvbuff holds nranks * count elements and rank i's sendbuff lands at offset
 * i * count; recvbuff is not used elsewhere. In place on the root: sendbuff == recvbuff + root * count. */
horaResult_t horaGather(const void* sendbuff, void* recvbuff, size_t count, horaDataType_t datatype, int root,
                        horaComm_t comm, horaStream_t stream);

/* On the root, sendbuff holds nranks * count elements, of which block i goes to rank i's recvbuff;
 * sendbuff is not used elsewhere. In place on the root: recvbuff == sendbuff + root * count. */
horaResult_t horaScatter(const void* sendbuff, void* recvbuff, size_t count, horaDataType_t datatype, int root,
                         horaComm_t comm, horaStream_t stream);

/* Point to point. Outside a group a send returns when its data has left the caller's
 * buffer, which may need the matching receive to be posted. */
horaResult_t horaSend(const void* sendbuff, size_t count, horaDataType_t datatype, int peer,
                      horaComm_t comm, horaStream_t stream);
/* Receives count elements from peer into recvbuff: the k-th receive from a peer meets that
 * peer's k-th send to this rank; count and type must match the send's. */
horaResult_t horaRecv(void* recvbuff, size_t count, horaDataType_t datatype, int peer,
                      horaComm_t comm, horaStream_t stream);

/* Calls between horaGroupStart and horaGroupEnd are issued together at horaGroupEnd, so
 * that, for example, a ring of sends and receives completes without deadlock. Groups nest;
 * the outermost horaGroupEnd runs them and returns the first error. */
horaResult_t horaGroupStart(void);
/* Ends the innermost group; the outermost issues every call held since its horaGroupStart. */
horaResult_t horaGroupEnd(void);

/* What horaGroupSimulateEnd reports. Initialise with HORA_SIM_INFO_INITIALIZER. */
typedef struct horaSimInfo_v1 {
  size_t size;          /* sizeof(horaSimInfo_t): do not touch */
  unsigned int magic;   /* HORA_SIM_INFO_MAGIC: do not touch */
  unsigned int version; /* HORA_VERSION_CODE: do not touch */
  float estimatedTime;  /* out: the planner's predicted time of the group, in microseconds */
} horaSimInfo_t;
#define HORA_SIM_INFO_MAGIC 0x686f7273u /* "hors" */
#define HORA_SIM_INFO_INITIALIZER { sizeof(horaSimInfo_t), HORA_SIM_INFO_MAGIC, HORA_VERSION_CODE, -1.0f }

/* Ends the group as horaGroupEnd would, but runs none of its calls: they are planned, the
 * planner's predicted time of the slowest communicator's share is stored in
 * simInfo->estimatedTime, and the calls are dropped. */
horaResult_t horaGroupSimulateEnd(horaSimInfo_t* simInfo);

/* ---- memory --------------------------------------------------------------------- */

/* Device memory of the current CUDA device (horaUnhandledCudaError, with the reason in the
 * last-error text, where there is no usable GPU; on the emulated GPU, its memory). */
horaResult_t horaMemAlloc(void** ptr, size_t size);
horaResult_t horaMemFree(void* ptr);

/* Registers [buff, buff + size) with comm for later calls: a handle for horaCommDeregister. Where
 * a transport keeps registrations (the ib transport's memory cache), the buffer is registered
 * with it now, so a first call on it does not pay for that; elsewhere the handle only records
 * the buffer. Local: no other rank takes part. */
horaResult_t horaCommRegister(const horaComm_t comm, void* buff, size_t size, void** handle);
horaResult_t horaCommDeregister(const horaComm_t comm, void* handle);

/* A window: a buffer registered collectively (every rank of comm calls it, in the same order with
 * its other collectives); with HORA_WIN_COLL_SYMMETRIC every rank's size must be the same, and a
 * rank whose size differs fails on every rank. Later calls whose buffers lie in a window use its
 * registration. */
typedef struct horaWindow* horaWindow_t;
horaResult_t horaCommWindowRegister(horaComm_t comm, void* buff, size_t size, horaWindow_t* win, int winFlags);
horaResult_t horaCommWindowDeregister(horaComm_t comm, horaWindow_t win);

/* Reads HORA_DEBUG, HORA_DEBUG_SUBSYS and HORA_DEBUG_FILE (and their NCCL_* aliases) again. */
void horaResetDebugInit(void);

/* ---- host streams (and, for Synchronize and Query, CUDA streams) ----------------- */

/* Creates a host stream: an in-order queue of work with its own progress thread. Work on
 * one stream runs in the order it was enqueued; work on different streams may overlap
 * (two streams must not use one communicator at the same time in different orders on
 * different ranks, as with CUDA streams in NCCL). A group (horaGroupStart/End) whose calls
 * name a stream is enqueued as one piece of work; all its calls must name the same stream. */
horaResult_t horaStreamCreate(horaStream_t* stream);

/* Waits until all work enqueued on stream is done. Returns horaSuccess, or the first error
 * of that work since the last call that reported one (the communicator concerned also
 * reports it through horaCommGetAsyncError and its later calls). */
horaResult_t horaStreamSynchronize(horaStream_t stream);

/* Never blocks: horaInProgress while work is pending, else as horaStreamSynchronize. */
horaResult_t horaStreamQuery(horaStream_t stream);

/* Waits for the stream's work to finish, then frees it. Returns the first unreported error
 * of that work, as horaStreamSynchronize would (the stream is freed either way). */
horaResult_t horaStreamDestroy(horaStream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HORA_H_ */
