// A stand-in rank for the hora-run tests (test_hora_run.sh). One program, several modes:
//
//   env                      print HORA_RANK, HORA_SIZE, HORA_LOCAL_RANK, HORA_LOCAL_SIZE, HORA_ID
//   args ARGS...             print each argument as "arg=<it>"
//   spam LINES LENGTH        print LINES numbered lines of LENGTH payload bytes to stdout and
//                            to stderr, in writes that cut lines apart
//   partial                  print a line, then a line without newline (stdout and stderr)
//   fds                      print what fd 0 is and every fd above 2 that is a pipe
//   closefds PROGRAM ARGS... close every fd above 2, then exec PROGRAM (to start hora-run clean)
//   affinity DIR             print "cpus=<Cpus_allowed_list>", write the list to DIR/cpus.<rank>,
//                            then wait until DIR/exit exists and exit 0
//   sleeper DIR [OPTIONS]    record SIGTERM/SIGINT in DIR/sig.<rank> and then die of it; write
//                            DIR/ready.<rank> once ready; sleep until a signal comes. Options:
//     --stubborn             record the signal but do not die of it
//     --grandchild           first start a child that does the same (DIR/sig.gc.<rank>)
//     --exit-rank R CODE     rank R waits until all ranks are ready, then exits with CODE
//     --kill-rank R          rank R waits until all ranks are ready, then SIGKILLs itself
//
// Waits for other ranks give up after a minute (exit 99) so that a broken hora-run cannot
// hang the tests.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// Filled before the handler is installed; the handler only reads them.
char gSignalFile[4096];
bool gStubborn = false;

void recordSignal(int signo) {
  const char* name = signo == SIGTERM ? "TERM\n" : signo == SIGINT ? "INT\n" : "OTHER\n";
  int fd = open(gSignalFile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ssize_t ignored = write(fd, name, strlen(name));
    (void)ignored;
    close(fd);
  }
  if (gStubborn) return;
  signal(signo, SIG_DFL);
  raise(signo);
}

int envInt(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : -1;
}

void writeAllOrDie(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = write(fd, data, size);
    if (n <= 0) std::exit(98);
    data += n;
    size -= static_cast<size_t>(n);
  }
}

// Written under another name and renamed, so that a reader never sees half of it.
void writeFileAtomically(const std::string& path, const std::string& text) {
  std::string temporary = path + ".tmp";
  FILE* file = std::fopen(temporary.c_str(), "w");
  if (file == nullptr) std::exit(97);
  std::fputs(text.c_str(), file);
  std::fclose(file);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) std::exit(97);
}

bool waitForFile(const std::string& path) {
  auto giveUp = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > giveUp) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

void installRecorder(const std::string& signalFile) {
  std::snprintf(gSignalFile, sizeof(gSignalFile), "%s", signalFile.c_str());
  struct sigaction action {};
  action.sa_handler = recordSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

[[noreturn]] void sleepForever() {
  for (;;) pause();
}

int runSleeper(const std::vector<std::string>& args) {
  if (args.empty()) return 96;
  std::string dir = args[0];
  bool grandchild = false;
  int exitRank = -1, exitCode = 0, killRank = -1;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--stubborn") gStubborn = true;
    else if (args[i] == "--grandchild") grandchild = true;
    else if (args[i] == "--exit-rank" && i + 2 < args.size()) {
      exitRank = std::atoi(args[++i].c_str());
      exitCode = std::atoi(args[++i].c_str());
    } else if (args[i] == "--kill-rank" && i + 1 < args.size()) {
      killRank = std::atoi(args[++i].c_str());
    } else {
      return 96;
    }
  }
  int rank = envInt("HORA_RANK"), size = envInt("HORA_SIZE");
  std::string tag = std::to_string(rank);
  if (grandchild) {
    pid_t pid = fork();
    if (pid == 0) {
      installRecorder(dir + "/sig.gc." + tag);
      writeFileAtomically(dir + "/ready.gc." + tag, std::to_string(getpid()) + "\n");
      sleepForever();
    }
    if (pid < 0 || !waitForFile(dir + "/ready.gc." + tag)) return 99;
  }
  installRecorder(dir + "/sig." + tag);
  writeFileAtomically(dir + "/ready." + tag, std::to_string(getpid()) + "\n");
  if (rank == exitRank || rank == killRank) {
    for (int r = 0; r < size; ++r) {
      if (!waitForFile(dir + "/ready." + std::to_string(r))) return 99;
    }
    if (rank == killRank) raise(SIGKILL);
    return exitCode;
  }
  sleepForever();
}

int runEnv() {
  const char* names[] = {"HORA_RANK", "HORA_SIZE", "HORA_LOCAL_RANK", "HORA_LOCAL_SIZE", "HORA_ID"};
  const char* keys[] = {"rank", "size", "local_rank", "local_size", "id"};
  std::string line;
  for (size_t i = 0; i < 5; ++i) {
    const char* value = std::getenv(names[i]);
    line += std::string(i > 0 ? " " : "") + keys[i] + "=" + (value != nullptr ? value : "<unset>");
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

// Line i of rank r: "r=<r> i=<i> " and LENGTH letters; lowercase on stdout, uppercase on
// stderr. Written in 997-byte pieces, so most lines are cut across two write() calls.
int runSpam(int lines, int length) {
  int rank = envInt("HORA_RANK");
  std::string out, err;
  for (int i = 0; i < lines; ++i) {
    std::string head = "r=" + std::to_string(rank) + " i=" + std::to_string(i) + " ";
    out += head + std::string(static_cast<size_t>(length), static_cast<char>('a' + rank % 26)) + "\n";
    err += head + std::string(static_cast<size_t>(length), static_cast<char>('A' + rank % 26)) + "\n";
  }
  const size_t piece = 997;
  for (size_t at = 0; at < out.size() || at < err.size(); at += piece) {
    if (at < out.size()) writeAllOrDie(1, out.data() + at, std::min(piece, out.size() - at));
    if (at < err.size()) writeAllOrDie(2, err.data() + at, std::min(piece, err.size() - at));
  }
  return 0;
}

int runPartial() {
  const char out[] = "first line\nno newline at end";
  const char err[] = "err first\nerr no newline";
  writeAllOrDie(1, out, sizeof(out) - 1);
  writeAllOrDie(2, err, sizeof(err) - 1);
  return 0;
}

std::string fdTarget(int fd) {
  char target[4096];
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
  return n < 0 ? "?" : std::string(target, static_cast<size_t>(n));
}

int runFds() {
  std::printf("stdin=%s\n", fdTarget(0).c_str());
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 95;
  std::vector<int> fds;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') fds.push_back(std::atoi(entry->d_name));
  }
  int own = dirfd(dir);
  for (int fd : fds) {
    std::string target = fdTarget(fd);
    if (fd > 2 && fd != own && target.rfind("pipe:", 0) == 0)
      std::printf("leaked fd %d -> %s\n", fd, target.c_str());
  }
  closedir(dir);
  return 0;
}

// The value of Cpus_allowed_list in /proc/self/status ("0-1,4").
std::string cpusAllowed() {
  FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) std::exit(94);
  char line[4096];
  std::string value;
  while (std::fgets(line, sizeof line, status) != nullptr) {
    if (std::strncmp(line, "Cpus_allowed_list:", 18) != 0) continue;
    value = line + 18;
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t\n") + 1);
  }
  std::fclose(status);
  return value;
}

int runAffinity(const std::vector<std::string>& args) {
  if (args.size() != 1) return 96;
  std::string cpus = cpusAllowed();
  std::printf("cpus=%s\n", cpus.c_str());
  std::fflush(stdout);
  writeFileAtomically(args[0] + "/cpus." + std::to_string(envInt("HORA_RANK")), cpus + "\n");
  return waitForFile(args[0] + "/exit") ? 0 : 99;
}

int runCloseFdsAndExec(char** argv) {
  close_range(3, ~0U, 0);
  execvp(argv[0], argv);
  std::perror("exec");
  return 127;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 96;
  std::string mode = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (mode == "env") return runEnv();
  if (mode == "args") {
    for (const std::string& arg : args) std::printf("arg=%s\n", arg.c_str());
    return 0;
  }
  if (mode == "spam" && args.size() == 2) return runSpam(std::atoi(argv[2]), std::atoi(argv[3]));
  if (mode == "partial") return runPartial();
  if (mode == "fds") return runFds();
  if (mode == "closefds" && argc > 2) return runCloseFdsAndExec(argv + 2);
  if (mode == "sleeper") return runSleeper(args);
  if (mode == "affinity") return runAffinity(args);
  std::fprintf(stderr, "rank_helper: bad arguments\n");
  return 96;
}
