// hora-run's job: starts the ranks, forwards the signals hora-run gets, and stops all of
// them when one fails or the time is up.
//
// Everything happens in one loop on the main thread: poll() over the signal self-pipe and
// every rank's stdout and stderr, then reap exited ranks, then check the deadlines. Each
// rank is the leader of its own process group, so a signal to the group also reaches the
// processes the rank started.
#include <fcntl.h>
#include <sched.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hora_run.h"

namespace hora::run {
namespace {

using Clock = std::chrono::steady_clock;

// Once every rank has exited, how long their pipes may stay open (held by processes the
// ranks started) before hora-run stops reading them. What they hold by then is still read.
constexpr std::chrono::milliseconds kDrainTime{1000};
constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGCHLD, SIGUSR1};
// How long a report of the ranks' calls waits for their dumps (hora_run_status.cc).
constexpr double kReportWaitS = 3;

// The write end of the signal self-pipe: the only global mutable state. Set and cleared by
// SignalPipe, written only by onSignal.
int gSignalPipeWrite = -1;

void onSignal(int signo) {
  int savedErrno = errno;
  unsigned char byte = static_cast<unsigned char>(signo);
  ssize_t ignored = ::write(gSignalPipeWrite, &byte, 1);  // a full pipe drops it: see reapRanks
  (void)ignored;
  errno = savedErrno;
}

std::string errnoText(int err) { return std::strerror(err); }

struct Pipe {
  Fd read;
  Fd write;
};

std::optional<Pipe> makePipe(int flags) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | flags) != 0) return std::nullopt;
  return Pipe{Fd(fds[0]), Fd(fds[1])};
}

// A pipe for a rank's output: the read end (ours) is non-blocking, the write end (the
// rank's stdout or stderr) is not.
std::optional<Pipe> makeOutputPipe() {
  std::optional<Pipe> pipe = makePipe(0);
  if (!pipe) return std::nullopt;
  int flags = fcntl(pipe->read.get(), F_GETFL);
  if (flags < 0 || fcntl(pipe->read.get(), F_SETFL, flags | O_NONBLOCK) != 0) return std::nullopt;
  return pipe;
}

// Turns SIGINT, SIGTERM and SIGCHLD into bytes on a pipe that the main loop reads, and
// ignores SIGPIPE (a closed stdout of hora-run must not kill it). Undone on destruction.
class SignalPipe {
 public:
  SignalPipe() {
    std::optional<Pipe> pipe = makePipe(O_NONBLOCK);
    if (!pipe) return;
    pipe_ = std::move(*pipe);
    gSignalPipeWrite = pipe_.write.get();
    struct sigaction action {};
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (size_t i = 0; i < std::size(kHandledSignals); ++i)
      sigaction(kHandledSignals[i], &action, &saved_[i]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &savedPipe_);
  }
  ~SignalPipe() {
    if (!pipe_.read.valid()) return;
    for (size_t i = 0; i < std::size(kHandledSignals); ++i)
      sigaction(kHandledSignals[i], &saved_[i], nullptr);
    sigaction(SIGPIPE, &savedPipe_, nullptr);
    gSignalPipeWrite = -1;
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  bool ok() const { return pipe_.read.valid(); }
  int readFd() const { return pipe_.read.get(); }

  // The signals received since the last call, oldest first.
  std::vector<int> take() {
    std::vector<int> signals;
    unsigned char bytes[256];
    for (;;) {
      ssize_t n = ::read(pipe_.read.get(), bytes, sizeof(bytes));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return signals;
      signals.insert(signals.end(), bytes, bytes + n);
    }
  }

 private:
  Pipe pipe_;
  struct sigaction saved_[std::size(kHandledSignals)] {};
  struct sigaction savedPipe_ {};
};

// Up to 1024 ranks need two pipes each: raise the soft limit on open files to the hard
// one for hora-run itself. Returns the original limit if it changed it; the ranks get that
// back (ChildPlan).
std::optional<rlimit> raiseFdLimit() {
  rlimit original{};
  if (getrlimit(RLIMIT_NOFILE, &original) != 0 || original.rlim_cur == original.rlim_max)
    return std::nullopt;
  rlimit raised = original;
  raised.rlim_cur = original.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &raised) != 0) return std::nullopt;
  return original;
}

// A NULL-terminated char* array over strings that must outlive it.
class CStringArray {
 public:
  explicit CStringArray(const std::vector<std::string>& strings) {
    for (const std::string& s : strings) pointers_.push_back(const_cast<char*>(s.c_str()));
    pointers_.push_back(nullptr);
  }
  char* const* get() const { return pointers_.data(); }

 private:
  std::vector<char*> pointers_;
};

// Everything a forked child needs, prepared before fork(): hora-run has other threads (the
// rendezvous listener), so between fork and exec the child may only make async-signal-safe
// calls: no allocation, no stdio, no locks.
struct ChildPlan {
  const char* file = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  int stdinFd = -1;
  int stdoutFd = -1;
  int stderrFd = -1;
  pid_t parent = 0;
  sigset_t mask{};  // the signal mask to run PROGRAM with
  std::optional<rlimit> fdLimit;  // to restore, if hora-run raised its own
  const std::string* execFailure = nullptr;  // "hora-run: cannot execute PROGRAM: "
  bool bind = false;                          // restrict the child to `cpus`
  cpu_set_t cpus{};
};

[[noreturn]] void execChild(const ChildPlan& plan) {
  setpgid(0, 0);
  struct sigaction defaults {};
  defaults.sa_handler = SIG_DFL;
  sigemptyset(&defaults.sa_mask);
  for (int signo : kHandledSignals) sigaction(signo, &defaults, nullptr);
  sigaction(SIGPIPE, &defaults, nullptr);
  sigprocmask(SIG_SETMASK, &plan.mask, nullptr);
  if (plan.fdLimit) setrlimit(RLIMIT_NOFILE, &*plan.fdLimit);
  if (plan.bind) sched_setaffinity(0, sizeof plan.cpus, &plan.cpus);  // best effort: a rank runs unbound if refused
  // If hora-run dies without stopping us (SIGKILL), the rendezvous is gone too.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != plan.parent) _exit(127);
  if (dup2(plan.stdinFd, STDIN_FILENO) < 0 || dup2(plan.stdoutFd, STDOUT_FILENO) < 0 ||
      dup2(plan.stderrFd, STDERR_FILENO) < 0)
    _exit(127);
  execvpe(plan.file, plan.argv, plan.envp);
  const char* reason = strerrordesc_np(errno);
  if (reason == nullptr) reason = "unknown error";
  iovec parts[3] = {{const_cast<char*>(plan.execFailure->data()), plan.execFailure->size()},
                    {const_cast<char*>(reason), std::strlen(reason)},
                    {const_cast<char*>("\n"), 1}};
  ssize_t ignored = writev(STDERR_FILENO, parts, 3);
  (void)ignored;
  _exit(127);
}

enum class RankState { NotStarted, Running, Succeeded, Failed };

struct Rank {
  int index = 0;
  pid_t pid = -1;
  RankState state = RankState::NotStarted;
  OutputStream out;
  OutputStream err;

  // Whether the process group may still have members. Once the leader is reaped and the
  // pipes it shared with its children are closed, the group id may be reused: not signalled.
  bool groupMayBeAlive() const {
    return pid > 0 && (state == RankState::Running || out.isOpen() || err.isOpen());
  }
};

// Running: normal. Interrupted: a SIGINT/SIGTERM of ours was forwarded. Terminating: a rank
// failed or the time is up, SIGTERM was sent (or, after Interrupted, the forwarded signal
// stands for it) and the grace period runs. Killing: SIGKILL sent.
enum class JobPhase { Running, Interrupted, Terminating, Killing };

int exitCodeOf(int waitStatus) {
  if (WIFSIGNALED(waitStatus)) return 128 + WTERMSIG(waitStatus);
  return WEXITSTATUS(waitStatus);
}

std::string describeExit(const Rank& rank, int waitStatus) {
  std::string who = "rank " + std::to_string(rank.index) + " (pid " + std::to_string(rank.pid) + ")";
  if (WIFSIGNALED(waitStatus)) {
    int signo = WTERMSIG(waitStatus);
    return who + " killed by signal " + std::to_string(signo) + " (" + strsignal(signo) + ")";
  }
  return who + " exited with status " + std::to_string(WEXITSTATUS(waitStatus));
}

std::string signalName(int signo) {
  const char* abbrev = sigabbrev_np(signo);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(signo);
}

std::string rankPrefix(int rank, int nranks) {
  std::string digits = std::to_string(rank);
  size_t width = std::to_string(nranks - 1).size();
  return "[" + std::string(width - digits.size(), ' ') + digits + "] ";
}

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

class Job {
 public:
  Job(const JobSpec& spec, SignalPipe& signals)
      : spec_(spec), signals_(signals), fdLimit_(raiseFdLimit()) {
    devNull_.reset(open("/dev/null", O_RDONLY | O_CLOEXEC));
    devNullErrno_ = errno;
    ranks_.resize(static_cast<size_t>(spec.nranks));
    for (int r = 0; r < spec.nranks; ++r) ranks_[static_cast<size_t>(r)].index = r;
  }

  int run() {
    if (spec_.timeoutS > 0) jobDeadline_ = Clock::now() + seconds(spec_.timeoutS);
    startAll();
    describeJob();
    while (!finished()) {
      waitForEvents();
      reapRanks();
      checkDeadlines();
    }
    for (Rank& rank : ranks_) {
      rank.out.readAvailable();
      rank.err.readAvailable();
      rank.out.close();
      rank.err.close();
    }
    return exitStatus();
  }

 private:
  void startAll() {
    for (Rank& rank : ranks_) {
      if (startRank(rank)) continue;
      if (!firstFailure_) firstFailure_ = 1;
      terminateAll();
      return;
    }
  }

  // The job file that hora-run --status reads (removed by the destructor).
  void describeJob() {
    record_.runner = getpid();
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    record_.host = host;
    record_.dumpDir = spec_.dumpDir;
    for (const std::string& a : spec_.argv) record_.command += (record_.command.empty() ? "" : " ") + a;
    for (const Rank& rank : ranks_) record_.ranks.push_back(rank.pid > 0 ? rank.pid : 0);
    jobFile_ = writeJobFile(record_);
  }

 public:
  ~Job() {
    if (!jobFile_.empty()) unlink(jobFile_.c_str());
  }

 private:
  // hora-inspect's report of the ranks' calls, on stderr (their output is forwarded meanwhile).
  void printStatus() {
    const std::string report = statusReport(record_, kReportWaitS, false, [this] {
      for (Rank& rank : ranks_) {
        rank.out.readAvailable();
        rank.err.readAvailable();
      }
    });
    printError("the ranks' calls, as hora-inspect reports them:");
    writeAll(STDERR_FILENO, report.data(), report.size());
  }

  std::vector<std::string> rankEnvironment(int rank) const {
    std::vector<std::string> env = spec_.baseEnv;
    std::string size = std::to_string(spec_.nranks);
    env.push_back("HORA_ID=" + spec_.idHex);
    env.push_back("HORA_RANK=" + std::to_string(rank));
    env.push_back("HORA_SIZE=" + size);
    env.push_back("HORA_LOCAL_RANK=" + std::to_string(rank));
    env.push_back("HORA_LOCAL_SIZE=" + size);
    return env;
  }

  bool startRank(Rank& rank) {
    std::string who = "cannot start rank " + std::to_string(rank.index) + ": ";
    if (!devNull_.valid()) {
      printError(who + "/dev/null: " + errnoText(devNullErrno_));
      return false;
    }
    std::optional<Pipe> out = makeOutputPipe();
    std::optional<Pipe> err = out ? makeOutputPipe() : std::nullopt;
    if (!err) {
      printError(who + "pipe: " + errnoText(errno));
      return false;
    }
    std::vector<std::string> env = rankEnvironment(rank.index);
    CStringArray argv(spec_.argv);
    CStringArray envp(env);
    std::string execFailure = "hora-run: cannot execute " + spec_.argv[0] + ": ";
    ChildPlan plan;
    plan.file = spec_.argv[0].c_str();
    plan.argv = argv.get();
    plan.envp = envp.get();
    plan.stdinFd = devNull_.get();
    plan.stdoutFd = out->write.get();
    plan.stderrFd = err->write.get();
    plan.parent = getpid();
    plan.fdLimit = fdLimit_;
    plan.execFailure = &execFailure;
    CPU_ZERO(&plan.cpus);
    if (rank.index < static_cast<int>(spec_.cpus.size()))
      for (int cpu : spec_.cpus[static_cast<size_t>(rank.index)])
        if (cpu >= 0 && cpu < CPU_SETSIZE) {
          CPU_SET(cpu, &plan.cpus);
          plan.bind = true;
        }
    // Blocked across fork so that no handler of ours runs in the child before exec.
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &plan.mask);
    pid_t pid = fork();
    if (pid == 0) execChild(plan);
    int forkErrno = errno;
    pthread_sigmask(SIG_SETMASK, &plan.mask, nullptr);
    if (pid < 0) {
      printError(who + "fork: " + errnoText(forkErrno));
      return false;
    }
    setpgid(pid, pid);  // the child does it too: whichever comes first
    rank.pid = pid;
    rank.state = RankState::Running;
    std::string prefix = spec_.prefix ? rankPrefix(rank.index, spec_.nranks) : "";
    rank.out = OutputStream(std::move(out->read), STDOUT_FILENO, prefix);
    rank.err = OutputStream(std::move(err->read), STDERR_FILENO, prefix);
    return true;  // the write ends close here: only the child holds them
  }

  void waitForEvents() {
    std::vector<pollfd> fds;
    std::vector<OutputStream*> streams;
    fds.push_back({signals_.readFd(), POLLIN, 0});
    for (Rank& rank : ranks_) {
      for (OutputStream* stream : {&rank.out, &rank.err}) {
        if (!stream->isOpen()) continue;
        fds.push_back({stream->fd(), POLLIN, 0});
        streams.push_back(stream);
      }
    }
    int ready = poll(fds.data(), fds.size(), pollTimeoutMs());
    if (ready <= 0) return;  // timed out or EINTR: the loop checks everything anyway
    for (size_t i = 0; i < streams.size(); ++i) {
      if (fds[i + 1].revents != 0) streams[i]->readOnce();
    }
    if (fds[0].revents != 0) handleSignals();
  }

  // Until the nearest deadline that matters now; -1 (forever) if there is none.
  int pollTimeoutMs() const {
    std::optional<Clock::time_point> next;
    auto consider = [&next](const std::optional<Clock::time_point>& deadline) {
      if (deadline && (!next || *deadline < *next)) next = deadline;
    };
    if (timeoutApplies()) consider(jobDeadline_);
    if (phase_ == JobPhase::Terminating) consider(graceDeadline_);
    consider(drainDeadline_);
    if (!next) return -1;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
    if (left < 0) return 0;
    return left > INT_MAX ? INT_MAX : static_cast<int>(left);
  }

  void handleSignals() {
    for (int signo : signals_.take()) {
      if (signo == SIGINT || signo == SIGTERM) onUserSignal(signo);
      if (signo == SIGUSR1 && anyRunning()) printStatus();
      // SIGCHLD only wakes the loop; reapRanks runs on every turn.
    }
  }

  void onUserSignal(int signo) {
    switch (phase_) {
      case JobPhase::Running:
        printError("got " + signalName(signo) + "; forwarding it to all ranks (again to kill them)");
        interruptSignal_ = signo;
        phase_ = JobPhase::Interrupted;
        signalAll(signo);
        return;
      case JobPhase::Interrupted:
      case JobPhase::Terminating:
        printError("got " + signalName(signo) + " again; killing all ranks");
        killAll();
        return;
      case JobPhase::Killing:
        return;
    }
  }

  // Every turn, not only after SIGCHLD: a SIGCHLD byte can be lost to a full pipe.
  void reapRanks() {
    for (Rank& rank : ranks_) {
      if (rank.state != RankState::Running) continue;
      int status = 0;
      pid_t pid;
      do {
        pid = waitpid(rank.pid, &status, WNOHANG);
      } while (pid < 0 && errno == EINTR);
      if (pid == rank.pid) {
        onRankExit(rank, status);
      } else if (pid < 0) {  // not our child any more: cannot happen unless someone reaped it
        printError("lost track of rank " + std::to_string(rank.index) + ": " + errnoText(errno));
        onRankExit(rank, 1 << 8);  // as if it exited with status 1
      }
    }
  }

  void onRankExit(Rank& rank, int status) {
    bool success = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    rank.state = success ? RankState::Succeeded : RankState::Failed;
    if (success) return;
    if (!firstFailure_) firstFailure_ = exitCodeOf(status);
    if (phase_ == JobPhase::Running) {
      // The rank's own last words come before the news of its death.
      rank.out.readAvailable();
      rank.err.readAvailable();
      printError(describeExit(rank, status) + (anyRunning() ? "; stopping the other ranks" : ""));
    }
    if (phase_ == JobPhase::Running) terminateAll();
    // The others already have the forwarded signal: they get the grace period to follow.
    if (phase_ == JobPhase::Interrupted) startGracePeriod();
  }

  bool timeoutApplies() const {
    return jobDeadline_ && !timedOut_ && anyRunning() &&
           (phase_ == JobPhase::Running || phase_ == JobPhase::Interrupted);
  }

  void checkDeadlines() {
    Clock::time_point now = Clock::now();
    if (timeoutApplies() && now >= *jobDeadline_) {
      timedOut_ = true;
      printError("timeout after " + spec_.timeoutText + " s; stopping all ranks");
      printStatus();
      terminateAll();
    }
    if (phase_ == JobPhase::Terminating && graceDeadline_ && now >= *graceDeadline_) killAll();
    if (!anyRunning() && !drainDeadline_) drainDeadline_ = now + kDrainTime;
  }

  void terminateAll() {
    if (phase_ == JobPhase::Terminating || phase_ == JobPhase::Killing) return;
    startGracePeriod();
    signalAll(SIGTERM);
  }

  void startGracePeriod() {
    phase_ = JobPhase::Terminating;
    graceDeadline_ = Clock::now() + seconds(spec_.graceS);
  }

  void killAll() {
    phase_ = JobPhase::Killing;
    signalAll(SIGKILL);
  }

  void signalAll(int signo) {
    for (Rank& rank : ranks_) {
      if (!rank.groupMayBeAlive()) continue;
      if (kill(-rank.pid, signo) != 0 && errno == ESRCH && rank.state == RankState::Running)
        kill(rank.pid, signo);
    }
  }

  bool anyRunning() const {
    for (const Rank& rank : ranks_) {
      if (rank.state == RankState::Running) return true;
    }
    return false;
  }

  bool anyOutputOpen() const {
    for (const Rank& rank : ranks_) {
      if (rank.out.isOpen() || rank.err.isOpen()) return true;
    }
    return false;
  }

  bool finished() const {
    if (anyRunning()) return false;
    return !anyOutputOpen() || (drainDeadline_ && Clock::now() >= *drainDeadline_);
  }

  int exitStatus() const {
    if (timedOut_) return 124;
    if (firstFailure_) return *firstFailure_;
    if (interruptSignal_) return 128 + *interruptSignal_;
    return 0;
  }

  const JobSpec& spec_;
  SignalPipe& signals_;
  std::optional<rlimit> fdLimit_;  // the ranks' limit on open files, if hora-run raised its own
  Fd devNull_;      // the ranks' stdin
  int devNullErrno_ = 0;
  std::vector<Rank> ranks_;
  JobPhase phase_ = JobPhase::Running;
  std::optional<Clock::time_point> jobDeadline_;
  std::optional<Clock::time_point> graceDeadline_;
  std::optional<Clock::time_point> drainDeadline_;
  std::optional<int> firstFailure_;     // exit code of the first rank that failed
  std::optional<int> interruptSignal_;  // the first SIGINT/SIGTERM we forwarded
  bool timedOut_ = false;
  JobRecord record_;
  std::string jobFile_;
};

}  // namespace

int runJob(const JobSpec& spec) {
  SignalPipe signals;
  if (!signals.ok()) {
    printError("cannot create the signal pipe: " + errnoText(errno));
    return 1;
  }
  Job job(spec, signals);
  return job.run();
}

}  // namespace hora::run
