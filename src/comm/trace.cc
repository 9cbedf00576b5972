#include "comm/trace.h"

#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <ctime>
#include <chrono>
#include <thread>

#include "base/log.h"
#include "build_info.h"
#include "coll/algorithm.h"
#include "comm/config.h"
#include "topo/topology.h"

namespace hora::trace {

namespace {

// The live recorders of this process; never destroyed (a dump may come at exit).
std::mutex& registryMu() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::vector<Recorder*>& registry() {
  static auto* all = new std::vector<Recorder*>();
  return *all;
}

using detail::isP2p;
using detail::kCudaStream;
using detail::kHostStream;
using detail::kOnDevice;
using detail::packShape;
using detail::packWho;
using detail::rootOrPeer;
using detail::versionOf;

bool isRooted(coll::Kind k) {
  return k == coll::Kind::Broadcast || k == coll::Kind::Reduce || k == coll::Kind::Gather || k == coll::Kind::Scatter;
}
bool hasOp(coll::Kind k) {
  return k == coll::Kind::AllReduce || k == coll::Kind::Reduce || k == coll::Kind::ReduceScatter;
}

// The identity of a call as a queued entry holds it, to find that entry when the call starts.
bool sameCall(const Entry& e, const coll::Args& a) {
  const uint64_t shape = e.shape.load(std::memory_order_relaxed);
  return (shape & 0xffffff) == (packShape(a, nullptr, 0, 0) & 0xffffff) &&
         e.count.load(std::memory_order_relaxed) == a.count &&
         static_cast<int32_t>(e.rootPeer.load(std::memory_order_relaxed)) == rootOrPeer(a);
}

// ticks() as wall-clock microseconds: from two readings of both clocks, the process's first
// (base) and one at the dump (at least 20 ms apart, for the rate).
struct WallClock {
  uint64_t t0 = 0, t1 = 0;
  int64_t w0 = 0, w1 = 0;
  int64_t operator()(uint64_t t) const {
    if (!t) return 0;
    const double rate = t1 > t0 ? static_cast<double>(w1 - w0) / static_cast<double>(t1 - t0) : 0;
    return w1 - static_cast<int64_t>(static_cast<double>(static_cast<int64_t>(t1 - t)) * rate);
  }
};
struct Base {
  uint64_t t;
  int64_t w;
};
const Base& base() {
  static const Base b{ticks(), core::wallMicros()};
  return b;
}
WallClock wallClock() {
  WallClock c;
  c.t0 = base().t;
  c.w0 = base().w;
  if (core::wallMicros() - c.w0 < 20000) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  c.t1 = ticks();
  c.w1 = core::wallMicros();
  return c;
}

// Opens an entry's identity for writing with the odd version v.
void open(Entry* e, uint32_t v) {
  e->version.store(v, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

}  // namespace

Recorder::Recorder(int capacity, int rank, int nranks, std::string name)
    : rank_(rank), nranks_(nranks), name_(std::move(name)) {
  (void)base();  // the clocks' first reading
  if (capacity > 0) {
    uint64_t slots = 1;
    while (slots < static_cast<uint64_t>(capacity)) slots <<= 1;
    ring_.reset(new Entry[slots]);
    queuedAt_.reset(new Queued[slots]);
    mask_ = slots - 1;
    keep_ = static_cast<uint64_t>(capacity);
    clockUser();
  }
  std::lock_guard<std::mutex> lock(registryMu());
  registry().push_back(this);
}

Recorder::~Recorder() {
  std::lock_guard<std::mutex> lock(registryMu());
  std::vector<Recorder*>& all = registry();
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i] == this) {
      all.erase(all.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
}

void Recorder::identify(uint64_t commId, std::vector<PeerId> peers) {
  std::lock_guard<std::mutex> lock(mu_);
  commId_ = commId;
  peers_ = std::move(peers);
  int init = 0;
  state_.compare_exchange_strong(init, 1);
}

void Recorder::failed(Errc code, const std::string& text, const std::string& waits) {
  std::lock_guard<std::mutex> lock(mu_);
  if (errorCode_) return;
  errorCode_ = static_cast<int>(code);
  errorText_ = text;
  errorWaits_ = waits;
  state_.store(2);
}

void Recorder::aborted() {
  int s = state_.load();
  while (s != 2 && !state_.compare_exchange_weak(s, 3)) {
  }
}

Entry* Recorder::take() {
  const uint64_t n = next_.fetch_add(1, std::memory_order_relaxed);
  Entry* e = &ring_[n & mask_];
  // A queued entry that never started (its stream's work failed first) leaves the count here.
  if (e->state.load(std::memory_order_relaxed) == static_cast<uint8_t>(State::Queued))
    queued_.fetch_sub(1, std::memory_order_relaxed);
  open(e, versionOf(n + 1, 1));
  e->seq.store(n + 1, std::memory_order_relaxed);
  return e;
}

Entry* Recorder::queued(const coll::Args& a, const void* stream, bool cuda) {
  if (!keep_) return nullptr;
  // Counted first: a call that starts from now on takes its slot by a locked instruction.
  const int before = queued_.fetch_add(1);
  Entry* e = take();
  e->call.store(isP2p(a.kind) ? 0 : calls_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  e->count.store(a.count, std::memory_order_relaxed);
  e->shape.store(packShape(a, nullptr, cuda ? kCudaStream : kHostStream, 1), std::memory_order_relaxed);
  e->rootPeer.store(rootOrPeer(a), std::memory_order_relaxed);
  Queued& q = queuedAt_[(e->seq.load(std::memory_order_relaxed) - 1) & mask_];
  q.stream.store(reinterpret_cast<uintptr_t>(stream), std::memory_order_relaxed);
  q.at.store(ticks(), std::memory_order_relaxed);
  e->started.store(0, std::memory_order_relaxed);
  e->ended.store(0, std::memory_order_relaxed);
  e->state.store(static_cast<uint8_t>(State::Queued), std::memory_order_relaxed);
  close(e, versionOf(e->seq.load(std::memory_order_relaxed), 2));
  if (before == 0) firstQueued_.store(e->seq.load(std::memory_order_relaxed), std::memory_order_relaxed);
  return e;
}

void Recorder::dropQueued(Entry* e) {
  uint8_t queued = static_cast<uint8_t>(State::Queued);
  if (!e || !e->state.compare_exchange_strong(queued, static_cast<uint8_t>(State::Failed))) return;
  e->ended.store(ticks(), std::memory_order_relaxed);
  queued_.fetch_sub(1, std::memory_order_relaxed);
}

Entry* Recorder::startOnDevice(const coll::Args& a) {
  Entry* e = start(a, nullptr, 1);
  if (e) e->shape.fetch_or(kOnDevice << 40, std::memory_order_relaxed);
  return e;
}

Entry* Recorder::start(const coll::Args& a, const coll::Plan* p, size_t group) {
  if (!keep_) return nullptr;
  if (queued_.load(std::memory_order_relaxed) == 0) return startAlone(a, p, group);
  // Not before it was queued (which read the counter): the counter, not the coarse clock.
  const uint64_t now = ticks();
  Entry* e = nullptr;
  uint32_t closed = 0;  // the version that closes the entry
  // The oldest queued entry of this call (streams run their calls in the order they came).
  const uint64_t end = next_.load(std::memory_order_relaxed);
  uint64_t from = firstQueued_.load(std::memory_order_relaxed);
  if (end > mask_ + 1 && from < end - mask_) from = end - mask_;
  for (uint64_t s = std::max<uint64_t>(from, 1); s <= end && !e; ++s) {
    Entry* x = &ring_[(s - 1) & mask_];
    uint8_t queued = static_cast<uint8_t>(State::Queued);
    if (x->seq.load(std::memory_order_relaxed) != s || x->state.load(std::memory_order_relaxed) != queued ||
        !sameCall(*x, a) || !x->state.compare_exchange_strong(queued, static_cast<uint8_t>(State::Started)))
      continue;
    e = x;
    queued_.fetch_sub(1, std::memory_order_relaxed);
    if (s == from) firstQueued_.store(s + 1, std::memory_order_relaxed);
    open(e, versionOf(s, 3));
    closed = versionOf(s, 4);
    e->shape.store(packShape(a, p, e->shape.load(std::memory_order_relaxed) >> 40 & 0xff, group),
                   std::memory_order_relaxed);
    e->rootPeer.store(packWho(a, p), std::memory_order_relaxed);
  }
  if (!e) {
    // Taken by a locked instruction: another thread may queue a call at the same moment.
    e = take();
    closed = versionOf(e->seq.load(std::memory_order_relaxed), 2);
    e->call.store(isP2p(a.kind) ? 0 : calls_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    e->count.store(a.count, std::memory_order_relaxed);
    e->shape.store(packShape(a, p, 0, group), std::memory_order_relaxed);
    e->rootPeer.store(packWho(a, p), std::memory_order_relaxed);
  }
  e->started.store(now, std::memory_order_relaxed);
  lastTicks_.store(now, std::memory_order_relaxed);
  resetMark();
  e->state.store(static_cast<uint8_t>(State::Started), std::memory_order_relaxed);
  close(e, closed);
  return e;
}

namespace {

const char* stateName(uint8_t s) {
  switch (static_cast<State>(s)) {
    case State::Queued: return "queued";
    case State::Started: return "started";
    case State::Done: return "done";
    case State::Failed: return "failed";
    case State::Empty: break;
  }
  return "?";
}

const char* waitName(uint8_t w) {
  switch (w) {
    case core::WaitMark::Recv: return "message from";
    case core::WaitMark::Send: return "message to";
    case core::WaitMark::Stage: return "shared stage";
    default: return "";
  }
}

std::string orNull(int64_t v) { return v ? std::to_string(v) : "null"; }


// An entry as JSON, or "" if it was being rewritten (by a later call) while it was read.
std::string entryJson(const Entry& e, const Queued& q, const core::WaitMark* mark, uint64_t seq, const WallClock& wall) {
  uint32_t v = 0;
  uint64_t call = 0, count = 0, shape = 0, stream = 0;
  int64_t rootPeer = -1, queuedUs = 0;
  for (int tries = 0;; ++tries) {
    if (tries == 100) return "";
    v = e.version.load(std::memory_order_acquire);
    if (v & 1) {
      std::this_thread::yield();
      continue;
    }
    const uint64_t s = e.seq.load(std::memory_order_relaxed);
    call = e.call.load(std::memory_order_relaxed);
    count = e.count.load(std::memory_order_relaxed);
    shape = e.shape.load(std::memory_order_relaxed);
    rootPeer = e.rootPeer.load(std::memory_order_relaxed);
    stream = q.stream.load(std::memory_order_relaxed);
    queuedUs = wall(q.at.load(std::memory_order_relaxed));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.version.load(std::memory_order_relaxed) != v) continue;
    if (s != seq) return "";
    break;
  }
  const uint8_t state = e.state.load(std::memory_order_acquire);
  const int64_t startedUs = wall(e.started.load(std::memory_order_relaxed));
  const bool over = state == static_cast<uint8_t>(State::Done) || state == static_cast<uint8_t>(State::Failed);
  const int64_t endedUs = over ? wall(e.ended.load(std::memory_order_relaxed)) : 0;
  const auto kind = static_cast<coll::Kind>(shape & 0xff);
  const auto dtype = static_cast<DataType>(shape >> 8 & 0xff);
  const auto op = static_cast<RedOp>(shape >> 16 & 0xff);
  const uint64_t algo = shape >> 24 & 0xff, inner = shape >> 32 & 0xff, flags = shape >> 40 & 0xff;
  const int32_t who = static_cast<int32_t>(rootPeer & 0xffffffff);
  const uint64_t chunk = static_cast<uint64_t>(rootPeer) >> 32;
  std::string s = format("{\"seq\": %" PRIu64 ", \"call\": %s, \"collective\": \"%s\", \"count\": %" PRIu64
                         ", \"dtype\": \"%s\"",
                         seq, call ? std::to_string(call).c_str() : "null", coll::kindName(kind), count,
                         dataTypeName(dtype));
  if (hasOp(kind)) s += format(", \"op\": \"%s\"", redOpName(op));
  if (isRooted(kind)) s += format(", \"root\": %d", who);
  if (isP2p(kind)) s += format(", \"peer\": %d", who);
  if (algo) {
    s += format(", \"algorithm\": \"%s\"", coll::algoName(static_cast<coll::Algo>(algo - 1)));
    if (inner && static_cast<coll::Algo>(algo - 1) == coll::Algo::Hier)
      s += format(", \"inner\": \"%s\"", coll::algoName(static_cast<coll::Algo>(inner - 1)));
    s += format(", \"chunk\": %" PRIu64, chunk);
  }
  if (flags & kOnDevice) s += ", \"algorithm\": \"device kernel\"";
  if (shape >> 48) s += format(", \"group\": %" PRIu64, shape >> 48);
  if (!(flags & (kCudaStream | kHostStream))) queuedUs = 0;
  if (flags & (kCudaStream | kHostStream))
    s += format(", \"stream\": \"%s 0x%" PRIx64 "\"", flags & kCudaStream ? "cuda" : "host", stream);
  s += format(", \"state\": \"%s\", \"queued\": %s, \"started\": %s, \"ended\": %s", stateName(state),
              orNull(queuedUs).c_str(), orNull(startedUs).c_str(), orNull(endedUs).c_str());
  const uint8_t what = mark ? mark->what.load(std::memory_order_acquire) : static_cast<uint8_t>(core::WaitMark::None);
  if (what != core::WaitMark::None) {
    const uint32_t steps = mark->steps.load(std::memory_order_relaxed);
    s += format(", \"wait\": {\"on\": \"%s\", \"rank\": %d, \"step\": %u, \"steps\": %s, \"since\": %" PRId64 "}",
                waitName(what), mark->peer.load(std::memory_order_relaxed), mark->step.load(std::memory_order_relaxed),
                steps ? std::to_string(steps).c_str() : "null", mark->sinceUs.load(std::memory_order_relaxed));
  }
  return s + "}";
}

}  // namespace

std::string Recorder::json() const {
  const WallClock wall = wallClock();
  std::string s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    static const char* const kStates[] = {"initialising", "ready", "failed", "aborted"};
    s = format("{\"commId\": \"%016" PRIx64 "\", \"name\": %s, \"rank\": %d, \"nranks\": %d, \"state\": \"%s\"", commId_,
               topo::jsonString(name_).c_str(), rank_, nranks_, kStates[state_.load() & 3]);
    s += errorCode_ ? format(", \"error\": {\"code\": %d, \"text\": %s%s%s}", errorCode_, topo::jsonString(errorText_).c_str(),
                             errorWaits_.empty() ? "" : ", \"waits\": ", errorWaits_.empty() ? "" : topo::jsonString(errorWaits_).c_str())
                    : std::string(", \"error\": null");
    s += ", \"peers\": [";
    for (size_t i = 0; i < peers_.size(); ++i)
      s += format("%s{\"rank\": %d, \"host\": %s, \"pid\": %d}", i ? ", " : "", peers_[i].rank,
                  topo::jsonString(peers_[i].host).c_str(), peers_[i].pid);
    s += "]";
  }
  const uint64_t n = next_.load(std::memory_order_acquire);
  s += format(", \"calls\": %" PRIu64 ", \"collectives\": %" PRIu64 ", \"kept\": %" PRIu64 ", \"entries\": [", n,
              calls_.load(std::memory_order_relaxed), keep_);
  // The wait mark belongs to the started entries, or (after a failure) to the last failed one.
  uint64_t lastFailed = 0;
  bool anyStarted = false;
  for (uint64_t seq = n > keep_ ? n - keep_ + 1 : 1; keep_ && seq <= n; ++seq) {
    const uint8_t st = ring_[(seq - 1) & mask_].state.load(std::memory_order_relaxed);
    anyStarted |= st == static_cast<uint8_t>(State::Started);
    if (st == static_cast<uint8_t>(State::Failed)) lastFailed = seq;
  }
  bool first = true;
  for (uint64_t seq = n > keep_ ? n - keep_ + 1 : 1; keep_ && seq <= n; ++seq) {
    const Entry& entry = ring_[(seq - 1) & mask_];
    const uint8_t st = entry.state.load(std::memory_order_relaxed);
    const bool marked = st == static_cast<uint8_t>(State::Started) || (!anyStarted && seq == lastFailed);
    const std::string e = entryJson(entry, queuedAt_[(seq - 1) & mask_], marked ? &mark_ : nullptr, seq, wall);
    if (e.empty()) continue;
    s += (first ? "\n  " : ",\n  ") + e;
    first = false;
  }
  return s + "]}";
}

namespace {

// The process's start in clock ticks since boot (/proc/self/stat's 22nd field): with the pid,
// it tells this process from a later one that reuses the pid.
unsigned long long processStart() {
  char buf[1024];
  const int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  const char* p = strrchr(buf, ')');
  for (int field = 2; p && field < 22; ++field) p = strchr(p + 1, ' ');
  return p ? strtoull(p + 1, nullptr, 10) : 0;
}

std::string document(const char* reason, const std::vector<std::string>& comms) {
  const int64_t now = core::wallMicros();
  const time_t secs = static_cast<time_t>(now / 1000000);
  struct tm utc {};
  gmtime_r(&secs, &utc);
  char when[64];
  strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &utc);
  std::string s = format("{\"format\": \"hora-dump\", \"version\": 1, \"hora\": \"%s\", \"host\": %s, \"pid\": %d, "
                         "\"processStart\": %llu, \"time\": %" PRId64 ", \"timeText\": \"%s.%06dZ\", \"reason\": \"%s\",\n"
                         "\"communicators\": [",
                         HORA_VERSION_STRING, topo::jsonString(log::hostName()).c_str(), static_cast<int>(getpid()),
                         processStart(), now, when, static_cast<int>(now % 1000000), reason);
  for (size_t i = 0; i < comms.size(); ++i) s += (i ? ",\n" : "\n") + comms[i];
  return s + "\n]}\n";
}

std::string fileName() { return format("hora-dump.%s.%d.json", log::hostName(), static_cast<int>(getpid())); }

void makeDirs(const std::string& dir) {
  for (size_t at = 1; at <= dir.size(); ++at)
    if (at == dir.size() || dir[at] == '/') {
      const std::string part = dir.substr(0, at);
      if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
        fail(Errc::System, "cannot create the dump directory %s: %s", part.c_str(), errnoText(errno).c_str());
    }
}

// The file a dump goes to: `path` as a file, or the usual name in `path` as a directory (the
// dump directory when empty).
std::string resolve(const std::string& path) {
  std::string dir = path;
  if (dir.empty()) {
    dir = config().dumpDir;
    if (dir.empty()) dir = ".";
    makeDirs(dir);
  } else {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return path;
  }
  return dir + "/" + fileName();
}

// Writes text to path whole or not at all (a temporary file renamed over it).
void writeFile(const std::string& path, const std::string& text) {
  const std::string tmp = format("%s.%ld.tmp", path.c_str(), static_cast<long>(syscall(SYS_gettid)));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(Errc::System, "cannot write the dump %s: %s", path.c_str(), errnoText(errno).c_str());
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(Errc::System, "cannot write the dump %s: %s", path.c_str(), errnoText(err).c_str());
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(Errc::System, "cannot write the dump %s: %s", path.c_str(), errnoText(err).c_str());
  }
}

}  // namespace

std::string dumpProcess(const char* reason) {
  try {
    std::vector<std::string> comms;
    {
      std::lock_guard<std::mutex> lock(registryMu());
      for (const Recorder* r : registry()) comms.push_back(r->json());
    }
    const std::string path = resolve("");
    writeFile(path, document(reason, comms));
    return path;
  } catch (const std::exception& e) {
    HORA_WARN(log::kColl, "flight recorder: %s", e.what());
    return "";
  }
}

std::string dumpOne(const Recorder& r, const std::string& path) {
  std::string comm;
  {
    std::lock_guard<std::mutex> lock(registryMu());  // as dumpProcess: one dump at a time
    comm = r.json();
  }
  const std::string to = resolve(path);
  writeFile(to, document("call", {comm}));
  return to;
}

// ---- SIGUSR1 ----------------------------------------------------------------------------

namespace {

// The handler posts a semaphore (async-signal-safe, and no descriptor: a process short of them
// must fail where it would without the recorder), which the dump thread waits on.
sem_t gWake;
std::atomic<bool> gThread{false};  // the dump thread runs (in this process: see afterForkChild)
struct sigaction gPrevious {};
bool gInstalled = false;
std::mutex& installMu() {
  static auto* mu = new std::mutex();
  return *mu;
}

// Only async-signal-safe calls: one sem_post, then the handler that was there before ours.
void onSignal(int signo, siginfo_t* info, void* context) {
  const int saved = errno;
  if (gThread.load(std::memory_order_relaxed)) sem_post(&gWake);
  errno = saved;
  if (gPrevious.sa_flags & SA_SIGINFO) {
    if (gPrevious.sa_sigaction) gPrevious.sa_sigaction(signo, info, context);
  } else if (gPrevious.sa_handler != SIG_DFL && gPrevious.sa_handler != SIG_IGN && gPrevious.sa_handler) {
    gPrevious.sa_handler(signo);
  }
}

void dumpLoop() {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);  // the process's signals go to its own threads
  for (;;) {
    if (sem_wait(&gWake) != 0) continue;  // EINTR
    while (sem_trywait(&gWake) == 0) {
    }  // signals that came together: one dump
    const std::string path = dumpProcess("signal");
    if (!path.empty()) HORA_WARN(log::kColl, "SIGUSR1: wrote the flight recorder's calls to %s", path.c_str());
  }
}

// In a child of fork() the thread is gone: the next communicator starts another.
void afterForkChild() { gThread.store(false); }

}  // namespace

void installSignal() {
  std::lock_guard<std::mutex> lock(installMu());
  if (gThread.load()) return;
  if (sem_init(&gWake, 0, 0) != 0) {
    HORA_WARN(log::kInit, "flight recorder: no dumps on SIGUSR1: sem_init: %s", errnoText(errno).c_str());
    return;
  }
  try {
    std::thread(dumpLoop).detach();
  } catch (const std::exception& e) {
    HORA_WARN(log::kInit, "flight recorder: no dumps on SIGUSR1: %s", e.what());
    return;
  }
  gThread.store(true);
  if (gInstalled) return;  // after a fork: the handler is in place
  gInstalled = true;
  pthread_atfork(nullptr, nullptr, afterForkChild);
  struct sigaction action {};
  action.sa_sigaction = onSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  if (sigaction(SIGUSR1, &action, &gPrevious) != 0)
    HORA_WARN(log::kInit, "flight recorder: no dumps on SIGUSR1: sigaction: %s", errnoText(errno).c_str());
}

}  // namespace hora::trace
