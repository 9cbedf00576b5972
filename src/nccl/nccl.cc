// NCCL's ABI over Hora's: every function of include/nccl.h, mapped onto hora.h. Nothing here
// runs a collective or holds state of its own but the texts of the errors it finds itself.
//
// The mapping: a communicator, a unique id, a stream, a data type and an operator are the same
// bits in both ABIs (the enums share their numbering, ncclComm_t is a horaComm_t, created
// operators are Hora's handles); NCCL's config structs, of any version from 2.14 on, become a
// horaConfig_t; result codes map one to one, and Hora's horaTimeout, which NCCL lacks, becomes
// ncclRemoteError (a peer that stopped answering is a remote failure; the last-error text names
// the timeout and the peer).
//
// Profiling: each function is defined as its weak `nccl` name with a strong `pnccl` alias, so a
// tool that defines the `nccl` names itself (preloaded) can call through to the `pnccl` ones.
#include <cstring>
#include <string>

#include "hora.h"
#include "nccl.h"

#define HORA_NCCL_API(ret, name, params)                                                 \
  extern "C" __attribute__((visibility("default"), alias(#name))) ret p##name params;    \
  extern "C" __attribute__((visibility("default"), weak)) ret name params

namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(horaUniqueId), "the ids are the same 128 bytes");
static_assert(static_cast<int>(ncclFloat8e5m2) == static_cast<int>(horaFloat8e5m2) &&
                  static_cast<int>(ncclBfloat16) == static_cast<int>(horaBfloat16) &&
                  static_cast<int>(ncclNumTypes) == static_cast<int>(horaNumTypes),
              "data types share their numbering");
static_assert(static_cast<int>(ncclAvg) == static_cast<int>(horaAvg) &&
                  static_cast<int>(ncclNumOps) == static_cast<int>(horaNumOps),
              "operators share their numbering");
static_assert(static_cast<int>(ncclInProgress) == static_cast<int>(horaInProgress) &&
                  static_cast<int>(ncclRemoteError) == static_cast<int>(horaRemoteError),
              "results share their numbering");

constexpr unsigned kConfigMagic = 0xcafebeef;
constexpr unsigned kSimInfoMagic = 0x74685283;

// An error this layer finds itself (a config Hora never sees): its text, until a later call
// of this thread fails in Hora. Like NCCL's, it is the thread's latest error whatever
// communicator ncclGetLastError names.
thread_local std::string tError;
thread_local bool tErrorIsOurs = false;
thread_local std::string tShown;  // ncclGetLastError's text, with the function named as NCCL names it

ncclResult_t ours(ncclResult_t code, const std::string& text) {
  tError = text;
  tErrorIsOurs = true;
  return code;
}

ncclResult_t toNccl(horaResult_t r) {
  if (r != horaSuccess && r != horaInProgress) tErrorIsOurs = false;  // Hora's text is the latest now
  switch (r) {
    case horaSuccess: return ncclSuccess;
    case horaUnhandledCudaError: return ncclUnhandledCudaError;
    case horaSystemError: return ncclSystemError;
    case horaInternalError: return ncclInternalError;
    case horaInvalidArgument: return ncclInvalidArgument;
    case horaInvalidUsage: return ncclInvalidUsage;
    case horaRemoteError: return ncclRemoteError;
    case horaInProgress: return ncclInProgress;
    case horaTimeout: return ncclRemoteError;
    default: return ncclInternalError;
  }
}

horaComm_t H(ncclComm_t c) { return reinterpret_cast<horaComm_t>(c); }
horaComm_t* H(ncclComm_t* c) { return reinterpret_cast<horaComm_t*>(c); }
horaStream_t H(cudaStream_t s) { return reinterpret_cast<horaStream_t>(s); }
horaUniqueId H(const ncclUniqueId& id) {
  horaUniqueId h;
  memcpy(&h, &id, sizeof h);
  return h;
}
// Enums pass as the caller's int, whatever it is: Hora checks the value.
template <class To, class From>
To E(From v) {
  static_assert(sizeof(To) == sizeof(From), "enums of both ABIs are int-sized");
  To t;
  memcpy(&t, &v, sizeof t);
  return t;
}

// NCCL's config as the caller's version has it: the fields its size and version hold, the
// defaults for the rest. Returns false (with the error's text) for a config that is not one.
bool readConfig(const ncclConfig_t* given, ncclConfig_t* out, std::string* why) {
  const ncclConfig_t defaults = NCCL_CONFIG_INITIALIZER;
  *out = defaults;
  size_t size = 0;
  memcpy(&size, given, sizeof size);
  if (size < offsetof(ncclConfig_t, blocking) + sizeof(int) || size > (1u << 20)) {
    *why = "config->size is " + std::to_string(size) + ": initialise the config with NCCL_CONFIG_INITIALIZER";
    return false;
  }
  memcpy(out, given, size < sizeof *out ? size : sizeof *out);
  if (out->magic != kConfigMagic) {
    char hex[16];
    snprintf(hex, sizeof hex, "%x", out->magic);
    *why = std::string("config->magic is 0x") + hex + ", not NCCL_CONFIG_INITIALIZER's: initialise the config with it";
    return false;
  }
  const unsigned v = out->version;
  const ncclConfig_t& d = defaults;
  // Fields appended by later versions keep their defaults for a config of an earlier one.
  if (v < NCCL_VERSION(2, 14, 0)) out->blocking = d.blocking;
  if (v < NCCL_VERSION(2, 17, 0)) {
    out->cgaClusterSize = d.cgaClusterSize;
    out->minCTAs = d.minCTAs;
    out->maxCTAs = d.maxCTAs;
    out->netName = d.netName;
  }
  if (v < NCCL_VERSION(2, 18, 0)) out->splitShare = d.splitShare;
  if (v < NCCL_VERSION(2, 25, 0)) out->trafficClass = d.trafficClass;
  if (v < NCCL_VERSION(2, 27, 0)) {
    out->commName = d.commName;
    out->collnetEnable = d.collnetEnable;
    out->CTAPolicy = d.CTAPolicy;
    out->shrinkShare = d.shrinkShare;
    out->nvlsCTAs = d.nvlsCTAs;
  }
  if (v < NCCL_VERSION(2, 28, 0)) {
    out->nChannelsPerNetPeer = d.nChannelsPerNetPeer;
    out->nvlinkCentricSched = d.nvlinkCentricSched;
  }
  // The values NCCL itself refuses, refused alike (accepted ones that Hora has no use for are
  // otherwise ignored).
  const int U = NCCL_CONFIG_UNDEF_INT;
  auto flag = [&](int x, const char* name) {
    if (x != U && x != 0 && x != 1) *why = std::string("config->") + name + " is " + std::to_string(x) + ": 0 or 1";
  };
  flag(out->blocking, "blocking");
  flag(out->splitShare, "splitShare");
  flag(out->collnetEnable, "collnetEnable");
  flag(out->shrinkShare, "shrinkShare");
  flag(out->nvlinkCentricSched, "nvlinkCentricSched");
  if (out->cgaClusterSize != U && out->cgaClusterSize < 0) *why = "config->cgaClusterSize is negative";
  if ((out->minCTAs != U && out->minCTAs <= 0) || (out->maxCTAs != U && out->maxCTAs <= 0) ||
      (out->minCTAs != U && out->maxCTAs != U && out->minCTAs > out->maxCTAs))
    *why = "config->minCTAs/maxCTAs are " + std::to_string(out->minCTAs) + "/" + std::to_string(out->maxCTAs) +
           ": each > 0 and minCTAs <= maxCTAs";
  if (out->CTAPolicy != U && (out->CTAPolicy < NCCL_CTA_POLICY_DEFAULT || out->CTAPolicy > NCCL_CTA_POLICY_ZERO))
    *why = "config->CTAPolicy is " + std::to_string(out->CTAPolicy) + ": one of the NCCL_CTA_POLICY_* values";
  if (out->nvlsCTAs != U && out->nvlsCTAs <= 0) *why = "config->nvlsCTAs must be > 0";
  if (out->nChannelsPerNetPeer != U && out->nChannelsPerNetPeer <= 0) *why = "config->nChannelsPerNetPeer must be > 0";
  return why->empty();
}

// The horaConfig_t of an NCCL config (null: null, Hora's defaults). Returns false with the text.
bool toHora(const ncclConfig_t* given, horaConfig_t* out, const horaConfig_t** use, std::string* why) {
  *use = nullptr;
  if (!given) return true;
  ncclConfig_t c;
  if (!readConfig(given, &c, why)) return false;
  const horaConfig_t defaults = HORA_CONFIG_INITIALIZER;
  *out = defaults;
  out->blocking = c.blocking;
  out->commName = c.commName;
  out->cgaClusterSize = c.cgaClusterSize;
  out->minCTAs = c.minCTAs;
  out->maxCTAs = c.maxCTAs;
  out->netName = c.netName;
  out->splitShare = c.splitShare;
  out->trafficClass = c.trafficClass;
  *use = out;
  return true;
}

// Runs `call` with the horaConfig_t of an NCCL config (null: null); a config that is not one is
// ncclInvalidArgument, its text naming fn, and *out (a communicator to be made) is left NULL.
template <class F>
ncclResult_t withConfig(const char* fn, const ncclConfig_t* config, ncclComm_t* out, F&& call) {
  horaConfig_t hc;
  const horaConfig_t* use;
  std::string why;
  if (!toHora(config, &hc, &use, &why)) {
    if (out) *out = nullptr;
    return ours(ncclInvalidArgument, std::string(fn) + ": " + why);
  }
  return toNccl(call(const_cast<horaConfig_t*>(use)));
}

}  // namespace

// ---- memory ------------------------------------------------------------------------------

HORA_NCCL_API(ncclResult_t, ncclMemAlloc, (void** ptr, size_t size)) { return toNccl(horaMemAlloc(ptr, size)); }
HORA_NCCL_API(ncclResult_t, ncclMemFree, (void* ptr)) { return toNccl(horaMemFree(ptr)); }

// ---- version, ids, communicators -----------------------------------------------------------

HORA_NCCL_API(ncclResult_t, ncclGetVersion, (int* version)) {
  if (!version) return ours(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

HORA_NCCL_API(ncclResult_t, ncclGetUniqueId, (ncclUniqueId* uniqueId)) {
  return toNccl(horaGetUniqueId(reinterpret_cast<horaUniqueId*>(uniqueId)));
}

HORA_NCCL_API(ncclResult_t, ncclCommInitRankConfig,
              (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config)) {
  return withConfig("ncclCommInitRankConfig", config, comm, [&](horaConfig_t* hc) {
    return horaCommInitRankConfig(H(comm), nranks, H(commId), rank, hc);
  });
}

HORA_NCCL_API(ncclResult_t, ncclCommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank)) {
  return toNccl(horaCommInitRank(H(comm), nranks, H(commId), rank));
}

HORA_NCCL_API(ncclResult_t, ncclCommInitAll, (ncclComm_t* comm, int ndev, const int* devlist)) {
  return toNccl(horaCommInitAll(H(comm), ndev, devlist));
}

HORA_NCCL_API(ncclResult_t, ncclCommInitRankScalable,
              (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config)) {
  return withConfig("ncclCommInitRankScalable", config, newcomm, [&](horaConfig_t* hc) {
    return horaCommInitRankScalable(H(newcomm), nranks, myrank, nId, reinterpret_cast<horaUniqueId*>(commIds),
                                         hc);
  });
}

HORA_NCCL_API(ncclResult_t, ncclCommFinalize, (ncclComm_t comm)) { return toNccl(horaCommFinalize(H(comm))); }
HORA_NCCL_API(ncclResult_t, ncclCommDestroy, (ncclComm_t comm)) { return toNccl(horaCommDestroy(H(comm))); }
HORA_NCCL_API(ncclResult_t, ncclCommAbort, (ncclComm_t comm)) { return toNccl(horaCommAbort(H(comm))); }

HORA_NCCL_API(ncclResult_t, ncclCommSplit,
              (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config)) {
  return withConfig("ncclCommSplit", config, newcomm, [&](horaConfig_t* hc) {
    return horaCommSplit(H(comm), color, key, H(newcomm), hc);
  });
}

HORA_NCCL_API(ncclResult_t, ncclCommShrink,
              (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
               ncclConfig_t* config, int shrinkFlags)) {
  return withConfig("ncclCommShrink", config, newcomm, [&](horaConfig_t* hc) {
    return horaCommShrink(H(comm), excludeRanksList, excludeRanksCount, H(newcomm), hc, shrinkFlags);
  });
}

HORA_NCCL_API(const char*, ncclGetErrorString, (ncclResult_t result)) {
  switch (E<int>(result)) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (the last error text says which call and why)";
    case ncclSystemError: return "unhandled system error (a call to the operating system failed)";
    case ncclInternalError: return "internal error (a bug in the library)";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited, stopped answering, or there was a network error";
    case ncclInProgress: return "operation in progress";
    default: return "unknown result code";
  }
}

HORA_NCCL_API(const char*, ncclGetLastError, (ncclComm_t comm)) {
  if (tErrorIsOurs) return tError.c_str();
  // Hora's text names the function as Hora does ("horaAllReduce: ..."); the caller called
  // NCCL's ("ncclAllReduce").
  tShown = horaGetLastError(H(comm));
  if (tShown.size() > 4 && tShown.compare(0, 4, "hora") == 0 && tShown[4] >= 'A' && tShown[4] <= 'Z')
    tShown.replace(0, 4, "nccl");
  return tShown.c_str();
}

HORA_NCCL_API(void, ncclResetDebugInit, (void)) { horaResetDebugInit(); }

HORA_NCCL_API(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError)) {
  horaResult_t h = horaSuccess;
  const ncclResult_t r = toNccl(horaCommGetAsyncError(H(comm), asyncError ? &h : nullptr));
  if (r == ncclSuccess) *asyncError = toNccl(h);
  return r;
}

HORA_NCCL_API(ncclResult_t, ncclCommCount, (const ncclComm_t comm, int* count)) {
  return toNccl(horaCommCount(H(comm), count));
}
HORA_NCCL_API(ncclResult_t, ncclCommCuDevice, (const ncclComm_t comm, int* device)) {
  return toNccl(horaCommCuDevice(H(comm), device));
}
HORA_NCCL_API(ncclResult_t, ncclCommUserRank, (const ncclComm_t comm, int* rank)) {
  return toNccl(horaCommUserRank(H(comm), rank));
}

HORA_NCCL_API(ncclResult_t, ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle)) {
  return toNccl(horaCommRegister(H(comm), buff, size, handle));
}
HORA_NCCL_API(ncclResult_t, ncclCommDeregister, (const ncclComm_t comm, void* handle)) {
  return toNccl(horaCommDeregister(H(comm), handle));
}
HORA_NCCL_API(ncclResult_t, ncclCommWindowRegister,
              (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags)) {
  return toNccl(horaCommWindowRegister(H(comm), buff, size, reinterpret_cast<horaWindow_t*>(win), winFlags));
}
HORA_NCCL_API(ncclResult_t, ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win)) {
  return toNccl(horaCommWindowDeregister(H(comm), reinterpret_cast<horaWindow_t>(win)));
}

// NCCL's device API (nccl_device.h, from 2.28: kernels of the caller's that call NCCL from the
// GPU) is not Hora's. Its host entry points are exported so that a program linked against them
// (torch's libtorch_cuda.so imports both, for its symmetric memory) loads; a call is refused.
HORA_NCCL_API(ncclResult_t, ncclDevCommCreate, (ncclComm_t comm, const void* reqs, void* outDevComm)) {
  (void)comm, (void)reqs, (void)outDevComm;
  return ours(ncclInvalidUsage, "ncclDevCommCreate: NCCL's device API (nccl_device.h) is not provided: collectives "
                                "are called from the host, on a stream");
}
HORA_NCCL_API(ncclResult_t, ncclDevCommDestroy, (ncclComm_t comm, const void* devComm)) {
  (void)comm, (void)devComm;
  return ours(ncclInvalidUsage, "ncclDevCommDestroy: NCCL's device API (nccl_device.h) is not provided");
}

// ---- reduction operators ---------------------------------------------------------------------

HORA_NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum,
              (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
               ncclComm_t comm)) {
  return toNccl(horaRedOpCreatePreMulSum(reinterpret_cast<horaRedOp_t*>(op), scalar, E<horaDataType_t>(datatype),
                                         E<horaScalarResidence_t>(residence), H(comm)));
}
HORA_NCCL_API(ncclResult_t, ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm)) {
  return toNccl(horaRedOpDestroy(E<horaRedOp_t>(op), H(comm)));
}

// ---- collectives and point to point ------------------------------------------------------------

HORA_NCCL_API(ncclResult_t, ncclReduce,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
               ncclComm_t comm, cudaStream_t stream)) {
  return toNccl(horaReduce(sendbuff, recvbuff, count, E<horaDataType_t>(datatype), E<horaRedOp_t>(op), root, H(comm),
                           H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclBcast,
              (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)) {
  return toNccl(horaBroadcast(buff, buff, count, E<horaDataType_t>(datatype), root, H(comm), H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclBroadcast,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
               cudaStream_t stream)) {
  return toNccl(horaBroadcast(sendbuff, recvbuff, count, E<horaDataType_t>(datatype), root, H(comm), H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclAllReduce,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
               ncclComm_t comm, cudaStream_t stream)) {
  return toNccl(horaAllReduce(sendbuff, recvbuff, count, E<horaDataType_t>(datatype), E<horaRedOp_t>(op), H(comm),
                              H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclReduceScatter,
              (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
               ncclComm_t comm, cudaStream_t stream)) {
  return toNccl(horaReduceScatter(sendbuff, recvbuff, recvcount, E<horaDataType_t>(datatype), E<horaRedOp_t>(op),
                                  H(comm), H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclAllGather,
              (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
               cudaStream_t stream)) {
  return toNccl(horaAllGather(sendbuff, recvbuff, sendcount, E<horaDataType_t>(datatype), H(comm), H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclAlltoAll,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
               cudaStream_t stream)) {
  return toNccl(horaAllToAll(sendbuff, recvbuff, count, E<horaDataType_t>(datatype), H(comm), H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclGather,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
               cudaStream_t stream)) {
  return toNccl(horaGather(sendbuff, recvbuff, count, E<horaDataType_t>(datatype), root, H(comm), H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclScatter,
              (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
               cudaStream_t stream)) {
  return toNccl(horaScatter(sendbuff, recvbuff, count, E<horaDataType_t>(datatype), root, H(comm), H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclSend,
              (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
               cudaStream_t stream)) {
  return toNccl(horaSend(sendbuff, count, E<horaDataType_t>(datatype), peer, H(comm), H(stream)));
}

HORA_NCCL_API(ncclResult_t, ncclRecv,
              (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)) {
  return toNccl(horaRecv(recvbuff, count, E<horaDataType_t>(datatype), peer, H(comm), H(stream)));
}

// ---- groups ------------------------------------------------------------------------------------

HORA_NCCL_API(ncclResult_t, ncclGroupStart, (void)) { return toNccl(horaGroupStart()); }
HORA_NCCL_API(ncclResult_t, ncclGroupEnd, (void)) { return toNccl(horaGroupEnd()); }

HORA_NCCL_API(ncclResult_t, ncclGroupSimulateEnd, (ncclSimInfo_t* simInfo)) {
  if (!simInfo) return ours(ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo is NULL");
  if (simInfo->magic != kSimInfoMagic || simInfo->size < sizeof(ncclSimInfo_t))
    return ours(ncclInvalidArgument, "ncclGroupSimulateEnd: simInfo was not initialised with NCCL_SIM_INFO_INITIALIZER");
  horaSimInfo_t h = HORA_SIM_INFO_INITIALIZER;
  const ncclResult_t r = toNccl(horaGroupSimulateEnd(&h));
  if (r == ncclSuccess) simInfo->estimatedTime = h.estimatedTime;
  return r;
}
