// Logging. Each line names the host, the pid and the rank:
//   myhost:12345:12350 [3] hora INFO NET connected to rank 4 ...
// The level and subsystems are set once from HORA_DEBUG / HORA_DEBUG_SUBSYS by the config
// module; the rank comes from a per-thread context set by whoever works for a communicator.
// Lines go to stderr, or to the file HORA_DEBUG_FILE names. Each line, newline included, is
// one write(2) to the file descriptor, so a line never interleaves mid-line with the program's
// output or with another process's lines.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace hora::log {

enum class Level : int { None = 0, Warn = 1, Info = 2, Trace = 3 };

enum Subsys : uint32_t {
  kInit = 1u << 0,
  kBootstrap = 1u << 1,
  kNet = 1u << 2,
  kColl = 1u << 3,
  kEnv = 1u << 4,
  kAll = 0xffffffffu,
};

extern std::atomic<int> gLevel;
extern std::atomic<uint32_t> gSubsys;

void configure(Level level, uint32_t subsysMask);

inline bool enabled(Level level, uint32_t subsys) {
  return static_cast<int>(level) <= gLevel.load(std::memory_order_relaxed) &&
         (level == Level::Warn || (gSubsys.load(std::memory_order_relaxed) & subsys) != 0);
}

void write(Level level, uint32_t subsys, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// Sets the rank shown in this thread's log lines for the lifetime of the object.
class RankScope {
 public:
  explicit RankScope(int rank);
  ~RankScope();
  RankScope(const RankScope&) = delete;
  RankScope& operator=(const RankScope&) = delete;

 private:
  int saved_;
};

const char* hostName();

// HORA_DEBUG_FILE's pattern with %h replaced by host, %p by pid and %% by %; any other % is kept.
std::string expandFilePattern(const std::string& pattern, const std::string& host, long pid);
// Sends the log to the file that pattern names for this process (expanded with hostName() and
// getpid()), created or appended to. Returns "" on success; otherwise the log stays where it
// was and the reason is returned.
std::string toFile(const std::string& pattern);
// Sends the log back to stderr, closing the file toFile opened.
void toStderr();

// The line written once per process, before its first INFO or TRACE line (the version banner).
void setBanner(const std::string& line);
// Writes the banner now if INFO is on (or, with evenAtWarn, WARN: NCCL_DEBUG=VERSION) and it has
// not been written yet.
void writeBanner(bool evenAtWarn = false);

}  // namespace hora::log

// Formats only when the line will be written. Warnings are always written unless the level is
// None.
#define HORA_WARN(subsys, ...)                                                               \
  do {                                                                                       \
    if (::hora::log::enabled(::hora::log::Level::Warn, (subsys)))                            \
      ::hora::log::write(::hora::log::Level::Warn, (subsys), __VA_ARGS__);                   \
  } while (0)
#define HORA_INFO(subsys, ...)                                                               \
  do {                                                                                       \
    if (::hora::log::enabled(::hora::log::Level::Info, (subsys)))                            \
      ::hora::log::write(::hora::log::Level::Info, (subsys), __VA_ARGS__);                   \
  } while (0)
#define HORA_TRACE(subsys, ...)                                                              \
  do {                                                                                       \
    if (::hora::log::enabled(::hora::log::Level::Trace, (subsys)))                           \
      ::hora::log::write(::hora::log::Level::Trace, (subsys), __VA_ARGS__);                  \
  } while (0)
