// The fault matrix: every fault x every collective x two sizes, 4 ranks as processes, rank 2 the
// culprit. In each cell every rank runs two good calls of the cell's collective (results checked
// exactly), then the third call is the faulty one:
//   kill       the culprit SIGKILLs itself instead of entering the call
//   stop       the culprit SIGSTOPs itself instead (the others must time out)
//   exit       the culprit calls _exit(3) without destroying its communicator
//   wrongcoll  the culprit calls another collective (AllGather; AllReduce in the AllGather cell)
//   wrongroot  the culprit passes root 1 (2 if it is rank 1), the others root 0 (the rooted
//              collectives only: Broadcast, Reduce, Gather, Scatter)
// The rooted collectives use root 0; Gather's and Scatter's big buffer (nranks blocks) is the
// root's only, the other ranks pass NULL for it. A rank of a rooted collective that does not hear
// from the culprit in the data's messages (a Scatter's non-roots, say) learns of the fault only
// through the call check, and must fail all the same.
// Every survivor (for wrongcoll/wrongroot every rank, the culprit included) must return the
// cause's code (kill/exit: horaRemoteError, stop: horaTimeout, wrong*: horaInvalidUsage) with a
// text that names the culprit ("rank 2 (host, pid P)") or says "mismatched", within a deadline
// that only real detection can meet, and a following call must fail too. A small rooted call
// over shared memory goes through the stage's cells, and a rooted call over TCP checks the
// ranks' calls later (src/comm/call_check.h): a rank that does not need the culprit (a
// Broadcast's root, a reader of a live root, a Reduce's sender) may finish it, with a right
// result. That rank hears of the fault through a later call instead, within a bounded number of
// calls (it compares its calls with its neighbour's within a window of calls, and through the
// stage rewrites a cell only once every rank has read it, kCells calls on), and that call must
// fail with the cause's code and text, and the one after it too. The ranks meet
// (through the shared records) after the good calls, and again once every survivor's faulty
// call has returned, so that no rank running ahead or leaving early changes what another finds.
//
// One line per rank and cell goes to stdout, so every text can be read. FAULT_MATRIX_ONLY=<s>
// runs only the cells whose name ("kill/Broadcast/large") contains s.
#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"
#include "transports/tcp/connection.h"

using namespace hora::test;

namespace {

// 4 ranks, rank 2 the culprit; FAULT_MATRIX_RANKS and FAULT_MATRIX_CULPRIT change them (the
// suite's fault-matrix-8 runs 8 ranks with rank 7 the culprit).
int envInt(const char* name, int dflt, int lo, int hi) {
  const char* v = getenv(name);
  if (!v || !*v) return dflt;
  const int x = atoi(v);
  return x >= lo && x <= hi ? x : dflt;
}
const int kRanks = envInt("FAULT_MATRIX_RANKS", 4, 3, 16);
const int kCulprit = envInt("FAULT_MATRIX_CULPRIT", 2, 1, kRanks - 1);
constexpr size_t kSmall = 256;
constexpr size_t kLarge = size_t(2) << 20;  // 2M floats: 8 MiB per rank's part
constexpr int kLongTimeoutMs = 120000;      // kill/exit/wrong*: only real detection is fast
constexpr int kStopTimeoutMs = 3000;
constexpr double kDetectDeadlineMs = 30000;                       // kill/exit/wrong*
constexpr double kStopDeadlineMs = 4.0 * kStopTimeoutMs + 5000;  // stop

enum class Fault { Kill, Stop, Exit, WrongColl, WrongRoot };
enum class Coll { AllReduce, AllGather, Broadcast, ReduceScatter, Reduce, Gather, Scatter };

const char* faultName(Fault f) {
  switch (f) {
    case Fault::Kill: return "kill";
    case Fault::Stop: return "stop";
    case Fault::Exit: return "exit";
    case Fault::WrongColl: return "wrongcoll";
    case Fault::WrongRoot: return "wrongroot";
  }
  return "?";
}

const char* collName(Coll c) {
  switch (c) {
    case Coll::AllReduce: return "AllReduce";
    case Coll::AllGather: return "AllGather";
    case Coll::Broadcast: return "Broadcast";
    case Coll::ReduceScatter: return "ReduceScatter";
    case Coll::Reduce: return "Reduce";
    case Coll::Gather: return "Gather";
    case Coll::Scatter: return "Scatter";
  }
  return "?";
}

const char* codeName(int r) {
  switch (r) {
    case horaSuccess: return "horaSuccess";
    case horaUnhandledCudaError: return "horaUnhandledCudaError";
    case horaSystemError: return "horaSystemError";
    case horaInternalError: return "horaInternalError";
    case horaInvalidArgument: return "horaInvalidArgument";
    case horaInvalidUsage: return "horaInvalidUsage";
    case horaRemoteError: return "horaRemoteError";
    case horaInProgress: return "horaInProgress";
    case horaTimeout: return "horaTimeout";
    default: return "horaUnknownResult";
  }
}

bool hasRoot(Coll c) { return c == Coll::Broadcast || c == Coll::Reduce || c == Coll::Gather || c == Coll::Scatter; }

// What each rank writes for the parent (one anonymous MAP_SHARED page set per cell).
struct RankRecord {
  int pid;
  int goodDone;   // finished the two good calls
  int reached;    // about to issue the faulty call
  int done;       // the faulty call returned
  int code;       // its result
  double ms;      // its duration
  int asyncCode;  // horaCommGetAsyncError right after it
  int nextDone;
  int nextCode;   // the following call's result
  int later;      // the faulty call succeeded (a cell's): the following call that failed, 1 the first
  char good[1024];  // what went wrong in the two good calls ("" if nothing)
  char text[4096];  // horaGetLastError after the faulty call
  char nextText[1024];
};

void copyText(char* dst, size_t cap, const std::string& s) {
  size_t n = std::min(cap - 1, s.size());
  memcpy(dst, s.data(), n);
  dst[n] = 0;
}

void appendText(char* dst, size_t cap, const std::string& s) {
  size_t have = strlen(dst);
  if (have + 1 >= cap) return;
  size_t n = std::min(cap - 1 - have, s.size());
  memcpy(dst + have, s.data(), n);
  dst[have + n] = 0;
}

// Elements of each buffer of `rank` when the call's root is `root`: Gather's recvbuff and
// Scatter's sendbuff are the root's alone (empty, so NULL, elsewhere).
size_t sendCount(Coll c, size_t n, int rank, int root) {
  if (c == Coll::ReduceScatter) return n * kRanks;
  if (c == Coll::Scatter) return rank == root ? n * kRanks : 0;
  return n;
}
size_t recvCount(Coll c, size_t n, int rank, int root) {
  if (c == Coll::AllGather) return n * kRanks;
  if (c == Coll::Gather) return rank == root ? n * kRanks : 0;
  return n;
}

// Input element i of rank r in call k: small integers, so every sum of 4 is exact in float.
float value(int k, int r, size_t i) {
  return static_cast<float>(static_cast<int>((static_cast<size_t>(r) * 7 + i * 13 + static_cast<size_t>(k) * 5 + 3) % 11) - 5);
}

constexpr float kSentinel = 1.0e9f;

void fill(Coll c, int k, int rank, int root, size_t n, std::vector<float>& send, std::vector<float>& recv) {
  send.assign(sendCount(c, n, rank, root), 0.0f);
  recv.assign(recvCount(c, n, rank, root), kSentinel);
  for (size_t i = 0; i < send.size(); ++i) send[i] = value(k, rank, i);
}

float sumOver(int k, size_t i) {
  float s = 0;
  for (int r = 0; r < kRanks; ++r) s += value(k, r, i);
  return s;
}

// "" when recv holds call k's exact result for this rank (the good calls: root 0).
std::string checkResult(Coll c, int k, int rank, size_t n, const std::vector<float>& recv) {
  if (c == Coll::Reduce && rank != 0) return "";  // only the root's recvbuff is defined
  if (c == Coll::Gather && rank != 0) return "";  // only the root has a recvbuff (NULL elsewhere)
  for (size_t j = 0; j < recv.size(); ++j) {
    float want = 0;
    switch (c) {
      case Coll::AllReduce: want = sumOver(k, j); break;
      case Coll::AllGather: want = value(k, static_cast<int>(j / n), j % n); break;
      case Coll::Broadcast: want = value(k, 0, j); break;
      case Coll::ReduceScatter: want = sumOver(k, static_cast<size_t>(rank) * n + j); break;
      case Coll::Reduce: want = sumOver(k, j); break;
      case Coll::Gather: want = value(k, static_cast<int>(j / n), j % n); break;
      case Coll::Scatter: want = value(k, 0, static_cast<size_t>(rank) * n + j); break;
    }
    if (recv[j] != want) {
      char buf[200];
      snprintf(buf, sizeof buf, "element %zu of %zu is %g, expected %g", j, recv.size(), static_cast<double>(recv[j]),
               static_cast<double>(want));
      return buf;
    }
  }
  return "";
}

horaResult_t issue(Coll c, const std::vector<float>& send, std::vector<float>& recv, size_t n, int root,
                   horaComm_t comm) {
  switch (c) {
    case Coll::AllReduce: return horaAllReduce(send.data(), recv.data(), n, horaFloat, horaSum, comm, nullptr);
    case Coll::AllGather: return horaAllGather(send.data(), recv.data(), n, horaFloat, comm, nullptr);
    case Coll::Broadcast: return horaBroadcast(send.data(), recv.data(), n, horaFloat, root, comm, nullptr);
    case Coll::ReduceScatter:
      return horaReduceScatter(send.data(), recv.data(), n, horaFloat, horaSum, comm, nullptr);
    case Coll::Reduce: return horaReduce(send.data(), recv.data(), n, horaFloat, horaSum, root, comm, nullptr);
    case Coll::Gather: return horaGather(send.data(), recv.data(), n, horaFloat, root, comm, nullptr);
    case Coll::Scatter: return horaScatter(send.data(), recv.data(), n, horaFloat, root, comm, nullptr);
  }
  return horaInternalError;
}

std::string oneLine(const char* s, size_t max) {
  std::string t(s);
  if (t.size() > max) t = t.substr(0, max) + "...";
  for (char& ch : t)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return t;
}

std::string statusText(int st) {
  if (WIFEXITED(st)) return "exit " + std::to_string(WEXITSTATUS(st));
  if (WIFSIGNALED(st)) return "signal " + std::to_string(WTERMSIG(st));
  return "status " + std::to_string(st);
}

std::string hostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

const char* transportsEnv() {
  const char* t = getenv("HORA_TRANSPORTS");
  return t && *t ? t : "default";
}

// Whether a rank may finish the cell's faulty call without the culprit and hear of the fault
// later (above): a small rooted call through the stage's cells, and any rooted call whose check
// goes over the links (no stage holds every rank: HORA_TRANSPORTS without shm), where a rank
// compares its calls with its neighbour's within the link's window (tcp::Connection::kUnreadMost
// calls over TCP, taken in batches of 16). Each rank may run a window ahead of its predecessor, so a rank that needs
// no other (a Reduce's leaf, whose sends the kernel buffers) may be that many calls ahead of the
// rank that finds the fault for each rank between them in the ring: it hears at a later call
// once they have failed, or when its window runs out.
const int kFollowMost = kRanks * (static_cast<int>(hora::tcp::Connection::kUnreadMost) + 16) + 8;  // calls after the faulty one, at most, until one fails
bool throughStage() {
  const std::string t = transportsEnv();
  return t == "default" || t.find("shm") != std::string::npos;
}
bool checkedLater(Coll c, size_t n) {
  const char* check = getenv("HORA_CALL_CHECK");
  if (!hasRoot(c) || (check && std::string(check) == "0")) return false;
  return !throughStage() || n == kSmall;
}

bool selected(const std::string& cell) {
  const char* only = getenv("FAULT_MATRIX_ONLY");
  return !only || !*only || cell.find(only) != std::string::npos;
}

void runCell(Fault fault, Coll coll, size_t n, const char* sizeName) {
  const std::string cell = std::string(faultName(fault)) + "/" + collName(coll) + "/" + sizeName;
  const bool wrong = fault == Fault::WrongColl || fault == Fault::WrongRoot;
  const size_t bytes = sizeof(RankRecord) * kRanks;
  auto* recs = static_cast<RankRecord*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(recs != MAP_FAILED);
  memset(recs, 0, bytes);

  ProcessOptions opts;
  opts.timeoutMs = fault == Fault::Stop ? kStopTimeoutMs : kLongTimeoutMs;
  opts.hangGuardSeconds = 200;
  const auto cellStart = std::chrono::steady_clock::now();
  auto results = runProcesses(kRanks, [&](horaComm_t comm, int rank, int nranks) -> std::string {
    if (nranks != kRanks) return "wrong number of ranks";
    RankRecord& me = recs[rank];
    me.pid = getpid();
    std::vector<float> send, recv;
    for (int k = 0; k < 2; ++k) {
      fill(coll, k, rank, 0, n, send, recv);
      horaResult_t r = issue(coll, send, recv, n, 0, comm);
      if (r != horaSuccess) {
        appendText(me.good, sizeof me.good,
                   "good call " + std::to_string(k) + ": " + codeName(r) + ": " + horaGetLastError(comm) + "; ");
        continue;
      }
      std::string bad = checkResult(coll, k, rank, n, recv);
      if (!bad.empty()) appendText(me.good, sizeof me.good, "good call " + std::to_string(k) + ": " + bad + "; ");
    }
    // Every rank finishes its good calls before anyone starts the third: a rank that ran ahead
    // (a leaf of Reduce, say) must not turn another rank's second call into the faulty one.
    __atomic_store_n(&me.goodDone, 1, __ATOMIC_RELEASE);
    const auto barrierEnd = std::chrono::steady_clock::now() + std::chrono::seconds(150);
    for (int p = 0; p < nranks; ++p)
      while (__atomic_load_n(&recs[p].goodDone, __ATOMIC_ACQUIRE) == 0 && std::chrono::steady_clock::now() < barrierEnd)
        usleep(1000);
    Coll mine = coll;
    int root = 0;
    if (rank == kCulprit) {
      switch (fault) {
        case Fault::Kill: kill(getpid(), SIGKILL); _exit(4);
        case Fault::Stop:
          kill(getpid(), SIGSTOP);
          _exit(4);  // never continued: the harness SIGKILLs it once the others exit
        case Fault::Exit: _exit(3);
        case Fault::WrongColl: mine = coll == Coll::AllGather ? Coll::AllReduce : Coll::AllGather; break;
        case Fault::WrongRoot: root = kCulprit == 1 ? 2 : 1; break;
      }
    }
    fill(mine, 2, rank, root, n, send, recv);
    me.reached = 1;
    const auto t0 = std::chrono::steady_clock::now();
    horaResult_t r = issue(mine, send, recv, n, root, comm);
    const auto t1 = std::chrono::steady_clock::now();
    me.code = r;
    me.ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    copyText(me.text, sizeof me.text, horaGetLastError(comm));
    const bool finished = r == horaSuccess && (rank != kCulprit || wrong) && checkedLater(coll, n);
    if (finished) {  // it must be right
      const std::string bad = checkResult(coll, 2, rank, n, recv);
      if (!bad.empty()) appendText(me.good, sizeof me.good, "the faulty call succeeded with a wrong result: " + bad);
    }
    __atomic_store_n(&me.done, 1, __ATOMIC_RELEASE);
    // Linger until every other survivor's faulty call has returned too: a rank that went on
    // (its next call failing, destroying its communicator, exiting) would hand the others a
    // second failure to find, and could unblock or rename the cause for a rank still waiting.
    // Not after a mismatch whose check goes over the links: there a rank that finished the call
    // finds the mismatch at its next calls, and a rank still waiting in it (on a rank that sent
    // its data elsewhere) hears of it from them; held back, they would find it only once the
    // waiting rank timed out.
    const bool goOn = finished && wrong && !throughStage();
    const auto lingerEnd = std::chrono::steady_clock::now() + std::chrono::seconds(goOn ? 0 : 150);
    for (int p = 0; p < nranks; ++p) {
      if (p == rank || (!wrong && p == kCulprit)) continue;
      while (__atomic_load_n(&recs[p].done, __ATOMIC_ACQUIRE) == 0 && std::chrono::steady_clock::now() < lingerEnd)
        usleep(1000);
    }
    horaResult_t async = horaSuccess;
    horaCommGetAsyncError(comm, &async);
    me.asyncCode = async;
    // The following call: the cell's collective again, as every rank would issue it. After a
    // faulty call that this rank finished, the first that fails stands for it, then the next.
    fill(coll, 3, rank, 0, n, send, recv);
    horaResult_t next = issue(coll, send, recv, n, 0, comm);
    if (finished) {
      int k = 1;
      for (; next == horaSuccess && k < kFollowMost; ++k) {
        fill(coll, 3, rank, 0, n, send, recv);
        next = issue(coll, send, recv, n, 0, comm);
      }
      me.later = k;
      me.code = next;
      copyText(me.text, sizeof me.text, horaGetLastError(comm));
      fill(coll, 3, rank, 0, n, send, recv);
      next = issue(coll, send, recv, n, 0, comm);
    }
    me.nextCode = next;
    copyText(me.nextText, sizeof me.nextText, horaGetLastError(comm));
    me.nextDone = 1;
    return "";
  }, opts);
  const double cellMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - cellStart).count();

  const std::string host = hostName();
  const int culpritPid = recs[kCulprit].pid;
  const std::string name = "rank " + std::to_string(kCulprit) + " (" + host + ", pid " + std::to_string(culpritPid) + ")";
  const std::string needle = wrong ? std::string("mismatched") : name;
  const horaResult_t want = fault == Fault::Stop ? horaTimeout : wrong ? horaInvalidUsage : horaRemoteError;
  const double deadline = fault == Fault::Stop ? kStopDeadlineMs : kDetectDeadlineMs;

  printf("cell %s [%s] %.0f ms, culprit %s\n", cell.c_str(), transportsEnv(), cellMs, name.c_str());
  std::vector<std::string> lines(kRanks);
  for (const ProcessResult& pr : results) {
    if (pr.rank < 0 || pr.rank >= kRanks) {
      printf("cell %s: harness: %s\n", cell.c_str(), pr.output.c_str());
      continue;
    }
    const RankRecord& rec = recs[pr.rank];
    const bool survivor = wrong || pr.rank != kCulprit;
    char head[200];
    std::string line;
    if (!survivor) {
      snprintf(head, sizeof head, "cell %s rank %d: culprit pid %d, %s", cell.c_str(), pr.rank, rec.pid,
               statusText(pr.status).c_str());
      line = head;
    } else if (!rec.done) {
      snprintf(head, sizeof head, "cell %s rank %d: never returned from the faulty call (%s, reached %d)", cell.c_str(),
               pr.rank, statusText(pr.status).c_str(), rec.reached);
      line = head;
    } else {
      snprintf(head, sizeof head, "cell %s rank %d: %s %.1f ms: ", cell.c_str(), pr.rank, codeName(rec.code), rec.ms);
      line = head + oneLine(rec.text, 300);
      if (rec.later) line += " | (the faulty call succeeded; the error above is call " + std::to_string(rec.later) + " after it)";
      line += std::string(" | next: ") + (rec.nextDone ? codeName(rec.nextCode) : "never returned");
      if (rec.asyncCode != rec.code) line += std::string(" | async: ") + codeName(rec.asyncCode);
      if (!WIFEXITED(pr.status) || WEXITSTATUS(pr.status) != 0) line += " | process " + statusText(pr.status);
    }
    if (rec.good[0]) line += std::string(" | GOOD CALLS FAILED: ") + oneLine(rec.good, 300);
    if (!pr.output.empty()) line += " | output: " + oneLine(pr.output.c_str(), 300);
    if (survivor) {  // the verdict of the checks below, for a reader of the summary
      std::string bad;
      if (rec.good[0]) bad += " good";
      if (!rec.done) bad += " returned";
      else {
        if (rec.code != want) bad += " code";
        if (std::string(rec.text).find(needle) == std::string::npos) bad += wrong ? " mismatched" : " culprit";
        if (rec.ms > deadline) bad += " deadline";
        if (!rec.nextDone || rec.nextCode == horaSuccess) bad += " next";
        if (!WIFEXITED(pr.status) || WEXITSTATUS(pr.status) != 0) bad += " exit";
      }
      line += bad.empty() ? " => ok" : " => FAIL:" + bad;
    }
    printf("%s\n", line.c_str());
    lines[static_cast<size_t>(pr.rank)] = line;
  }
  fflush(stdout);

  for (const ProcessResult& pr : results) {
    if (pr.rank < 0 || pr.rank >= kRanks) {
      INFO("cell " << cell << ": " << pr.output);
      CHECK(pr.ok());
      continue;
    }
    const RankRecord& rec = recs[pr.rank];
    const bool survivor = wrong || pr.rank != kCulprit;
    INFO(lines[static_cast<size_t>(pr.rank)]);
    INFO("cell " << cell << " [" << transportsEnv() << "] rank " << pr.rank << ": code " << codeName(rec.code)
                 << ", text: " << rec.text << "\nnext: " << codeName(rec.nextCode) << ": " << rec.nextText);
    // The test's own setup: the two good calls worked and gave exact results.
    CHECK(std::string(rec.good) == "");
    CHECK(pr.output == "");
    if (!survivor) {
      // The culprit did what the cell asked of it.
      if (fault == Fault::Exit) CHECK((WIFEXITED(pr.status) && WEXITSTATUS(pr.status) == 3));
      else CHECK((WIFSIGNALED(pr.status) && WTERMSIG(pr.status) == SIGKILL));
      continue;
    }
    CHECK(rec.done == 1);
    if (!rec.done) continue;
    // 1. the cause's code
    CHECK(codeName(rec.code) == std::string(codeName(want)));
    // 2. a text that names the culprit (or the mismatch)
    CHECK(std::string(rec.text).find(needle) != std::string::npos);
    // 3. in time
    CHECK(rec.ms <= deadline);
    // 4. the communicator stays failed
    CHECK(rec.nextDone == 1);
    CHECK(rec.nextCode != horaSuccess);
    // and the rank exits cleanly (destroy or abort after the failure neither crashes nor hangs)
    CHECK((WIFEXITED(pr.status) && WEXITSTATUS(pr.status) == 0));
  }
  munmap(recs, bytes);
}

void runFault(Fault fault) {
  const Coll colls[] = {Coll::AllReduce, Coll::AllGather, Coll::Broadcast, Coll::ReduceScatter, Coll::Reduce,
                        Coll::Gather, Coll::Scatter};
  const struct {
    size_t n;
    const char* name;
  } sizes[] = {{kSmall, "small"}, {kLarge, "large"}};
  for (Coll c : colls) {
    if (fault == Fault::WrongRoot && !hasRoot(c)) continue;
    for (const auto& s : sizes) {
      const std::string cell = std::string(faultName(fault)) + "/" + collName(c) + "/" + s.name;
      if (!selected(cell)) continue;
      runCell(fault, c, s.n, s.name);
    }
  }
}

}  // namespace

TEST_CASE("fault matrix: a culprit killed instead of entering the call", "[faults][matrix]") { runFault(Fault::Kill); }

TEST_CASE("fault matrix: a culprit stopped (SIGSTOP) instead of entering the call", "[faults][matrix]") {
  runFault(Fault::Stop);
}

TEST_CASE("fault matrix: a culprit that exits without destroying its communicator", "[faults][matrix]") {
  runFault(Fault::Exit);
}

TEST_CASE("fault matrix: a culprit that calls another collective", "[faults][matrix]") {
  runFault(Fault::WrongColl);
}

TEST_CASE("fault matrix: a culprit that passes another root", "[faults][matrix]") { runFault(Fault::WrongRoot); }
