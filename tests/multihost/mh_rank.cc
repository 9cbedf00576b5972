// One rank of a multi-host test (tests/multihost/*.sh start one per rank, each in the network
// namespace of its host, with HORA_ROOT, HORA_SECRET, HORA_RANK and HORA_SIZE). It prints what
// the scripts check, one fact a line:
//   pid <rank> <pid>                       at start
//   link <rank> <peer> <transport>         for every peer, from the communicator
//   ran <rank> <collective>:<algo> <n> <t> ms  cases run exactly under that forced algorithm, in t ms
//   unfit <rank> <collective>:<algo> <why> the planner's refusal to force it here
//   wrong <rank> <text>                    a result that is not exact, or a failed call
//   error <rank> <text>                    the error that ended a call (modes loop, one)
//   done <rank>                            everything asked ran exactly
// Modes:
//   sweep   every collective x every algorithm of the registry that implements it (forced as
//           HORA_ALGO=collective:name would), a sample of dtypes and ops, in place and out,
//           every root; then Send/Recv between every pair
//   sample  a few collectives up to some MiB, chosen by the planner (for impaired links)
//   device  the same with device buffers (HORA_CUDA=emulate), without a stream and on one
//   loop C  AllReduce of C floats until a call fails; "looping <rank>" after the first call
//   one     one AllReduce of 1024 floats
//   large [C...]  collectives C (all by default) with 64 MiB buffers (the whole vector, or every
//           rank's part of it)
//   regcache  AllReduce from buffers freed and allocated again at the same address between calls
//           (malloc'd and mmap'd): the results stay exact, so no stale memory registration was
//           used; prints "regcache <rank> hits H misses M invalidations I caching 0|1" where the
//           ib transport is built
// Exit status: 0 all exact, 1 a wrong result or an unexpected failure, 3 a call failed
// (loop, one), 2 bad usage or no communicator.
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "coll/algorithm.h"
#include "collective_check.h"
#include "comm/comm.h"
#include "gpu/cuda.h"
#include "harness.h"
#ifdef HORA_TEST_IB
#include "transports/ib/device.h"
#include "transports/ib/mrcache.h"
#endif

using namespace hora;
using namespace hora::test;

namespace {

int gRank = -1;

void say(const char* what, const std::string& text) {
  printf("%s %d %s\n", what, gRank, text.c_str());
  fflush(stdout);
}

coll::Kind kindOf(Coll c) {
  switch (c) {
    case Coll::AllReduce: return coll::Kind::AllReduce;
    case Coll::Broadcast: return coll::Kind::Broadcast;
    case Coll::Reduce: return coll::Kind::Reduce;
    case Coll::AllGather: return coll::Kind::AllGather;
    case Coll::ReduceScatter: return coll::Kind::ReduceScatter;
    case Coll::AllToAll: return coll::Kind::AllToAll;
    case Coll::Barrier: return coll::Kind::Barrier;
    case Coll::Gather: return coll::Kind::Gather;
    case Coll::Scatter: return coll::Kind::Scatter;
  }
  return coll::Kind::Barrier;
}

// The cases of one collective: a sample of dtypes and ops (PreMulSum included), small and
// pipelined counts, in place and out, every root.
std::vector<Case> casesOf(Coll c, int n) {
  if (c == Coll::Barrier) return {Case{c, horaUint8, horaSum, 0, false, 0}};
  const bool reduces = c == Coll::AllReduce || c == Coll::Reduce || c == Coll::ReduceScatter;
  const bool rooted = rootedColl(c);
  struct TypeOp {
    horaDataType_t t;
    horaRedOp_t op;
  };
  const TypeOp sample[] = {{horaFloat32, horaSum}, {horaInt8, horaMax},   {horaUint64, horaProd},
                           {horaBfloat16, horaAvg}, {horaFloat16, horaMin}, {horaFloat64, horaNumOps}};
  const size_t un = static_cast<size_t>(n);
  std::vector<Case> out;
  for (int root = 0; root < (rooted ? n : 1); ++root)
    for (const TypeOp& s : sample) {
      if (!reduces && s.op != horaSum && s.t != horaInt8) continue;  // the data movers: a few types
      for (size_t count : {size_t(1), size_t(7), 1000 + un})
        for (bool inPlace : {false, true})
          out.push_back(Case{c, s.t, reduces ? s.op : horaSum, count, inPlace, root});
    }
  // Several pipeline chunks per rank's segment (with HORA_CHUNK_BYTES=64K, as the tests set).
  const bool perRank = c == Coll::AllToAll || c == Coll::AllGather || c == Coll::ReduceScatter || c == Coll::Gather ||
                       c == Coll::Scatter;
  const size_t big = (1u << 20) / (perRank ? un : 1) + 3;
  out.push_back(Case{c, horaFloat32, reduces ? horaAvg : horaSum, big, false, rooted ? n - 1 : 0});
  out.push_back(Case{c, horaInt32, horaSum, big / 2 + 1, true, 0});
  return out;
}

// Every peer's rank-dependent message, of a length that differs by pair, both ways in one group.
std::string sendRecvEveryPair(horaComm_t comm, int rank, int n) {
  const horaDataType_t t = horaBfloat16;
  const size_t E = typeSize(t);
  auto countFor = [](int a, int b) { return size_t(1 + 4099 * (a + 1) * (b + 1)); };
  auto value = [](int from, int to, size_t i) { return inputValue(horaBfloat16, horaSum, from * 16 + to, i); };
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(n)), in(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    const size_t count = countFor(rank < p ? rank : p, rank < p ? p : rank);
    out[static_cast<size_t>(p)].resize(count * E);
    in[static_cast<size_t>(p)].assign(count * E, 0xcd);
    for (size_t i = 0; i < count; ++i) store(t, out[static_cast<size_t>(p)].data(), i, value(rank, p, i));
  }
  horaGroupStart();
  for (int p = 0; p < n; ++p) {
    const size_t count = out[static_cast<size_t>(p)].size() / E;
    horaSend(out[static_cast<size_t>(p)].data(), count, t, p, comm, nullptr);
    horaRecv(in[static_cast<size_t>(p)].data(), count, t, p, comm, nullptr);
  }
  if (horaGroupEnd() != horaSuccess) return std::string("Send/Recv every pair: ") + horaGetLastError(comm);
  for (int p = 0; p < n; ++p) {
    const size_t count = in[static_cast<size_t>(p)].size() / E;
    std::vector<uint8_t> want(count * E);
    for (size_t i = 0; i < count; ++i) store(t, want.data(), i, value(p, rank, i));
    std::string e = compare(t, in[static_cast<size_t>(p)].data(), want.data(), count,
                            "Send/Recv from rank " + std::to_string(p));
    if (!e.empty()) return e;
  }
  return "";
}

int sweep(horaComm_t comm, int rank, int n) {
  horaComm* c = comm;
  int wrong = 0;
  for (Coll k : allColls()) {
    const coll::Kind kind = kindOf(k);
    for (const coll::Algorithm* algo : coll::algorithms()) {
      if (!algo->implements(kind)) continue;
      // As HORA_ALGO=collective:name: this collective forced to it; no cached plan survives.
      c->planner.forced.fill(-1);
      c->planner.forced[static_cast<size_t>(kind)] = static_cast<int>(algo->id());
      c->plans.entries.fill({});
      const std::string pair = format("%s:%s", coll::kindName(kind), algo->name());
      int ran = 0;
      std::string refused;
      const auto t0 = std::chrono::steady_clock::now();
      for (const Case& cs : casesOf(k, n)) {
        // What the planner would refuse, not run: the same question it asks, without the
        // buffers (their inputs take long to make for the large cases).
        coll::Args a;
        a.kind = kind;
        a.count = cs.count;
        a.dtype = static_cast<DataType>(cs.dtype);
        a.root = cs.root;
        if (const char* why = algo->unfit(a, c->shape, true)) {
          if (refused.empty()) refused = why;
          continue;
        }
        std::string e = runCase(comm, rank, n, cs);
        // The planner refuses before anything is sent, alike on every rank: not this case.
        if (e.find("HORA_ALGO forces") != std::string::npos && e.find("communicator has failed") == std::string::npos) {
          if (refused.empty()) refused = e;
          continue;
        }
        if (!e.empty()) {
          say("wrong", pair + ": " + e);
          if (c->asyncError() != Errc::Success) return 1;  // the communicator has failed: stop
          ++wrong;
          continue;
        }
        ++ran;
      }
      const long ms = static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
      say("ran", pair + " " + std::to_string(ran) + " " + std::to_string(ms) + " ms");
      if (!refused.empty()) say("unfit", pair + " " + refused);
    }
  }
  c->planner.forced.fill(-1);
  c->plans.entries.fill({});
  std::string e = sendRecvEveryPair(comm, rank, n);
  if (!e.empty()) {
    say("wrong", e);
    ++wrong;
  } else {
    say("ran", "Send/Recv:p2p 1");
  }
  return wrong ? 1 : 0;
}

std::vector<Case> sampleCases(int n) {
  const size_t MiB = size_t(1) << 20;
  return {
      {Coll::AllReduce, horaFloat32, horaSum, 1000, false, 0},
      {Coll::AllReduce, horaFloat32, horaSum, 2 * MiB + 1, false, 0},  // 8 MiB
      {Coll::AllReduce, horaBfloat16, horaAvg, MiB, true, 0},
      {Coll::Broadcast, horaInt8, horaSum, 3 * MiB + 7, false, n - 1},
      {Coll::Reduce, horaInt32, horaMax, MiB / 2 + 5, true, n / 2},
      {Coll::AllGather, horaFloat64, horaSum, MiB / 8 / static_cast<size_t>(n) * 3 + 1, false, 0},
      {Coll::ReduceScatter, horaFloat16, horaMin, MiB / static_cast<size_t>(n), false, 0},
      {Coll::AllToAll, horaUint8, horaSum, 2 * MiB / static_cast<size_t>(n) + 3, true, 0},
      {Coll::Gather, horaInt32, horaSum, MiB / 4 / static_cast<size_t>(n) + 5, false, n / 2},
      {Coll::Scatter, horaFloat32, horaSum, MiB / 4 / static_cast<size_t>(n) + 3, true, n - 1},
  };
}

int sample(horaComm_t comm, int rank, int n) {
  for (const Case& cs : sampleCases(n)) {
    std::string e = runCase(comm, rank, n, cs);
    if (!e.empty()) {
      say("wrong", e);
      return 1;
    }
    say("ran", describe(cs));
  }
  std::string e = sendRecvEveryPair(comm, rank, n);
  if (!e.empty()) {
    say("wrong", e);
    return 1;
  }
  return 0;
}

// The sample with every buffer in device memory (the emulated GPU under HORA_CUDA=emulate),
// without a stream and on one: staged through host blocks, the copies ops of the calls' programs.
int onDevice(horaComm_t comm, int rank, int n) {
  void* stream = cuda::streamCreate();
  for (void* s : {static_cast<void*>(nullptr), stream})
    for (const Case& cs : sampleCases(n)) {
      const std::string e = runCase(comm, rank, n, cs, Memory{true, s});
      if (!e.empty()) {
        say("wrong", describe(cs) + (s ? " on a stream: " : ": ") + e);
        return 1;
      }
      say("ran", describe(cs) + (s ? " on a stream" : ""));
    }
  cuda::streamDestroy(stream);
  return 0;
}

int large(horaComm_t comm, int rank, int n, const std::vector<std::string>& only) {
  const size_t MiB = size_t(1) << 20;
  const size_t un = static_cast<size_t>(n);
  const Case cases[] = {
      {Coll::AllReduce, horaFloat32, horaSum, 16 * MiB, false, 0},
      {Coll::Broadcast, horaInt8, horaSum, 64 * MiB, false, n - 1},
      {Coll::Reduce, horaInt32, horaSum, 16 * MiB, false, 0},
      {Coll::AllGather, horaUint8, horaSum, 64 * MiB / un, false, 0},
      {Coll::ReduceScatter, horaFloat32, horaSum, 16 * MiB / un, false, 0},
      {Coll::AllToAll, horaFloat64, horaSum, 8 * MiB / un, false, 0},
  };
  int wrong = 0;
  for (const Case& cs : cases) {
    if (!only.empty() && std::find(only.begin(), only.end(), collName(cs.coll)) == only.end()) continue;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string e = runCase(comm, rank, n, cs);
    if (!e.empty()) {
      say("wrong", describe(cs) + ": " + e);
      ++wrong;
      continue;
    }
    const long ms = static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
    say("ran", describe(cs) + " 1 " + std::to_string(ms) + " ms");
  }
  return wrong ? 1 : 0;
}

// One AllReduce (sum of float32) of `count` elements in buf, checked: every element is
// rank-sum of (rank + 1) * (i % 61 + round).
std::string checkedAllReduce(horaComm_t comm, float* buf, size_t count, int rank, int n, int round) {
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((rank + 1) * static_cast<int>(i % 61 + round));
  if (horaAllReduce(buf, buf, count, horaFloat32, horaSum, comm, nullptr) != horaSuccess)
    return std::string("AllReduce failed: ") + horaGetLastError(comm);
  const int ranks = n * (n + 1) / 2;
  for (size_t i = 0; i < count; ++i)
    if (buf[i] != static_cast<float>(ranks * static_cast<int>(i % 61 + round)))
      return "round " + std::to_string(round) + ": element " + std::to_string(i) + " is " + std::to_string(buf[i]) +
             ", expected " + std::to_string(ranks * static_cast<int>(i % 61 + round));
  return "";
}

int regcache(horaComm_t comm, int rank, int n) {
  const size_t count = size_t(1) << 21;  // 8 MiB
  const size_t bytes = count * sizeof(float);
  int wrong = 0;
  auto check = [&](const std::string& what, const std::string& e) {
    if (e.empty()) return;
    say("wrong", what + ": " + e);
    ++wrong;
  };
  // malloc'd: big allocations are mapped afresh by malloc (a fixed threshold), so a buffer freed
  // and allocated again comes back at the same address with other pages.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  void* first = nullptr;
  int same = 0;
  for (int round = 0; round < 4; ++round) {
    float* buf = static_cast<float*>(malloc(bytes));
    if (round == 0) first = buf;
    same += buf == first;
    check("malloc round " + std::to_string(round), checkedAllReduce(comm, buf, count, rank, n, round));
    check("malloc round " + std::to_string(round) + " again", checkedAllReduce(comm, buf, count, rank, n, round + 7));
    free(buf);
  }
  // mmap'd by the caller at a fixed place, unmapped, mapped again.
  void* at = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  for (int round = 0; round < 3 && at != MAP_FAILED; ++round) {
    void* p = round == 0 ? at : mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    check("mmap round " + std::to_string(round), checkedAllReduce(comm, static_cast<float*>(p), count, rank, n, 20 + round));
    munmap(p, bytes);
  }
  say("reused", std::to_string(same) + " of 4 allocations at the first one's address");
#ifdef HORA_TEST_IB
  std::string seen;
  const std::vector<ib::PortChoice> ports = ib::usablePorts(ib::HcaFilter{}, -1, "", &seen);
  if (!ports.empty()) {
    const ib::MrCache::Stats st = ib::Device::open(ports[0])->cache().stats();
    say("regcache", format("hits %llu misses %llu invalidations %llu caching %d", static_cast<unsigned long long>(st.hits),
                           static_cast<unsigned long long>(st.misses), static_cast<unsigned long long>(st.invalidations),
                           st.caching ? 1 : 0));
  }
#endif
  return wrong ? 1 : 0;
}

int loop(horaComm_t comm, size_t count) {
  std::vector<float> buf(count, 1.0f);
  for (long i = 0;; ++i) {
    if (horaAllReduce(buf.data(), buf.data(), count, horaFloat32, horaSum, comm, nullptr) != horaSuccess) {
      say("error", horaGetLastError(comm));
      return 3;
    }
    if (i == 0) say("looping", "");
  }
}

int one(horaComm_t comm) {
  std::vector<float> buf(1024, 1.0f);
  if (horaAllReduce(buf.data(), buf.data(), buf.size(), horaFloat32, horaSum, comm, nullptr) != horaSuccess) {
    say("error", horaGetLastError(comm));
    return 3;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "sweep" && mode != "sample" && mode != "loop" && mode != "one" && mode != "large" && mode != "regcache" &&
      mode != "device") {
    fprintf(stderr, "usage: mh_rank sweep|sample|device|loop COUNT|one|large|regcache (as a rank: HORA_ROOT, HORA_SECRET, HORA_RANK, HORA_SIZE)\n");
    return 2;
  }
  const char* r = getenv("HORA_RANK");
  gRank = r ? atoi(r) : -1;
  say("pid", std::to_string(getpid()));
  horaComm_t comm = nullptr;
  if (horaCommInitFromEnv(&comm) != horaSuccess) {
    say("error", std::string("horaCommInitFromEnv: ") + horaGetLastError(nullptr));
    return 2;
  }
  int rank = -1, n = -1;
  horaCommUserRank(comm, &rank);
  horaCommCount(comm, &n);
  for (int p = 0; p < n; ++p)
    if (p != rank) say("link", std::to_string(p) + " " + comm->self().linkNames[static_cast<size_t>(p)]);
  int status = 0;
  if (mode == "sweep") status = sweep(comm, rank, n);
  if (mode == "sample") status = sample(comm, rank, n);
  if (mode == "device") status = onDevice(comm, rank, n);
  if (mode == "loop") status = loop(comm, argc > 2 ? strtoull(argv[2], nullptr, 10) : size_t(1) << 20);
  if (mode == "one") status = one(comm);
  if (mode == "large") status = large(comm, rank, n, std::vector<std::string>(argv + 2, argv + argc));
  if (mode == "regcache") status = regcache(comm, rank, n);
  if (status == 0) say("done", "");
  if (status == 3) {
    horaCommAbort(comm);
  } else {
    horaCommDestroy(comm);
  }
  return status;
}
