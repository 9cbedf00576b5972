// hora-info --check: one 2-rank job per transport, each in a child process of its own, since
// the library reads HORA_TRANSPORTS once per process.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hora.h"
#include "tools/hora_info.h"

extern char** environ;

namespace hora::info {

namespace {

constexpr size_t kCount = 4096;

// Rank r's element i; the sum over two ranks is 3 * (i % 97 + 1), exact in float.
float input(int rank, size_t i) { return static_cast<float>((rank + 1) * (i % 97 + 1)); }

std::string rankJob(const horaUniqueId& id, int rank) {
  horaComm_t comm = nullptr;
  horaConfig_t config = HORA_CONFIG_INITIALIZER;
  config.blocking = 1;  // whatever HORA_COMM_BLOCKING says
  config.commName = "hora-info check";
  if (horaCommInitRankConfig(&comm, 2, id, rank, &config) != horaSuccess)
    return "rank " + std::to_string(rank) + ": init: " + horaGetLastError(nullptr);
  std::vector<float> send(kCount), recv(kCount, -1.0f);
  for (size_t i = 0; i < kCount; ++i) send[i] = input(rank, i);
  std::string why;
  if (horaAllReduce(send.data(), recv.data(), kCount, horaFloat32, horaSum, comm, nullptr) != horaSuccess) {
    why = "rank " + std::to_string(rank) + ": allreduce: " + horaGetLastError(comm);
  } else {
    for (size_t i = 0; i < kCount && why.empty(); ++i)
      if (recv[i] != input(0, i) + input(1, i))
        why = "rank " + std::to_string(rank) + ": allreduce gave " + std::to_string(recv[i]) + " at element " +
              std::to_string(i) + ", expected " + std::to_string(input(0, i) + input(1, i));
  }
  if (why.empty()) {
    if (horaCommDestroy(comm) != horaSuccess) why = "rank " + std::to_string(rank) + ": destroy: " + horaGetLastError(nullptr);
  } else {
    horaCommAbort(comm);
  }
  return why;
}

}  // namespace

int checkOne() {
  horaUniqueId id;
  if (horaGetUniqueId(&id) != horaSuccess) {
    std::printf("unique id: %s\n", horaGetLastError(nullptr));
    return 1;
  }
  std::string why[2];
  std::thread other([&] { why[1] = rankJob(id, 1); });
  why[0] = rankJob(id, 0);
  other.join();
  std::string out = why[0].empty() ? why[1] : why[1].empty() ? why[0] : why[0] + "; " + why[1];
  std::printf("%s\n", out.empty() ? "ok" : out.c_str());
  return out.empty() ? 0 : 1;
}

CheckResult checkTransport(const std::string& self, const std::string& transport, int deadlineSeconds) {
  CheckResult res;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    res.why = std::string("pipe: ") + std::strerror(errno);
    return res;
  }
  // The child's environment: this one, with HORA_TRANSPORTS forcing the transport (it wins
  // over its NCCL_* twins) and a library timeout well inside the deadline.
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "HORA_TRANSPORTS=", 16) != 0 && std::strncmp(*e, "HORA_TIMEOUT_MS=", 16) != 0) env.push_back(*e);
  env.push_back("HORA_TRANSPORTS=" + transport);
  env.push_back("HORA_TIMEOUT_MS=" + std::to_string(deadlineSeconds * 1000 / 2));
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = self, arg1 = "--check-one";
  char* argv[] = {arg0.data(), arg1.data(), nullptr};

  const pid_t pid = fork();
  if (pid < 0) {
    res.why = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return res;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);  // the library's own warnings, if any, come before the answer
    execve(self.c_str(), argv, envp.data());
    std::printf("cannot run %s: %s\n", self.c_str(), std::strerror(errno));
    std::fflush(stdout);
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(deadlineSeconds);
  bool timedOut = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timedOut = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[4096];
    const ssize_t got = read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (out.size() < 65536) out.append(buf, static_cast<size_t>(got));
  }
  close(fds[0]);
  if (timedOut) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // The answer is the last line (the library may have logged before it).
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (const size_t nl = out.rfind('\n'); nl != std::string::npos) out = out.substr(nl + 1);
  if (timedOut) {
    res.why = "no answer within " + std::to_string(deadlineSeconds) + " s (stopped)";
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && out == "ok") {
    res.ok = true;
  } else {
    res.why = !out.empty() ? out
              : WIFSIGNALED(status) ? std::string("the job was killed by signal ") + strsignal(WTERMSIG(status))
                                    : "the job exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return res;
}

}  // namespace hora::info
