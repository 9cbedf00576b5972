// Failures: a peer killed before, during and after collectives, a peer that exits without
// destroying its communicator, a silent (stopped) peer, a rank that never makes its call, abort
// from another thread, a peer's memory read and written (failures at init:
// test_faults_init.cc; mismatched calls: test_faults_mismatch.cc).
// Every rank must get an error (never a hang, never a crash); no test depends on timing: a
// closed socket must be reported as horaRemoteError even though the timeout is long.
#include <catch2/catch.hpp>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "base/host.h"
#include "base/socket.h"
#include "comm/bootstrap.h"
#include "comm/comm.h"
#include "harness.h"
#include "transports/shm/world.h"

using namespace hora::test;

namespace {

// Runs allreduces until one fails; returns "" if the failure is `want` (any of them) and every
// later call on the communicator fails too, else a description.
std::string expectFailure(horaComm_t comm, std::initializer_list<horaResult_t> want, int iters = 100000) {
  std::vector<float> buf(1 << 18, 1.0f);
  for (int i = 0; i < iters; ++i) {
    horaResult_t r = horaAllReduce(buf.data(), buf.data(), buf.size(), horaFloat, horaSum, comm, nullptr);
    if (r == horaSuccess) continue;
    std::string text = horaGetLastError(comm);
    bool ok = false;
    for (horaResult_t w : want) ok |= r == w;
    if (!ok) return std::string("unexpected error ") + horaGetErrorString(r) + ": " + text;
    if (text.empty()) return "error without a text";
    horaResult_t async = horaSuccess;
    horaCommGetAsyncError(comm, &async);
    if (async != r) return "horaCommGetAsyncError does not report the failure";
    float x = 0;
    if (horaBroadcast(&x, &x, 1, horaFloat, 0, comm, nullptr) == horaSuccess) return "a call after the failure succeeded";
    return "";
  }
  return "no call failed";
}

int killSelf(int sig) { return kill(getpid(), sig); }

}  // namespace

TEST_CASE("a peer killed during a collective: every other rank gets horaRemoteError", "[faults]") {
  ProcessOptions opts;
  opts.timeoutMs = 600000;  // only the closed socket can make this fail fast
  auto results = runProcesses(4, [](horaComm_t comm, int rank, int) -> std::string {
    if (rank == 2) {
      // Dies inside its sixth call (busy is set while a call runs).
      std::thread([comm] {
        while (comm->seq.calls < 6 || !comm->busy.load()) usleep(50);
        killSelf(SIGKILL);
      }).detach();
    }
    return expectFailure(comm, {horaRemoteError});
  }, opts);
  INFO(describe(results));
  for (const auto& r : results) {
    if (r.rank == 2) CHECK((WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL));
    else CHECK(r.ok());
  }
}

TEST_CASE("a peer killed before the first collective, or between two", "[faults]") {
  for (bool between : {false, true}) {
    ProcessOptions opts;
    opts.timeoutMs = 600000;
    auto results = runProcesses(3, [between](horaComm_t comm, int rank, int) -> std::string {
      if (between) {
        int64_t x = rank;
        if (horaAllReduce(&x, &x, 1, horaInt64, horaSum, comm, nullptr) != horaSuccess || x != 3)
          return "the first collective failed";
      }
      if (rank == 1) killSelf(SIGKILL);
      return expectFailure(comm, {horaRemoteError});
    }, opts);
    INFO((between ? "between\n" : "before\n") << describe(results));
    for (const auto& r : results) {
      if (r.rank == 1) CHECK(WIFSIGNALED(r.status));
      else CHECK(r.ok());
    }
  }
}

TEST_CASE("a peer that exits without destroying its communicator", "[faults]") {
  ProcessOptions opts;
  opts.timeoutMs = 600000;
  auto results = runProcesses(3, [](horaComm_t comm, int rank, int) -> std::string {
    if (rank == 0) _exit(0);
    return expectFailure(comm, {horaRemoteError});
  }, opts);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("a peer that destroys its communicator and stays alive: the others fail at once", "[faults]") {
  // Rank 1 closes its communicator and lives on until every other rank has exited, so neither
  // a closed socket nor a dead process can explain a pass, only the closed shared-memory
  // rings (or, over TCP, the closed sockets). Small buffers take the flat shared-stage path,
  // large ones at 3 ranks the sliced one.
  const size_t count = GENERATE(size_t(16), size_t(1) << 17);
  INFO("count " << count);
  auto* pids = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(pids != MAP_FAILED);
  ProcessOptions opts;
  opts.timeoutMs = 600000;
  auto results = runProcesses(3, [pids, count](horaComm_t comm, int rank, int nranks) -> std::string {
    pids[rank].store(getpid());
    if (rank == 1) {
      if (horaCommDestroy(comm) != horaSuccess) return "destroy failed";
      for (int r = 0; r < nranks; ++r) {
        if (r == rank) continue;
        while (pids[r].load() == 0 || kill(pids[r].load(), 0) == 0) usleep(1000);
      }
      _exit(0);  // the harness must not destroy the communicator a second time
    }
    std::vector<float> buf(count, 1.0f);
    horaResult_t r = horaAllReduce(buf.data(), buf.data(), count, horaFloat, horaSum, comm, nullptr);
    if (r != horaRemoteError)
      return std::string("got ") + horaGetErrorString(r) + ": " + horaGetLastError(comm);
    if (std::string(horaGetLastError(comm)).find("rank 1") == std::string::npos)
      return std::string("the error does not name rank 1: ") + horaGetLastError(comm);
    return "";
  }, opts);
  munmap(pids, 4096);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

namespace {
// This process's connected TCP sockets other than its link to the rendezvous at `root`.
int dataSockets(const hora::SockAddr& root) {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = atoi(e->d_name);
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;  // not a connected socket
    if (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) continue;
    if (len == root.len && memcmp(&peer, &root.ss, len) == 0) continue;
    ++n;
  }
  closedir(d);
  return n;
}
}  // namespace

// A communicator that has failed holds no links: its sockets close when it fails (after the
// abort frame), not when the application gets round to destroying it.
// Checked where the links are sockets (faults-tcp); shared memory's keep none after init.
TEST_CASE("a failed communicator closes its sockets when it fails and not when it is destroyed", "[faults]") {
  horaUniqueId raw;
  REQUIRE(horaGetUniqueId(&raw) == horaSuccess);
  const hora::SockAddr root = hora::UniqueId::decode(reinterpret_cast<const uint8_t*>(raw.internal)).root;
  ProcessOptions opts;
  opts.timeoutMs = 600000;
  auto results = runRawProcessesWithId(raw, 3, [root](const horaUniqueId& id, int rank, int n) -> std::string {
    horaConfig_t cfg = HORA_CONFIG_INITIALIZER;
    cfg.timeoutMs = 600000;
    horaComm_t comm = nullptr;
    if (horaCommInitRankConfig(&comm, n, id, rank, &cfg) != horaSuccess) return std::string("init: ") + horaGetLastError(nullptr);
    const bool sockets = dataSockets(root) > 0;
    if (rank == 2) _exit(0);
    std::string e = expectFailure(comm, {horaRemoteError});
    if (!e.empty()) return e;
    const int left = dataSockets(root);
    horaCommDestroy(comm);
    if (sockets && left != 0) return std::to_string(left) + " data socket(s) still open on the failed communicator";
    return "";
  }, opts);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("a silent (SIGSTOPped) peer: the others fail within the timeout", "[faults]") {
  ProcessOptions opts;
  opts.timeoutMs = 1500 * kSanitizerScale;  // init and the first calls get through it under a sanitizer too
  auto results = runProcesses(3, [](horaComm_t comm, int rank, int) -> std::string {
    std::vector<float> buf(1 << 16, 1.0f);
    for (int i = 0; i < 3; ++i)
      if (horaAllReduce(buf.data(), buf.data(), buf.size(), horaFloat, horaSum, comm, nullptr) != horaSuccess)
        return std::string("early failure: ") + horaGetLastError(comm);
    if (rank == 1) killSelf(SIGSTOP);
    std::string e = expectFailure(comm, {horaTimeout, horaRemoteError});
    if (!e.empty()) return e;
    // Whoever timed out names what it was waiting for.
    std::string text = horaGetLastError(comm);
    if (text.find("timed out") == std::string::npos) return "the error does not say it timed out: " + text;
    return "";
  }, opts);
  INFO(describe(results));
  for (const auto& r : results) {
    if (r.rank == 1) CHECK(WIFSIGNALED(r.status));
    else CHECK(r.ok());
  }
}

// A rank of this host that is alive and well but never makes the call: the others time out
// naming it as not having begun the call, at their timeout. (Their timeout is held back, for at
// most another timeout, only while a rank waited for has begun the call and may yet say why it
// is stuck: torch's test_barrier_timeout_group waits 10 s for a 5 s timeout.) Small calls take
// the flat shared-stage path, large ones at 3 ranks the pipelined one, where rank 0 may wait on
// rank 1, which waits on rank 2 and says so.
TEST_CASE("a rank that never makes the call is named as not having begun it", "[faults]") {
  const size_t count = GENERATE(size_t(16), size_t(1) << 17);
  INFO("count " << count);
  // Without shared memory (faults-tcp) no stage holds the ranks' announcements: a rank then
  // names what it waited for, which is rank 2 for one of them at least.
  const char* transports = getenv("HORA_TRANSPORTS");
  const bool stage = !transports || !*transports || strstr(transports, "shm");
  auto* done = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(done != MAP_FAILED);
  ProcessOptions opts;
  opts.timeoutMs = 1000 * kSanitizerScale;
  auto results = runProcesses(3, [done, count, stage](horaComm_t comm, int rank, int) -> std::string {
    std::vector<float> buf(count, 1.0f);
    if (horaAllReduce(buf.data(), buf.data(), count, horaFloat, horaSum, comm, nullptr) != horaSuccess)
      return std::string("the first call failed: ") + horaGetLastError(comm);
    if (rank == 2) {  // skips the second call until the others have failed in it
      for (int i = 0; i < 120000 && (done[0].load() == 0 || done[1].load() == 0); ++i) usleep(1000);
      return done[0].load() && done[1].load() ? "" : "the others never finished their second call";
    }
    horaResult_t r = horaAllReduce(buf.data(), buf.data(), count, horaFloat, horaSum, comm, nullptr);
    const std::string text = horaGetLastError(comm);
    const bool named = text.find("rank 2") != std::string::npos;
    done[rank].store(named ? 2 : 1);
    if (r != horaTimeout && r != horaRemoteError) return std::string("got ") + horaGetErrorString(r) + ": " + text;
    if (stage && (!named || text.find("has not begun call #2") == std::string::npos))
      return "the error does not say that rank 2 has not begun the call: " + text;
    return "";
  }, opts);
  const bool someoneNamedIt = done[0].load() == 2 || done[1].load() == 2;
  munmap(done, 4096);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
  CHECK(someoneNamedIt);
}

// What a caller reads is short: the culprit and what it did, the call, this rank; the whole list
// of what each rank waited for goes to the WARN log and the flight recorder's dump. Before, a
// stopped rank in a large AllReduce gave about 1,100 characters, the call three times over.
TEST_CASE("a stopped rank in a large AllReduce: the caller's text is short and names it", "[faults]") {
  ProcessOptions opts;
  opts.timeoutMs = 1500 * kSanitizerScale;
  auto* pid1 = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(pid1 != MAP_FAILED);
  auto results = runProcesses(4, [pid1](horaComm_t comm, int rank, int) -> std::string {
    std::vector<float> buf(size_t(1) << 21, 1.0f);
    if (horaAllReduce(buf.data(), buf.data(), buf.size(), horaFloat, horaSum, comm, nullptr) != horaSuccess)
      return std::string("early failure: ") + horaGetLastError(comm);
    if (rank == 1) {
      pid1->store(getpid());
      killSelf(SIGSTOP);
    }
    horaResult_t r = horaAllReduce(buf.data(), buf.data(), buf.size(), horaFloat, horaSum, comm, nullptr);
    const std::string text = horaGetLastError(comm);
    if (r != horaTimeout && r != horaRemoteError) return std::string("returned ") + horaGetErrorString(r) + ": " + text;
    if (text.size() > 450) return "a text of " + std::to_string(text.size()) + " characters: " + text;
    if (text.find("rank 1 (") == std::string::npos || text.find("pid " + std::to_string(pid1->load())) == std::string::npos)
      return "the text does not name rank 1 by its pid: " + text;
    const size_t call = text.find("AllReduce(");
    if (call == std::string::npos || text.find("AllReduce(", call + 1) != std::string::npos)
      return "the text does not name the call once: " + text;
    if (text.find("rank " + std::to_string(rank) + " of 4") == std::string::npos) return "the text does not name this rank: " + text;
    return "";
  }, opts);
  munmap(pid1, 4096);
  INFO(describe(results));
  for (const auto& r : results) {
    if (r.rank == 1) CHECK(WIFSIGNALED(r.status));
    else CHECK(r.ok());
  }
}

// A rank of this host is known by its pidfd (or, without pidfds, by its pid and its process's
// start time), never by its pid alone: once it is gone, another process that the kernel gave its
// pid is not taken for it. Made here with ns_last_pid (root only): the new process is stopped,
// and must not make the old one "stopped".
TEST_CASE("a process whose pid was given to another is said to have exited", "[faults]") {
  pid_t a = fork();
  if (a == 0) {
    pause();
    _exit(0);
  }
  REQUIRE(a > 0);
  const hora::ProcessRef byPidfd(a), byStart(a, false);  // the second as where the kernel has no pidfds
  // Start times count clock ticks (at most 10 ms): a process started in the same tick looks the
  // same to the fallback. A rank's process is never given away that soon after its start; here
  // a tick passes before the pid is freed (a bound, not a race).
  usleep(30 * 1000);
  kill(a, SIGKILL);
  REQUIRE(waitpid(a, nullptr, 0) == a);
  pid_t b = -1;
  for (int tries = 0; tries < 200 && b != a; ++tries) {
    if (b > 0) {
      kill(b, SIGKILL);
      waitpid(b, nullptr, 0);
    }
    FILE* f = fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (!f || fprintf(f, "%d", a - 1) < 0 || fclose(f) != 0) {
      WARN("skipped: cannot write /proc/sys/kernel/ns_last_pid (not root?)");
      return;
    }
    b = fork();
    if (b == 0) {
      kill(getpid(), SIGSTOP);
      _exit(0);
    }
    REQUIRE(b > 0);
  }
  int st = 0;
  REQUIRE(waitpid(b, &st, WUNTRACED) == b);
  const bool reused = b == a && WIFSTOPPED(st);
  const std::string saidByPidfd = byPidfd.stalled(), saidByStart = byStart.stalled();
  const bool aliveByPidfd = byPidfd.alive(), aliveByStart = byStart.alive();
  kill(b, SIGKILL);
  waitpid(b, nullptr, 0);
  if (!reused) {
    WARN("skipped: the kernel did not give pid " << a << " again");
    return;
  }
  // Before, a rank was known by its pid alone, and this said "is stopped (...)".
  CHECK(saidByPidfd == "has exited");
  CHECK(saidByStart == "has exited");
  CHECK(!aliveByPidfd);
  CHECK(!aliveByStart);
}

namespace {
// A process's state letter from /proc ('?' when it is gone).
char procState(int pid) {
  char path[64], line[512];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = fopen(path, "r");
  if (!f) return '?';
  size_t n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = '\0';
  const char* close = strrchr(line, ')');
  return close && close[1] == ' ' ? close[2] : '?';
}
}  // namespace

// The first cause that a failed rank of this host published wins over what its process's state
// says once it has gone. Rank 0 waits in its call and is stopped there; ranks 1 and 2 find their
// calls mismatched and publish that; rank 1 exits. Rank 0, continued after more than its
// timeout, times out at once and finds rank 1 gone: it must report the mismatch, not "rank 1 has
// exited" (the symptom that made `multihost link cut` name a rank of its own host that had
// exited after failing, instead of the rank across the cut). Rank 2 lives until rank 0 has
// exited (the harness ends a child it saw stopped once every other has exited).
TEST_CASE("a same-host peer that failed and exited: its published cause wins over its exit", "[faults]") {
  auto* shared = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(shared != MAP_FAILED);
  std::atomic<int>* pids = shared;        // [0..2] each rank's pid
  std::atomic<int>& calling = shared[3];  // rank 0 is about to make its call
  std::atomic<int>& go = shared[4];       // rank 0 is stopped: ranks 1 and 2 call
  std::atomic<int>& resumed = shared[5];  // rank 0 has been continued
  std::atomic<int>& returned = shared[6];  // rank 0's call has returned
  // Long enough under a sanitizer for init and for the controller to see rank 0 blocked before
  // rank 0's call times out; rank 0 stays stopped for twice this.
  const int timeoutMs = 1500 * kSanitizerScale;
  // Each state is awaited, never a time; the bound only keeps a broken run from hanging here,
  // and a state that never came ends the controller with what it awaited (never a kill(0)).
  auto await = [](const std::function<bool()>& cond) {
    for (int i = 0; i < 120000; ++i) {
      if (cond()) return true;
      usleep(1000);
    }
    return cond();
  };
  std::string controlFailed;
  std::atomic<bool> started{false};
  std::thread control([&] {
    started.store(true);
    if (!await([&] { return pids[0].load() > 0 && calling.load(); })) {
      controlFailed = "rank 0 never made its call (did its init fail?)";
    } else if (!await([&] { return procState(pids[0].load()) == 'S'; })) {  // blocked in its call
      controlFailed = "rank 0 was never seen blocked in its call";
    } else {
      kill(pids[0].load(), SIGSTOP);
      go.store(1);
      if (!await([&] { return pids[1].load() > 0 && (procState(pids[1].load()) == 'Z' || procState(pids[1].load()) == '?'); }))
        controlFailed = "rank 1 never exited";
      usleep(2 * timeoutMs * 1000);  // rank 0's deadline passes while it is stopped
      kill(pids[0].load(), SIGCONT);
    }
    go.store(1);  // whatever happened, nobody waits for the controller any more
    resumed.store(1);
  });
  // The ranks are forked once the controller runs and allocates nothing more until they are in
  // their calls: a fork while its thread was starting could copy a lock of ASan's allocator
  // held (GCC 12's runtime does not take its locks around fork), and the child's first
  // allocation then waited forever (seen: rank 0 never joined the rendezvous).
  while (!started.load()) usleep(1000);
  ProcessOptions opts;
  opts.timeoutMs = timeoutMs;
  auto results = runProcesses(3, [&](horaComm_t comm, int rank, int) -> std::string {
    pids[rank].store(getpid());
    // Large enough for many chunks: ranks 1 and 2 fail before they post the chunk rank 0 waits for.
    std::vector<float> buf(size_t(1) << 21, 1.0f);
    if (rank == 0) calling.store(1);
    while (rank != 0 && !go.load()) usleep(1000);
    horaResult_t r = horaAllReduce(buf.data(), buf.data(), buf.size() >> (rank == 2), horaFloat, horaSum, comm, nullptr);
    const std::string text = horaGetLastError(comm);
    if (rank == 0) returned.store(1);
    // Rank 2 exits last, once rank 0 has exited too: the harness, having seen rank 0 stopped,
    // would end it if every other had exited first.
    if (rank == 2)
      await([&] {
        const char st = resumed.load() && returned.load() ? procState(pids[0].load()) : 'R';
        return st == 'Z' || st == '?';
      });
    if (r != horaInvalidUsage || text.find("mismatched") == std::string::npos)
      return std::string("returned ") + horaGetErrorString(r) + ": " + text;
    return "";
  }, opts);
  control.join();
  munmap(shared, 4096);
  INFO(describe(results));
  CHECK(controlFailed == "");
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("horaCommAbort from another thread stops a blocked call", "[faults]") {
  std::vector<horaComm_t> comms(2);
  REQUIRE(horaCommInitAll(comms.data(), 2, nullptr) == horaSuccess);
  horaResult_t got = horaSuccess;
  std::string text;
  std::thread t([&] {
    float x;
    got = horaRecv(&x, 1, horaFloat, 1, comms[0], nullptr);  // rank 1 never sends
    text = horaGetLastError(nullptr);
  });
  while (!comms[0]->busy.load()) usleep(1000);
  // A second thread's call on the busy communicator: horaInvalidUsage, and the first goes on.
  float z = 0;
  CHECK(horaAllReduce(&z, &z, 1, horaFloat, horaSum, comms[0], nullptr) == horaInvalidUsage);
  CHECK(std::string(horaGetLastError(nullptr)).find("in use by another thread") != std::string::npos);
  CHECK(horaCommAbort(comms[0]) == horaSuccess);
  t.join();
  // The aborting rank's own interrupted call: horaInvalidUsage (docs/errors.md's table).
  CHECK(got == horaInvalidUsage);
  CHECK(text.find("aborted") != std::string::npos);
  // Its peer hears of it as a peer's failure: horaRemoteError, naming the rank that aborted.
  float y = 0;
  CHECK(horaAllReduce(&y, &y, 1, horaFloat, horaSum, comms[1], nullptr) == horaRemoteError);
  const std::string peerText = horaGetLastError(comms[1]);
  INFO(peerText);
  CHECK(peerText.find("rank 0 (") != std::string::npos);
  CHECK(peerText.find("was aborted") != std::string::npos);
  CHECK(horaCommDestroy(comms[1]) == horaSuccess);
}

// The single copy's reads and writes of a peer's memory (shm::World::readMember and writeMember,
// process_vm_readv and process_vm_writev): what the peer's memory holds; an address it does not
// map (a published word that is not a buffer of its own) is that peer's error, not a crash; and
// once its process is gone, it is said to be gone.
TEST_CASE("reading and writing a peer's memory: its bytes, an address it does not map, its process gone",
          "[faults][singlecopy]") {
  int toParent[2], toChild[2];
  REQUIRE(pipe(toParent) == 0);
  REQUIRE(pipe(toChild) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    static uint8_t data[100000];
    for (size_t i = 0; i < sizeof data; ++i) data[i] = static_cast<uint8_t>(i % 241);
    const uint64_t at = reinterpret_cast<uintptr_t>(data);
    char c;
    _exit(write(toParent[1], &at, sizeof at) == sizeof at && read(toChild[0], &c, 1) >= 0 ? 0 : 1);
  }
  uint64_t at = 0;
  REQUIRE(read(toParent[0], &at, sizeof at) == sizeof at);
  hora::shm::World w;
  w.nlocal = 2;
  w.localIndex = 0;
  w.peers.resize(2);
  w.peers[1].name = "rank 1 (test, pid " + std::to_string(child) + ")";
  w.peers[1].process = hora::ProcessRef(child);
  std::vector<uint8_t> got(100000, 0);
  auto readErr = [&](uint64_t from, size_t bytes) -> std::string {
    try {
      w.readMember(1, from, got.data(), bytes);
      return "";
    } catch (const hora::Error& e) {
      return std::string(e.code() == hora::Errc::Remote ? "remote: " : "other: ") + e.what();
    }
  };
  CHECK(readErr(at, got.size()) == "");
  bool same = true;
  for (size_t i = 0; i < got.size(); ++i) same &= got[i] == static_cast<uint8_t>(i % 241);
  CHECK(same);
  // A write lands in its memory, and reads back.
  std::vector<uint8_t> mark(5000, 0x5A);
  w.writeMember(1, at + 1000, mark.data(), mark.size());
  CHECK(readErr(at, got.size()) == "");
  CHECK((got[999] == static_cast<uint8_t>(999 % 241) && got[1000] == 0x5A && got[5999] == 0x5A &&
         got[6000] == static_cast<uint8_t>(6000 % 241)));
  std::string e = readErr(16, 4096);  // nothing is mapped at 16
  CHECK(e.rfind("remote: " + w.peers[1].name + " published a buffer that this rank cannot read", 0) == 0);
  try {
    w.writeMember(1, 16, mark.data(), mark.size());
    FAIL("a write to an address it does not map succeeded");
  } catch (const hora::Error& x) {
    CHECK(std::string(x.what()).find("published a buffer that this rank cannot write") != std::string::npos);
  }
  e = readErr(at + 99000, 8192);  // runs past its buffer, and maybe its mapping
  CHECK((e.empty() || e.find("cannot read") != std::string::npos));
  REQUIRE(write(toChild[1], "x", 1) == 1);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  e = readErr(at, 64);
  CHECK(e.rfind("remote: " + w.peers[1].name + " exited or crashed", 0) == 0);
  try {
    w.writeMember(1, at, mark.data(), 64);
    FAIL("a write to a process that is gone succeeded");
  } catch (const hora::Error& x) {
    CHECK(std::string(x.what()).find("exited or crashed (its process is gone); while writing its buffer") != std::string::npos);
  }
  for (int fd : {toParent[0], toParent[1], toChild[0], toChild[1]}) close(fd);
}
