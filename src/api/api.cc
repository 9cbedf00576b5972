// Version, errors, unique ids, communicators and reduction ops (groups and host streams:
// groups_streams.cc).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "api/guard.h"
#include "base/log.h"
#include "comm/config.h"
#include "comm/launch.h"
#include "comm/group.h"
#include "kernels/cpu/scalar.h"

using namespace hora;

namespace hora::api {

namespace {
thread_local std::string tLastError;
}

const char* tLastErrorText() { return tLastError.c_str(); }

void setLastError(horaComm* comm, const std::string& text) {
  tLastError = text;
  if (comm) comm->setLastError(text);
}

horaComm* checkCommAny(horaComm_t comm) {
  if (!comm) fail(Errc::InvalidArgument, "comm is NULL");
  if (!horaComm::isLive(comm) || comm->magic != horaComm::kMagic)
    fail(Errc::InvalidArgument, "comm %p is not a live communicator (destroyed, or not made by horaCommInit*)",
         static_cast<void*>(comm));
  return comm;
}

horaComm* checkComm(horaComm_t comm) {
  horaComm* c = checkCommAny(comm);
  // (A background operation that failed has recorded its error before it ends: the call then
  // fails with that error, not as a call on a pending communicator.)
  if (c->asyncError() == Errc::InProgress)
    fail(Errc::InvalidUsage, "the communicator's non-blocking init, split, shrink or finalize is still in progress: "
         "call horaCommGetAsyncError until it no longer returns horaInProgress");
  return c;
}

device::StreamRef checkStream(horaStream_t stream) { return device::resolve(stream); }

DataType checkType(int v) {
  if (v < 0 || v >= horaNumTypes) fail(Errc::InvalidArgument, "invalid datatype %d", v);
  return static_cast<DataType>(v);
}

}  // namespace hora::api

using api::guard;

namespace {

// The address the rendezvous listens on: HORA_SOCKET_IFNAME's, else the first interface that
// is not loopback (so ranks on other hosts can reach it), else loopback.
SockAddr rendezvousAddress(const Config& cfg) {
  if (!cfg.socketIfname.empty()) return chooseInterface(cfg.socketIfname, AF_INET);
  const Interface* pick = nullptr;
  std::vector<Interface> all = listInterfaces();
  for (const Interface& i : all)
    if (!i.addr.isLoopback() && (!pick || (pick->addr.family() != AF_INET && i.addr.family() == AF_INET))) pick = &i;
  if (pick) {
    SockAddr a = pick->addr;
    a.setPort(0);
    return a;
  }
  return SockAddr::parse("127.0.0.1:0");
}

UniqueId newId(const SockAddr& bind) {
  Secret secret;
  randomBytes(secret.bytes, kSecretBytes);
  return startRendezvous(bind, secret, config().timeout);
}

}  // namespace

namespace hora::api {

CommOptions optionsFrom(const horaConfig_t* config) {
  CommOptions o;
  o.timeout = hora::config().timeout;
  o.blocking = hora::config().commBlocking;
  if (!config) return o;
  if (config->magic != HORA_API_MAGIC || config->size < offsetof(horaConfig_t, timeoutMs))
    fail(Errc::InvalidArgument, "config was not initialised with HORA_CONFIG_INITIALIZER");
  if (config->blocking != HORA_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      fail(Errc::InvalidArgument, "config->blocking must be 0 or 1 (got %d)", config->blocking);
    o.blocking = config->blocking == 1;
  }
  if (config->commName) o.name = std::string(config->commName).substr(0, 128);
  if (config->size >= sizeof(horaConfig_t) && config->timeoutMs != HORA_CONFIG_UNDEF_INT) {
    if (config->timeoutMs <= 0) fail(Errc::InvalidArgument, "config->timeoutMs must be > 0 (got %d)", config->timeoutMs);
    o.timeout = milliseconds(config->timeoutMs);
  }
  return o;
}

CommOptions inherit(const horaComm* parent, const horaConfig_t* config) {
  CommOptions o = parent->opts;
  if (!config) return o;
  CommOptions given = optionsFrom(config);
  if (config->commName) o.name = given.name;
  if (config->blocking != HORA_CONFIG_UNDEF_INT) o.blocking = given.blocking;
  if (config->size >= sizeof(horaConfig_t) && config->timeoutMs != HORA_CONFIG_UNDEF_INT) o.timeout = given.timeout;
  return o;
}

bool makeComm(horaComm_t* out, const UniqueId& id, int nranks, int rank, const CommOptions& o,
              const std::function<void()>& after) {
  std::unique_ptr<horaComm> c = horaComm::shell(nranks, rank, o, !o.blocking || group::active());
  horaComm* raw = c.get();
  auto work = [raw, id, after] {
    raw->init(id);
    if (after) after();
  };
  if (group::active()) {
    *out = c.release();
    group::addInit(raw, work);
    return false;
  }
  if (!o.blocking) {
    *out = c.release();
    raw->runInBackground(work);
    return true;
  }
  work();
  *out = c.release();
  return false;
}

}  // namespace hora::api

namespace {

// The version banner at INFO, once per process, from every init entry point (the log also
// writes it before the process's first INFO line, whichever comes first).
void banner() {
  config();
  log::writeBanner();
}

// Returns whether the init goes on in the background (non-blocking). Inside a group the
// communicator is made at the outermost horaGroupEnd, with the others of the group.
bool initRank(horaComm_t* comm, int nranks, const UniqueId& id, int rank, const CommOptions& o,
              const std::function<void()>& after = nullptr) {
  banner();
  if (!comm) fail(Errc::InvalidArgument, "comm is NULL");
  *comm = nullptr;
  if (nranks < 1) fail(Errc::InvalidArgument, "nranks must be >= 1 (got %d)", nranks);
  if (rank < 0 || rank >= nranks) fail(Errc::InvalidArgument, "rank %d is out of range [0, %d)", rank, nranks);
  return api::makeComm(comm, id, nranks, rank, o, after);
}

UniqueId decodeId(const horaUniqueId& id) {
  return UniqueId::decode(reinterpret_cast<const uint8_t*>(id.internal));
}

// horaCommInitRank and horaCommInitRankConfig, each under its own name in error texts.
horaResult_t initRankEntry(const char* fn, horaComm_t* comm, int nranks, const horaUniqueId& commId, int rank,
                           const horaConfig_t* config) {
  return api::guardPending(fn, nullptr, [&] {
    if (comm) *comm = nullptr;
    CommOptions o = api::optionsFrom(config);
    return initRank(comm, nranks, decodeId(commId), rank, o);
  });
}

}  // namespace

HORA_API horaResult_t horaGetVersion(int* version) {
  return guard("horaGetVersion", nullptr, [&] {
    if (!version) fail(Errc::InvalidArgument, "version is NULL");
    *version = HORA_VERSION_CODE;
  });
}

HORA_API const char* horaGetErrorString(horaResult_t result) {
  switch (api::rawInt(result)) {
    case horaSuccess: return "no error";
    case horaUnhandledCudaError: return "unhandled cuda error";
    case horaSystemError: return "unhandled system error (a call to the operating system failed)";
    case horaInternalError: return "internal error (a bug in Hora)";
    case horaInvalidArgument: return "invalid argument";
    case horaInvalidUsage: return "invalid usage";
    case horaRemoteError: return "remote process exited or there was a network error";
    case horaInProgress: return "operation in progress";
    case horaTimeout: return "timed out waiting for a peer";
    default: return "unknown result code";
  }
}

HORA_API const char* horaGetLastError(horaComm_t comm) {
  if (horaComm* c = api::liveComm(comm)) return c->lastError();
  return api::tLastErrorText();
}

HORA_API horaResult_t horaGetUniqueId(horaUniqueId* uniqueId) {
  return guard("horaGetUniqueId", nullptr, [&] {
    if (!uniqueId) fail(Errc::InvalidArgument, "uniqueId is NULL");
    UniqueId id = newId(rendezvousAddress(config()));
    memset(uniqueId, 0, sizeof *uniqueId);
    id.encode(reinterpret_cast<uint8_t*>(uniqueId->internal));
  });
}

HORA_API horaResult_t horaCommInitRankConfig(horaComm_t* comm, int nranks, horaUniqueId commId, int rank,
                                             horaConfig_t* config) {
  return initRankEntry("horaCommInitRankConfig", comm, nranks, commId, rank, config);
}

HORA_API horaResult_t horaCommInitRank(horaComm_t* comm, int nranks, horaUniqueId commId, int rank) {
  return initRankEntry("horaCommInitRank", comm, nranks, commId, rank, nullptr);
}

HORA_API horaResult_t horaCommInitRankScalable(horaComm_t* newcomm, int nranks, int myrank, int nId,
                                               horaUniqueId* commIds, horaConfig_t* config) {
  return api::guardPending("horaCommInitRankScalable", nullptr, [&] {
    if (newcomm) *newcomm = nullptr;
    if (nId < 1) fail(Errc::InvalidArgument, "nId must be >= 1 (got %d)", nId);
    if (!commIds) fail(Errc::InvalidArgument, "commIds is NULL");
    if (nranks >= 1 && nId > nranks) fail(Errc::InvalidArgument, "nId (%d) is larger than nranks (%d)", nId, nranks);
    // Every id must be valid (a rank given garbage fails here, not at a rendezvous); the first
    // one's rendezvous forms the communicator.
    std::vector<UniqueId> ids;
    for (int i = 0; i < nId; ++i) {
      try {
        ids.push_back(decodeId(commIds[i]));
      } catch (const Error& e) {
        fail(Errc::InvalidArgument, "commIds[%d]: %s", i, e.what());
      }
    }
    CommOptions o = api::optionsFrom(config);
    return initRank(newcomm, nranks, ids[0], myrank, o, [ids, myrank, nranks] {
      // The rendezvous of each other id is released by the rank that would have led it, so
      // that no process keeps serving an id nobody joins.
      for (size_t i = 1; i < ids.size(); ++i)
        if (myrank == static_cast<int>(i * static_cast<size_t>(nranks) / ids.size())) releaseRendezvous(ids[i]);
    });
  });
}

HORA_API horaResult_t horaCommInitAll(horaComm_t* comms, int ndev, const int* devlist) {
  return guard("horaCommInitAll", nullptr, [&] {
    banner();
    if (!comms) fail(Errc::InvalidArgument, "comm is NULL");
    if (ndev < 1) fail(Errc::InvalidArgument, "ndev must be >= 1 (got %d)", ndev);
    if (group::active()) fail(Errc::InvalidUsage, "horaCommInitAll inside a group is not supported");
    for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
    UniqueId id = newId(SockAddr::parse("127.0.0.1:0"));
    CommOptions o = api::optionsFrom(nullptr);
    o.blocking = true;  // no config to ask otherwise
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(ndev));
    std::vector<Errc> codes(static_cast<size_t>(ndev), Errc::Success);
    for (int i = 0; i < ndev; ++i) {
      threads.emplace_back([&, i] {
        try {
          CommOptions mine = o;
          mine.cudaDev = devlist ? devlist[i] : -1;
          comms[i] = horaComm::create(id, ndev, i, mine).release();
        } catch (const Error& e) {
          codes[static_cast<size_t>(i)] = e.code();
          errors[static_cast<size_t>(i)] = e.what();
        } catch (const std::exception& e) {
          codes[static_cast<size_t>(i)] = Errc::Internal;
          errors[static_cast<size_t>(i)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < ndev; ++i) {
      if (codes[static_cast<size_t>(i)] == Errc::Success) continue;
      for (int j = 0; j < ndev; ++j) {
        delete comms[j];
        comms[j] = nullptr;
      }
      throw Error(codes[static_cast<size_t>(i)], format("rank %d: %s", i, errors[static_cast<size_t>(i)].c_str()));
    }
  });
}

HORA_API horaResult_t horaCommInitFromEnv(horaComm_t* comm) {
  return guard("horaCommInitFromEnv", nullptr, [&] {
    banner();
    LaunchEnv l = parseLaunchEnv(processEnv());
    HORA_INFO(log::kInit, "horaCommInitFromEnv: %s", l.source.c_str());
    for (const std::string& w : l.warnings) HORA_WARN(log::kInit, "%s", w.c_str());
    if (l.size < 1)
      fail(Errc::InvalidArgument, "no rank and size in the environment%s%s: set HORA_RANK and HORA_SIZE (hora-run "
           "does), or run under srun, mpirun or torchrun", l.rendezvousHint.empty() ? "" : "; ",
           l.rendezvousHint.c_str());
    UniqueId id;
    std::shared_ptr<RendezvousEnd> rendezvous;  // when this rank hosts it (HORA_ROOT)
    if (!l.idHex.empty()) {
      try {
        id = UniqueId::fromHex(l.idHex);
      } catch (const Error& e) {
        fail(Errc::InvalidArgument, "HORA_ID='%.24s%s' is invalid: %s (hora-run sets it; to name a rendezvous by "
             "address use HORA_ROOT=host:port)", l.idHex.c_str(), l.idHex.size() > 24 ? "..." : "", e.what());
      }
    } else if (!l.root.empty()) {
      id.secret = parseSecret(l);
      try {
        id.root = SockAddr::parse(l.root);
      } catch (const Error& e) {
        fail(Errc::InvalidArgument, "the rendezvous address '%s' (from %s) is invalid: %s", l.root.c_str(),
             l.rootFrom.c_str(), e.what());
      }
      if (l.rank == 0) {
        // Rank 0 hosts the rendezvous at that address, so it must be one of this host's: a
        // test bind says (any 127.x address and ::1 included). Elsewhere every rank would wait
        // out its timeout at an address nobody listens on.
        SockAddr bind = id.root;
        bind.setPort(0);
        const int probe = ::socket(bind.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
        const bool local = probe >= 0 && ::bind(probe, reinterpret_cast<const sockaddr*>(&bind.ss), bind.len) == 0;
        const int err = errno;
        if (probe >= 0) ::close(probe);
        if (!local) {
          std::string mine;
          for (const Interface& i : listInterfaces()) {
            std::string a = i.addr.str();
            if (a.size() > 2 && a.compare(a.size() - 2, 2, ":0") == 0) a.resize(a.size() - 2);
            mine += (mine.empty() ? "" : ", ") + i.name + " " + a;
          }
          fail(Errc::InvalidUsage, "the rendezvous address %s (from %s): rank 0 hosts it, but %s is not an address "
               "of this host (%s): %s; this host's addresses: %s", l.root.c_str(), l.rootFrom.c_str(),
               id.root.str().c_str(), log::hostName(), strerror(err), mine.empty() ? "none" : mine.c_str());
        }
        rendezvous = std::make_shared<RendezvousEnd>();
        try {
          startRendezvous(id.root, id.secret, config().timeout, rendezvous, l.size);
        } catch (const Error& e) {
          fail(e.code(), "rank 0 cannot host the rendezvous at %s (from %s): %s%s", l.root.c_str(),
               l.rootFrom.c_str(), e.what(),
               strstr(e.what(), "in use") ? "; another process holds that port: choose another with "
                                            "HORA_ROOT=host:port" : "");
        }
      }
    } else {
      fail(Errc::InvalidArgument, "no rendezvous in the environment for rank %d of %d (from %s): %s", l.rank, l.size,
           l.launcher.c_str(), l.rendezvousHint.c_str());
    }
    // The rendezvous lives in this process: return only once it has served every rank (each
    // leaves right after the last barrier), or a rank 0 that exits at once (a failed first
    // call, a short job) would take it away from a rank still waiting for its last answer.
    // After a failure, likewise until every rank connected has heard why.
    try {
      CommOptions o = api::optionsFrom(nullptr);
      o.blocking = true;  // the rendezvous this process may host is awaited below
      if (group::active()) fail(Errc::InvalidUsage, "horaCommInitFromEnv inside a group is not supported");
      initRank(comm, l.size, id, l.rank, o);
    } catch (const Error& e) {
      if (rendezvous) rendezvous->await(config().timeout);
      // A rank that cannot reach the rendezvous names its address; say where that came from,
      // in the variables this job set (MASTER_ADDR, SLURM_STEP_NODELIST, ...).
      if (l.rootFrom.empty() || !strstr(e.what(), id.root.str().c_str())) throw;
      fail(e.code(), "%s (the rendezvous address %s came from %s)", e.what(), l.root.c_str(), l.rootFrom.c_str());
    } catch (...) {
      if (rendezvous) rendezvous->await(config().timeout);
      throw;
    }
    if (rendezvous) rendezvous->await(config().timeout);
  });
}

HORA_API horaResult_t horaCommFinalize(horaComm_t comm) {
  return api::guardPending("horaCommFinalize", comm, [&] {
    horaComm* c = api::checkComm(comm);
    // The calls this rank left without hearing from every rank are compared with its
    // predecessor's first (run.cc), so that a mismatch among them fails here at the latest.
    if (!c->opts.blocking) {
      c->runInBackground([c] {
        awaitStreamWork(c);
        c->check();
        awaitEarlierCalls(c, true);
        awaitLinkChecks(c, true);
      });
      return true;
    }
    awaitStreamWork(c);
    c->check();
    try {
      awaitEarlierCalls(c, true);
      awaitLinkChecks(c, true);
    } catch (const Error& e) {
      if (!c->aborting.load()) c->fail(e);
      throw;
    }
    return false;
  });
}

// Destroy and abort free the communicator, so their errors go to the thread's last error
// only, and they do not count themselves among its callers (api/guard.h).
HORA_API horaResult_t horaCommDestroy(horaComm_t comm) {
  if (!comm) return horaSuccess;
  return guard("horaCommDestroy", nullptr, [&] {
    horaComm* c = api::checkCommAny(comm);
    c->joinBackground();  // a non-blocking init or finalize ends first
    awaitStreamWork(c);  // a stream's thread may still hold it
    if (c->busy.load()) fail(Errc::InvalidUsage, "the communicator is in use by another thread; use horaCommAbort");
    // The calls left unchecked that the predecessor has announced on the stage are compared,
    // without waiting (horaCommFinalize waits for them all); the checks expected over the links
    // are received, waiting for them (comm.h); a mismatch fails the peers too, and is returned.
    std::exception_ptr mismatch;
    try {
      if (c->asyncError() == Errc::Success) {
        checkEarlierCalls(c);
        awaitLinkChecks(c, false);
      }
    } catch (const Error& e) {
      c->fail(e);
      mismatch = std::current_exception();
    }
    delete c;
    if (mismatch) std::rethrow_exception(mismatch);
  });
}

HORA_API horaResult_t horaCommAbort(horaComm_t comm) {
  if (!comm) return horaSuccess;
  return guard("horaCommAbort", nullptr, [&] {
    horaComm* c = api::checkCommAny(comm);
    log::RankScope scope(c->self().rank);
    if (c->abort()) delete c;
  });
}

namespace {

// Split: every rank tells every other its (color, key); the first rank of each color (by key,
// then rank) hosts a rendezvous for its color and tells the others its id; then the ranks of
// each color make their communicator as horaCommInitRank would. Two allgathers on the parent
// and one communicator setup.
bool splitComm(horaComm* c, int color, int key, const CommOptions& o, horaComm_t* out) {
  const int n = c->self().nranks;
  std::vector<int32_t> mine{color, key}, all(2 * static_cast<size_t>(n));
  coll::Args a;
  a.kind = coll::Kind::AllGather;
  a.dtype = DataType::Int32;
  a.count = 2;
  a.sendbuf = mine.data();
  a.recvbuf = all.data();
  group::submit(c, a);
  std::vector<int> members;  // this color's ranks, in their new order
  for (int r = 0; r < n; ++r)
    if (color != HORA_SPLIT_NOCOLOR && all[2 * static_cast<size_t>(r)] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int x, int y) { return all[2 * static_cast<size_t>(x) + 1] < all[2 * static_cast<size_t>(y) + 1]; });
  std::vector<uint8_t> id(kUniqueIdBytes, 0), ids(kUniqueIdBytes * static_cast<size_t>(n));
  if (!members.empty() && members[0] == c->self().rank) {
    SockAddr bind = c->self().address;
    bind.setPort(0);
    newId(bind).encode(id.data());
  }
  a.dtype = DataType::Uint8;
  a.count = kUniqueIdBytes;
  a.sendbuf = id.data();
  a.recvbuf = ids.data();
  group::submit(c, a);
  if (members.empty()) return false;
  const int newRank = static_cast<int>(std::find(members.begin(), members.end(), c->self().rank) - members.begin());
  const UniqueId leaderId = UniqueId::decode(ids.data() + kUniqueIdBytes * static_cast<size_t>(members[0]));
  return api::makeComm(out, leaderId, static_cast<int>(members.size()), newRank, o, nullptr);
}

}  // namespace

HORA_API horaResult_t horaCommSplit(horaComm_t comm, int color, int key, horaComm_t* newcomm, horaConfig_t* config) {
  return api::guardPending("horaCommSplit", comm, [&] {
    horaComm* c = api::checkComm(comm);
    if (!newcomm) fail(Errc::InvalidArgument, "newcomm is NULL");
    *newcomm = nullptr;
    if (color < 0 && color != HORA_SPLIT_NOCOLOR)
      fail(Errc::InvalidArgument, "color %d is invalid: use a color >= 0, or HORA_SPLIT_NOCOLOR (-1)", color);
    if (group::active()) fail(Errc::InvalidUsage, "horaCommSplit inside horaGroupStart/horaGroupEnd is not supported");
    // The new communicator inherits what the config leaves undefined.
    return splitComm(c, color, key, api::inherit(c, config), newcomm);
  });
}

HORA_API horaResult_t horaCommGetAsyncError(horaComm_t comm, horaResult_t* asyncError) {
  return guard("horaCommGetAsyncError", comm, [&] {
    horaComm* c = api::checkCommAny(comm);
    if (!asyncError) fail(Errc::InvalidArgument, "asyncError is NULL");
    *asyncError = static_cast<horaResult_t>(c->asyncError());
  });
}

HORA_API horaResult_t horaCommCount(const horaComm_t comm, int* count) {
  return guard("horaCommCount", comm, [&] {
    horaComm* c = api::checkCommAny(comm);
    if (!count) fail(Errc::InvalidArgument, "count is NULL");
    *count = c->self().nranks;
  });
}

HORA_API horaResult_t horaCommCuDevice(const horaComm_t comm, int* device) {
  return guard("horaCommCuDevice", comm, [&] {
    horaComm* c = api::checkCommAny(comm);
    if (!device) fail(Errc::InvalidArgument, "device is NULL");
    *device = c->opts.cudaDev;
  });
}

HORA_API horaResult_t horaCommUserRank(const horaComm_t comm, int* rank) {
  return guard("horaCommUserRank", comm, [&] {
    horaComm* c = api::checkCommAny(comm);
    if (!rank) fail(Errc::InvalidArgument, "rank is NULL");
    *rank = c->self().rank;
  });
}

HORA_API horaResult_t horaRedOpCreatePreMulSum(horaRedOp_t* op, void* scalar, horaDataType_t datatype,
                                               horaScalarResidence_t residence, horaComm_t comm) {
  return guard("horaRedOpCreatePreMulSum", comm, [&] {
    horaComm* c = api::checkComm(comm);
    if (!op) fail(Errc::InvalidArgument, "op is NULL");
    if (!scalar) fail(Errc::InvalidArgument, "scalar is NULL");
    DataType dt = api::checkType(api::rawInt(datatype));
    const int where = api::rawInt(residence);
    if (where != horaScalarHostImmediate && where != horaScalarDevice)
      fail(Errc::InvalidArgument, "invalid residence %d (horaScalarDevice or horaScalarHostImmediate)", where);
    PreMulOp p;
    p.dtype = dt;
    if (where == horaScalarDevice) p.at = scalar;  // read as each call runs (device::readScalars)
    else p.scalar = kernels::scalarFromBytes(scalar, dt);
    int idx = c->addPreMulOp(p);
    if (idx < 0) fail(Errc::InvalidUsage, "too many reduction ops alive on this communicator (1024)");
    *op = static_cast<horaRedOp_t>(horaNumOps + idx);
  });
}

HORA_API horaResult_t horaRedOpDestroy(horaRedOp_t op, horaComm_t comm) {
  return guard("horaRedOpDestroy", comm, [&] {
    horaComm* c = api::checkComm(comm);
    const int v = api::rawInt(op);
    if (v >= 0 && v < horaNumOps) fail(Errc::InvalidArgument, "built-in op %d cannot be destroyed", v);
    if (!c->destroyPreMulOp(v))
      fail(Errc::InvalidArgument, "op %d was not created on this communicator (or was destroyed)", v);
  });
}
