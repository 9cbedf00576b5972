// The harness of the transport contract suite (test_transport_contract.cc): deadlines, the
// ranks' side channel, a pump that drives one connection as the progress engine does, message
// contents that are cheap to check at any size, and running a job for one transport in a
// process of its own.
#pragma once
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include <catch2/catch.hpp>
#include "base/error.h"
#include "comm/comm.h"
#include "harness.h"
#include "transports/registry.h"
#include "transports/transport.h"

namespace contract {

using namespace hora;
using hora::transport::Connection;
using hora::transport::Cookie;

constexpr int kScale = hora::test::kSanitizerScale;

// How long nothing may move before a wait counts as a hang. Only a broken transport waits
// this long: every case ends as soon as what it waits for happens.
constexpr int kHangSeconds = 120 * kScale;

using Clock = std::chrono::steady_clock;

struct Deadline {
  explicit Deadline(int seconds = kHangSeconds) : span(seconds) { reset(); }
  void reset() { end = Clock::now() + span; }
  bool expired() const { return Clock::now() > end; }
  int msLeft() const {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1 << 30));
  }
  std::chrono::seconds span;
  Clock::time_point end;
};

// A wait that outlived its deadline.
struct Hang : std::runtime_error {
  using std::runtime_error::runtime_error;
};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

inline bool containsNoCase(std::string s, std::string part) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (char& c : part) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return contains(s, part);
}

// ---- what is tested -------------------------------------------------------------------------

struct Subject {
  std::string name;
  bool self;  // always on: tested through a rank's link to itself
};

inline std::vector<Subject> subjects() {
  std::vector<Subject> s;
  for (const transport::Registration& r : transport::registry()) s.push_back(Subject{r.name, !r.optional});
  return s;
}

// ---- the ranks' side channel ----------------------------------------------------------------

// One byte at a time over a socket pair made before the ranks were forked: "I have armed", "some
// bytes arrived", "I am done". Never used to move data of the transport under test. A rank waits
// here twice as long as a pump waits for its link, so that when a link hangs, the rank that
// drives it is the one to say so.
class Side {
 public:
  explicit Side(int fd) : fd_(fd) {}
  void tell(char c) const { (void)!::send(fd_, &c, 1, MSG_NOSIGNAL); }
  // Whether c has come (consumed if so); never blocks.
  bool heard(char c) {
    drain();
    const size_t at = got_.find(c);
    if (at == std::string::npos) return false;
    got_.erase(at, 1);
    return true;
  }
  bool await(char c, int seconds = 2 * kHangSeconds) {
    Deadline d(seconds);
    while (!heard(c)) {
      if (d.expired() || closed_) return false;
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, std::min(d.msLeft(), 1000));
    }
    return true;
  }

 private:
  void drain() {
    char buf[64];
    for (;;) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        got_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) closed_ = true;
      return;
    }
  }
  int fd_;
  std::string got_;
  bool closed_ = false;
};

// One rank's view of the link under test.
struct Link {
  std::string name;  // the transport
  bool self;
  int rank, peer;
  horaComm* comm;
  Connection* conn;
  Side side;
};

// What went wrong on a rank, in words.
struct Report {
  std::string text;
  void add(const std::string& what) { text += (text.empty() ? "" : "; ") + what; }
  void check(bool ok, const std::string& what) {
    if (!ok) add(what);
  }
};

// ---- driving a connection -------------------------------------------------------------------

// The progress engine's loop on one connection. Completed cookies accumulate in `done`
// (progress() appends to it directly, so cookies it reports before throwing are kept).
struct Pump {
  explicit Pump(Connection* c) : conn(c) {}
  Connection* conn;
  std::vector<Cookie> done;
  const char* where = "";  // the call that threw, if one did

  bool step() {
    where = "progress()";
    const size_t before = done.size();
    return conn->progress(done) || done.size() != before;
  }
  // Nothing moved: sleep in poll() as the engine does, for at most maxMs.
  void idle(int maxMs) {
    where = "armWakeup()";
    const bool sleep = conn->armWakeup();
    std::vector<pollfd> fds;
    conn->addPollFds(fds);
    if (sleep) ::poll(fds.data(), fds.size(), maxMs);
    where = "disarmWakeup()";
    conn->disarmWakeup();
  }
  // Runs until pred() holds; throws Hang when nothing moves for `seconds`, and whatever the
  // connection throws.
  template <class Pred>
  void until(Pred pred, const std::string& what, int seconds = kHangSeconds) {
    Deadline d(seconds);
    while (!pred()) {
      if (step()) {
        d.reset();
        continue;
      }
      if (pred()) return;
      if (d.expired()) throw Hang("nothing moved for " + std::to_string(seconds) + " s while waiting for " + what);
      idle(50);
    }
  }
  bool has(Cookie k) const { return std::count(done.begin(), done.end(), k) > 0; }
};

struct Outcome {
  bool threw = false;  // a hora::Error
  bool hung = false;
  Errc code = Errc::Success;  // the hora::Error's
  std::string what, where;
  std::string describe() const {
    if (threw) return "threw from " + where + ": " + what;
    if (hung) return what;
    return what.empty() ? "nothing was thrown" : "threw something other than hora::Error: " + what;
  }
};

template <class F>
Outcome capture(const Pump& p, F f) {
  Outcome o;
  try {
    f();
  } catch (const Hang& e) {
    o.hung = true;
    o.what = e.what();
  } catch (const Error& e) {
    o.threw = true;
    o.what = e.what();
    o.code = e.code();
    o.where = p.where;
  } catch (const std::exception& e) {
    o.what = e.what();
  }
  return o;
}

// ---- data -----------------------------------------------------------------------------------

constexpr uint8_t kCanary = 0xA5;
constexpr size_t kTail = 16;  // canary bytes past every receive
constexpr Cookie kRecvCookie = 1u << 20;

inline uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline void fill(uint8_t* p, size_t n, uint64_t seed) {
  uint64_t x = mix(seed) | 1;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = next();
    memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>(next());
}

uint64_t seedOf(int from, size_t k, uint64_t salt) { return (static_cast<uint64_t>(from) + 1) * 1000003 + k * 7919 + salt; }

// The first byte where got differs from want, or "".
inline std::string firstDifference(const uint8_t* got, const uint8_t* want, size_t n) {
  if (n == 0 || memcmp(got, want, n) == 0) return "";
  for (size_t i = 0; i < n; ++i)
    if (got[i] != want[i]) return format("byte %zu of %zu is 0x%02x, expected 0x%02x", i, n, got[i], want[i]);
  return "";
}

inline bool allCanary(const uint8_t* p, size_t n, size_t* at = nullptr) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != kCanary) {
      if (at) *at = i;
      return false;
    }
  return true;
}

// Memory for messages too big to fill: anonymous, reserved nothing up front. A page costs memory
// only once written; bytes never written are sent as zeros (the kernel's zero page).
struct Mapping {
  explicit Mapping(size_t bytes) : n(bytes) {
    void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw std::runtime_error(format("mmap of %zu bytes: %s", n, strerror(errno)));
    p = static_cast<uint8_t*>(m);
  }
  ~Mapping() { ::munmap(p, n); }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  uint8_t* p = nullptr;
  size_t n;
};

// A sparse message: 8-byte stamps at fixed offsets (both ends, and either side of 2^31 and 2^32
// where the message reaches them) and at pseudo-random ones; zeros everywhere else. The receiver
// fills a window around each stamp with canary bytes before the message comes, then checks each
// window byte for byte, and that nothing landed past the end.
struct Stamp {
  size_t at;
  uint64_t value;
};
constexpr size_t kWindow = 64;

inline std::vector<Stamp> stampsFor(size_t len, uint64_t seed) {
  std::vector<size_t> at = {0, 3, 4093, size_t(1) << 20, (size_t(1) << 31) - 8, (size_t(1) << 31) - 3, size_t(1) << 31,
                            (size_t(1) << 31) + 5, (size_t(1) << 32) - 4, size_t(1) << 32};
  for (int i = 0; i < 24; ++i) at.push_back(static_cast<size_t>(mix(seed + 77 + static_cast<uint64_t>(i)) % len));
  if (len >= 8) at.push_back(len - 8);
  std::vector<Stamp> s;
  for (size_t i = 0; i < at.size(); ++i)
    if (len >= 8 && at[i] <= len - 8) s.push_back(Stamp{at[i], mix(seed * 131 + i) | 1});
  return s;
}

inline void writeStamps(uint8_t* p, const std::vector<Stamp>& stamps) {
  for (const Stamp& s : stamps) memcpy(p + s.at, &s.value, 8);
}

// What the sender's byte at `pos` is: the last stamp written over it, else zero.
inline uint8_t stampedByte(const std::vector<Stamp>& stamps, size_t pos) {
  uint8_t b = 0;
  for (const Stamp& s : stamps)
    if (pos >= s.at && pos < s.at + 8) b = static_cast<uint8_t>(s.value >> (8 * (pos - s.at)));
  return b;
}

inline void prepareWindows(uint8_t* p, size_t len, const std::vector<Stamp>& stamps, size_t tail) {
  for (const Stamp& s : stamps) {
    const size_t from = s.at > kWindow ? s.at - kWindow : 0, to = std::min(len, s.at + 8 + kWindow);
    memset(p + from, kCanary, to - from);
  }
  memset(p + len, kCanary, tail);
}

inline std::string checkWindows(const uint8_t* p, size_t len, const std::vector<Stamp>& stamps, size_t tail) {
  for (const Stamp& s : stamps) {
    const size_t from = s.at > kWindow ? s.at - kWindow : 0, to = std::min(len, s.at + 8 + kWindow);
    for (size_t i = from; i < to; ++i)
      if (p[i] != stampedByte(stamps, i))
        return format("byte %zu of %zu is 0x%02x, expected 0x%02x", i, len, p[i], stampedByte(stamps, i));
  }
  size_t at = 0;
  if (!allCanary(p + len, tail, &at)) return format("byte %zu past the end of the %zu-byte receive was written", at, len);
  return "";
}

// ---- running a job --------------------------------------------------------------------------

using Body = std::function<std::string(Link&)>;

struct RunOptions {
  int killed = -1;          // the rank that SIGKILLs itself on purpose
  int guardSeconds = 300;   // the harness kills ranks still alive after this (scaled under sanitizers)
};

struct RunResult {
  bool skipped = false;  // the transport cannot connect two ranks of this host
  std::string text;      // what failed, or why it was skipped
};

// In the job's own process: sets HORA_TRANSPORTS, forks the ranks, runs body on each; returns
// "" on success, "S<why>" when skipped, "F<what failed>".
inline std::string coordinate(const Subject& s, const Body& body, const RunOptions& o) {
  if (!s.self) setenv("HORA_TRANSPORTS", s.name.c_str(), 1);
  const int n = s.self ? 1 : 2;
  int sv[2] = {-1, -1};
  if (!s.self && ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    return std::string("Fsocketpair: ") + strerror(errno);
  test::ProcessOptions po;
  po.hangGuardSeconds = o.guardSeconds;
  const std::vector<test::ProcessResult> results = test::runRawProcesses(
      n,
      [&](const horaUniqueId& id, int rank, int nranks) -> std::string {
        if (!s.self) ::close(sv[1 - rank]);
        horaComm_t comm = nullptr;
        if (horaCommInitRank(&comm, nranks, id, rank) != horaSuccess)
          return std::string("init: ") + horaGetLastError(nullptr);
        const int peer = s.self ? rank : 1 - rank;
        Link l{s.name, s.self, rank, peer, comm, comm->connPtrs[static_cast<size_t>(peer)], Side(s.self ? -1 : sv[rank])};
        std::string out;
        if (comm->self().linkNames[static_cast<size_t>(peer)] != s.name || !l.conn) {
          out = format("the link to rank %d is %s, not %s", peer, comm->self().linkNames[static_cast<size_t>(peer)].c_str(),
                       s.name.c_str());
        } else {
          try {
            out = body(l);
          } catch (const std::exception& e) {
            out = std::string("unexpected exception: ") + e.what();
          }
        }
        horaCommDestroy(comm);
        return out;
      },
      po);
  if (!s.self) {
    ::close(sv[0]);
    ::close(sv[1]);
  }
  std::string text;
  bool unreachable = false, onlyInit = true;
  for (const test::ProcessResult& r : results) {
    if (r.rank == o.killed) {
      if (!WIFSIGNALED(r.status) || WTERMSIG(r.status) != SIGKILL)
        text += "rank " + std::to_string(r.rank) + " should have died of SIGKILL: " + test::describe({r});
      continue;
    }
    if (r.ok()) continue;
    text += test::describe({r});
    unreachable |= contains(r.output, "no transport reaches");
    onlyInit &= r.output.rfind("init: ", 0) == 0;
  }
  if (text.empty()) return "";
  return (unreachable && onlyInit ? "S" : "F") + text;
}

// Runs one job for subject s in a process of its own, so that its configuration is read afresh.
inline RunResult run(const Subject& s, const Body& body, const RunOptions& o = {}) {
  int p[2];
  if (::pipe(p) != 0) return RunResult{false, std::string("pipe: ") + strerror(errno)};
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return RunResult{false, std::string("fork: ") + strerror(errno)};
  if (pid == 0) {
    setpgid(0, 0);  // its ranks join its group: a hang takes the whole job down at once
    ::close(p[0]);
    std::string r;
    try {
      r = coordinate(s, body, o);
    } catch (const std::exception& e) {
      r = std::string("F") + e.what();
    }
    size_t off = 0;
    while (off < r.size()) {
      ssize_t k = ::write(p[1], r.data() + off, r.size() - off);
      if (k <= 0) break;
      off += static_cast<size_t>(k);
    }
    _exit(0);
  }
  setpgid(pid, pid);
  ::close(p[1]);
  std::string out;
  bool hung = false;
  const auto end = Clock::now() + std::chrono::seconds((o.guardSeconds + 60) * kScale);
  for (;;) {
    pollfd pf{p[0], POLLIN, 0};
    if (::poll(&pf, 1, 1000) > 0) {
      char buf[4096];
      ssize_t k = ::read(p[0], buf, sizeof buf);
      if (k > 0) {
        out.append(buf, static_cast<size_t>(k));
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      break;
    }
    if (Clock::now() > end) {
      ::kill(-pid, SIGKILL);
      hung = true;
      break;
    }
  }
  ::close(p[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (hung) return RunResult{false, "the job hung: killed by the test's guard"};
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return RunResult{false, "the job's process failed: " + out};
  if (out.empty()) return RunResult{};
  return RunResult{out[0] == 'S', out.substr(1)};
}

inline void expectPass(const Subject& s, const RunResult& r) {
  if (r.skipped) {
    WARN(s.name << " cannot connect two ranks of this host here, so its contract is not checked: " << r.text);
    return;
  }
  INFO("transport " << s.name);
  CHECK(r.text == "");
}

// The two ranks meet (both have finished what they were checking).
inline void barrier(Link& l, Report& rep) {
  if (l.self) return;
  l.side.tell('B');
  rep.check(l.side.await('B'), "the peer never reached the end of the case");
}

}  // namespace contract
