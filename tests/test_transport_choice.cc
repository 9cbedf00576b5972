// Which transport each pair uses: shared memory between ranks of one host that both allow it,
// TCP otherwise; decided alike on both ends. The rule as a unit (sharedMemoryGroup), then on
// real communicators as processes, and nothing left in /dev/shm afterwards.
#include <catch2/catch.hpp>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include "comm/comm.h"
#include "comm/config.h"
#include "harness.h"
#include "transports/shm/connection.h"
#include "transports/tcp/connection.h"

using namespace hora;
using namespace hora::test;

namespace {

PeerInfo peer(int rank, const std::string& host, bool shm) {
  PeerInfo p;
  p.rank = rank;
  p.hostId = host;
  p.shmSocket = shm ? "hora-socket-" + std::to_string(rank) : "";
  return p;
}

std::set<std::string> devShm() {
  std::set<std::string> names;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.insert(e->d_name);
    closedir(d);
  }
  return names;
}

bool shmAllowed() {
  const auto& t = config().transports;
  return std::find(t.begin(), t.end(), "shm") != t.end();
}

}  // namespace

TEST_CASE("transport choice: the shared-memory group of each rank", "[transport]") {
  // Ranks 0, 1, 3 on host A; 2 and 4 on host B; rank 3 does not allow shared memory.
  std::vector<PeerInfo> peers = {peer(0, "A", true), peer(1, "A", true), peer(2, "B", true), peer(3, "A", false),
                                 peer(4, "B", true)};
  CHECK(sharedMemoryGroup(peers, 0) == std::vector<int>{0, 1});
  CHECK(sharedMemoryGroup(peers, 1) == std::vector<int>{0, 1});
  CHECK(sharedMemoryGroup(peers, 2) == std::vector<int>{2, 4});
  CHECK(sharedMemoryGroup(peers, 4) == std::vector<int>{2, 4});
  CHECK(sharedMemoryGroup(peers, 3).empty());
  // Both ends of every pair agree: a pair is in shared memory for one iff for the other.
  for (int a = 0; a < 5; ++a)
    for (int b = 0; b < 5; ++b) {
      auto ga = sharedMemoryGroup(peers, a), gb = sharedMemoryGroup(peers, b);
      bool ab = std::find(ga.begin(), ga.end(), b) != ga.end();
      bool ba = std::find(gb.begin(), gb.end(), a) != gb.end();
      CHECK(ab == ba);
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
    }
    if (shm != (comm->shmWorld != nullptr)) return "the shared-memory world does not match the setting";
    int64_t x = rank;
    if (horaAllReduce(&x, &x, 1, horaInt64, horaSum, comm, nullptr) != horaSuccess || x != 3) return "allreduce failed";
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("a peer killed while holding shared segments: no hang, nothing left in /dev/shm", "[transport][faults]") {
  // One buffer small enough for the flat shared-stage algorithm, one that pipelines chunks.
  const size_t count = GENERATE(size_t(16), size_t(1) << 17);
  INFO("count " << count);
  const std::set<std::string> before = devShm();
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
      if (r == horaRemoteError) return "";
      if (r != horaSuccess) return std::string("unexpected ") + horaGetErrorString(r) + ": " + horaGetLastError(comm);
    }
    return "no error after a peer died";
  }, opts);
  INFO(describe(results));
  for (const auto& r : results) {
    if (r.rank == 1) CHECK(WIFSIGNALED(r.status));
    else CHECK(r.ok());
  }
  CHECK(devShm() == before);
}
