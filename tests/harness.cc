#include "harness.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "kernels/cpu/reduce.h"

namespace hora::test {

// ---- ranks as threads ----------------------------------------------------------------------

std::vector<std::string> runThreads(int n, const RankFn& fn) {
  std::vector<horaComm_t> comms(static_cast<size_t>(n), nullptr);
  if (horaCommInitAll(comms.data(), n, nullptr) != horaSuccess)
    return {std::string("horaCommInitAll: ") + horaGetLastError(nullptr)};
  std::vector<std::string> out(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { out[static_cast<size_t>(r)] = fn(comms[static_cast<size_t>(r)], r, n); });
  for (auto& t : threads) t.join();
  std::vector<std::string> failures;
  for (int r = 0; r < n; ++r) {
    if (!out[static_cast<size_t>(r)].empty()) failures.push_back("rank " + std::to_string(r) + ": " + out[static_cast<size_t>(r)]);
    horaCommDestroy(comms[static_cast<size_t>(r)]);
  }
  return failures;
}

// ---- ranks as processes --------------------------------------------------------------------

bool ProcessResult::ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0 && output.empty(); }

namespace {


// Forks n ranks running fn. With an id, each child gets it at once; without one, the children
// are forked first and the parent hosts the rendezvous afterwards (horaGetUniqueId starts its
// listener thread) and sends each child the id over a socket pair. Forking while that thread runs
// could hand a child a lock the thread held at that instant: glibc's malloc guards against it,
// ASan's allocator does not, and TSan refuses new threads in such a child.
std::vector<ProcessResult> forkRanks(const horaUniqueId* given, int n, const RawFn& fn,
                                     const ProcessOptions& opts) {
  std::vector<ProcessResult> results;
  std::string idError;  // the parent could not host the rendezvous
  struct Child {
    pid_t pid;
    int fd;      // the child's report
    int idFd;    // where the parent sends the id (-1: the child has it)
    std::string out;
    bool eof = false, reaped = false, stopped = false;
    int status = 0;
  };
  std::vector<Child> kids;
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; ++r) {
    int p[2], q[2] = {-1, -1};
    if (pipe(p) != 0 || (!given && socketpair(AF_UNIX, SOCK_STREAM, 0, q) != 0)) abort();
    pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      for (const Child& k : kids) {  // the earlier children's ends: only the parent's
        close(k.fd);
        if (k.idFd >= 0) close(k.idFd);
      }
      horaUniqueId id{};
      std::string msg;
      if (given) {
        id = *given;
      } else {
        close(q[1]);
        size_t got = 0;
        while (got < sizeof id) {
          ssize_t k = read(q[0], reinterpret_cast<char*>(&id) + got, sizeof id - got);
          if (k < 0 && errno == EINTR) continue;
          if (k <= 0) break;
          got += static_cast<size_t>(k);
        }
        close(q[0]);
        if (got != sizeof id) msg = "no unique id from the parent";
      }
      if (msg.empty()) {
        try {
          msg = fn(id, r, n);
        } catch (const std::exception& e) {
          msg = std::string("exception: ") + e.what();
        }
      }
      size_t off = 0;
      while (off < msg.size()) {
        ssize_t k = write(p[1], msg.data() + off, msg.size() - off);
        if (k <= 0) break;
        off += static_cast<size_t>(k);
      }
      _exit(msg.empty() ? 0 : 1);
    }
    close(p[1]);
    if (q[0] >= 0) close(q[0]);
    kids.push_back(Child{pid, p[0], q[1], "", false, false, false, 0});
  }
  if (!given) {
    horaUniqueId id;
    const bool ok = horaGetUniqueId(&id) == horaSuccess;
    for (Child& k : kids) {
      // A child that died before reading costs only its own result (its status says why), not
      // a SIGPIPE for the whole test binary; one without an id reads EOF and says so.
      if (ok) (void)send(k.idFd, &id, sizeof id, MSG_NOSIGNAL);
      close(k.idFd);
      k.idFd = -1;
    }
    if (!ok) idError = std::string("horaGetUniqueId: ") + horaGetLastError(nullptr);
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opts.hangGuardSeconds * kSanitizerScale);
  bool killedAll = false;
  for (;;) {
    bool pending = false;
    for (Child& k : kids) {
      if (!k.eof) {
        pending = true;
        pollfd pf{k.fd, POLLIN, 0};
        if (poll(&pf, 1, 0) > 0) {
          char buf[4096];
          ssize_t got = read(k.fd, buf, sizeof buf);
          if (got > 0) k.out.append(buf, static_cast<size_t>(got));
          else k.eof = true;
        }
      }
      if (!k.reaped) {
        pending = true;
        int st = 0;
        if (waitpid(k.pid, &st, WNOHANG | WUNTRACED) == k.pid) {
          if (WIFSTOPPED(st)) k.stopped = true;
          else {
            k.status = st;
            k.reaped = true;
          }
        }
      }
    }
    if (!pending) break;
    bool othersDone = true;
    for (const Child& k : kids)
      if (!k.reaped && !k.stopped) othersDone = false;
    if (othersDone)
      for (Child& k : kids)
        if (k.stopped && !k.reaped) kill(k.pid, SIGKILL);
    if (!killedAll && std::chrono::steady_clock::now() > deadline) {
      for (Child& k : kids)
        if (!k.reaped) kill(k.pid, SIGKILL);
      killedAll = true;
    }
    usleep(2000);
  }
  for (size_t r = 0; r < kids.size(); ++r) {
    close(kids[r].fd);
    std::string out = kids[r].out;
    if (killedAll && out.empty()) out = "hung: killed by the test's guard";
    results.push_back(ProcessResult{static_cast<int>(r), kids[r].status, out});
  }
  if (!idError.empty()) results.push_back(ProcessResult{-1, -1, idError});  // never ok()
  return results;
}

}  // namespace

std::vector<ProcessResult> runRawProcesses(int n, const RawFn& fn, const ProcessOptions& opts) {
  return forkRanks(nullptr, n, fn, opts);
}

std::vector<ProcessResult> runRawProcessesWithId(const horaUniqueId& id, int n, const RawFn& fn,
                                                 const ProcessOptions& opts) {
  return forkRanks(&id, n, fn, opts);
}

std::vector<ProcessResult> runProcesses(int n, const RankFn& fn, const ProcessOptions& opts) {
  return runRawProcesses(
      n,
      [&](const horaUniqueId& id, int r, int size) -> std::string {
        horaComm_t comm = nullptr;
        horaConfig_t cfg = HORA_CONFIG_INITIALIZER;
        if (opts.timeoutMs > 0) cfg.timeoutMs = opts.timeoutMs;
        if (horaCommInitRankConfig(&comm, size, id, r, &cfg) != horaSuccess)
          return std::string("init: ") + horaGetLastError(nullptr);
        std::string s = fn(comm, r, size);
        horaResult_t async = horaSuccess;
        horaCommGetAsyncError(comm, &async);
        if (async == horaSuccess) horaCommDestroy(comm);
        else horaCommAbort(comm);
        return s;
      },
      opts);
}

std::string describe(const std::vector<ProcessResult>& rs) {
  std::string s;
  for (const ProcessResult& r : rs) {
    s += "rank " + std::to_string(r.rank) + ": ";
    if (WIFEXITED(r.status)) s += "exit " + std::to_string(WEXITSTATUS(r.status));
    else if (WIFSIGNALED(r.status)) s += "signal " + std::to_string(WTERMSIG(r.status));
    s += r.output.empty() ? "" : " (" + r.output + ")";
    s += "\n";
  }
  return s;
}

// ---- typed data ----------------------------------------------------------------------------

size_t typeSize(horaDataType_t t) { return dataTypeSize(static_cast<DataType>(t)); }
const char* typeName(horaDataType_t t) { return dataTypeName(static_cast<DataType>(t)); }
const char* opName(horaRedOp_t op) {
  return static_cast<int>(op) < horaNumOps ? redOpName(static_cast<RedOp>(op)) : "premulsum";
}
bool isFloat(horaDataType_t t) { return isFloating(static_cast<DataType>(t)); }

static bool isFp8(horaDataType_t t) { return t == horaFloat8e4m3 || t == horaFloat8e5m2; }

double inputValue(horaDataType_t t, horaRedOp_t op, int rank, size_t i) {
  const long h = static_cast<long>((static_cast<size_t>(rank) * 7 + i * 13 + 3) % 11);
  if (!isFloat(t)) {
    bool sgn = isSigned(static_cast<DataType>(t));
    return static_cast<double>(sgn ? h - 5 : h);
  }
  if (op == horaProd) {
    static const double v[4] = {1, 2, -1, 0.5};
    return v[(static_cast<size_t>(rank) + i) % 4];
  }
  if (isFp8(t)) return static_cast<double>(h % 2);  // partial sums of up to 8 ranks stay exact
  return static_cast<double>(h % 5) - 2;             // [-2, 2]
}

double premulScalar(horaDataType_t t, int rank) {
  if (!isFloat(t)) return static_cast<double>(rank % 3 + 1);
  if (isFp8(t)) return 1.0;
  static const double v[4] = {2, 1, -1, 0.5};
  return v[rank % 4];
}

template <class T>
static void put(void* base, size_t i, T v) {
  memcpy(static_cast<uint8_t*>(base) + i * sizeof(T), &v, sizeof v);
}
template <class T>
static T get(const void* base, size_t i) {
  T v;
  memcpy(&v, static_cast<const uint8_t*>(base) + i * sizeof(T), sizeof v);
  return v;
}

void store(horaDataType_t t, void* base, size_t i, double v) {
  switch (t) {
    case horaInt8: put<int8_t>(base, i, static_cast<int8_t>(static_cast<int64_t>(v))); break;
    case horaUint8: put<uint8_t>(base, i, static_cast<uint8_t>(static_cast<int64_t>(v))); break;
    case horaInt32: put<int32_t>(base, i, static_cast<int32_t>(static_cast<int64_t>(v))); break;
    case horaUint32: put<uint32_t>(base, i, static_cast<uint32_t>(static_cast<int64_t>(v))); break;
    case horaInt64: put<int64_t>(base, i, static_cast<int64_t>(v)); break;
    case horaUint64: put<uint64_t>(base, i, static_cast<uint64_t>(static_cast<int64_t>(v))); break;
    case horaFloat16: put<uint16_t>(base, i, kernels::floatToHalf(static_cast<float>(v))); break;
    case horaBfloat16: put<uint16_t>(base, i, kernels::floatToBfloat16(static_cast<float>(v))); break;
    case horaFloat8e4m3: put<uint8_t>(base, i, kernels::floatToFp8e4m3(static_cast<float>(v))); break;
    case horaFloat8e5m2: put<uint8_t>(base, i, kernels::floatToFp8e5m2(static_cast<float>(v))); break;
    case horaFloat32: put<float>(base, i, static_cast<float>(v)); break;
    case horaFloat64: put<double>(base, i, v); break;
    default: break;
  }
}

double load(horaDataType_t t, const void* base, size_t i) {
  switch (t) {
    case horaInt8: return get<int8_t>(base, i);
    case horaUint8: return get<uint8_t>(base, i);
    case horaInt32: return get<int32_t>(base, i);
    case horaUint32: return get<uint32_t>(base, i);
    case horaInt64: return static_cast<double>(get<int64_t>(base, i));
    case horaUint64: return static_cast<double>(get<uint64_t>(base, i));
    case horaFloat16: return kernels::halfToFloat(get<uint16_t>(base, i));
    case horaBfloat16: return kernels::bfloat16ToFloat(get<uint16_t>(base, i));
    case horaFloat8e4m3: return kernels::fp8e4m3ToFloat(get<uint8_t>(base, i));
    case horaFloat8e5m2: return kernels::fp8e5m2ToFloat(get<uint8_t>(base, i));
    case horaFloat32: return get<float>(base, i);
    case horaFloat64: return get<double>(base, i);
    default: return 0;
  }
}

// Integer reference in the type's own wrapping arithmetic.
template <class T>
static T intReduce(horaDataType_t t, horaRedOp_t op, bool premul, int n, size_t i) {
  using U = std::make_unsigned_t<T>;
  auto in = [&](int r) {
    U x = static_cast<U>(static_cast<T>(static_cast<int64_t>(inputValue(t, op, r, i))));
    if (premul) x = static_cast<U>(x * static_cast<U>(static_cast<int64_t>(premulScalar(t, r))));
    return x;
  };
  U acc = in(0);
  for (int r = 1; r < n; ++r) {
    U x = in(r);
    switch (op) {
      case horaProd: acc = static_cast<U>(acc * x); break;
      case horaMax: acc = static_cast<T>(acc) < static_cast<T>(x) ? x : acc; break;
      case horaMin: acc = static_cast<T>(x) < static_cast<T>(acc) ? x : acc; break;
      default: acc = static_cast<U>(acc + x); break;
    }
  }
  T res = static_cast<T>(acc);
  if (op == horaAvg) res = static_cast<T>(res / static_cast<T>(n));
  return res;
}

void expected(horaDataType_t t, horaRedOp_t op, bool premul, int n, size_t i, void* out) {
  switch (t) {
    case horaInt8: put(out, 0, intReduce<int8_t>(t, op, premul, n, i)); return;
    case horaUint8: put(out, 0, intReduce<uint8_t>(t, op, premul, n, i)); return;
    case horaInt32: put(out, 0, intReduce<int32_t>(t, op, premul, n, i)); return;
    case horaUint32: put(out, 0, intReduce<uint32_t>(t, op, premul, n, i)); return;
    case horaInt64: put(out, 0, intReduce<int64_t>(t, op, premul, n, i)); return;
    case horaUint64: put(out, 0, intReduce<uint64_t>(t, op, premul, n, i)); return;
    default: break;
  }
  // Floating inputs were chosen so that every partial result is exact: reduce in double.
  double acc = 0;
  for (int r = 0; r < n; ++r) {
    double x = inputValue(t, op, r, i) * (premul ? premulScalar(t, r) : 1.0);
    if (r == 0) acc = x;
    else if (op == horaProd) acc *= x;
    else if (op == horaMax) acc = std::max(acc, x);
    else if (op == horaMin) acc = std::min(acc, x);
    else acc += x;
  }
  if (op == horaAvg) {
    // The kernels divide once, in the type of their accumulator (double for double, else float).
    if (t == horaFloat64) acc = acc / n;
    else acc = static_cast<double>(static_cast<float>(acc) / static_cast<float>(n));
  }
  store(t, out, 0, acc);
}

std::string compare(horaDataType_t t, const void* got, const void* want, size_t count, const std::string& what) {
  size_t e = typeSize(t);
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* g = static_cast<const uint8_t*>(got) + i * e;
    const uint8_t* w = static_cast<const uint8_t*>(want) + i * e;
    if (memcmp(g, w, e) != 0) {
      char buf[256];
      snprintf(buf, sizeof buf, "%s: element %zu of %zu is %g, expected %g", what.c_str(), i, count, load(t, g, 0),
               load(t, w, 0));
      return buf;
    }
  }
  return "";
}

std::string joinAll(const std::vector<std::string>& failures) {
  std::string s;
  for (const auto& x : failures) s += x + "\n";
  return s;
}

bool forbidSyscall(uint32_t nr) {
  sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), code};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

}  // namespace hora::test
