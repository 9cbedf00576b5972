// The machinery shared by the tests of the collective algorithms and the executor
// (test_algorithms.cc, test_executor.cc): every rank's program is built with coll::build and
// all ranks run together in ONE core::Executor::run over the in-memory transport of
// unit_memtransport.h (runAll). A Case is one collective on all ranks; runCase runs it and
// compares the results bit for bit with an independent reference computed here. The functions
// that are not templates are in unit_coll.cc.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <catch2/catch.hpp>

#include "coll/algorithm.h"
#include "coll/collective.h"
#include "coll/cost.h"
#include "core/program.h"
#include "kernels/cpu/reduce.h"
#include "unit_memtransport.h"

namespace unit {

// The library's names as the tests spell them (they say `using namespace hora`).
namespace coll = hora::coll;
namespace core = hora::core;
namespace kernels = hora::kernels;
using hora::DataType;
using hora::RedOp;
using hora::coll::Kind;
using std::chrono::milliseconds;

// The executor's no-progress timeout for in-memory runs. All ranks run in one executor over
// the in-memory transport, so a round in which nothing moves is a deadlock (nothing else can
// ever move); a correct run never has such a round and never reads the clock for it. This
// value therefore only bounds how long a deadlock takes to be reported, whatever the load.
inline constexpr milliseconds kRunTimeout{2000};

// ---- plumbing ---------------------------------------------------------------------------------

std::vector<core::Scratch>& scratchPool();

// Builds every rank's programs (calls[r] in order) and runs them all in one executor run.
// With `hosts` (each rank's host number), the ranks are laid out on those hosts (JobShape::layout).
void runAll(MemWorld& w, const std::vector<std::vector<coll::Args>>& calls, const coll::Plan& plan,
            milliseconds timeout = kRunTimeout, const std::vector<int>& hosts = {});

std::string planText(const coll::Plan& p);
const char* kindText(Kind k);
uint64_t mix(uint64_t x);

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

const char* opText(RedOp op);

inline constexpr uint8_t kCanary = 0xA5;
inline constexpr size_t kPad = 16;  // elements of canary on each side of every buffer

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
  std::vector<int> hosts;  // each rank's host (empty: one host)
};

std::string caseText(const Case& c);

template <class T>
bool sameBits(const T* a, const T* b, size_t n, size_t* firstBad) {
  for (size_t i = 0; i < n; ++i)
    if (memcmp(a + i, b + i, sizeof(T)) != 0) {
      *firstBad = i;
      return false;
    }
  return true;
}

bool isCanary(const void* p, size_t bytes);

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
  if (c.kind == Kind::AllGather || c.kind == Kind::Gather) recvLen = nN;  // (Gather: only the root's is used)
  if (c.kind == Kind::ReduceScatter || c.kind == Kind::Scatter) sendLen = nN;

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
      if (c.kind == Kind::AllGather || c.kind == Kind::Gather) {
        B.recv = base;
        B.send = base + rN;
      } else if (c.kind == Kind::ReduceScatter || c.kind == Kind::Scatter) {
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
  runAll(w, calls, c.plan, kRunTimeout, c.hosts);

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
      case Kind::Gather:
        if (r == c.root) {
          expect.resize(nN);
          for (int q = 0; q < n; ++q)
            std::copy(inputs[static_cast<size_t>(q)].begin(), inputs[static_cast<size_t>(q)].end(),
                      expect.begin() + static_cast<long>(static_cast<size_t>(q) * N));
        } else if (c.inPlace) {  // the vector as it was: canary around the block it sent
          T canary;
          memset(&canary, kCanary, sizeof canary);
          expect.assign(nN, canary);
          std::copy(B.input.begin(), B.input.end(), expect.begin() + static_cast<long>(static_cast<size_t>(r) * N));
          got = B.recv;
        } else {
          if (!isCanary(B.recv, nN * sizeof(T)))
            err << "rank " << r << ": a non-root's receive buffer was written by Gather\n";
          len = 0;
        }
        break;
      case Kind::Scatter: {
        // Block r of the root's input; in place, the rest of the vector as it was.
        const std::vector<T>& from = inputs[static_cast<size_t>(c.root)];
        const auto block = from.begin() + static_cast<long>(static_cast<size_t>(r) * N);
        if (c.inPlace) {
          expect = B.input;
          std::copy(block, block + static_cast<long>(N), expect.begin() + static_cast<long>(static_cast<size_t>(r) * N));
          got = B.send;
          len = nN;
        } else {
          expect.assign(block, block + static_cast<long>(N));
        }
        break;
      }
      default:  // a collective this checker has no expectation for must not pass unchecked
        err << "rank " << r << ": no expected result for " << coll::kindName(c.kind) << "\n";
        len = 0;
        break;
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

coll::Plan plan(size_t chunkBytes, int slots);
inline const coll::Plan kSmall = plan(64, 4);       // 16 int32 per chunk: many chunks, slots reused
inline const coll::Plan kOneSlot = plan(64, 1);     // the least staging: every chunk waits for the last
inline const coll::Plan kOdd = plan(12, 2);         // 3 int32 per chunk
inline const coll::Plan kDefault = coll::Plan{};    // 512 KiB

// The plan's algorithm when it implements the call's collective (the ring by default, or one a
// test names), else the first of the registry that implements it and runs without a shared
// stage: the in-memory transport has none.
inline coll::Plan planFor(const coll::Args& a, const coll::JobShape& t, coll::Plan p) {
  if (coll::algorithm(p.algo).implements(a.kind)) {
    // An algorithm of phases: the inner one the test names, or the planner's.
    if (!coll::algorithm(p.inner).implements(a.kind)) coll::algorithm(p.algo).refine(a, t, coll::Costs(), p);
    return p;
  }
  for (const coll::Algorithm* algo : coll::algorithms())
    if (algo->implements(a.kind) && !algo->unfit(a, t, false)) {
      p.algo = algo->id();
      return p;
    }
  FAIL("no algorithm implements " << coll::kindName(a.kind));
  return p;
}

// Half of a sweep's cases (by seed) run with eager sends (a send completes when posted, as a
// TCP send that fits the socket buffers does), the other half with rendezvous sends (complete
// only once the receive took the bytes, the strictest a transport may be): an algorithm must be
// right under both, and each lets different interleavings happen.
inline bool eagerFor(uint64_t seed) { return seed % 2 == 1; }

}  // namespace unit
