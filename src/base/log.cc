#include "base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

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
std::mutex gWriteMutex;
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

void write(Level level, uint32_t subsys, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string msg = vformat(fmt, ap);
  va_end(ap);
  char rank[16];
  if (tRank >= 0) snprintf(rank, sizeof rank, "%d", tRank); else snprintf(rank, sizeof rank, "-");
  std::lock_guard<std::mutex> lock(gWriteMutex);
  fprintf(stderr, "%s:%d:%ld [%s] hora %s %s %s\n", hostName(), static_cast<int>(getpid()),
          static_cast<long>(syscall(SYS_gettid)), rank, levelName(level), subsysName(subsys),
          msg.c_str());
  fflush(stderr);
}

}  // namespace hora::log
