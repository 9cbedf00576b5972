// hora-run: the local launcher. hora_run_main.cc reads the command line and makes the
// rendezvous id; hora_run_cpus.cc chooses the ranks' CPUs and claims them from other jobs;
// hora_run_job.cc starts the ranks, forwards their signals and decides hora-run's exit
// status; hora_run_output.cc forwards their output.
#pragma once
#include <unistd.h>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace hora::run {

// Owns one file descriptor and closes it when it goes.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// One of a rank's output pipes (hora_run_output.cc), forwarded whole lines at a time to
// hora-run's stdout or stderr, each line behind the rank's prefix ("" for none), so that
// lines of different ranks never mix.
class OutputStream {
 public:
  OutputStream() = default;
  // fd: the read end, non-blocking. destination: where the lines go (1 or 2).
  OutputStream(Fd fd, int destination, std::string prefix)
      : fd_(std::move(fd)), destination_(destination), prefix_(std::move(prefix)) {}

  bool isOpen() const { return fd_.valid(); }
  int fd() const { return fd_.get(); }

  // One read(); forwards the lines it completes. Closes the stream at EOF or on error.
  // True if it got data.
  bool readOnce();
  // Reads what is there now; bounded, since a writer may never stop.
  void readAvailable();
  // Writes out a last line that has no newline, adding one, and closes the pipe.
  void close();

 private:
  void forward(const char* data, size_t size);

  Fd fd_;
  int destination_ = -1;
  std::string prefix_;
  std::string partial_;  // the start of a line whose newline has not come yet
};

// Everything the job needs, decided before the first rank starts.
struct JobSpec {
  int nranks = 0;
  std::vector<std::string> argv;      // PROGRAM ARGS...; PROGRAM is looked up in PATH
  std::vector<std::string> baseEnv;   // hora-run's environment without the HORA_* rank variables
  std::string idHex;                  // the unique id as 256 lowercase hex characters
  double timeoutS = 0;                // > 0: stop the job after this many seconds
  std::string timeoutText;            // the --timeout argument as given, for the message
  double graceS = 5;                  // SIGTERM to SIGKILL
  bool prefix = true;                 // prefix output lines with "[rank] "
  std::vector<std::vector<int>> cpus; // per rank: the CPUs to bind it to, or none
  std::string dumpDir;                // the ranks' HORA_DUMP_DIR (absolute), set in baseEnv
};

// How to bind ranks (--bind, HORA_RUN_BIND). Auto: Core when every rank can have a CPU of its
// own, else None.
enum class BindMode { Auto, Core, Numa, None };

// The ranks' CPUs, and the claim on them that other hora-runs of this host respect: byte-range
// locks on one file shared by every user (HORA_RUN_CPU_CLAIMS, /dev/shm/hora-run.cpus by
// default), held by `claim`'s open file. The kernel drops them when hora-run exits, however it
// exits, so a claim never outlives its job.
struct Placement {
  std::vector<std::vector<int>> cpus;  // per rank: the CPUs to bind it to, or none
  Fd claim;                            // keep open for the job's life
};

// Places nranks ranks on the CPUs hora-run may use (its own affinity mask, from taskset or a
// cpuset) that no other Hora job of this host has claimed, and claims them. Says on stderr when
// other jobs leave too few and the ranks run unbound or share CPUs; says where every rank went
// when HORA_DEBUG is INFO or TRACE.
Placement placeRanks(int nranks, BindMode bind);

// Starts the ranks, runs until all of them are gone and returns hora-run's exit status.
int runJob(const JobSpec& spec);

// A running job as hora-run describes it for --status (hora_run_status.cc), in
// <jobDirectory()>/<runner>.job while it runs.
struct JobRecord {
  pid_t runner = 0;           // hora-run's pid
  std::string host;           // gethostname()
  std::string dumpDir;        // the ranks' HORA_DUMP_DIR, absolute
  std::string command;        // PROGRAM ARGS...
  std::vector<pid_t> ranks;   // by rank
};
// $XDG_RUNTIME_DIR/hora-run, else /tmp/hora-run-<uid>.
std::string jobDirectory();
// Writes the job's file; returns its path, or "" when it cannot (then --status cannot find it).
std::string writeJobFile(const JobRecord& job);
bool readJobFile(const std::string& path, JobRecord* job);
// Asks every rank of the job for its dump (SIGUSR1, to the processes that catch it), waits up to
// waitS seconds for them, calling meanwhile() (may be empty) every 20 ms, and returns
// hora-inspect's report of the dumps that came (text, or JSON).
std::string statusReport(const JobRecord& job, double waitS, bool json, const std::function<void()>& meanwhile);
// hora-run --status [PID] [--json]: the report of the running job (of hora-run PID, or the only
// one of this user) on stdout; returns the exit status.
int statusMain(const std::string& which, bool json, double waitS);

// Writes all of data to fd, retrying on EINTR and waiting out EAGAIN. False on error.
bool writeAll(int fd, const char* data, size_t size);

// Writes "hora-run: <message>\n" to stderr in one piece.
void printError(const std::string& message);

}  // namespace hora::run
