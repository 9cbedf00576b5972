// The communicator: one rank's membership in a job, its connections to every peer, its
// settings and its error state.
//
// Error state. A failure of a peer or of the wire (dead, silent, malformed) is fail-stop: the
// communicator records the first error, tells every peer why (transport shutdown) and closes
// its links, so that the failure reaches every rank at once instead of one timeout per hop.
// From then on every call returns that error until the communicator is aborted or destroyed.
// A bad argument is not a failure: the call returns an error and the communicator stays usable.
#pragma once
#include <array>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/error.h"
#include "base/host.h"
#include "base/record.h"
#include "base/socket.h"
#include "base/wait.h"
#include "coll/collective.h"
#include "coll/planner.h"
#include "comm/call_check.h"
#include "comm/bootstrap.h"
#include "comm/trace.h"
#include "core/program.h"
#include "topo/topology.h"
#include "transports/registry.h"
#include "transports/stage.h"
#include "transports/transport.h"

struct horaComm;

namespace hora {
namespace device {
struct CommState;
void destroy(CommState* s);
}  // namespace device
namespace core {
class ComputeEngine;
}

// What a rank told every other at init: its identity (the record's "core" field, read here) and
// the record itself, whose other fields belong to the transports (and the topology).
struct PeerInfo {
  int rank = -1;
  int pid = 0;
  std::string host;
  std::string hostId;  // equal for ranks of one host (base/host.h)
  std::string machineId;  // equal for ranks on one kernel, whatever their namespaces
  topo::Host machine;  // its host's topology (the record's "topo" field)
  topo::Place place;   // where it runs on that host
  SockAddr rejoin;     // where it listens for the rendezvous of a shrink it leads (the "rejoin" field)
  Record record;
  std::string name() const;  // "rank 3 (host, pid 123)"
  transport::PeerView view(const char* transportName) const;
};

// Every host of the job with its topology and ranks, in the order of their lowest rank.
std::vector<topo::HostEntry> jobHosts(const std::vector<PeerInfo>& peers);

// A transport offered to the choice of links: its name and its object on this rank.
struct TransportOffer {
  std::string name;
  transport::Transport* transport = nullptr;
};

struct Config;
// The transports' settings of `cfg` for rank `rank` of `nranks` listening at bindAddr (the job's
// secret and id left for the caller).
transport::Settings transportSettings(const Config& cfg, int rank, int nranks, const SockAddr& bindAddr);

// The transport of each peer (an index into `offers`), chosen alike on both ends of each pair:
// among the offers whose field both records carry, the one whose canConnect gives the highest
// priority (the earlier offer on a tie). Throws, naming the peer and every offer, when none
// reaches a peer.
std::vector<size_t> chooseTransports(const std::vector<TransportOffer>& offers, const std::vector<PeerInfo>& peers,
                                     int rank);

// Who a communicator is among its ranks, fixed once it is made (horaComm::self()): its rank and
// size, the id every rank shares, and what each rank told the others at init.
struct CommIdentity {
  int rank = 0;
  int nranks = 1;
  uint64_t commId = 0;  // the same on every rank of this communicator (UniqueId::commId)
  Secret secret;        // the id's secret: a shrink derives its new one from it
  SockAddr address;     // where this rank listens for its peers (its network address)
  std::vector<PeerInfo> peers;  // by rank, this one's included
  std::vector<std::string> linkNames;  // the transport of each peer, by rank
  // By rank, the pid of each rank of this host (same host identity, so same pid namespace),
  // else 0: a wait that times out looks at these ranks' state (core::Job::localPids).
  std::vector<int> localPids;
  // The same ranks' processes, held by pidfd (or pid and start time): what a wait that times out
  // looks at (core::Job::localProcs), so that a later process under a gone rank's pid is not it.
  std::vector<ProcessRef> localProcs;
};

// The job as the planner sees it, from the identity's peer records and links: `shape` (this rank,
// the hosts, the busiest host's ranks and cores, the slowest links, the shared stages where every
// rank, or every rank of this host, is a member) and, when the ranks span hosts, `layout` (which
// shape.layout then points at). `spins`: whether this host has a core for each of its ranks.
void describeJob(const CommIdentity& self, const transport::SharedStage* stage, uint64_t* stageSeq, const Config& cfg,
                 const coll::Costs& costs, bool spins, coll::JobShape& shape, coll::HostLayout& layout);

struct CommOptions {
  milliseconds timeout{600000};
  std::string name;  // horaConfig_t.commName
  int cudaDev = -1;
  bool blocking = true;  // horaConfig_t.blocking: false runs init, split, shrink and finalize in the background
};

// A PreMulSum op made by horaRedOpCreatePreMulSum.
struct PreMulOp {
  bool used = false;
  DataType dtype = DataType::Float32;
  kernels::Scalar scalar{0.0};
  const void* at = nullptr;  // horaScalarDevice: where the scalar is, read as each call runs
};

// The numbering of a communicator's calls, which every rank advances alike, call by call, and
// what its call checks have still to compare: changed only by the rank's call in progress
// (comm/run.cc, with the checks of comm/call_check.cc and comm/link_check.cc).
struct CallSequence {
  std::atomic<uint64_t> calls{0};  // calls made so far (collectives, sends and receives)
  uint64_t collectives = 0;  // groups with a collective run so far: the call number announced on the host
  uint16_t frameCall = 0;    // the last collective's number in frames (transports/frame.h), 0 skipped
  uint16_t nextFrameCall() { return ++frameCall ? frameCall : ++frameCall; }
  uint64_t stageSeq = 0;  // chunks through the shared stage so far (coll/stage.cc)
  // The calls this rank has not yet compared with its predecessor's on the stage (from..to,
  // call numbers; from 0: none), since it left them without hearing from every rank
  // (coll::stageChecksLater; run.cc's checkEarlierCalls).
  uint64_t uncheckedFrom = 0, uncheckedTo = 0;
  uint64_t compareAgainAt = 0;  // a lone call compares its batch again from this call on (run.cc)
  bool comparedLater = false;  // some call of this rank was (horaCommFinalize then waits for all)
  // The same over the links: the checks sent to the successor not yet received from the
  // predecessor (comm/call_check.h).
  LinkChecks linkChecks;
};

// The plans of a communicator's recent calls, by (collective, bytes, alone): a repeated call is
// planned once (comm/run.cc's planned()). With each plan, what the run needs to know of it that
// depends on no more than the key: a lone call (alone) that its algorithm runs at once through
// the shared stage, and one that compares its call with the other ranks' later
// (coll::stageChecksLater).
struct PlanCache {
  struct Entry {
    uint64_t key = 0;  // 0: empty
    coll::Plan plan;
    bool runsNow = false;
    bool checksLater = false;
  };
  std::array<Entry, 64> entries{};
  // The collectives and size classes whose choice has been explained at INFO (kind << 8 | log2).
  std::vector<uint32_t> explained;
};

}  // namespace hora

struct horaComm {
  static constexpr uint32_t kMagic = 0x434f4d4d;  // "COMM"
  static constexpr uint32_t kDead = 0xdeadc0de;

  // Creates this rank's communicator; collective over the nranks ranks sharing `id`.
  static std::unique_ptr<horaComm> create(const hora::UniqueId& id, int nranks, int rank,
                                          const hora::CommOptions& opts);
  // A communicator not yet initialised: live (a handle the caller may hold, destroy or abort),
  // its rank and size set, every other call refused until init() has run. With pending, it
  // reports Errc::InProgress until finish() (a non-blocking init, split or shrink).
  static std::unique_ptr<horaComm> shell(int nranks, int rank, const hora::CommOptions& opts, bool pending);
  // Joins the ranks sharing `id` and connects to them (the body of create); throws on failure.
  void init(const hora::UniqueId& id);
  ~horaComm();

  // Non-blocking operations (init, split, shrink, finalize with opts.blocking false): `work`
  // runs on a thread of the communicator's own while asyncError() says InProgress; its failure
  // becomes the communicator's error. One at a time; joinBackground() waits for it.
  void runInBackground(std::function<void()> work);
  void joinBackground();
  bool pending() const { return pending_.load(std::memory_order_acquire); }
  // A failed init (or other work before the communicator was ever usable): the error every
  // later call and asyncError() report; nothing is sent to peers.
  void failInit(const hora::Error& e) noexcept;

  // Whether p is a communicator that exists now: the process's live ones are kept in a set, so
  // a handle is checked without touching the memory it points at (a destroyed communicator, or
  // a wild pointer, must be an error and not a crash).
  static bool isLive(const void* p) noexcept;

  bool valid() const { return magic == kMagic; }

  // Runs calls now (not in a group): the whole group API goes through runCalls().
  void check() const;  // throws the recorded error, if any
  void fail(const hora::Error& e) noexcept;
  void setLastError(const std::string& text);
  const char* lastError();
  // The recorded error, else InProgress while a non-blocking operation runs, else Success.
  hora::Errc asyncError() const {
    const int e = asyncError_.load();
    return e == 0 && pending() ? hora::Errc::InProgress : static_cast<hora::Errc>(e);
  }

  // Abort: stop calls in other threads, close links. Never waits for a peer; waits only for
  // other threads inside calls on this communicator to notice (each does within
  // Waiter::kMaxBlock). Returns false if they have not left within the timeout: the caller
  // must then not free the communicator (it leaks rather than pull memory from under them).
  bool abort() noexcept;

  int addPreMulOp(const hora::PreMulOp& op);  // returns the handle offset, or -1 when full
  // Sets a.op (and a.scalar) from a horaRedOp_t or an op created on this communicator; throws
  // Errc::InvalidArgument for anything else, or an op created for another datatype.
  void resolveOp(int op, hora::DataType dt, hora::coll::Args& a) const;
  bool destroyPreMulOp(int op);

  std::string describeCall() const;  // "call #12 on rank 3 of 4"

  // Who it is among its ranks: set by shell() and init() alone, read by every call.
  const hora::CommIdentity& self() const { return self_; }

  uint32_t magic = kMagic;
  hora::CommOptions opts;
  hora::coll::PlannerSettings planner;
  // What the planner knows of the job (coll::JobShape's hosts, ranks per host, cores, slowest link).
  hora::coll::JobShape shape;
  hora::coll::HostLayout layout;  // shape.layout, when the ranks span hosts
  // The shared stage offered by a transport to some of this rank's peers (before conns:
  // outlives them); null when none is.
  std::shared_ptr<hora::transport::SharedStage> stage;
  std::vector<std::unique_ptr<hora::transport::Connection>> conns;  // by rank, this one's included
  std::vector<hora::transport::Connection*> connPtrs;
  std::atomic<bool> aborting{false};
  std::atomic<bool> busy{false};  // a call is running on it
  std::atomic<int> callers{0};    // threads inside an entry point on it (api/guard.h)
  hora::Fd wakeFd;                // eventfd, polled by waits, written by abort
  hora::core::Scratch scratch;
  // Waits spin a little before yielding when this host has a CPU for each of its ranks.
  std::chrono::microseconds spinFor{0};
  // Listens (unaccepted until then) for the rendezvous of a shrink this rank leads: the
  // survivors of a failure find each other here without a new unique id (api shrink).
  hora::Fd rejoin;
  int shrinks = 0;  // shrinks made from this communicator so far (each derives its own secret)
  // The numbering of its calls and their checks (run.cc, call_check.cc, link_check.cc).
  hora::CallSequence seq;
  // Calls queued on host streams and not yet done (comm/stream.h); changed under streamMu.
  std::mutex streamMu;
  std::condition_variable streamIdle;
  std::atomic<int> streamWork{0};
  // Device buffers and CUDA streams (comm/device.h): made by the first call that needs them.
  struct DeviceStateFree {
    void operator()(hora::device::CommState* s) const { hora::device::destroy(s); }
  };
  std::mutex deviceMu;
  std::unique_ptr<hora::device::CommState, DeviceStateFree> device;
  // Buffers registered with horaCommRegister and horaCommWindowRegister, by handle; each entry
  // holds the transports' registrations until it is deregistered or the communicator goes.
  std::mutex registeredMu;
  std::unordered_map<const void*, std::shared_ptr<void>> registered;
  // The flight recorder of its calls (comm/trace.h); made with the communicator.
  std::unique_ptr<hora::trace::Recorder> trace;

  // Last, away from the fields every call touches: the plans of recent calls (run.cc).
  hora::PlanCache plans;

 private:
  horaComm();  // registers it as live (isLive)
  std::atomic<int> asyncError_{0};
  std::atomic<bool> pending_{false};
  std::atomic<bool> ready_{false};  // init() has completed
  std::thread background_;
  mutable std::mutex mu_;
  std::string errorText_;
  std::string lastError_;
  std::vector<hora::PreMulOp> preMulOps_;
  hora::CommIdentity self_;
};

namespace hora {

namespace core {
struct DeviceCopies;
}
// Runs the calls (possibly on several communicators) together, as one group. With `copies`
// (by call; empty for most): the call's buffers stand for device buffers, copied in and out as
// ops of its program (core/device_copies.h).
void runCalls(const std::vector<std::pair<horaComm*, coll::Args>>& calls,
              const std::vector<core::DeviceCopies>* copies = nullptr);
// runCalls of one call, without a vector where it runs at once through the shared stage.
void runOne(horaComm* c, const coll::Args& a);
// Compares the calls this rank left unchecked (CallSequence::uncheckedFrom) with its predecessor's
// on the stage, as far as the predecessor has announced them; throws a mismatch. The await
// form waits (up to the communicator's timeout) until fewer than `leave` are left uncompared
// (0: none) and, with `everyone`, until every member has compared its own through this rank's
// last call: finalize.
void checkEarlierCalls(horaComm* c);
void awaitEarlierCalls(horaComm* c, bool everyone, uint64_t leave = 0);
// Over the links (comm/call_check.h): receives every check still expected from the predecessor
// and, with `meet`, then meets every rank (a dissemination barrier), so that a mismatch that any
// rank finds fails this one too: horaCommFinalize (meet) and horaCommDestroy (not: a rank that
// closed its links with a check unread, or before its predecessor sent its last, would reset
// them under a peer still in its last call). Throws what fails.
void awaitLinkChecks(horaComm* c, bool meet);
// Runs one AllReduce through `stage` (a shared stage other than the communicator's own: the CUDA
// IPC stage) by the shared-stage algorithm, its actions on `engine`.
void runOnStage(horaComm* c, const coll::Args& a, const transport::SharedStage& stage, core::ComputeEngine& engine);

}  // namespace hora
