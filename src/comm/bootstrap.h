// Bootstrap: the rendezvous that turns N processes holding one unique id into a job.
//
// The unique id (128 bytes) holds: magic "HRID", protocol version, the rendezvous address and
// a 32-byte random secret. The process that made the id runs the rendezvous (a root thread):
// every rank connects to it over an authenticated link (base/handshake.h) whose payload says
// (rank, nranks). The root then serves rounds of an out-of-band allgather: each rank sends a
// blob, and once all nranks have, every rank gets all of them. A barrier is an allgather of
// nothing. When a rank leaves early or the rendezvous does not complete within the timeout,
// the root tells every rank why, and their waits fail with that text.
//
// Bootstrap frames are {u32 type, u32 length, payload}; the length is checked against
// kMaxBootstrapFrame before anything is read.
#pragma once
#include <array>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/handshake.h"
#include "base/socket.h"
#include "base/wait.h"

namespace hora {

inline constexpr size_t kUniqueIdBytes = 128;
inline constexpr uint32_t kMaxBootstrapFrame = 16u << 20;

struct UniqueId {
  SockAddr root;
  Secret secret;

  void encode(uint8_t out[kUniqueIdBytes]) const;
  // Throws Errc::InvalidArgument naming what is wrong.
  static UniqueId decode(const uint8_t in[kUniqueIdBytes]);
  std::string hex() const;
  static UniqueId fromHex(const std::string& hex);
  // A 64-bit name for the communicator made from this id (for logs and link checks).
  uint64_t commId() const;
};

// The end of a root thread: set when it has served its job (every rank left) or given up.
class RendezvousEnd {
 public:
  void set();
  // Waits for it at most `most`; returns whether it came.
  bool await(milliseconds most);
  // The root thread itself has ended, everything it held freed (set() may come earlier: after
  // a failure, once every rank connected has heard of it).
  void finish();
  bool awaitFinished(milliseconds most);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool finished_ = false;
};

// Creates an id and starts the root thread listening on `bindAddr` (port 0: any). The thread
// serves one job and ends when all its ranks have left, or after `timeout` without progress;
// `end`, if given, is set then. A process that hosts the rendezvous of its own job waits for it
// before going on: the thread dies with the process, and a rank still being served would lose it.
// `nranks` is the job's size where the host knows it (else the first rank to join sets it).
// A process whose rank has joined already, or whose size is not the job's, is turned away
// (its allgather fails with the root's text, naming the process that holds the rank) and the
// job goes on: it may be a stray of a second job started on the same address and secret.
UniqueId startRendezvous(const SockAddr& bindAddr, const Secret& secret, milliseconds timeout,
                         std::shared_ptr<RendezvousEnd> end = nullptr, int nranks = -1);

// As above, on a socket already listening (a communicator's rejoin listener, for a shrink).
UniqueId startRendezvous(Fd listener, const Secret& secret, milliseconds timeout,
                         std::shared_ptr<RendezvousEnd> end = nullptr, int nranks = -1);

// Ends, quietly, the rendezvous of an id that no rank will join (horaCommInitRankScalable's
// other ids), if no rank has joined it; a failure to reach it is logged at INFO and ignored.
void releaseRendezvous(const UniqueId& id) noexcept;

// The root's report that the job failed: it names the first cause, with its code (Timeout when
// ranks never joined, Remote when a rank failed).
class RendezvousFailure : public Error {
 public:
  RendezvousFailure(Errc code, std::string message) : Error(code, std::move(message)) {}
};

// A rank's link to the root.
class BootstrapClient {
 public:
  BootstrapClient(const UniqueId& id, int rank, int nranks, Waiter& w);
  ~BootstrapClient();
  // Every rank calls this the same number of times; returns the blobs of ranks 0..n-1.
  std::vector<std::string> allgather(const std::string& mine, Waiter& w);
  void barrier(Waiter& w) { allgather(std::string(), w); }
  // The local address of the link, a good address to listen on for peers.
  SockAddr localAddress() const;
  void close();
  // Says goodbye (this rank's init is complete) and closes. Leaving without it, or with
  // abandon(), makes the root fail the rendezvous for every rank at once.
  void finish(Waiter& w);
  void abandon(const std::string& why) noexcept;
  // As abandon(), but first waits up to `most` for the root's verdict and throws it
  // (RendezvousFailure): a rank that gives up waiting learns what the root was waiting for
  // (the ranks that never joined, say).
  void giveUp(const std::string& why, milliseconds most);
  // Between rounds: throws the root's error report (RendezvousFailure) if one has arrived.
  // Never blocks.
  void checkForFailure();
  // After a local failure that a peer caused: waits up to `most` for the root's report, which
  // names the first cause, and throws it; returns if none comes (or the link just closes).
  void awaitFailureReport(milliseconds most);
  int fd() const { return fd_.get(); }

 private:
  // Sends the root this rank's failure (an Error frame; GaveUp for a rank that stopped waiting),
  // without waiting or closing.
  void tellRoot(const std::string& why, bool gaveUp = false) noexcept;

  Fd fd_;
  int rank_, nranks_;
};

// Closes, in a child made by fork(), every listening and connected socket the parent's Hora
// objects hold, so that a child never keeps a parent's connections (or its port) alive.
void installForkHandler();

}  // namespace hora
