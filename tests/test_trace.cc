// The flight recorder (src/comm/trace.h) and hora-inspect's report of it (tools/hora_inspect.h):
// dumps by horaCommDump, on a failure, on a timeout and on SIGUSR1; the report of a hang where
// one rank is busy in its own code while the others wait in a call, of mismatched calls and of
// a killed rank. Ranks are processes; nothing depends on timing (a rank that must be waiting is
// asked again until its dump says so). Dumps of failures go to HORA_DUMP_DIR (set by meson).
#include <catch2/catch.hpp>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "../tools/hora_inspect.h"
#include "base/log.h"
#include "comm/trace_clock.h"
#include "harness.h"

using namespace hora::test;
namespace inspect = hora::inspect;

namespace {

std::string dumpDir() {
  const char* d = getenv("HORA_DUMP_DIR");
  REQUIRE(d != nullptr);
  return d;
}

// An empty directory: dir/name under the dump directory.
std::string freshDir(const std::string& name) {
  const std::string dir = dumpDir() + "/" + name;
  mkdir(dumpDir().c_str(), 0755);
  REQUIRE(system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str()) == 0);
  return dir;
}

void clearDumps() {
  mkdir(dumpDir().c_str(), 0755);
  REQUIRE(system(("rm -f '" + dumpDir() + "'/hora-dump.*.json").c_str()) == 0);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

std::string defaultDump(int pid) {
  return dumpDir() + "/hora-dump." + hora::log::hostName() + "." + std::to_string(pid) + ".json";
}

inspect::Json parse(const std::string& path) {
  inspect::Json doc;
  std::string why;
  INFO(path);
  REQUIRE(inspect::parseJson(readFile(path), &doc, &why));
  return doc;
}

std::string load(const std::vector<std::string>& paths, std::vector<inspect::Communicator>* out = nullptr) {
  std::vector<std::string> problems;
  std::vector<inspect::Communicator> comms = inspect::load(paths, &problems);
  const std::string text = inspect::reportText(comms, problems);
  if (out) *out = std::move(comms);
  return text;
}

void touch(const std::string& path) { std::ofstream(path) << "1"; }

std::string check(bool ok, const std::string& what) { return ok ? "" : what; }

}  // namespace

TEST_CASE("horaCommDump writes the communicator's calls", "[trace]") {
  const std::string dir = freshDir("call");
  auto results = runProcesses(2, [dir](horaComm_t comm, int rank, int) -> std::string {
    float x[2] = {1, 2};
    for (int i = 0; i < 3; ++i)
      if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "allreduce failed";
    if (horaBroadcast(x, x, 1, horaFloat, 1, comm, nullptr) != horaSuccess) return "broadcast failed";
    const std::string file = dir + "/rank" + std::to_string(rank) + ".json";
    if (horaCommDump(comm, file.c_str()) != horaSuccess) return std::string("dump failed: ") + horaGetLastError(comm);
    // A directory: the usual name in it; NULL: the usual name in HORA_DUMP_DIR.
    if (horaCommDump(comm, dir.c_str()) != horaSuccess) return "dump to a directory failed";
    if (horaCommDump(comm, nullptr) != horaSuccess) return "dump to the usual place failed";
    if (horaCommDump(nullptr, nullptr) != horaInvalidArgument) return "a NULL communicator was not refused";
    const std::string usual = "/hora-dump." + std::string(hora::log::hostName()) + "." + std::to_string(getpid()) + ".json";
    if (!exists(dir + usual) || !exists(getenv("HORA_DUMP_DIR") + usual)) return "no dump at the usual name";
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) REQUIRE(r.ok());
  for (int rank = 0; rank < 2; ++rank) {
    const inspect::Json doc = parse(dir + "/rank" + std::to_string(rank) + ".json");
    CHECK(doc.get("format")->str() == "hora-dump");
    CHECK(doc.get("reason")->str() == "call");
    const inspect::Json& c = doc.get("communicators")->items.at(0);
    CHECK(c.get("rank")->integer() == rank);
    CHECK(c.get("nranks")->integer() == 2);
    CHECK(c.get("state")->str() == "ready");
    CHECK(c.get("peers")->items.size() == 2);
    const std::vector<inspect::Json>& entries = c.get("entries")->items;
    REQUIRE(entries.size() == 4);
    for (size_t i = 0; i < 4; ++i) {
      CHECK(entries[i].get("seq")->integer() == static_cast<int64_t>(i + 1));
      CHECK(entries[i].get("call")->integer() == static_cast<int64_t>(i + 1));
      CHECK(entries[i].get("state")->str() == "done");
      CHECK(entries[i].get("count")->integer() == (i < 3 ? 2 : 1));
      CHECK(entries[i].get("started")->integer() > 0);
      CHECK(entries[i].get("ended")->integer() >= entries[i].get("started")->integer());
      CHECK(entries[i].get("algorithm") != nullptr);
    }
    CHECK(entries[0].get("collective")->str() == "AllReduce");
    CHECK(entries[0].get("op")->str() == "sum");
    CHECK(entries[0].get("dtype")->str() == "float");
    CHECK(entries[3].get("collective")->str() == "Broadcast");
    CHECK(entries[3].get("root")->integer() == 1);
  }
  std::vector<inspect::Communicator> comms;
  const std::string report = load({dir}, &comms);
  INFO(report);
  REQUIRE(comms.size() == 1);
  CHECK(report.find("last completed: #4 on ranks 0, 1") != std::string::npos);
  CHECK(report.find("rank 0 last finished #4 and is in no call") != std::string::npos);
  CHECK(report.find("mismatch") == std::string::npos);
}

// Whether a Broadcast is in place is the root's own: its reader passes its result alone. Every
// rank must still make the same plan (at 2 processes the single copy and the root's slots
// differ in their protocol): a Broadcast is planned as the root's call in place, whatever each
// rank passes, and every result is right.
TEST_CASE("a Broadcast in place on some ranks and out of place on others has one plan on every rank", "[trace][planner]") {
  const std::string dir = freshDir("inplace");
  auto results = runProcesses(2, [dir](horaComm_t comm, int rank, int) -> std::string {
    const size_t count = size_t(1) << 20;
    std::vector<uint8_t> a(count), b(count);
    // (root, is this rank in place): each rank in place as root and not, and both alike.
    const std::pair<int, bool> calls[] = {{0, rank == 0}, {1, rank == 1}, {0, rank != 0}, {1, true}, {0, false}};
    for (const auto& [root, inPlace] : calls) {
      for (size_t i = 0; i < count; ++i) a[i] = rank == root ? static_cast<uint8_t>(i * 7 + root) : 0xEE;
      std::fill(b.begin(), b.end(), 0xDD);
      uint8_t* result = inPlace ? a.data() : b.data();
      if (horaBroadcast(a.data(), result, count, horaUint8, root, comm, nullptr) != horaSuccess)
        return std::string("broadcast failed: ") + horaGetLastError(comm);
      for (size_t i = 0; i < count; ++i)
        if (result[i] != static_cast<uint8_t>(i * 7 + root))
          return "wrong byte " + std::to_string(i) + " from root " + std::to_string(root);
    }
    const std::string file = dir + "/rank" + std::to_string(rank) + ".json";
    return horaCommDump(comm, file.c_str()) == horaSuccess ? "" : std::string("dump failed: ") + horaGetLastError(comm);
  });
  INFO(describe(results));
  for (const auto& r : results) REQUIRE(r.ok());
  std::vector<std::string> algos[2];
  for (int rank = 0; rank < 2; ++rank) {
    const inspect::Json doc = parse(dir + "/rank" + std::to_string(rank) + ".json");
    for (const inspect::Json& e : doc.get("communicators")->items.at(0).get("entries")->items)
      algos[rank].push_back(e.get("algorithm")->str());
  }
  REQUIRE(algos[0].size() == 5);
  CHECK(algos[0] == algos[1]);
  for (const std::string& x : algos[0]) CHECK(x == algos[0][0]);
}

TEST_CASE("the recorder's coarse clock parks when no call starts, and the next start reads the counter", "[trace]") {
  namespace tr = hora::trace;
  tr::clockUser();  // this process's clock thread (no communicator of this process starts calls)
  auto stateIs = [](uint32_t want) {
    // Eventually, whatever the scheduling: up to a minute.
    for (int i = 0; i < 60000 && tr::gCoarse.state.load() != want; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return tr::gCoarse.state.load() == want;
  };
  REQUIRE(stateIs(tr::kCoarseParked));  // a tick went by with no start
  const uint64_t parkedAt = tr::clockCost().wakeups;
  std::this_thread::sleep_for(std::chrono::microseconds(3 * tr::kCoarseTickUs));
  CHECK(tr::clockCost().wakeups == parkedAt);  // parked: no wakeups while no call starts
  // The first start after the pause reads the counter itself: never the reading from before it.
  const uint64_t before = tr::ticks();
  const uint64_t start = tr::coarseTicks();
  CHECK(start >= before);
  CHECK(tr::gCoarse.ticks.load() >= before);
  // ... and the thread ticks again.
  for (int i = 0; i < 60000 && tr::clockCost().wakeups == parkedAt; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(tr::clockCost().wakeups > parkedAt);
  // While calls start, a start is the last tick's reading: never later than the counter.
  for (int i = 0; i < 100; ++i) {
    const uint64_t c = tr::coarseTicks();
    CHECK(c <= tr::ticks());
    CHECK(tr::gCoarse.state.load() != tr::kCoarseOff);
  }
  REQUIRE(stateIs(tr::kCoarseParked));  // and it parks again
}

TEST_CASE("calls on a host stream are recorded as queued, then run", "[trace]") {
  const std::string dir = freshDir("stream");
  auto results = runProcesses(2, [dir](horaComm_t comm, int rank, int) -> std::string {
    horaStream_t s = nullptr;
    if (horaStreamCreate(&s) != horaSuccess) return "no stream";
    float x[4] = {1, 2, 3, 4};
    for (int i = 0; i < 5; ++i) horaAllReduce(x, x, 4, horaFloat, horaSum, comm, s);
    if (horaStreamSynchronize(s) != horaSuccess) return "the stream's calls failed";
    horaStreamDestroy(s);
    const std::string file = dir + "/rank" + std::to_string(rank) + ".json";
    return horaCommDump(comm, file.c_str()) == horaSuccess ? "" : "dump failed";
  });
  INFO(describe(results));
  for (const auto& r : results) REQUIRE(r.ok());
  const inspect::Json doc = parse(dir + "/rank0.json");
  const std::vector<inspect::Json>& entries = doc.get("communicators")->items.at(0).get("entries")->items;
  REQUIRE(entries.size() == 5);
  for (const inspect::Json& e : entries) {
    CHECK(e.get("state")->str() == "done");
    CHECK(e.get("queued")->integer() > 0);  // queued, then started: one entry each
    CHECK(e.get("started")->integer() >= e.get("queued")->integer());
    CHECK(e.get("stream")->str().rfind("host 0x", 0) == 0);
  }
}

TEST_CASE("a failure dumps every rank's calls; hora-inspect names a killed rank as gone", "[trace]") {
  clearDumps();
  std::vector<int> pids(4);
  const std::string dir = freshDir("killed");
  ProcessOptions opts;
  opts.timeoutMs = 600000;  // only the closed links can make this fail fast
  auto results = runProcesses(4, [dir](horaComm_t comm, int rank, int) -> std::string {
    touch(dir + "/pid." + std::to_string(rank) + "." + std::to_string(getpid()));
    float x[2] = {1, 2};
    for (int i = 0; i < 3; ++i)
      if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "allreduce failed";
    if (rank == 3) kill(getpid(), SIGKILL);
    if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) == horaSuccess) return "the fourth call succeeded";
    return "";
  }, opts);
  INFO(describe(results));
  std::vector<std::string> files;
  for (const auto& r : results) {
    if (r.rank == 3) {
      CHECK((WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL));
      continue;
    }
    CHECK(r.ok());
  }
  DIR* d = opendir(dir.c_str());
  REQUIRE(d);
  while (dirent* e = readdir(d)) {
    int rank = -1, pid = 0;
    if (sscanf(e->d_name, "pid.%d.%d", &rank, &pid) == 2 && rank >= 0 && rank < 4) pids[static_cast<size_t>(rank)] = pid;
  }
  closedir(d);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string f = defaultDump(pids[static_cast<size_t>(rank)]);
    INFO(f);
    REQUIRE(exists(f));
    const inspect::Json doc = parse(f);
    CHECK(doc.get("reason")->str() == "failure");
    const inspect::Json& c = doc.get("communicators")->items.at(0);
    CHECK(c.get("state")->str() == "failed");
    CHECK(c.get("error")->get("code")->integer() == 6);  // horaRemoteError
    const std::vector<inspect::Json>& entries = c.get("entries")->items;
    REQUIRE(entries.size() == 4);
    CHECK(entries[3].get("state")->str() == "failed");
    files.push_back(f);
  }
  CHECK(!exists(defaultDump(pids[3])));
  const std::string report = load(files);
  INFO(report);
  CHECK(report.find("rank 3 wrote no dump (pid " + std::to_string(pids[3]) + ", gone)") != std::string::npos);
  CHECK(report.find("rank 0 failed (horaRemoteError) in AllReduce #4") != std::string::npos);
  CHECK(report.find("last completed: #3 on ranks 0-2") != std::string::npos);
}

TEST_CASE("a timeout dumps the call with the rank it waits for", "[trace]") {
  clearDumps();
  const std::string dir = freshDir("timeout");
  ProcessOptions opts;
  opts.timeoutMs = 1000;
  auto results = runProcesses(3, [dir](horaComm_t comm, int rank, int) -> std::string {
    touch(dir + "/pid." + std::to_string(rank) + "." + std::to_string(getpid()));
    float x[2] = {1, 2};
    if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "allreduce failed";
    if (rank == 2) {
      // Busy in its own code until both others have timed out and dumped.
      int seen = 0;
      for (int i = 0; i < 12000 && seen < 2; ++i) {
        usleep(10000);
        seen = 0;
        DIR* d = opendir(dir.c_str());
        while (dirent* e = d ? readdir(d) : nullptr) seen += std::string(e->d_name).rfind("timedout.", 0) == 0;
        if (d) closedir(d);
      }
      return check(seen == 2, "the others did not time out");
    }
    const horaResult_t r = horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr);
    touch(dir + "/timedout." + std::to_string(rank));
    return check(r == horaTimeout, std::string("expected horaTimeout, got ") + horaGetErrorString(r));
  }, opts);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  REQUIRE(d);
  while (dirent* e = readdir(d)) {
    int rank = -1, pid = 0;
    if (sscanf(e->d_name, "pid.%d.%d", &rank, &pid) == 2 && rank < 2) files.push_back(defaultDump(pid));
  }
  closedir(d);
  REQUIRE(files.size() == 2);
  for (const std::string& f : files) {
    INFO(f);
    const inspect::Json doc = parse(f);
    const inspect::Json& c = doc.get("communicators")->items.at(0);
    CHECK(c.get("error")->get("code")->integer() == 8);  // horaTimeout
    const inspect::Json& last = c.get("entries")->items.at(1);
    CHECK(last.get("state")->str() == "failed");
    REQUIRE(last.get("wait") != nullptr);
    CHECK(last.get("wait")->get("rank")->integer() == 2);
  }
  const std::string report = load(files);
  INFO(report);
  CHECK(report.find("rank 0 failed (horaTimeout) in AllReduce #2, where it waits at step") != std::string::npos);
  CHECK(report.find("for rank 2") != std::string::npos);
  CHECK(report.find("rank 2 wrote no dump") != std::string::npos);
}

TEST_CASE("SIGUSR1 dumps every rank; hora-inspect names the rank busy in its own code", "[trace]") {
  clearDumps();
  const std::string dir = freshDir("hang");
  std::string report, problem;
  // The inspector: once every rank has said its pid, it asks all of them (SIGUSR1) until ranks
  // 0-2 are blocked in their fourth call, then releases rank 3.
  std::thread inspector([&] {
    std::vector<int> pids(4, 0);
    for (int tries = 0; tries < 12000; ++tries) {
      DIR* d = opendir(dir.c_str());
      while (dirent* e = d ? readdir(d) : nullptr) {
        int rank = -1, pid = 0;
        if (sscanf(e->d_name, "pid.%d.%d", &rank, &pid) == 2 && rank >= 0 && rank < 4) pids[static_cast<size_t>(rank)] = pid;
      }
      if (d) closedir(d);
      if (std::count(pids.begin(), pids.end(), 0) == 0 && exists(dir + "/sleeping")) break;
      usleep(10000);
    }
    for (int round = 0; round < 600 && report.empty(); ++round) {
      std::vector<std::string> files;
      for (int pid : pids) {
        const std::string f = defaultDump(pid);
        unlink(f.c_str());
        kill(pid, SIGUSR1);
        files.push_back(f);
      }
      bool all = false;
      for (int i = 0; i < 1000 && !all; ++i) {
        all = true;
        for (const std::string& f : files) all &= exists(f);
        if (!all) usleep(10000);
      }
      std::vector<inspect::Communicator> comms;
      const std::string text = load(files, &comms);
      int waiting = 0;
      for (const inspect::Communicator& c : comms)
        for (const auto& [rank, dump] : c.ranks)
          for (const inspect::Call& k : dump.calls) waiting += k.call == 4 && k.state == "started" && k.waiting;
      if (waiting == 3) report = text;
      else usleep(100000);
    }
    if (report.empty()) problem = "ranks 0-2 were never seen waiting";
    const int fd = open((dir + "/release").c_str(), O_WRONLY);  // rank 3's open returns
    if (fd >= 0) close(fd);
  });
  REQUIRE(mkfifo((dir + "/release").c_str(), 0600) == 0);
  auto results = runProcesses(4, [dir](horaComm_t comm, int rank, int) -> std::string {
    float x[2] = {1, 2};
    for (int i = 0; i < 3; ++i)
      if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "allreduce failed";
    touch(dir + "/pid." + std::to_string(rank) + "." + std::to_string(getpid()));
    if (rank == 3) {
      // Asleep in its own code (no wake-ups: its state stays S) until the inspector opens the fifo.
      touch(dir + "/sleeping");
      const int fd = open((dir + "/release").c_str(), O_RDONLY);
      if (fd < 0) return "cannot open the fifo";
      close(fd);
    }
    if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "the fourth call failed";
    return "";
  });
  inspector.join();
  INFO(describe(results));
  INFO(report);
  for (const auto& r : results) CHECK(r.ok());
  REQUIRE(problem.empty());
  CHECK(report.find("AllReduce #4 (2 float, sum") != std::string::npos);
  CHECK(report.find("ranks 0-2 wait at step ") != std::string::npos);
  CHECK(report.find(" for rank 3") != std::string::npos);
  CHECK(report.find("rank 3 last finished #3 and is in no call (pid ") != std::string::npos);
  CHECK(report.find("state S (sleeping))") != std::string::npos);
  CHECK(report.find("last completed: #3 on ranks 0-3") != std::string::npos);
}

TEST_CASE("hora-inspect says when ranks are in different calls under one number", "[trace]") {
  const std::string dir = freshDir("mismatch");
  ProcessOptions opts;
  opts.timeoutMs = 20000;
  auto results = runProcesses(3, [dir](horaComm_t comm, int rank, int) -> std::string {
    float x[2] = {1, 2};
    if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "allreduce failed";
    horaResult_t r = rank == 2 ? horaBroadcast(x, x, 2, horaFloat, 0, comm, nullptr)
                               : horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr);
    if (r == horaSuccess) return "the mismatched call succeeded";
    const std::string file = dir + "/rank" + std::to_string(rank) + ".json";
    return horaCommDump(comm, file.c_str()) == horaSuccess ? "" : "dump failed";
  }, opts);
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
  const std::string report = load({dir + "/rank0.json", dir + "/rank1.json", dir + "/rank2.json"});
  INFO(report);
  CHECK(report.find("mismatch at call #2: ranks 0, 1 in AllReduce of 2 float, sum, rank 2 in Broadcast of 2 float, root 0") !=
        std::string::npos);
  CHECK(report.find("last completed: #1 on ranks 0-2") != std::string::npos);
}

// Run by itself with HORA_TRACE_CALLS=0 (the setting is read once per process: tests/meson.build).
TEST_CASE("HORA_TRACE_CALLS=0 records nothing; the dump still says the communicator's state", "[.off]") {
  REQUIRE(std::string(getenv("HORA_TRACE_CALLS") ? getenv("HORA_TRACE_CALLS") : "") == "0");
  const std::string dir = freshDir("off");
  auto failures = runThreads(2, [dir](horaComm_t comm, int rank, int) -> std::string {
    float x[2] = {1, 2};
    if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "allreduce failed";
    const std::string file = dir + "/rank" + std::to_string(rank) + ".json";
    return horaCommDump(comm, file.c_str()) == horaSuccess ? "" : "dump failed";
  });
  INFO(joinAll(failures));
  REQUIRE(failures.empty());
  const inspect::Json doc = parse(dir + "/rank0.json");
  const inspect::Json& c = doc.get("communicators")->items.at(0);
  CHECK(c.get("state")->str() == "ready");
  CHECK(c.get("kept")->integer() == 0);
  CHECK(c.get("entries")->items.empty());
}

namespace {
volatile sig_atomic_t gUserSignals = 0;
void userHandler(int) { gUserSignals = gUserSignals + 1; }
}  // namespace

TEST_CASE("a SIGUSR1 handler installed before the first communicator is still called", "[trace]") {
  clearDumps();
  auto results = runRawProcesses(2, [](const horaUniqueId& id, int rank, int n) -> std::string {
    struct sigaction mine {};
    mine.sa_handler = userHandler;
    sigemptyset(&mine.sa_mask);
    sigaction(SIGUSR1, &mine, nullptr);
    horaComm_t comm = nullptr;
    if (horaCommInitRank(&comm, n, id, rank) != horaSuccess) return "init failed";
    float x[2] = {1, 2};
    if (horaAllReduce(x, x, 2, horaFloat, horaSum, comm, nullptr) != horaSuccess) return "allreduce failed";
    raise(SIGUSR1);
    std::string problem;
    if (gUserSignals != 1) problem = "the application's handler was not called";
    const std::string f = defaultDump(getpid());
    for (int i = 0; i < 12000 && !exists(f); ++i) usleep(10000);
    if (!exists(f)) problem += " no dump was written";
    horaCommDestroy(comm);
    return problem;
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// Run by itself with HORA_DUMP_SIGNAL=0 (tests/meson.build).
TEST_CASE("HORA_DUMP_SIGNAL=0 leaves SIGUSR1 alone", "[.nosignal]") {
  REQUIRE(std::string(getenv("HORA_DUMP_SIGNAL") ? getenv("HORA_DUMP_SIGNAL") : "") == "0");
  auto results = runProcesses(2, [](horaComm_t, int, int) -> std::string {
    struct sigaction now {};
    sigaction(SIGUSR1, nullptr, &now);
    return now.sa_handler == SIG_DFL && !(now.sa_flags & SA_SIGINFO) ? "" : "a SIGUSR1 handler was installed";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}
