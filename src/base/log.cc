#include "base/log.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>

#include "base/error.h"

namespace hora::log {

std::atomic<int> gLevel{static_cast<int>(Level::Warn)};
std::atomic<uint32_t> gSubsys{kAll};

namespace {
thread_local int tRank = -1;
std::mutex gWriteMutex;  // one line at a time within the process; guards the three below
int gFd = STDERR_FILENO;
std::string gBanner;
bool gBannerDone = false;
}  // namespace

void configure(Level level, uint32_t subsysMask) {
  gLevel.store(static_cast<int>(level));
  gSubsys.store(subsysMask);
}

RankScope::RankScope(int rank) : saved_(tRank) { tRank = rank; }
RankScope::~RankScope() { tRank = saved_; }

const char* hostName() {
  static const std::string name = [] {
    char buf[256] = {0};
    if (gethostname(buf, sizeof buf - 1) != 0) return std::string("unknown-host");
    return std::string(buf);
  }();
  return name.c_str();
}

static const char* levelName(Level l) {
  switch (l) {
    case Level::Warn: return "WARN";
    case Level::Info: return "INFO";
    case Level::Trace: return "TRACE";
    default: return "";
  }
}

static const char* subsysName(uint32_t s) {
  switch (s) {
    case kInit: return "INIT";
    case kBootstrap: return "BOOTSTRAP";
    case kNet: return "NET";
    case kColl: return "COLL";
    case kEnv: return "ENV";
    default: return "ALL";
  }
}

static std::string line(Level level, uint32_t subsys, const std::string& msg) {
  char rank[16];
  if (tRank >= 0) snprintf(rank, sizeof rank, "%d", tRank); else snprintf(rank, sizeof rank, "-");
  return format("%s:%d:%ld [%s] hora %s %s %s\n", hostName(), static_cast<int>(getpid()),
                static_cast<long>(syscall(SYS_gettid)), rank, levelName(level), subsysName(subsys), msg.c_str());
}

// Writes text (whole lines) with one write(2), unless the descriptor takes less at a time,
// preceded by the banner when an INFO or TRACE line is the process's first.
static void emit(Level level, std::string text) {
  std::lock_guard<std::mutex> lock(gWriteMutex);
  if (static_cast<int>(level) >= static_cast<int>(Level::Info) && !gBannerDone && !gBanner.empty()) {
    gBannerDone = true;
    text.insert(0, line(Level::Info, kInit, gBanner));
  }
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(gFd, text.data() + done, text.size() - done);
    if (n > 0) done += static_cast<size_t>(n);
    else if (n < 0 && errno == EINTR) continue;
    else return;  // a log that cannot be written has nowhere to say so
  }
}

void write(Level level, uint32_t subsys, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  emit(level, line(level, subsys, msg));
}

void setBanner(const std::string& text) {
  std::lock_guard<std::mutex> lock(gWriteMutex);
  gBanner = text;
}

void writeBanner(bool evenAtWarn) {
  if (enabled(Level::Info, kAll) || (evenAtWarn && enabled(Level::Warn, kAll))) emit(Level::Info, "");
}

std::string expandFilePattern(const std::string& pattern, const std::string& host, long pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char next = i + 1 < pattern.size() ? pattern[i + 1] : '\0';
    if (pattern[i] != '%' || (next != 'h' && next != 'p' && next != '%')) {
      out += pattern[i];
      continue;
    }
    out += next == 'h' ? host : next == 'p' ? std::to_string(pid) : std::string("%");
    ++i;
  }
  return out;
}

std::string toFile(const std::string& pattern) {
  const std::string path = expandFilePattern(pattern, hostName(), static_cast<long>(getpid()));
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot open " + path + ": " + errnoText(errno);
  std::lock_guard<std::mutex> lock(gWriteMutex);
  if (gFd != STDERR_FILENO) ::close(gFd);
  gFd = fd;
  return "";
}

void toStderr() {
  std::lock_guard<std::mutex> lock(gWriteMutex);
  if (gFd != STDERR_FILENO) ::close(gFd);
  gFd = STDERR_FILENO;
}

}  // namespace hora::log
