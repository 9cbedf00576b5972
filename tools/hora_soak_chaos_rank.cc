// hora-soak --chaos's ranks, and the lines they exchange with the controller
// (hora_soak_chaos.cc says what the lines are).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <sstream>
#include <string>

#include "hora.h"
#include "hora_soak.h"
#include "hora_soak_chaos.h"

namespace hora_soak {

std::string oneLine(std::string s) {
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

bool writeLine(int fd, const std::string& line) {
  std::string s = line + "\n";
  size_t off = 0;
  while (off < s.size()) {
    ssize_t w = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    off += static_cast<size_t>(w);
  }
  return true;
}

// A line from fd (buffered in buf), waiting until deadline. False on EOF, error or time out.
bool readLine(int fd, std::string& buf, std::string* line, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const size_t nl = buf.find('\n');
    if (nl != std::string::npos) {
      *line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return true;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) continue;
    char chunk[4096];
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf.append(chunk, static_cast<size_t>(n));
  }
}


int rankMain() {
  const int fd = 3;
  horaComm_t comm = nullptr;
  if (horaCommInitFromEnv(&comm) != horaSuccess) {
    writeLine(fd, std::string("initfail ") + oneLine(horaGetLastError(nullptr)));
    return 1;
  }
  int rank = -1;
  horaCommUserRank(comm, &rank);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  writeLine(fd, "ready " + std::to_string(rank) + " " + std::to_string(getpid()) + " " + host);
  std::string buf, line;
  bool failed = false;
  const auto forever = std::chrono::steady_clock::now() + std::chrono::hours(24 * 365);
  while (readLine(fd, buf, &line, forever)) {
    std::istringstream in(line);
    std::string verb;
    in >> verb;
    if (verb == "round") {
      uint64_t first = 0, calls = 0, seed = 0;
      size_t maxBytes = 0;
      in >> first >> calls >> seed >> maxBytes;
      const Round r = soakRound(comm, seed, first, calls, maxBytes);
      if (!r.firstWrong.empty()) writeLine(fd, "wrong " + oneLine(r.firstWrong));
      if (r.error == horaSuccess) {
        writeLine(fd, "done " + std::to_string(r.calls) + " " + std::to_string(r.wrongResults));
      } else {
        failed = true;
        writeLine(fd, "fail " + std::to_string(r.calls) + " " + std::to_string(r.wrongResults) + " " +
                          std::to_string(static_cast<int>(r.error)) + " " + oneLine(r.errorCall + ": " + r.errorText));
      }
    } else if (verb == "shrink") {
      int culprit = -1;
      in >> culprit;
      horaComm_t child = nullptr;
      horaResult_t res = horaCommShrink(comm, &culprit, 1, &child, nullptr, HORA_SHRINK_ABORT);
      if (res != horaSuccess) {
        writeLine(fd, "fail 0 0 " + std::to_string(static_cast<int>(res)) + " horaCommShrink: " + oneLine(horaGetLastError(comm)));
        continue;
      }
      horaCommAbort(comm);  // the failed parent
      comm = child;
      failed = false;
      int size = 0;
      horaCommUserRank(comm, &rank);
      horaCommCount(comm, &size);
      writeLine(fd, "shrunk " + std::to_string(rank) + " " + std::to_string(size));
    } else {  // exit, or anything else
      break;
    }
  }
  if (failed) horaCommAbort(comm);
  else horaCommDestroy(comm);
  return 0;
}

}  // namespace hora_soak
