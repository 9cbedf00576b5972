// Which transport each pair uses: shared memory between ranks of one host that both allow it,
// TCP otherwise; decided alike on both ends. The rule as a unit (chooseTransports), then on
// real communicators as processes, and a survivor of a killed peer that aborts holds none of
// the shared segments (memfds) afterwards.
#include <catch2/catch.hpp>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "comm/comm.h"
#include "comm/config.h"
#include "harness.h"
#include "transports/shm/connection.h"
#include "transports/tcp/connection.h"

using namespace hora;
using namespace hora::test;

namespace {

PeerInfo peer(int rank, const std::string& host, bool near) {
  PeerInfo p;
  p.rank = rank;
  p.host = host;
  p.hostId = host;
  p.record.set("far", "x");
  if (near) p.record.set("near", "x");
  return p;
}

// Stand-ins for a memory transport (one host only, preferred) and a network one (anywhere).
struct FakeTransport : transport::Transport {
  bool sameHostOnly;
  int priority;
  FakeTransport(bool s, int p) : sameHostOnly(s), priority(p) {}
  std::string field() override { return "x"; }
  int canConnect(const transport::PeerView& self, const transport::PeerView& peer) const override {
    if (self.rank == peer.rank) return 0;
    return sameHostOnly && self.hostId != peer.hostId ? 0 : priority;
  }
  std::vector<std::unique_ptr<transport::Connection>> connect(const transport::PeerView&,
                                                             const std::vector<transport::PeerView>&,
                                                             transport::ConnectContext&) override {
    return {};
  }
};

// How many of Hora's shared segments (memfds named hora-shm) this process holds open.
int horaSegmentsHeld() {
  int held = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      char link[512];
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      const ssize_t len = readlink(path.c_str(), link, sizeof link - 1);
      if (len <= 0) continue;
      link[len] = '\0';
      held += strstr(link, "memfd:hora-shm") != nullptr;
    }
    closedir(d);
  }
  return held;
}

bool shmAllowed() {
  const auto& t = config().transports;
  return std::find(t.begin(), t.end(), "shm") != t.end();
}

}  // namespace

TEST_CASE("transport choice: the highest priority that both records allow, alike on both ends", "[transport]") {
  // Ranks 0, 1, 3 on host A; 2 and 4 on host B; rank 3 has the near transport switched off.
  std::vector<PeerInfo> peers = {peer(0, "A", true), peer(1, "A", true), peer(2, "B", true), peer(3, "A", false),
                                 peer(4, "B", true)};
  FakeTransport near(true, 2), far(false, 1);
  // "self" stands for the loopback transport: only a rank's link to itself.
  struct Self : FakeTransport {
    Self() : FakeTransport(false, 1) {}
    int canConnect(const transport::PeerView& a, const transport::PeerView& b) const override { return a.rank == b.rank; }
  } self;
  for (PeerInfo& p : peers) p.record.set("self", "x");
  const std::vector<TransportOffer> offers = {{"self", &self}, {"near", &near}, {"far", &far}};
  std::vector<std::vector<size_t>> choice;
  for (int r = 0; r < 5; ++r) choice.push_back(chooseTransports(offers, peers, r));
  CHECK(choice[0] == std::vector<size_t>{0, 1, 2, 2, 2});
  CHECK(choice[1] == std::vector<size_t>{1, 0, 2, 2, 2});
  CHECK(choice[2] == std::vector<size_t>{2, 2, 0, 2, 1});
  CHECK(choice[3] == std::vector<size_t>{2, 2, 2, 0, 2});
  CHECK(choice[4] == std::vector<size_t>{2, 2, 1, 2, 0});
  for (size_t a = 0; a < 5; ++a)
    for (size_t b = 0; b < 5; ++b) CHECK(choice[a][b] == choice[b][a]);
  // A peer that no offer reaches is an error that names it and what was tried.
  peers[4].record = Record();
  peers[4].record.set("near", "x");
  try {
    chooseTransports(offers, peers, 0);
    FAIL("no error");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("rank 4") != std::string::npos);
    CHECK(what.find("far (off on that rank)") != std::string::npos);
    CHECK(what.find("near (cannot reach it)") != std::string::npos);
  }
}

TEST_CASE("transport choice on real communicators: shm on one host unless excluded", "[transport][processes]") {
  const bool shm = shmAllowed();
  auto results = runProcesses(3, [shm](horaComm_t comm, int rank, int n) -> std::string {
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      transport::Connection* c = comm->connPtrs[static_cast<size_t>(p)];
      bool isShm = dynamic_cast<shm::Connection*>(c) != nullptr;
      bool isTcp = dynamic_cast<tcp::Connection*>(c) != nullptr;
      if (shm && !isShm) return "rank " + std::to_string(p) + " is not reached through shared memory";
      if (!shm && !isTcp) return "rank " + std::to_string(p) + " is not reached through TCP";
      if (comm->self().linkNames[static_cast<size_t>(p)] != (shm ? "shm" : "tcp")) return "the link's name is wrong";
    }
    if (comm->self().linkNames[static_cast<size_t>(rank)] != "loopback") return "the link to itself is not loopback";
    if (shm != (comm->stage != nullptr)) return "the shared stage does not match the setting";
    int64_t x = rank;
    if (horaAllReduce(&x, &x, 1, horaInt64, horaSum, comm, nullptr) != horaSuccess || x != 3) return "allreduce failed";
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("a peer killed while holding shared segments: no hang, and the survivors let go of every segment", "[transport][faults]") {
  // One buffer small enough for the flat shared-stage algorithm, one that pipelines chunks.
  const size_t count = GENERATE(size_t(16), size_t(1) << 17);
  INFO("count " << count);
  ProcessOptions opts;
  opts.timeoutMs = 600000;  // only the transport's own detection can end this quickly
  auto results = runProcesses(4, [count](horaComm_t comm, int rank, int) -> std::string {
    std::vector<float> buf(count, 1.0f);
    for (int i = 0; i < 3; ++i)
      if (horaAllReduce(buf.data(), buf.data(), buf.size(), horaFloat, horaSum, comm, nullptr) != horaSuccess)
        return "early failure";
    if (rank == 1) kill(getpid(), SIGKILL);
    for (int i = 0; i < 100000; ++i) {
      horaResult_t r = horaAllReduce(buf.data(), buf.data(), buf.size(), horaFloat, horaSum, comm, nullptr);
      if (r != horaSuccess && r != horaRemoteError)
        return std::string("unexpected ") + horaGetErrorString(r) + ": " + horaGetLastError(comm);
      if (r == horaSuccess) continue;
      // The job is lost: an abort must release its shared segments (a process that goes on,
      // as an elastic job's survivors do, would otherwise keep the memory).
      const int during = horaSegmentsHeld();
      if (horaCommAbort(comm) != horaSuccess) return std::string("abort: ") + horaGetLastError(nullptr);
      const int after = horaSegmentsHeld();
      if (!shmAllowed()) return after == 0 ? "" : "shared segments held with shared memory off";
      if (during == 0) return "no shared segment was held before the abort (the check would prove nothing)";
      if (after != 0) return std::to_string(after) + " shared segment(s) still held after horaCommAbort";
      return "";
    }
    return "no error after a peer died";
  }, opts);
  INFO(describe(results));
  for (const auto& r : results) {
    if (r.rank == 1) CHECK(WIFSIGNALED(r.status));
    else CHECK(r.ok());
  }
}
