// Tests of the collective algorithms (src/coll) and the executor (src/core) without sockets:
// every rank's program is built with coll::build and all ranks run together in ONE
// core::Executor::run over the in-memory transport of unit_memtransport.h (which poisons
// receive buffers, checks that in-flight send buffers are left alone, and defers matches at
// random). Results are compared bit for bit with an independent reference computed here.
// A few of the same programs also run over real tcp::Connection objects on socket pairs, to
// show that what the in-memory transport finds happens on the wire too.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "base/error.h"
#include "coll/collective.h"
#include "core/executor.h"
#include "core/program.h"
#include "kernels/cpu/reduce.h"
#include "transports/tcp/connection.h"
#include "unit_memtransport.h"
#include "unit_net.h"

using namespace hora;
using coll::Kind;
using std::chrono::milliseconds;

namespace {

// The executor's no-progress timeout for in-memory runs. All ranks run in one executor over
// the in-memory transport, so a round in which nothing moves is a deadlock (nothing else can
// ever move); a correct run never has such a round and never reads the clock for it. This
// value therefore only bounds how long a deadlock takes to be reported, whatever the load.
constexpr milliseconds kRunTimeout{2000};

// ---- plumbing ---------------------------------------------------------------------------------

std::vector<core::Scratch>& scratchPool() {
  static std::vector<core::Scratch> pool(32);  // reused across runs: stale bytes included
  return pool;
}

// Builds every rank's programs (calls[r] in order) and runs them all in one executor run.
void runAll(unit::MemWorld& w, const std::vector<std::vector<coll::Args>>& calls, const coll::Plan& plan,
            milliseconds timeout = kRunTimeout) {
  const int n = w.n;
  auto& pool = scratchPool();
  for (int r = 0; r < n; ++r) pool[static_cast<size_t>(r)].reset();
  std::vector<core::Program> progs;
  std::vector<int> owner;
  for (int r = 0; r < n; ++r)
    for (const coll::Args& a : calls[static_cast<size_t>(r)]) {
      progs.emplace_back();
      coll::build(a, coll::Topo{r, n}, plan, pool[static_cast<size_t>(r)], progs.back());
      owner.push_back(r);
    }
  std::vector<core::Job> jobs(progs.size());
  for (size_t k = 0; k < progs.size(); ++k) {
    jobs[k].program = &progs[k];
    jobs[k].conns = w.table[static_cast<size_t>(owner[k])].data();
    jobs[k].nranks = n;
  }
  core::Executor ex;
  ex.run(jobs, timeout);
  std::string why;
  if (!w.quiet(&why)) FAIL("after the run: " << why);
}

std::string planText(const coll::Plan& p) {
  return "chunk " + std::to_string(p.chunkBytes) + " B, " + std::to_string(p.slots) + " slots";
}

const char* kindText(Kind k) { return coll::kindName(k); }

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// ---- types and reference arithmetic -------------------------------------------------------------

template <class T> struct DT;
template <> struct DT<int8_t> { static constexpr DataType v = DataType::Int8; };
template <> struct DT<uint8_t> { static constexpr DataType v = DataType::Uint8; };
template <> struct DT<int32_t> { static constexpr DataType v = DataType::Int32; };
template <> struct DT<uint32_t> { static constexpr DataType v = DataType::Uint32; };
template <> struct DT<int64_t> { static constexpr DataType v = DataType::Int64; };
template <> struct DT<uint64_t> { static constexpr DataType v = DataType::Uint64; };
template <> struct DT<float> { static constexpr DataType v = DataType::Float32; };
template <> struct DT<double> { static constexpr DataType v = DataType::Float64; };

// PreMulSum's factor of rank r.
template <class T>
kernels::Scalar scalarFor(int r) {
  kernels::Scalar s;
  if constexpr (std::is_integral_v<T>) {
    s.i = 3 * static_cast<int64_t>(r) - 5;
  } else {
    static const double f[] = {-1.0, -0.5, 0.5, 1.0, 2.0};
    s.f = f[r % 5];
  }
  return s;
}

// Inputs: integers use their full range (the reference wraps exactly, so any order of
// reduction gives the same bits); floating types use small integers (and for Prod, +-1, +-2)
// so that every partial result is exact whatever the order.
template <class T>
T inputValue(RedOp op, uint32_t seed, int r, size_t i) {
  uint64_t h = mix(seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(r) * 0x100000001b3ULL + i);
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(h);
  } else {
    if (op == RedOp::Prod) {
      static const T v[] = {T(-2), T(-1), T(1), T(2)};
      return v[h % 4];
    }
    return static_cast<T>(static_cast<int>(h % 17) - 8);
  }
}

template <class T>
T premul(T x, const kernels::Scalar& s) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<uint64_t>(static_cast<U>(x)) *
                          static_cast<uint64_t>(static_cast<U>(static_cast<T>(s.i))));
  } else {
    return static_cast<T>(x * static_cast<T>(s.f));
  }
}

template <class T>
T combine(RedOp op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case RedOp::Sum: case RedOp::Avg: case RedOp::PreMulSum:
        return static_cast<T>(static_cast<uint64_t>(static_cast<U>(a)) + static_cast<uint64_t>(static_cast<U>(b)));
      case RedOp::Prod:
        return static_cast<T>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<uint64_t>(static_cast<U>(b)));
      case RedOp::Max: return std::max(a, b);
      case RedOp::Min: return std::min(a, b);
    }
  } else {
    switch (op) {
      case RedOp::Sum: case RedOp::Avg: case RedOp::PreMulSum: return a + b;
      case RedOp::Prod: return a * b;
      case RedOp::Max: return std::max(a, b);
      case RedOp::Min: return std::min(a, b);
    }
  }
  return T();
}

template <class T>
T finish(RedOp op, T acc, int n) {
  if (op != RedOp::Avg) return acc;
  if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_signed_v<T>) return static_cast<T>(static_cast<int64_t>(acc) / n);  // truncates
    else return static_cast<T>(static_cast<uint64_t>(acc) / static_cast<uint64_t>(n));
  } else {
    return static_cast<T>(acc / static_cast<T>(n));
  }
}

// The reduction over ranks 0..n-1 of in[q][off + i].
template <class T>
T reference(RedOp op, const std::vector<std::vector<T>>& in, size_t idx) {
  const int n = static_cast<int>(in.size());
  T acc{};
  for (int q = 0; q < n; ++q) {
    T x = in[static_cast<size_t>(q)][idx];
    if (op == RedOp::PreMulSum) x = premul(x, scalarFor<T>(q));
    acc = q == 0 ? x : combine(op, acc, x);
  }
  return finish(op, acc, n);
}

const char* opText(RedOp op) {
  switch (op) {
    case RedOp::Sum: return "Sum";
    case RedOp::Prod: return "Prod";
    case RedOp::Max: return "Max";
    case RedOp::Min: return "Min";
    case RedOp::Avg: return "Avg";
    case RedOp::PreMulSum: return "PreMulSum";
  }
  return "?";
}

constexpr uint8_t kCanary = 0xA5;
constexpr size_t kPad = 16;  // elements of canary on each side of every buffer

// ---- one collective, all ranks, checked ---------------------------------------------------------

struct Case {
  Kind kind = Kind::AllReduce;
  int n = 1;
  size_t count = 0;
  bool inPlace = false;
  RedOp op = RedOp::Sum;
  int root = 0;
  coll::Plan plan;
  uint32_t seed = 1;
  double deferP = 0.5;
  bool eager = false;  // sends complete when posted (see unit_memtransport.h)
};

std::string caseText(const Case& c) {
  std::ostringstream s;
  s << kindText(c.kind) << " n=" << c.n << " count=" << c.count << (c.inPlace ? " in-place" : " out-of-place")
    << " op=" << opText(c.op) << " root=" << c.root << " " << planText(c.plan) << " seed=" << c.seed
    << " defer=" << c.deferP << (c.eager ? " eager sends" : " rendezvous sends");
  return s.str();
}

template <class T>
bool sameBits(const T* a, const T* b, size_t n, size_t* firstBad) {
  for (size_t i = 0; i < n; ++i)
    if (memcmp(a + i, b + i, sizeof(T)) != 0) {
      *firstBad = i;
      return false;
    }
  return true;
}

bool isCanary(const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (b[i] != kCanary) return false;
  return true;
}

template <class T>
std::string show(T v) {
  std::ostringstream s;
  if constexpr (sizeof(T) == 1) s << static_cast<int>(v);
  else s << v;
  return s.str();
}

// Runs case c with element type T and returns "" when every check passes, else what failed.
template <class T>
std::string runCase(const Case& c) {
  const int n = c.n;
  const size_t N = c.count, nN = N * static_cast<size_t>(n);
  size_t sendLen = N, recvLen = N;
  if (c.kind == Kind::AllGather) recvLen = nN;
  if (c.kind == Kind::ReduceScatter) sendLen = nN;

  struct Bufs {
    std::vector<T> a, b;  // a: send (or the only buffer in place); b: recv out of place
    T* send = nullptr;
    T* recv = nullptr;
    std::vector<T> input;  // sendLen elements
  };
  std::vector<Bufs> bufs(static_cast<size_t>(n));
  std::vector<std::vector<T>> inputs(static_cast<size_t>(n));
  std::vector<std::vector<coll::Args>> calls(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    Bufs& B = bufs[static_cast<size_t>(r)];
    B.input.resize(sendLen);
    for (size_t i = 0; i < sendLen; ++i) B.input[i] = inputValue<T>(c.op, c.seed, r, i);
    inputs[static_cast<size_t>(r)] = B.input;
    const size_t rN = static_cast<size_t>(r) * N;
    if (c.inPlace) {
      B.a.resize(std::max(sendLen, recvLen) + 2 * kPad);
      memset(B.a.data(), kCanary, B.a.size() * sizeof(T));
      T* base = B.a.data() + kPad;
      if (c.kind == Kind::AllGather) {
        B.recv = base;
        B.send = base + rN;
      } else if (c.kind == Kind::ReduceScatter) {
        B.send = base;
        B.recv = base + rN;
      } else {
        B.send = B.recv = base;
      }
    } else {
      B.a.resize(sendLen + 2 * kPad);
      B.b.resize(recvLen + 2 * kPad);
      memset(B.a.data(), kCanary, B.a.size() * sizeof(T));
      memset(B.b.data(), kCanary, B.b.size() * sizeof(T));
      B.send = B.a.data() + kPad;
      B.recv = B.b.data() + kPad;
    }
    if (sendLen) memcpy(B.send, B.input.data(), sendLen * sizeof(T));
    coll::Args a;
    a.kind = c.kind;
    a.sendbuf = B.send;
    a.recvbuf = B.recv;
    a.count = N;
    a.dtype = DT<T>::v;
    a.op = c.op;
    a.scalar = scalarFor<T>(r);
    a.root = c.root;
    calls[static_cast<size_t>(r)].push_back(a);
  }

  unit::MemWorld w(n, mix(c.seed) ^ static_cast<uint64_t>(n), c.deferP);
  w.eager = c.eager;
  runAll(w, calls, c.plan);

  std::ostringstream err;
  for (int r = 0; r < n; ++r) {
    const Bufs& B = bufs[static_cast<size_t>(r)];
    // Nothing outside the buffers was written.
    for (const std::vector<T>* v : {&B.a, &B.b}) {
      if (v->empty()) continue;
      const size_t inner = v->size() - 2 * kPad;
      if (!isCanary(v->data(), kPad * sizeof(T)) || !isCanary(v->data() + kPad + inner, kPad * sizeof(T)))
        err << "rank " << r << ": a write outside the buffer\n";
    }
    // Out of place, the input is never written.
    size_t bad = 0;
    if (!c.inPlace && !sameBits(B.send, B.input.data(), sendLen, &bad))
      err << "rank " << r << ": the send buffer was modified at element " << bad << "\n";

    std::vector<T> expect;
    const T* got = B.recv;
    size_t len = recvLen;
    switch (c.kind) {
      case Kind::AllReduce:
        expect.resize(N);
        for (size_t i = 0; i < N; ++i) expect[i] = reference(c.op, inputs, i);
        break;
      case Kind::AllGather:
        expect.resize(nN);
        for (int q = 0; q < n; ++q)
          std::copy(inputs[static_cast<size_t>(q)].begin(), inputs[static_cast<size_t>(q)].end(),
                    expect.begin() + static_cast<long>(static_cast<size_t>(q) * N));
        break;
      case Kind::ReduceScatter:
        expect.resize(N);
        for (size_t i = 0; i < N; ++i) expect[i] = reference(c.op, inputs, static_cast<size_t>(r) * N + i);
        break;
      case Kind::Broadcast:
        expect = inputs[static_cast<size_t>(c.root)];
        break;
      case Kind::Reduce:
        if (r == c.root) {
          expect.resize(N);
          for (size_t i = 0; i < N; ++i) expect[i] = reference(c.op, inputs, i);
        } else if (c.inPlace) {
          expect = B.input;  // a non-root's buffer is its input, untouched
        } else {
          if (!isCanary(B.recv, N * sizeof(T)))
            err << "rank " << r << ": a non-root's receive buffer was written by Reduce\n";
          len = 0;
        }
        break;
      default: break;
    }
    if (len && !sameBits(got, expect.data(), len, &bad))
      err << "rank " << r << ": element " << bad << " is " << show(got[bad]) << ", expected " << show(expect[bad])
          << "\n";
  }
  return err.str();
}

template <class T>
void check(const Case& c) {
  std::string e = runCase<T>(c);
  if (!e.empty()) FAIL(caseText(c) << "\n" << e);
}

std::vector<size_t> countsFor(int n, size_t many) {
  std::vector<size_t> v = {0, 1, 2, static_cast<size_t>(n - 1), static_cast<size_t>(n), static_cast<size_t>(n + 1),
                           1000, many};
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

const int kRankCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16};
const RedOp kAllOps[] = {RedOp::Sum, RedOp::Prod, RedOp::Max, RedOp::Min, RedOp::Avg, RedOp::PreMulSum};

coll::Plan plan(size_t chunkBytes, int slots) {
  coll::Plan p;
  p.chunkBytes = chunkBytes;
  p.slots = slots;
  return p;
}
const coll::Plan kSmall = plan(64, 4);       // 16 int32 per chunk: many chunks, slots reused
const coll::Plan kOneSlot = plan(64, 1);     // the least staging: every chunk waits for the last
const coll::Plan kOdd = plan(12, 2);         // 3 int32 per chunk
const coll::Plan kDefault = coll::Plan{};    // 512 KiB

// Every collective runs with rendezvous sends (a send completes only once its receive is
// posted), the strictest a transport may be; the switch stays to try eager sends by hand.
bool needsEager(Kind) { return false; }

// The int32 sweep of one kind: every op, every rank count of kRankCounts, counts 0, 1, 2, n-1,
// n, n+1, 1000 and one of many chunks (4099 elements in 64-byte chunks), in and out of place.
void int32Sweep(Kind kind, uint32_t seed, const coll::Plan& thePlan = kSmall) {
  for (int n : kRankCounts)
    for (size_t count : countsFor(n, 4099))
      for (bool inPlace : {false, true})
        for (RedOp op : kAllOps) {
          Case c;
          c.kind = kind;
          c.n = n;
          c.count = count;
          c.inPlace = inPlace;
          c.op = op;
          c.plan = thePlan;
          c.seed = seed++;
          c.eager = needsEager(kind);
          if (kind != Kind::Reduce) {
            check<int32_t>(c);
            continue;
          }
          // Every root for Sum; the ends and the middle for the other ops.
          for (int root = 0; root < n; ++root) {
            if (op != RedOp::Sum && root != 0 && root != n - 1 && root != n / 2) continue;
            c.root = root;
            check<int32_t>(c);
          }
        }
}

}  // namespace

// =================================================================================================
// The sweep
// =================================================================================================

TEST_CASE("collectives: AllReduce int32 sweep", "[coll]") { int32Sweep(Kind::AllReduce, 1); }
TEST_CASE("collectives: direct AllReduce int32 sweep", "[coll]") {
  coll::Plan direct = kSmall;
  direct.algo = coll::Algo::Direct;
  int32Sweep(Kind::AllReduce, 300000, direct);
}
TEST_CASE("collectives: recursive-doubling AllReduce int32 sweep", "[coll]") {
  coll::Plan rd = kSmall;
  rd.algo = coll::Algo::RecursiveDoubling;
  int32Sweep(Kind::AllReduce, 400000, rd);
}
TEST_CASE("collectives: Reduce int32 sweep (every root)", "[coll]") { int32Sweep(Kind::Reduce, 100000); }
TEST_CASE("collectives: ReduceScatter int32 sweep", "[coll]") {
  int32Sweep(Kind::ReduceScatter, 200000);
}

TEST_CASE("collectives: AllGather and Broadcast (every root)", "[coll]") {
  uint32_t seed = 300000;
  for (int n : kRankCounts)
    for (size_t count : countsFor(n, 4099))
      for (bool inPlace : {false, true}) {
        Case c;
        c.n = n;
        c.count = count;
        c.inPlace = inPlace;
        c.plan = kSmall;
        c.seed = seed++;
        c.kind = Kind::AllGather;
        check<int32_t>(c);
        c.kind = Kind::Broadcast;
        for (int root = 0; root < n; ++root) {
          c.root = root;
          check<int32_t>(c);
        }
      }
}

TEST_CASE("collectives: every plan (chunk sizes and slot counts)", "[coll]") {
  uint32_t seed = 400000;
  for (const coll::Plan& p : {kOneSlot, kOdd, kDefault, plan(4, 1), plan(4096, 3)})
    for (int n : {2, 3, 4, 7, 16})
      for (size_t count : {size_t(1), static_cast<size_t>(n + 1), size_t(257), size_t(1000), size_t(3001)})
        for (bool inPlace : {false, true}) {
          // One-element chunks: enough with the smaller counts (the executor's cost per round
          // grows with the number of pending local ops, so these get slow).
          if (p.chunkBytes < 12 && count > 257) continue;
          if (p.chunkBytes == 12 && count > 1000) continue;
          INFO(planText(p));
          Case c;
          c.n = n;
          c.count = count;
          c.inPlace = inPlace;
          c.plan = p;
          c.seed = seed++;
          for (RedOp op : {RedOp::Sum, RedOp::PreMulSum, RedOp::Avg}) {
            c.op = op;
            for (Kind k : {Kind::AllReduce, Kind::ReduceScatter}) {
              c.kind = k;
              c.eager = needsEager(k);
              check<int32_t>(c);
            }
            c.kind = Kind::Reduce;
            c.eager = false;
            for (int root : {0, n - 1, n / 2}) {
              c.root = root;
              check<int32_t>(c);
            }
          }
          c.op = RedOp::Sum;
          c.kind = Kind::AllGather;
          check<int32_t>(c);
          c.kind = Kind::Broadcast;
          for (int root : {0, 1 % n, n - 1}) {
            c.root = root;
            check<int32_t>(c);
          }
        }
}

TEST_CASE("collectives: large buffers with the default plan (several 512 KiB chunks)", "[coll]") {
  uint32_t seed = 500000;
  const size_t count = 300007;  // > 2 chunks of 131072 int32 per ring segment with n = 2
  for (int n : {2, 3})
    for (bool inPlace : {false, true}) {
      Case c;
      c.n = n;
      c.count = count;
      c.inPlace = inPlace;
      c.plan = kDefault;
      c.seed = seed++;
      c.deferP = 0.3;
      for (Kind k : {Kind::AllReduce, Kind::ReduceScatter, Kind::AllGather, Kind::Broadcast, Kind::Reduce}) {
        c.kind = k;
        c.eager = needsEager(k);
        c.root = n - 1;
        check<int32_t>(c);
      }
    }
}

TEST_CASE("collectives: float every op exact with small integer inputs", "[coll]") {
  uint32_t seed = 600000;
  for (int n : {1, 2, 3, 5, 8, 16})
    for (size_t count : countsFor(n, 2051))
      for (bool inPlace : {false, true})
        for (RedOp op : kAllOps) {
          Case c;
          c.n = n;
          c.count = count;
          c.inPlace = inPlace;
          c.op = op;
          c.plan = kSmall;
          c.seed = seed++;
          for (Kind k : {Kind::AllReduce, Kind::ReduceScatter, Kind::Reduce}) {
            c.kind = k;
            c.eager = needsEager(k);
            c.root = static_cast<int>(seed % static_cast<uint32_t>(n));
            check<float>(c);
          }
        }
}

TEST_CASE("collectives: other element sizes and signedness", "[coll]") {
  uint32_t seed = 700000;
  for (int n : {2, 3, 5})
    for (size_t count : {size_t(1), size_t(7), size_t(1000)})
      for (bool inPlace : {false, true})
        for (RedOp op : kAllOps) {
          Case c;
          c.n = n;
          c.count = count;
          c.inPlace = inPlace;
          c.op = op;
          c.plan = kSmall;
          c.seed = seed++;
          c.root = n - 1;
          for (Kind k : {Kind::AllReduce, Kind::ReduceScatter, Kind::Reduce, Kind::AllGather}) {
            c.kind = k;
            c.eager = needsEager(k);
            check<int8_t>(c);
            check<uint8_t>(c);
            check<uint32_t>(c);
            check<int64_t>(c);
            check<uint64_t>(c);
            check<double>(c);
          }
        }
}

TEST_CASE("collectives: half-precision spot check", "[coll]") {
  // Float16 and bfloat16 sums of small integers are exact at every step.
  for (DataType dt : {DataType::Float16, DataType::Bfloat16})
    for (bool inPlace : {false, true})
      for (Kind kind : {Kind::AllReduce, Kind::ReduceScatter, Kind::Reduce}) {
        const int n = 4, root = 2;
        const size_t N = 1000, sendLen = kind == Kind::ReduceScatter ? N * n : N;
        auto toBits = [&](float f) { return dt == DataType::Float16 ? kernels::floatToHalf(f) : kernels::floatToBfloat16(f); };
        auto toFloat = [&](uint16_t b) { return dt == DataType::Float16 ? kernels::halfToFloat(b) : kernels::bfloat16ToFloat(b); };
        std::vector<std::vector<uint16_t>> send(n), recv(n);
        std::vector<std::vector<coll::Args>> calls(n);
        for (int r = 0; r < n; ++r) {
          send[r].resize(sendLen);
          for (size_t i = 0; i < sendLen; ++i) send[r][i] = toBits(static_cast<float>(static_cast<int>((i * 7 + r * 3) % 19) - 9));
          recv[r].assign(N, 0xFFFF);
          coll::Args a;
          a.kind = kind;
          a.sendbuf = send[r].data();
          a.recvbuf = inPlace ? (kind == Kind::ReduceScatter ? send[r].data() + r * N : send[r].data()) : recv[r].data();
          a.count = N;
          a.dtype = dt;
          a.op = RedOp::Sum;
          a.root = root;
          calls[r].push_back(a);
        }
        std::vector<std::vector<uint16_t>> orig = send;
        unit::MemWorld w(n, 7, 0.5);
        w.eager = needsEager(kind);
        runAll(w, calls, kSmall);
        for (int r = 0; r < n; ++r) {
          if (kind == Kind::Reduce && r != root) continue;
          const uint16_t* got = static_cast<const uint16_t*>(calls[r][0].recvbuf);
          size_t bad = N;
          for (size_t i = 0; i < N && bad == N; ++i) {
            size_t idx = kind == Kind::ReduceScatter ? r * N + i : i;
            float expect = 0;
            for (int q = 0; q < n; ++q) expect += toFloat(orig[q][idx]);
            if (toFloat(got[i]) != expect) bad = i;
          }
          INFO(dataTypeName(dt) << " " << kindText(kind) << (inPlace ? " in-place" : "") << " rank " << r);
          CHECK(bad == N);
        }
      }
}

// Regression: ringReduceScatter (src/coll/ring.cc) once made the receive into a staging slot wait for the
// send out of that slot at the same step (Deps{lastUse[i]}, the send just added). Every rank
// does the same, so rank r's receive waits for its send, which waits for rank r+1's receive,
// ... around the ring back to rank r: a wait cycle that only a transport buffering a whole
// chunk per link can break. The transport contract does not promise that (a TCP send cannot
// complete once the socket buffers are full and the peer is not reading: see the tcp test
// below), so ReduceScatter hangs until the timeout: out of place from 4 ranks (2 steps that
// forward a partial sum), in place from 3 ranks (the last step receives into a slot), and in
// place with PreMulSum from 2 ranks (step 0 sends the scaled input out of the same slot).
TEST_CASE("collectives: ReduceScatter with rendezvous sends", "[coll]") {
  Case c;
  c.kind = Kind::ReduceScatter;
  c.plan = kSmall;
  c.deferP = 0;
  c.eager = false;
  SECTION("4 ranks out of place") {
    c.n = 4;
    c.count = 64;
  }
  SECTION("3 ranks in place") {
    c.n = 3;
    c.count = 64;
    c.inPlace = true;
  }
  SECTION("2 ranks in place with PreMulSum") {
    c.n = 2;
    c.count = 1;
    c.inPlace = true;
    c.op = RedOp::PreMulSum;
  }
  std::string failure;
  try {
    failure = runCase<int32_t>(c);
  } catch (const Error& e) {
    failure = e.what();
  }
  INFO(caseText(c));
  CHECK(failure == "");
}

// =================================================================================================
// The same programs over real TCP connections (socket pairs), whose sends complete only as far
// as the socket buffers absorb them (about 200 KiB here, less than one 512 KiB chunk)
// =================================================================================================

namespace {

struct TcpWorld {
  int n;
  std::vector<std::unique_ptr<tcp::Connection>> conns;  // [rank * n + peer]
  std::vector<std::vector<transport::Connection*>> table;
  explicit TcpWorld(int nranks) : n(nranks), conns(static_cast<size_t>(n * n)) {
    table.assign(static_cast<size_t>(n), std::vector<transport::Connection*>(static_cast<size_t>(n), nullptr));
    for (int r = 0; r < n; ++r)
      for (int p = r + 1; p < n; ++p) {
        auto sp = unit::socketPair();
        std::vector<Fd> a, b;
        a.push_back(std::move(sp.first));
        b.push_back(std::move(sp.second));
        auto& cr = conns[static_cast<size_t>(r * n + p)];
        auto& cp = conns[static_cast<size_t>(p * n + r)];
        cr = std::make_unique<tcp::Connection>(std::move(a), "rank " + std::to_string(p));
        cp = std::make_unique<tcp::Connection>(std::move(b), "rank " + std::to_string(r));
        table[static_cast<size_t>(r)][static_cast<size_t>(p)] = cr.get();
        table[static_cast<size_t>(p)][static_cast<size_t>(r)] = cp.get();
      }
  }
};

// Runs one int32 Sum collective on n ranks over socket pairs; "" or what went wrong.
std::string runOverTcp(Kind kind, int n, size_t count, milliseconds timeout = milliseconds(20000)) {
  TcpWorld w(n);
  const size_t sendLen = kind == Kind::ReduceScatter ? count * n : count;
  const size_t recvLen = kind == Kind::AllGather ? count * n : count;
  std::vector<std::vector<int32_t>> in(n), out(n);
  std::vector<core::Program> progs(n);
  std::vector<core::Job> jobs(n);
  auto& pool = scratchPool();
  for (int r = 0; r < n; ++r) {
    in[r].resize(sendLen);
    for (size_t i = 0; i < sendLen; ++i) in[r][i] = static_cast<int32_t>(mix(r * 1000003 + i));
    out[r].assign(recvLen, 0);
    coll::Args a;
    a.kind = kind;
    a.sendbuf = in[r].data();
    a.recvbuf = out[r].data();
    a.count = count;
    a.dtype = DataType::Int32;
    a.root = 1;
    pool[static_cast<size_t>(r)].reset();
    coll::build(a, coll::Topo{r, n}, kDefault, pool[static_cast<size_t>(r)], progs[r]);
    jobs[r].program = &progs[r];
    jobs[r].conns = w.table[static_cast<size_t>(r)].data();
    jobs[r].nranks = n;
  }
  core::Executor ex;
  try {
    // A no-progress timeout: a correct run moves bytes continuously; only a deadlock sits still.
    ex.run(jobs, timeout);
  } catch (const Error& e) {
    return e.what();
  }
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < recvLen; ++i) {
      uint32_t expect = 0;
      switch (kind) {
        case Kind::AllReduce: case Kind::Reduce:
          for (int q = 0; q < n; ++q) expect += static_cast<uint32_t>(in[q][i]);
          if (kind == Kind::Reduce && r != 1) expect = 0;
          break;
        case Kind::ReduceScatter:
          for (int q = 0; q < n; ++q) expect += static_cast<uint32_t>(in[q][r * count + i]);
          break;
        case Kind::AllGather: expect = static_cast<uint32_t>(in[i / count][i % count]); break;
        case Kind::Broadcast: expect = static_cast<uint32_t>(in[1][i]); break;
        default: break;
      }
      if (static_cast<uint32_t>(out[r][i]) != expect)
        return "rank " + std::to_string(r) + ": wrong value at element " + std::to_string(i);
    }
  return "";
}

}  // namespace

TEST_CASE("tcp: collectives over socket pairs with 512 KiB chunks", "[coll][tcp]") {
  const int n = 4;
  const size_t chunkElems = kDefault.chunkBytes / 4;
  CHECK(runOverTcp(Kind::AllReduce, n, n * chunkElems * 2 + 3) == "");
  CHECK(runOverTcp(Kind::AllGather, n, chunkElems + 5) == "");
  CHECK(runOverTcp(Kind::Broadcast, n, chunkElems * 3) == "");
  CHECK(runOverTcp(Kind::Reduce, n, chunkElems * 3) == "");
}

// Regression: the ReduceScatter wait cycle above (ring.cc: a slot's receive waited for the same slot's
// send) over the real TCP transport: with a chunk larger than what the socket buffers absorb,
// no send of the forwarding step can complete, no receive is posted, and the call hangs until
// the timeout ("timed out after 5000 ms without progress waiting for sending a message of
// 524288 bytes ..."). With n = 4 and one 512 KiB chunk per block.
TEST_CASE("tcp: ReduceScatter over socket pairs with 512 KiB chunks", "[coll][tcp]") {
  CHECK(runOverTcp(Kind::ReduceScatter, 4, kDefault.chunkBytes / 4, milliseconds(5000)) == "");
}

// =================================================================================================
// Determinism
// =================================================================================================

TEST_CASE("allreduce: float sums with non-integer inputs are bit-identical on every rank", "[coll]") {
  for (int n : {2, 3, 5, 8, 16})
    for (bool inPlace : {false, true})
      for (const coll::Plan& p : {kSmall, kOdd, kDefault}) {
        const size_t N = 3000;
        std::vector<std::vector<float>> send(n), recv(n);
        std::vector<std::vector<coll::Args>> calls(n);
        std::vector<double> exact(N, 0.0);
        for (int r = 0; r < n; ++r) {
          send[r].resize(N);
          for (size_t i = 0; i < N; ++i) {
            uint64_t h = mix(static_cast<uint64_t>(r) * 1000003 + i);
            send[r][i] = static_cast<float>(static_cast<double>(h % 2000001) / 1000.0 - 1000.0) * 1.0001f;
            exact[i] += send[r][i];
          }
          recv[r].assign(N, -1.0f);
          coll::Args a;
          a.kind = Kind::AllReduce;
          a.sendbuf = send[r].data();
          a.recvbuf = inPlace ? send[r].data() : recv[r].data();
          a.count = N;
          a.dtype = DataType::Float32;
          a.op = RedOp::Sum;
          calls[r].push_back(a);
        }
        unit::MemWorld w(n, 11, 0.5);
        runAll(w, calls, p);
        INFO("n=" << n << (inPlace ? " in-place " : " out-of-place ") << planText(p));
        const float* r0 = static_cast<const float*>(calls[0][0].recvbuf);
        for (int r = 1; r < n; ++r)
          CHECK(memcmp(r0, calls[r][0].recvbuf, N * sizeof(float)) == 0);
        size_t far = 0;
        for (size_t i = 0; i < N; ++i)
          if (std::fabs(r0[i] - exact[i]) > 1e-2 * n) ++far;
        CHECK(far == 0);
      }
}

// =================================================================================================
// Send / Recv
// =================================================================================================

TEST_CASE("send/recv: a ring and a pairwise exchange in one run", "[p2p]") {
  for (int n : {2, 3, 4, 5, 8, 16})
    for (const coll::Plan& p : {kSmall, kDefault})
      for (size_t count : {size_t(0), size_t(1), size_t(17), size_t(1000)}) {
        const size_t ringN = count, pairN = count + 5;  // different tags for the two calls
        std::vector<std::vector<int32_t>> ringOut(n), ringIn(n), pairOut(n), pairIn(n);
        std::vector<std::vector<coll::Args>> calls(n);
        for (int r = 0; r < n; ++r) {
          ringOut[r].resize(ringN);
          pairOut[r].resize(pairN);
          for (size_t i = 0; i < ringN; ++i) ringOut[r][i] = static_cast<int32_t>(mix(r * 7919 + i));
          for (size_t i = 0; i < pairN; ++i) pairOut[r][i] = static_cast<int32_t>(mix(r * 104729 + i + 1));
          ringIn[r].assign(ringN + 4, 0x5A5A5A5A);
          pairIn[r].assign(pairN + 4, 0x5A5A5A5A);
        }
        auto args = [](Kind k, const void* s, void* rb, size_t cnt, int peer) {
          coll::Args a;
          a.kind = k;
          a.sendbuf = s;
          a.recvbuf = rb;
          a.count = cnt;
          a.dtype = DataType::Int32;
          a.peer = peer;
          return a;
        };
        const int pairs = n / 2 * 2;  // with odd n the last rank sits the exchange out
        for (int r = 0; r < n; ++r) {
          const int next = (r + 1) % n, prev = (r + n - 1) % n, partner = r ^ 1;
          // Every rank lists ring before pairwise, sends before receives: the order of
          // messages on a link is then the same on both of its ends.
          calls[r].push_back(args(Kind::Send, ringOut[r].data(), nullptr, ringN, next));
          if (r < pairs) calls[r].push_back(args(Kind::Send, pairOut[r].data(), nullptr, pairN, partner));
          calls[r].push_back(args(Kind::Recv, nullptr, ringIn[r].data(), ringN, prev));
          if (r < pairs) calls[r].push_back(args(Kind::Recv, nullptr, pairIn[r].data(), pairN, partner));
        }
        unit::MemWorld w(n, 5, 0.5);
        runAll(w, calls, p);
        INFO("n=" << n << " count=" << count << " " << planText(p));
        for (int r = 0; r < n; ++r) {
          const int prev = (r + n - 1) % n;
          CHECK(std::equal(ringOut[prev].begin(), ringOut[prev].end(), ringIn[r].begin()));
          CHECK(std::all_of(ringIn[r].begin() + static_cast<long>(ringN), ringIn[r].end(),
                            [](int32_t v) { return v == 0x5A5A5A5A; }));
          if (r < pairs) {
            CHECK(std::equal(pairOut[r ^ 1].begin(), pairOut[r ^ 1].end(), pairIn[r].begin()));
            CHECK(std::all_of(pairIn[r].begin() + static_cast<long>(pairN), pairIn[r].end(),
                              [](int32_t v) { return v == 0x5A5A5A5A; }));
          }
        }
      }
}

TEST_CASE("send/recv: chunking of a large message", "[p2p]") {
  // With 64-byte chunks a 1000-element message is 63 messages on the link, in order.
  const int n = 2;
  std::vector<int32_t> out(1000), in(1000, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(i * 3 + 1);
  std::vector<std::vector<coll::Args>> calls(n);
  coll::Args s;
  s.kind = Kind::Send;
  s.sendbuf = out.data();
  s.count = out.size();
  s.dtype = DataType::Int32;
  s.peer = 1;
  coll::Args r = s;
  r.kind = Kind::Recv;
  r.sendbuf = nullptr;
  r.recvbuf = in.data();
  r.peer = 0;
  calls[0].push_back(s);
  calls[1].push_back(r);
  unit::MemWorld w(n, 3, 0.5);
  runAll(w, calls, kSmall);
  CHECK(in == out);
  CHECK(w.channel(0, 1)->matched == 63);
  CHECK(w.channel(1, 0)->matched == 0);
  CHECK(w.bytesMoved == 4000);
}

// =================================================================================================
// Groups: several calls per rank in one run
// =================================================================================================

TEST_CASE("executor: several collectives per rank in one run", "[exec]") {
  // Five calls per rank in one run (a group): their messages share the links, in call order.
  for (bool withReduceScatter : {false, true})
    for (int n : {2, 3, 5, 8}) {
      const size_t N = 257;
      std::vector<std::vector<int32_t>> arIn(n), arOut(n), agIn(n), agOut(n), bc(n), rsIn(n), rsOut(n), rdOut(n);
      std::vector<std::vector<coll::Args>> calls(n);
      const int root = n - 1;
      for (int r = 0; r < n; ++r) {
        arIn[r].resize(N);
        agIn[r].resize(N);
        rsIn[r].resize(N * n);
        for (size_t i = 0; i < N; ++i) arIn[r][i] = static_cast<int32_t>(mix(r * 31 + i));
        for (size_t i = 0; i < N; ++i) agIn[r][i] = static_cast<int32_t>(mix(r * 37 + i + 99));
        for (size_t i = 0; i < N * n; ++i) rsIn[r][i] = static_cast<int32_t>(mix(r * 41 + i + 7));
        arOut[r].assign(N, 0);
        agOut[r].assign(N * n, 0);
        rsOut[r].assign(N, 0);
        rdOut[r].assign(N, 0);
        bc[r].assign(N, -1);
        if (r == root)
          for (size_t i = 0; i < N; ++i) bc[r][i] = static_cast<int32_t>(i * i);
        coll::Args a;
        a.dtype = DataType::Int32;
        a.count = N;
        a.kind = Kind::AllReduce;
        a.sendbuf = arIn[r].data();
        a.recvbuf = arOut[r].data();
        calls[r].push_back(a);
        a.kind = Kind::Broadcast;
        a.sendbuf = a.recvbuf = bc[r].data();
        a.root = root;
        calls[r].push_back(a);
        a.kind = Kind::AllGather;
        a.sendbuf = agIn[r].data();
        a.recvbuf = agOut[r].data();
        calls[r].push_back(a);
        if (withReduceScatter) {
          a.kind = Kind::ReduceScatter;
          a.sendbuf = rsIn[r].data();
          a.recvbuf = rsOut[r].data();
          calls[r].push_back(a);
        }
        a.kind = Kind::Reduce;
        a.root = 0;
        a.sendbuf = arIn[r].data();
        a.recvbuf = rdOut[r].data();
        calls[r].push_back(a);
      }
      unit::MemWorld w(n, 17, 0.5);
      w.eager = withReduceScatter && needsEager(Kind::ReduceScatter);
      for (const coll::Plan& p : {kSmall, kDefault}) {
        runAll(w, calls, p);
        INFO("n=" << n << " " << planText(p) << (withReduceScatter ? " with ReduceScatter" : ""));
        for (int r = 0; r < n; ++r) {
          size_t bad = 0;
          for (size_t i = 0; i < N; ++i) {
            uint32_t s = 0, t = 0;
            for (int q = 0; q < n; ++q) s += static_cast<uint32_t>(arIn[q][i]);
            for (int q = 0; q < n; ++q) t += static_cast<uint32_t>(rsIn[q][r * N + i]);
            if (arOut[r][i] != static_cast<int32_t>(s) || bc[r][i] != static_cast<int32_t>(i * i)) ++bad;
            if (withReduceScatter && rsOut[r][i] != static_cast<int32_t>(t)) ++bad;
            if (rdOut[r][i] != (r == 0 ? static_cast<int32_t>(s) : 0)) ++bad;
            for (int q = 0; q < n; ++q)
              if (agOut[r][q * N + i] != agIn[q][i]) ++bad;
          }
          CHECK(bad == 0);
        }
      }
    }
}

TEST_CASE("executor: local ops run after their dependencies", "[exec]") {
  // A hand-built chain a -> b -> c -> d of copies, added in reverse order, plus a sum of two
  // of them: only dependencies order them.
  std::vector<int32_t> a(100), b(100, 0), c(100, 0), d(100, 0), e(100, 0);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(i + 1);
  kernels::ReduceSpec copy;
  copy.dtype = DataType::Int32;
  copy.op = RedOp::Sum;
  core::Program prog;
  core::ProgramBuilder pb(prog);
  // Indices: 0: e = c + d (after 1 and 2); 1: d = c (after 2); 2: c = b (after 3); 3: b = a.
  pb.local(core::reduceAction(e.data(), c.data(), d.data(), 100, copy), core::Deps{1, 2});
  pb.local(core::reduceAction(d.data(), c.data(), nullptr, 100, copy), core::Deps{2});
  pb.local(core::reduceAction(c.data(), b.data(), nullptr, 100, copy), core::Deps{3});
  pb.local(core::reduceAction(b.data(), a.data(), nullptr, 100, copy));
  std::vector<transport::Connection*> none(1, nullptr);
  core::Job j;
  j.program = &prog;
  j.conns = none.data();
  j.nranks = 1;
  core::Executor ex;
  ex.run({j}, kRunTimeout);
  CHECK(d == a);
  for (size_t i = 0; i < a.size(); ++i) CHECK(e[i] == 2 * a[i]);
  // An empty program finishes at once.
  core::Program empty;
  j.program = &empty;
  ex.run({j}, kRunTimeout);
}

TEST_CASE("executor: a program that addresses a rank without a connection", "[exec]") {
  unit::MemWorld w(2);
  int32_t x = 5;
  core::Program prog;
  core::ProgramBuilder pb(prog);
  pb.send(0, &x, 4);  // rank 0 sending to itself: no connection
  core::Job j;
  j.program = &prog;
  j.conns = w.table[0].data();
  j.nranks = 2;
  core::Executor ex;
  try {
    ex.run({j}, kRunTimeout);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::Internal);
  }
  core::Program prog2;
  core::ProgramBuilder pb2(prog2);
  pb2.recv(5, &x, 4);  // out of range
  j.program = &prog2;
  try {
    ex.run({j}, kRunTimeout);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::Internal);
  }
}

TEST_CASE("executor: an aborted communicator stops a wait", "[exec]") {
  unit::MemWorld w(2);
  int32_t x = 0;
  core::Program prog;
  core::ProgramBuilder pb(prog);
  pb.recv(1, &x, 4);  // nobody sends
  std::atomic<bool> abort{true};
  core::Job j;
  j.program = &prog;
  j.conns = w.table[0].data();
  j.nranks = 2;
  j.abortFlag = &abort;
  core::Executor ex;
  try {
    ex.run({j}, kRunTimeout);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::InvalidUsage);
    CHECK(std::string(e.what()).find("abort") != std::string::npos);
  }
}

// =================================================================================================
// Mismatched calls are caught, never misread, and never hang
// =================================================================================================

TEST_CASE("mismatched calls across ranks fail instead of hanging", "[mismatch]") {
  const int n = 2;
  std::vector<int32_t> s0(200, 1), r0(200, 0), s1(200, 2), r1(200, 0);
  auto make = [](Kind k, const void* s, void* r, size_t count) {
    coll::Args a;
    a.kind = k;
    a.sendbuf = s;
    a.recvbuf = r;
    a.count = count;
    a.dtype = DataType::Int32;
    return a;
  };
  std::vector<std::vector<coll::Args>> calls(n);
  std::string expectIn;
  Errc expectCode = Errc::Remote;

  SECTION("AllReduce counts 100 and 101") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 100));
    calls[1].push_back(make(Kind::AllReduce, s1.data(), r1.data(), 101));
  }
  SECTION("AllReduce and AllGather") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 50));
    calls[1].push_back(make(Kind::AllGather, s1.data(), r1.data(), 50));
  }
  SECTION("another datatype") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 50));
    coll::Args a = make(Kind::AllReduce, s1.data(), r1.data(), 50);
    a.dtype = DataType::Float32;
    calls[1].push_back(a);
  }
  SECTION("another op") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 50));
    coll::Args a = make(Kind::AllReduce, s1.data(), r1.data(), 50);
    a.op = RedOp::Max;
    calls[1].push_back(a);
  }
  SECTION("another root") {
    coll::Args a = make(Kind::Broadcast, s0.data(), r0.data(), 50);
    a.root = 0;
    calls[0].push_back(a);
    a = make(Kind::Broadcast, s1.data(), r1.data(), 50);
    a.root = 1;
    calls[1].push_back(a);
    // Both think they are the root (or both think the other is): the sends meet no receive,
    // or the receives no send.
    expectCode = Errc::Timeout;
  }
  SECTION("one rank does not call at all") {
    calls[0].push_back(make(Kind::AllReduce, s0.data(), r0.data(), 100));
    expectCode = Errc::Timeout;
  }
  unit::MemWorld w(n, 1, 0.0);
  auto t0 = std::chrono::steady_clock::now();
  try {
    runAll(w, calls, kSmall, milliseconds(300));
    FAIL("the run succeeded");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == expectCode);
    if (expectCode == Errc::Remote) CHECK(std::string(e.what()).find("while waiting for") != std::string::npos);
    if (expectCode == Errc::Timeout) CHECK(std::string(e.what()).find("timed out") != std::string::npos);
  }
  // Only a guard against hangs (the timeout above is 300 ms).
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
}
