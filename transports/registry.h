// The transport registry: the transports this build has, each registered with one line in
// registry.cc, and what the communicator asks of them. The communicator names no transport: it
// asks each enabled one for its field of the peer record, picks for every peer the transport
// whose canConnect() gives the highest priority (NCCL's selectTransport, with priorities), and
// hands each transport the peers it won.
//
// Life of a Transport object (one per communicator being made, on every rank):
//   1. made from the Settings; it may start listening;
//   2. field(): this rank's field of the peer record ("" when the transport cannot serve this
//      rank at all, e.g. shared memory switched off); exchanged with every rank;
//   3. canConnect(self, peer) for every peer whose record has this transport's field: 0 when it
//      cannot carry messages between the two, else a priority (higher wins). It must give the
//      same answer on both ends, from the two records alone, so both ends choose alike; it
//      throws (naming the peer) when the peer's field is malformed or its settings disagree;
//   4. connect(self, peers): every rank calls it for the peers that chose this transport with
//      it, transports in registry order, so that no two ranks wait on each other in different
//      transports; it returns one connection per peer, in the order given;
//   5. stage(): after connect, the shared stage among this rank and those peers, if the
//      transport offers one (stage.h);
//   6. destroyed once the communicator is made (the connections and stage live on).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/handshake.h"
#include "base/socket.h"
#include "base/wait.h"
#include "transports/stage.h"
#include "transports/transport.h"

namespace hora::transport {

// What a transport may use to set itself up: the job's identity and the settings that concern
// transports (parsed by the communicator's configuration, which alone reads the environment).
struct Settings {
  Secret secret{};
  uint64_t commId = 0;
  int rank = 0;
  int nranks = 1;
  SockAddr bindAddr;         // where socket transports listen (its port is 0: any)
  int socketsPerPeer = 1;    // HORA_NSOCKS_PERPEER
  size_t chunkBytes = 512 * 1024;  // HORA_CHUNK_BYTES: pipeline chunk and stage slot
  bool shmSingleCopy = true;       // HORA_SHM_SINGLE_COPY
  std::string ibHca;               // HORA_IB_HCA (a device and port filter)
  // The filter came from NCCL_IB_HCA: one that leaves no port turns ib off with a note, as
  // NCCL falls back to sockets, instead of failing as HORA_IB_HCA does.
  bool ibHcaLenient = false;
  int ibGidIndex = -1;             // HORA_IB_GID_INDEX; -1: chosen per port
  int ibQpsPerPeer = 1;            // HORA_IB_QPS_PER_PEER
  std::string topoFile;            // HORA_TOPO_FILE: where the rank runs, for the nearest device
  milliseconds handshakeTimeout{30000};
};

// One rank as the peer record describes it.
struct PeerView {
  int rank = -1;
  std::string name;     // "rank 3 (host, pid 123)"
  std::string hostId;   // equal for ranks of one host (base/host.h)
  const std::string* field = nullptr;  // this transport's field of its record; null if absent
};

// While connect() waits it also polls watchFd (if >= 0) and calls onWatch() when it is
// readable, so that the caller can stop it (by throwing) when the job failed elsewhere.
struct ConnectContext {
  Waiter& waiter;
  int watchFd = -1;
  std::function<void()> onWatch;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string field() = 0;
  virtual int canConnect(const PeerView& self, const PeerView& peer) const = 0;
  virtual std::vector<std::unique_ptr<Connection>> connect(const PeerView& self, const std::vector<PeerView>& peers,
                                                          ConnectContext& ctx) = 0;
  virtual std::shared_ptr<SharedStage> stage() { return nullptr; }
  // Why field() is empty on this rank ("" when it is not, or when there is nothing to say).
  virtual std::string offReason() const { return ""; }
};

struct Registration {
  const char* name;     // as HORA_TRANSPORTS and the logs spell it
  const char* summary;  // one line, for messages and the README
  bool optional;        // false: always on, whatever HORA_TRANSPORTS says (loopback)
  std::unique_ptr<Transport> (*make)(const Settings&);
  // The planner's default cost of a message over it (src/coll/cost.h): latency in
  // microseconds and bandwidth in GB/s, as measured where the transport was written;
  // hora-tune measures them again for a HORA_TUNE_FILE.
  double latencyUs;
  double gbps;
};

// Every transport of this build, in the order they connect.
const std::vector<Registration>& registry();

// A stage provider: a transport with no connections of its own that offers the ranks of a host
// stage another stage over it, whose regions it lays out in memory of its own (the GPUs': CUDA
// IPC), with the host stage's counters, announcements and failure records (a RegionStage). The
// communicator asks for one on demand, when a call first wants it (for device memory, once a
// device is known), collectively: every rank of the host stage asks at once, in registry order,
// and takes the first provider that sets one up on every rank.
struct StageRequest {
  std::shared_ptr<const SharedStage> host;  // its members are every rank of the communicator
  int device = -1;                          // the CUDA device of this rank
  // One all-gather among the ranks (`bytes` of each, by rank, into all), and whether every rank
  // says yes: each collective, in the caller's thread.
  std::function<void(const void* mine, void* all, size_t bytes)> exchange;
  std::function<bool(bool)> everyRank;
  // Whether this rank can use a stage at all (the caller's own set-up, such as the engine that
  // runs its copies; why not).
  bool ready = true;
  std::string why;
};
struct StageProviderRegistration {
  const char* name;
  const char* summary;
  // Collective: the stage, or null on every rank alike (*why: this rank's reason, or "" where
  // another rank's was the cause). The stage frees what it holds when it goes, which must be
  // after every member is done with its regions (the host stage's counters tell).
  std::shared_ptr<SharedStage> (*provide)(const StageRequest& request, std::string* why);
};
const std::vector<StageProviderRegistration>& stageProviders();
// "shm, tcp": the names HORA_TRANSPORTS may use.
std::string optionalTransportNames();

}  // namespace hora::transport
