// hora-run --status: asks every rank of a running job for its flight recorder dump (SIGUSR1)
// and prints hora-inspect's report of them. hora-run itself does the same when --timeout stops
// a job, and when it gets SIGUSR1.
//
// A running hora-run describes its job in a file of its own, <pid>.job in the job directory
// ($XDG_RUNTIME_DIR/hora-run, else /tmp/hora-run-<uid>; mode 700), removed when it exits: its
// host, the ranks' pids and where their dumps go (HORA_DUMP_DIR, which hora-run sets to its
// working directory when it is unset). A rank is asked only if its process catches SIGUSR1 (a
// program that has not made a communicator yet would die of it), else the processes of its
// process group that do; a dump counts once it is a new file (a dump replaces its file whole).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "hora_inspect.h"
#include "hora_run.h"

namespace hora::run {

namespace {

std::string readText(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Whether pid's process catches SIGUSR1 (its SigCgt mask in /proc).
bool catchesUsr1(pid_t pid) {
  std::istringstream in(readText("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("SigCgt:", 0) == 0) {
      const unsigned long long mask = strtoull(line.c_str() + 7, nullptr, 16);
      return (mask >> (SIGUSR1 - 1)) & 1;
    }
  return false;
}

// The processes of process group pgid (the rank's own processes: what it started).
std::vector<pid_t> groupMembers(pid_t pgid) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = strtol(e->d_name, &end, 10);
    if (*end || pid <= 0) continue;
    const std::string stat = readText("/proc/" + std::string(e->d_name) + "/stat");
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    int ppid = 0, group = 0;
    char state = 0;
    if (sscanf(stat.c_str() + close + 1, " %c %d %d", &state, &ppid, &group) == 3 && group == pgid)
      out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

std::string hostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

struct FileId {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId& o) const { return exists == o.exists && dev == o.dev && ino == o.ino; }
};
FileId fileId(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return {};
  return FileId{true, st.st_dev, st.st_ino};
}

}  // namespace

std::string jobDirectory() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime && *runtime && access(runtime, W_OK) == 0) return std::string(runtime) + "/hora-run";
  return "/tmp/hora-run-" + std::to_string(getuid());
}

std::string writeJobFile(const JobRecord& job) {
  const std::string dir = jobDirectory();
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return "";
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) return "";
  const std::string path = dir + "/" + std::to_string(job.runner) + ".job";
  std::string text = "hora-run-job 1\nrunner " + std::to_string(job.runner) + "\nhost " + job.host + "\ndumpdir " +
                     job.dumpDir + "\ncommand " + job.command + "\n";
  for (size_t r = 0; r < job.ranks.size(); ++r)
    text += "rank " + std::to_string(r) + " " + std::to_string(job.ranks[r]) + "\n";
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << text;
  out.close();
  if (!out || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return "";
  }
  return path;
}

bool readJobFile(const std::string& path, JobRecord* job) {
  std::istringstream in(readText(path));
  std::string line;
  bool magic = false;
  while (std::getline(in, line)) {
    const size_t sp = line.find(' ');
    const std::string key = line.substr(0, sp), value = sp == std::string::npos ? "" : line.substr(sp + 1);
    if (key == "hora-run-job") magic = true;
    else if (key == "runner") job->runner = static_cast<pid_t>(atol(value.c_str()));
    else if (key == "host") job->host = value;
    else if (key == "dumpdir") job->dumpDir = value;
    else if (key == "command") job->command = value;
    else if (key == "rank") {
      int r = -1;
      long pid = 0;
      if (sscanf(value.c_str(), "%d %ld", &r, &pid) == 2 && r >= 0 && r < 65536) {
        if (job->ranks.size() <= static_cast<size_t>(r)) job->ranks.resize(static_cast<size_t>(r) + 1, 0);
        job->ranks[static_cast<size_t>(r)] = static_cast<pid_t>(pid);
      }
    }
  }
  return magic && job->runner > 0;
}

std::string statusReport(const JobRecord& job, double waitS, bool json, const std::function<void()>& meanwhile) {
  std::vector<std::string> notes;
  struct Target {
    int rank;
    pid_t pid;
    std::string file;
    FileId before;
  };
  std::vector<Target> targets;
  for (size_t r = 0; r < job.ranks.size(); ++r) {
    const pid_t pid = job.ranks[r];
    if (pid <= 0) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) {
      notes.push_back("rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") has exited");
      continue;
    }
    std::vector<pid_t> asked;
    if (catchesUsr1(pid)) asked.push_back(pid);
    else
      for (pid_t m : groupMembers(pid))
        if (catchesUsr1(m)) asked.push_back(m);
    if (asked.empty())
      notes.push_back("rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                      ") does not catch SIGUSR1 (no communicator yet, or HORA_DUMP_SIGNAL=0): not asked");
    for (pid_t p : asked) {
      const std::string file = job.dumpDir + "/hora-dump." + job.host + "." + std::to_string(p) + ".json";
      targets.push_back(Target{static_cast<int>(r), p, file, fileId(file)});
    }
  }
  for (const Target& t : targets) kill(t.pid, SIGUSR1);
  // Until every asked process has written a new file, or the time is up.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(waitS);
  std::vector<std::string> fresh;
  for (;;) {
    fresh.clear();
    for (const Target& t : targets) {
      const FileId now = fileId(t.file);
      if (now.exists && !(now == t.before)) fresh.push_back(t.file);
    }
    if (fresh.size() == targets.size() || std::chrono::steady_clock::now() >= deadline) break;
    if (meanwhile) meanwhile();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const Target& t : targets) {
    const FileId now = fileId(t.file);
    if (!now.exists || now == t.before)
      notes.push_back("rank " + std::to_string(t.rank) + " (pid " + std::to_string(t.pid) + ", " +
                      inspect::processState("", t.pid, 0) + ") wrote no dump within " + std::to_string(waitS).substr(0, 4) +
                      " s");
  }
  std::vector<std::string> problems;
  std::vector<inspect::Communicator> comms;
  if (!fresh.empty()) comms = inspect::load(fresh, &problems);
  problems.insert(problems.begin(), notes.begin(), notes.end());
  if (targets.empty() && !json) {
    std::string out;
    for (const std::string& p : problems) out += "note: " + p + "\n";
    return out + "no rank could be asked for its calls\n";
  }
  return json ? inspect::reportJson(comms, problems) : inspect::reportText(comms, problems);
}

int statusMain(const std::string& which, bool json, double waitS) {
  const std::string dir = jobDirectory();
  std::vector<std::pair<std::string, JobRecord>> jobs;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.size() < 5 || name.compare(name.size() - 4, 4, ".job") != 0) continue;
      JobRecord job;
      if (!readJobFile(dir + "/" + name, &job)) continue;
      // A job file whose hora-run is gone (killed with SIGKILL) is left over.
      if (kill(job.runner, 0) != 0 && errno == ESRCH) continue;
      if (!which.empty() && std::to_string(job.runner) != which) continue;
      jobs.emplace_back(name, std::move(job));
    }
    closedir(d);
  }
  if (jobs.empty() && which.empty()) {
    printError("--status: no running job of hora-run found in " + dir);
    return 1;
  }
  if (jobs.empty()) {
    printError("--status: no running job of hora-run with pid " + which + " found in " + dir);
    return 1;
  }
  if (jobs.size() > 1) {
    std::string list;
    for (const auto& [name, job] : jobs)
      list += "\n  " + std::to_string(job.runner) + ": " + std::to_string(job.ranks.size()) + " ranks of " + job.command;
    printError("--status: several jobs run; name one by its hora-run's pid (hora-run --status PID):" + list);
    return 2;
  }
  if (jobs[0].second.host != hostName()) {
    printError("--status: the job's host is " + jobs[0].second.host + ", not this one");
    return 1;
  }
  const std::string report = statusReport(jobs[0].second, waitS, json, nullptr);
  writeAll(STDOUT_FILENO, report.data(), report.size());
  return 0;
}

}  // namespace hora::run
