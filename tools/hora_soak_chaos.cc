// hora-soak --chaos: the soak's random calls on ranks that fail. This process (the controller)
// starts N ranks (this program again, --chaos-rank, one process each, HORA_RANK/HORA_SIZE/HORA_ID
// as hora-run gives them) and drives them in rounds: each round every rank of the communicator
// makes the same random calls (hora_soak.cc's, every result checked) and reports. In some rounds
// the controller picks a rank and, while the others are in their calls, does one of:
//   kill   SIGKILL;
//   stop   SIGSTOP, and SIGCONT once every other rank has failed (the others time out);
//   pause  SIGSTOP, then SIGCONT after --pause-ms: well within the timeout, so the others
//          should not notice, but if they do, it counts as a stop (nothing is asserted about time);
//   cut    (--hosts only) takes one host's cable out: every rank must fail, naming a rank on the
//          far side of the cut (on the cut host for the others, on another host for its own);
//          then the cable is put back, every rank leaves and new ones start.
// With --hosts HxR the ranks run on H hosts of R ranks each, network namespaces this process
// makes (hora_soak_hosts.cc) and removes at the end; rank 0 hosts the rendezvous (HORA_ROOT).
// Every other rank (a survivor) must then fail, by the library's own detection, with a text
// that names the culprit as the library promises: "rank R (host, pid P)", R its rank in the
// communicator of the call. A survivor whose round ended before it noticed gets more rounds
// until it does. Then, with --shrink, the survivors call horaCommShrink(HORA_SHRINK_ABORT)
// without the culprit and go on with the rounds (results checked, renumbered ranks); without
// it, or when fewer than 2 would remain, every rank leaves and N new ones start. A resumed
// rank reports what its own calls did, then leaves (it is not a survivor: nothing is asserted
// about its text).
//
// Messages between the controller and a rank are lines on a socket pair (fd 3 in the rank):
//   to a rank:    "round FIRST CALLS SEED", "shrink RANK", "exit"
//   from a rank:  "ready RANK PID HOST", "done CALLS WRONG", "fail CALLS WRONG CODE TEXT",
//                 "wrong TEXT" (before done/fail, the first wrong result), "shrunk RANK SIZE"
// A rank's log (stderr) goes to the dump directory, beside the flight recorder's dumps.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hora.h"
#include "hora_soak.h"
#include "hora_soak_chaos.h"

extern char** environ;

namespace hora_soak {
namespace {

const char* kProgram = "hora-soak";

// splitmix64, as hora_soak.cc's: the faults drawn from the seed.
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed ^ 0xc4a05c4a05c4a05ull) {}
  uint64_t next() {
    uint64_t x = (state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

// ---- the controller ----------------------------------------------------------------

struct Member {
  pid_t pid = -1;
  int fd = -1;
  int rank = -1;          // in the current communicator
  int hostNo = 0;         // with --hosts: which of them it runs on
  std::string host;
  std::string log;        // its stderr
  std::string buf;
  bool inComm = true;     // still a rank of the current communicator
  bool failed = false;    // reported a failed call since the last fault
};

enum class Fault { None, Kill, Stop, Pause, Cut };
const char* faultName(Fault f) {
  switch (f) {
    case Fault::Kill: return "kill";
    case Fault::Stop: return "stop";
    case Fault::Pause: return "pause";
    case Fault::Cut: return "cut";
    default: return "none";
  }
}

class Chaos {
 public:
  Chaos(const ChaosOptions& o, std::string self, std::string dumpDir, Hosts* hosts)
      : o_(o), self_(std::move(self)), dumpDir_(std::move(dumpDir)), rng_(o.seed), hosts_(hosts) {}
  int run();

 private:
  bool startRanks();
  void endRanks();
  bool sendRound(const std::vector<Member*>& to);
  bool collect(Member& m, bool survivor, Fault fault, const Member* culprit);
  bool names(const Member& m, const std::string& text, Fault fault, const Member* culprit, std::string* want) const;
  std::string rendezvous(std::string* root);
  int drawCut();
  bool shrink(Member& culprit);
  std::chrono::steady_clock::time_point guard() const {
    return std::chrono::steady_clock::now() + std::chrono::milliseconds(4 * o_.timeoutMs) + std::chrono::seconds(120);
  }
  void problem(const std::string& what) {
    ++problems_;
    if (problems_ <= 20) std::printf("%s: chaos: PROBLEM: %s\n", kProgram, what.c_str());
    std::fflush(stdout);
  }
  // A rank told to leave must exit with 0: a sanitizer's report, a crash or a leak in it is a
  // problem of the run, though only its log says more.
  void reap(Member& m) {
    int status = 0;
    ::waitpid(m.pid, &status, 0);
    exited(m, status);
  }
  void exited(const Member& m, int status) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    problem(name(m) + (WIFSIGNALED(status) ? " died of signal " + std::to_string(WTERMSIG(status))
                                           : " exited with status " + std::to_string(WEXITSTATUS(status))) +
            " after it was told to leave; its log: " + m.log);
  }
  std::string name(const Member& m) const {
    return "rank " + std::to_string(m.rank) + " (" + m.host + ", pid " + std::to_string(m.pid) + ")";
  }

  ChaosOptions o_;
  std::string self_, dumpDir_;
  Rng rng_;
  Hosts* hosts_;      // --hosts: where the ranks run (null: here)
  int cutHost_ = -1;  // the host whose cable is out (a cut's round)
  std::string secret_;  // --hosts: the rendezvous' secret (HORA_SECRET)
  std::vector<Member> members_;
  uint64_t comms_ = 0, rounds_ = 0, nextCall_ = 0, calls_ = 0, wrong_ = 0;
  uint64_t faults_ = 0, kills_ = 0, stops_ = 0, pauses_ = 0, pausesNoticed_ = 0, cuts_ = 0, shrinks_ = 0;
  uint64_t errors_ = 0, named_ = 0, problems_ = 0;
};

// The rendezvous of a new communicator: in this process (HORA_ID, returned), or with --hosts
// at rank 0 on host 0 (HORA_ROOT and HORA_SECRET in *root, a port of its own per communicator).
std::string Chaos::rendezvous(std::string* root) {
  if (hosts_) {
    if (secret_.empty()) {
      unsigned char bytes[32] = {};
      const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
      const bool got = fd >= 0 && ::read(fd, bytes, sizeof bytes) == static_cast<ssize_t>(sizeof bytes);
      if (fd >= 0) ::close(fd);
      if (!got) return "";
      static const char kDigits[] = "0123456789abcdef";
      for (unsigned char b : bytes) secret_ += kDigits[b >> 4], secret_ += kDigits[b & 0xf];
    }
    *root = hosts_->address(0) + ":" + std::to_string(29500 + comms_ % 1000);
    return secret_;
  }
  horaUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (horaGetUniqueId(&id) != horaSuccess) return "";
  static const char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (char ch : id.internal) hex += kDigits[static_cast<unsigned char>(ch) >> 4], hex += kDigits[ch & 0xf];
  return hex;
}

// Starts o_.ranks new ranks (a new communicator, its rendezvous in this process, or at rank 0
// with --hosts).
bool Chaos::startRanks() {
  ++comms_;
  std::string root;
  const std::string key = rendezvous(&root);  // HORA_ID, or (--hosts) HORA_SECRET
  if (key.empty()) {
    problem(hosts_ ? std::string("no secret from /dev/urandom") : std::string("horaGetUniqueId: ") + horaGetLastError(nullptr));
    return false;
  }
  members_.assign(static_cast<size_t>(o_.ranks), Member{});
  for (int r = 0; r < o_.ranks; ++r) {
    // Everything the child needs is made before fork: the parent has threads (the rendezvous).
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string v = *e;
      if (v.rfind("HORA_RANK=", 0) && v.rfind("HORA_SIZE=", 0) && v.rfind("HORA_ID=", 0) && v.rfind("HORA_ROOT=", 0) &&
          v.rfind("HORA_SECRET", 0) && v.rfind("HORA_TIMEOUT_MS=", 0) && v.rfind("HORA_DUMP_DIR=", 0))
        env.push_back(v);
    }
    env.push_back("HORA_RANK=" + std::to_string(r));
    env.push_back("HORA_SIZE=" + std::to_string(o_.ranks));
    if (hosts_) {
      env.push_back("HORA_ROOT=" + root);
      env.push_back("HORA_SECRET=" + key);
    } else {
      env.push_back("HORA_ID=" + key);
    }
    env.push_back("HORA_TIMEOUT_MS=" + std::to_string(o_.timeoutMs));
    env.push_back("HORA_DUMP_DIR=" + dumpDir_);
    std::vector<char*> envp;
    for (std::string& v : env) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::string arg1 = "--chaos-rank";
    char* argv[] = {self_.data(), arg1.data(), nullptr};
    const std::string log = dumpDir_ + "/rank-log." + std::to_string(comms_) + "." + std::to_string(r);
    const int logFd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int hostNo = hosts_ ? r / (o_.ranks / hosts_->count()) : 0;
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      problem(std::string("socketpair: ") + std::strerror(errno));
      return false;
    }
    const pid_t self = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // A rank dies with this process (stopped ranks included), whatever ends it.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != self) ::_exit(125);
      if (hosts_ && !hosts_->enter(hostNo)) ::_exit(126);  // first: its namespace's descriptor may be 3
      ::dup2(sv[1], 3);  // dup2 clears close-on-exec on the copy
      if (logFd >= 0) ::dup2(logFd, 2);
      ::execve(argv[0], argv, envp.data());
      ::_exit(127);
    }
    ::close(sv[1]);
    if (logFd >= 0) ::close(logFd);
    Member& m = members_[static_cast<size_t>(r)];
    m.fd = sv[0];
    m.pid = pid;
    m.rank = r;
    m.hostNo = hostNo;
    m.log = log;
    if (pid < 0) {
      problem(std::string("fork: ") + std::strerror(errno));
      return false;
    }
  }
  bool ok = true;
  for (Member& m : members_) {
    std::string line;
    if (!readLine(m.fd, m.buf, &line, guard())) {
      problem("rank " + std::to_string(m.rank) + " (pid " + std::to_string(m.pid) + ") never joined");
      ok = false;
      continue;
    }
    std::istringstream in(line);
    std::string verb;
    int rank = -1, pid = -1;
    in >> verb >> rank >> pid >> m.host;
    if (verb != "ready" || rank != m.rank || pid != m.pid) {
      problem("rank " + std::to_string(m.rank) + " at init: " + line);
      ok = false;
    }
  }
  return ok;
}

// Every rank leaves: told to, resumed if stopped, killed if it does not within the guard.
void Chaos::endRanks() {
  for (Member& m : members_) {
    if (m.pid <= 0) continue;
    ::kill(m.pid, SIGCONT);
    writeLine(m.fd, "exit");
  }
  const auto deadline = guard();
  for (Member& m : members_) {
    if (m.pid <= 0) continue;
    int status = 0;
    for (;;) {
      const pid_t w = ::waitpid(m.pid, &status, WNOHANG);
      if (w == m.pid) {
        exited(m, status);
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        problem(name(m) + " did not exit when told to; killed");
        ::kill(m.pid, SIGKILL);
        ::waitpid(m.pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::close(m.fd);
    m.pid = -1;
  }
  members_.clear();
}

bool Chaos::sendRound(const std::vector<Member*>& to) {
  const uint64_t seed = o_.seed ^ (rounds_ * 0x9e3779b97f4a7c15ull);
  bool ok = true;
  for (Member* m : to)
    ok = writeLine(m->fd, "round " + std::to_string(nextCall_) + " " + std::to_string(o_.calls) + " " +
                              std::to_string(seed) + " " + std::to_string(o_.maxBytes)) && ok;
  nextCall_ += o_.calls;
  ++rounds_;
  return ok;
}

// Reads one rank's report of its round. A survivor of a fault that fails must name the
// culprit; without a fault, no call may fail.
bool Chaos::collect(Member& m, bool survivor, Fault fault, const Member* culprit) {
  std::string line;
  for (;;) {
    if (!readLine(m.fd, m.buf, &line, guard())) {
      problem(name(m) + " did not report its round (" + (survivor ? "hung or died" : "the culprit") + ")");
      return false;
    }
    if (line.rfind("wrong ", 0) == 0) {
      problem(name(m) + ": wrong result: " + line.substr(6));
      continue;
    }
    break;
  }
  std::istringstream in(line);
  std::string verb, text;
  uint64_t calls = 0, wrong = 0;
  int code = 0;
  in >> verb >> calls >> wrong;
  calls_ += calls;
  wrong_ += wrong;
  if (verb == "done") return true;
  if (verb != "fail") {
    problem(name(m) + ": " + line);
    return false;
  }
  in >> code;
  std::getline(in, text);
  m.failed = true;
  if (!survivor) return true;  // the culprit itself, resumed: whatever it says
  ++errors_;
  if (fault == Fault::None || (!culprit && fault != Fault::Cut)) {
    problem(name(m) + ": a call failed without a fault: " + horaGetErrorString(static_cast<horaResult_t>(code)) + ":" + text);
    return true;
  }
  std::string want;
  if (names(m, text, fault, culprit, &want)) {
    ++named_;
  } else {
    problem(name(m) + "'s error does not name " + want + " (" + faultName(fault) + "): " +
            horaGetErrorString(static_cast<horaResult_t>(code)) + ":" + text);
  }
  if (o_.verbose)
    std::printf("%s: chaos:   %s: %s:%s\n", kProgram, name(m).c_str(), horaGetErrorString(static_cast<horaResult_t>(code)),
                text.c_str());
  return true;
}

// Whether a survivor's error text names the culprit: the rank that was killed or stopped, or
// for a cut a rank on the far side of it (on the cut host, or for a rank of that host on
// another). *want says whom it should have named.
bool Chaos::names(const Member& m, const std::string& text, Fault fault, const Member* culprit, std::string* want) const {
  if (fault != Fault::Cut) {
    *want = "the culprit " + name(*culprit);
    return text.find(name(*culprit)) != std::string::npos;
  }
  const bool onCut = m.hostNo == cutHost_;
  *want = std::string("a rank ") + (onCut ? "on another host than" : "on") + " host " + std::to_string(cutHost_) +
          " (its cable out), as";
  bool any = false;
  for (const Member& p : members_) {
    if (!p.inComm || &p == &m || (p.hostNo == cutHost_) == onCut) continue;
    *want += std::string(any ? "," : "") + " " + name(p);
    any = true;
    if (text.find(name(p)) != std::string::npos) return true;
  }
  return false;
}

// A host to cut off: one with ranks of the communicator, while another host has some too; -1
// when they are all on one host (after shrinks).
int Chaos::drawCut() {
  std::vector<int> with;
  for (const Member& m : members_)
    if (m.inComm && std::find(with.begin(), with.end(), m.hostNo) == with.end()) with.push_back(m.hostNo);
  if (with.size() < 2) return -1;
  return with[rng_.below(with.size())];
}

// The survivors shrink the culprit away.
bool Chaos::shrink(Member& culprit) {
  const int gone = culprit.rank;
  for (Member& m : members_)
    if (m.inComm && &m != &culprit) writeLine(m.fd, "shrink " + std::to_string(gone));
  bool ok = true;
  int size = 0;
  for (Member& m : members_) {
    if (!m.inComm || &m == &culprit) continue;
    ++size;
  }
  for (Member& m : members_) {
    if (!m.inComm || &m == &culprit) continue;
    std::string line;
    if (!readLine(m.fd, m.buf, &line, guard())) {
      problem(name(m) + " did not finish horaCommShrink");
      ok = false;
      continue;
    }
    std::istringstream in(line);
    std::string verb;
    int rank = -1, n = 0;
    in >> verb >> rank >> n;
    const int want = m.rank > gone ? m.rank - 1 : m.rank;
    if (verb != "shrunk" || rank != want || n != size) {
      problem(name(m) + ": shrink: " + line);
      ok = false;
    }
    m.rank = want;
    m.failed = false;
  }
  culprit.inComm = false;
  ++shrinks_;
  return ok;
}

int Chaos::run() {
  const auto t0 = std::chrono::steady_clock::now();
  auto more = [&] {
    if (o_.rounds && rounds_ >= o_.rounds) return false;
    return o_.seconds <= 0 || std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < o_.seconds;
  };
  const std::string where = hosts_ ? " on " + std::to_string(hosts_->count()) + " hosts (network namespaces " +
                                         hosts_->name(0) + ".." + hosts_->name(hosts_->count() - 1) + ")"
                                   : std::string();
  std::printf("%s: chaos: %d ranks%s, seed %" PRIu64 ", %" PRIu64 " calls a round, buffers up to %zu bytes, HORA_TIMEOUT_MS=%ld, %s; "
              "logs and dumps in %s\n",
              kProgram, o_.ranks, where.c_str(), o_.seed, o_.calls, o_.maxBytes, o_.timeoutMs,
              o_.shrink ? "survivors shrink" : "new ranks after each fault", dumpDir_.c_str());
  std::fflush(stdout);
  bool alive = startRanks();
  while (alive && more()) {
    std::vector<Member*> in;
    for (Member& m : members_)
      if (m.inComm) in.push_back(&m);
    // The fault of this round: none in half of them (with --hosts, a cut in a quarter).
    const uint64_t draw = rng_.below(20);
    Fault fault = draw < 10 ? Fault::None : draw < 14 ? Fault::Kill : draw < 17 ? Fault::Stop : Fault::Pause;
    if (hosts_)
      fault = draw < 8 ? Fault::None : draw < 11 ? Fault::Kill : draw < 13 ? Fault::Stop : draw < 15 ? Fault::Pause : Fault::Cut;
    if (fault == Fault::Cut && (cutHost_ = drawCut()) < 0) fault = Fault::Kill;  // the ranks are on one host
    Member* culprit = fault == Fault::None || fault == Fault::Cut ? nullptr : in[rng_.below(in.size())];
    const long delayMs = static_cast<long>(rng_.below(30));
    if (!sendRound(in)) problem("a rank's socket closed");
    if (fault != Fault::None) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
      ++faults_;
      if (o_.verbose)
        std::printf("%s: chaos: round %" PRIu64 ": %s %s after %ld ms\n", kProgram, rounds_, faultName(fault),
                    culprit ? name(*culprit).c_str() : ("host " + std::to_string(cutHost_) + "'s cable").c_str(), delayMs);
      std::string why;
      switch (fault) {
        case Fault::Cut:
          ++cuts_;
          if (!hosts_->link(cutHost_, false, &why)) problem(why);
          break;
        case Fault::Kill: ++kills_, ::kill(culprit->pid, SIGKILL); break;
        case Fault::Stop: ++stops_, ::kill(culprit->pid, SIGSTOP); break;
        case Fault::Pause:
          ++pauses_;
          ::kill(culprit->pid, SIGSTOP);
          std::this_thread::sleep_for(std::chrono::milliseconds(o_.pauseMs));
          ::kill(culprit->pid, SIGCONT);
          break;
        case Fault::None: break;
      }
    } else if (o_.verbose) {
      std::printf("%s: chaos: round %" PRIu64 " on %zu ranks\n", kProgram, rounds_, in.size());
    }
    std::fflush(stdout);
    // The survivors' reports, then (pause) the culprit's own.
    for (Member* m : in)
      if (m != culprit || fault == Fault::Pause) alive = collect(*m, m != culprit, fault, culprit) && alive;
    if (!alive) break;
    if (fault == Fault::None) continue;
    bool noticed = fault != Fault::Pause;
    for (Member* m : in) noticed = noticed || m->failed;
    if (!noticed) continue;  // a pause that went unnoticed: every call right, nothing to name
    if (fault == Fault::Pause) ++pausesNoticed_;
    // Survivors whose round ended before they noticed: more rounds until each does.
    for (int extra = 0; extra < 3 && alive; ++extra) {
      std::vector<Member*> unaware;
      for (Member* m : in)
        if (m != culprit && !m->failed) unaware.push_back(m);
      if (unaware.empty()) break;
      sendRound(unaware);
      for (Member* m : unaware) alive = collect(*m, true, fault, culprit) && alive;
    }
    for (Member* m : in)
      if (m != culprit && !m->failed)
        problem(name(*m) + " never noticed the " + faultName(fault) + " of " +
                (culprit ? name(*culprit) : "host " + std::to_string(cutHost_) + "'s cable"));
    if (fault == Fault::Cut) {  // the cable back in, and new ranks: every rank has failed
      std::string why;
      if (!hosts_->link(cutHost_, true, &why)) problem(why);
      endRanks();
      if (more()) alive = startRanks();
      continue;
    }
    // The culprit: reaped, or resumed to say what its own calls did, then told to leave.
    if (fault == Fault::Kill) {
      int status = 0;
      ::waitpid(culprit->pid, &status, 0);
    } else {
      ::kill(culprit->pid, SIGCONT);
      if (fault == Fault::Stop) collect(*culprit, false, fault, culprit);
      writeLine(culprit->fd, "exit");
      reap(*culprit);
    }
    ::close(culprit->fd);
    culprit->pid = -1;
    int left = 0;
    for (Member* m : in) left += m != culprit;
    if (o_.shrink && left >= 2) {
      alive = shrink(*culprit);
    } else {
      endRanks();
      if (more()) alive = startRanks();
    }
  }
  endRanks();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool ok = problems_ == 0 && wrong_ == 0 && named_ == errors_;
  const std::string cuts = hosts_ ? ", " + std::to_string(cuts_) + " link cuts" : std::string();
  std::printf("%s: chaos: %" PRIu64 " rounds in %.1f s, %" PRIu64 " communicators, %" PRIu64 " shrinks, %" PRIu64
              " faults injected (%" PRIu64 " kills, %" PRIu64 " stops, %" PRIu64 " pauses, %" PRIu64 " of them noticed%s), %" PRIu64
              " errors seen, %" PRIu64 " naming the culprit, %" PRIu64 " calls checked, %" PRIu64 " wrong results: %s\n",
              kProgram, rounds_, took, comms_, shrinks_, faults_, kills_, stops_, pauses_, pausesNoticed_, cuts.c_str(), errors_,
              named_, calls_, wrong_, ok ? "PASSED" : "FAILED");
  const std::string ranks = hosts_ ? "--hosts " + std::to_string(hosts_->count()) + "x" + std::to_string(o_.ranks / hosts_->count())
                                   : "-n " + std::to_string(o_.ranks);
  std::printf("%s: replay: %s --chaos %s -s %" PRIu64 " -r %" PRIu64 " -c %" PRIu64 " -e %zu%s (the faults land where timing puts them)\n",
              kProgram, kProgram, ranks.c_str(), o_.seed, rounds_, o_.calls, o_.maxBytes, o_.shrink ? " --shrink" : "");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

}  // namespace

int chaosMain(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--chaos-rank")) return rankMain();
  const ChaosOptions o = parseChaos(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    std::fprintf(stderr, "%s: --chaos: cannot find this program (/proc/self/exe): %s\n", kProgram, std::strerror(errno));
    return 1;
  }
  self[n] = '\0';
  std::string dir;
  if (const char* d = std::getenv("HORA_DUMP_DIR"); d && *d) {
    dir = d;
    ::mkdir(dir.c_str(), 0755);
  } else {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/hora-soak-chaos.XXXXXX";
    if (!::mkdtemp(pattern.data())) {
      std::fprintf(stderr, "%s: --chaos: mkdtemp(%s): %s\n", kProgram, pattern.c_str(), std::strerror(errno));
      return 1;
    }
    dir = pattern;
  }
  Hosts hosts;
  if (o.hosts) {
    std::string why;
    const Hosts::Made made = hosts.make(o.hosts, &why);
    if (made != Hosts::Made::Yes) {
      std::fprintf(stderr, "%s: --chaos --hosts: %s%s\n", kProgram,
                   made == Hosts::Made::Cannot ? "skipped: cannot make network namespaces here: " : "", why.c_str());
      return made == Hosts::Made::Cannot ? 77 : 1;
    }
  }
  Chaos chaos(o, self, dir, o.hosts ? &hosts : nullptr);
  return chaos.run();
}

}  // namespace hora_soak
