// The collective sweep with ranks as separate processes (fork), each with its own
// communicator made from one unique id, as an application written against hora.h would.
#include <catch2/catch.hpp>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "collective_check.h"
#include "comm/comm.h"
#include "harness.h"
#include "transports/shm/world.h"

using namespace hora::test;

TEST_CASE("collectives as processes: sweep on 1, 2, 3, 5 and 8 ranks", "[processes]") {
  for (int n : {1, 2, 3, 5, 8}) {
    auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      for (const Case& c : sweep(nranks, nranks == 2 || nranks == 5)) {
        std::string e = runCase(comm, rank, nranks, c);
        if (!e.empty()) return e;
      }
      return "";
    });
    INFO("nranks " << n << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

TEST_CASE("p2p between processes: every pair exchanges in one group", "[processes][p2p]") {
  const int n = 6;
  auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
    const size_t count = 50001;
    std::vector<std::vector<uint16_t>> in(static_cast<size_t>(nranks), std::vector<uint16_t>(count));
    std::vector<uint16_t> out(count);
    for (size_t i = 0; i < count; ++i) out[i] = static_cast<uint16_t>(rank * 7 + i);
    horaGroupStart();
    for (int p = 0; p < nranks; ++p) {
      horaSend(out.data(), count, horaFloat16, p, comm, nullptr);
      horaRecv(in[static_cast<size_t>(p)].data(), count, horaFloat16, p, comm, nullptr);
    }
    if (horaGroupEnd() != horaSuccess) return horaGetLastError(comm);
    for (int p = 0; p < nranks; ++p)
      for (size_t i = 0; i < count; ++i)
        if (in[static_cast<size_t>(p)][i] != static_cast<uint16_t>(p * 7 + i)) return "wrong data from rank " + std::to_string(p);
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("more ranks than cores: 8 ranks pinned to one core finish every collective", "[processes][oversubscribed]") {
  // Every rank on the CPU this test started on: a wait that spun instead of backing off would
  // hold the core its peers need, and the sweep would crawl or time out.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
  auto results = runProcesses(8, [&one](horaComm_t comm, int rank, int nranks) -> std::string {
    if (sched_setaffinity(0, sizeof one, &one) != 0) return "sched_setaffinity failed";
    for (size_t count : {size_t(3), size_t(5000), size_t(300001)})  // flat, slice and many chunks
      for (Coll c : allColls()) {
        std::string e = runCase(comm, rank, nranks, Case{c, horaFloat, horaSum, count, false, 3});
        if (!e.empty()) return e;
      }
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

TEST_CASE("split between processes: halves, then the sweep's collectives on each", "[processes][split]") {
  const int n = 5;
  auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
    horaComm_t half = nullptr;
    if (horaCommSplit(comm, rank < 2 ? 7 : 3, rank, &half, nullptr) != horaSuccess)
      return std::string("horaCommSplit: ") + horaGetLastError(comm);
    int hr = -1, hn = -1;
    horaCommUserRank(half, &hr);
    horaCommCount(half, &hn);
    if (hn != (rank < 2 ? 2 : 3) || hr != (rank < 2 ? rank : rank - 2)) return "wrong rank or size in the split";
    for (const Case& c : {Case{Coll::AllReduce, horaFloat32, horaAvg, 100003, false, 0},
                          Case{Coll::AllToAll, horaInt64, horaSum, 4001, true, 0},
                          Case{Coll::ReduceScatter, horaBfloat16, horaMax, 777, false, 0},
                          Case{Coll::Barrier, horaUint8, horaSum, 0, false, 0}}) {
      std::string e = runCase(half, hr, hn, c);
      if (!e.empty()) return e;
    }
    horaCommDestroy(half);
    return runCase(comm, rank, nranks, Case{Coll::AllGather, horaInt32, horaSum, 1000, true, 0});
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// A group of one collective plus a send/recv between only some of the ranks: every rank must
// plan the collective alike (it once was planned by the size of each rank's group: the pair's
// ranks chose ring, the others the shared stage, and the job hung until its timeout).
TEST_CASE("a collective grouped with a send/recv of some ranks plans alike everywhere", "[processes][p2p]") {
  ProcessOptions opts;
  opts.timeoutMs = 20000;  // a bound on the old hang, not a timing
  for (int kind = 0; kind < 3; ++kind) {
    INFO("collective " << kind);
    auto results = runProcesses(3, [kind](horaComm_t comm, int rank, int nranks) -> std::string {
      for (int round = 0; round < 3; ++round) {
        std::vector<int8_t> in(18 * static_cast<size_t>(nranks)), out(18 * static_cast<size_t>(nranks), 0);
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int8_t>(rank + 1 + static_cast<int>(i % 5));
        uint16_t pairOut = static_cast<uint16_t>(0x1234 + round), pairIn = 0;
        horaGroupStart();
        if (kind == 0) horaReduceScatter(in.data(), out.data(), 18, horaInt8, horaSum, comm, nullptr);
        if (kind == 1) horaAllReduce(in.data(), out.data(), 18, horaInt8, horaSum, comm, nullptr);
        if (kind == 2) horaBroadcast(in.data(), out.data(), 18, horaInt8, 0, comm, nullptr);
        if (rank == 2) horaSend(&pairOut, 1, horaFloat16, 1, comm, nullptr);
        if (rank == 1) horaRecv(&pairIn, 1, horaFloat16, 2, comm, nullptr);
        if (horaGroupEnd() != horaSuccess) return std::string("group: ") + horaGetLastError(nullptr);
        for (size_t i = 0; i < 18; ++i) {
          const size_t at = kind == 0 ? static_cast<size_t>(rank) * 18 + i : i;
          int want = 0;
          if (kind == 2) want = 1 + static_cast<int>(i % 5);  // rank 0's
          else
            for (int r = 0; r < nranks; ++r) want += r + 1 + static_cast<int>(at % 5);
          if (out[i] != static_cast<int8_t>(want)) return "wrong element " + std::to_string(i);
        }
        if (rank == 1 && pairIn != pairOut) return "the pair's message is wrong";
      }
      return "";
    }, opts);
    INFO(describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

namespace {
// What a rank of a long run of calls says of call k: its failure, its wrong result, or "".
std::string verdict(int k, horaResult_t r, horaComm_t comm, const std::string& what, size_t count, int root) {
  if (r != horaSuccess) return "call " + std::to_string(k) + " failed: " + horaGetLastError(comm);
  if (!what.empty())
    return "call " + std::to_string(k) + " (count " + std::to_string(count) + ", root " + std::to_string(root) +
           "): wrong " + what;
  return "";
}
}  // namespace

// Small rooted calls through the shared stage's cells: a rank that only gives runs ahead of its
// readers (up to a cell per call), so many calls are in flight at once. Every result is checked:
// Broadcasts, Reduces, Gathers and Scatters with the root moving, sizes from 1 element to a whole
// cell and beyond (the slots), AllReduces between them (the slots and the cells in turn), and a
// finalize at the end that compares the last calls.
TEST_CASE("small rooted calls run ahead through the cells, every result right", "[processes][cells]") {
  for (int n : {2, 3, 5}) {
    auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      const size_t sizes[] = {1, 7, 256, 8192, 9000};  // 9000 floats: more than a cell
      std::vector<float> send, recv;
      for (int k = 0; k < 400; ++k) {
        const size_t count = sizes[static_cast<size_t>(k) % 5];
        const int root = (k / 3) % nranks;
        auto value = [&](int who, size_t i) { return static_cast<float>((k * 31 + who * 7 + static_cast<int>(i % 97)) % 1000); };
        horaResult_t r = horaSuccess;
        std::string what;
        switch (k % 4) {
          case 0: {  // Broadcast, in place on the readers
            recv.assign(count, -1.0f);
            if (rank == root)
              for (size_t i = 0; i < count; ++i) recv[i] = value(root, i);
            r = horaBroadcast(recv.data(), recv.data(), count, horaFloat, root, comm, nullptr);
            for (size_t i = 0; i < count && what.empty(); ++i)
              if (recv[i] != value(root, i)) what = "Broadcast element " + std::to_string(i);
            break;
          }
          case 1: {  // Reduce
            send.resize(count);
            for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
            recv.assign(count, -1.0f);
            r = horaReduce(send.data(), recv.data(), count, horaFloat, horaSum, root, comm, nullptr);
            for (size_t i = 0; rank == root && i < count && what.empty(); ++i) {
              float want = 0;
              for (int p = 0; p < nranks; ++p) want += value(p, i);
              if (recv[i] != want) what = "Reduce element " + std::to_string(i);
            }
            break;
          }
          case 2: {  // Scatter, then an AllReduce of what each got
            send.resize(count * static_cast<size_t>(nranks));
            for (size_t i = 0; i < send.size(); ++i) send[i] = value(root, i);
            recv.assign(count, -1.0f);
            r = horaScatter(send.data(), recv.data(), count, horaFloat, root, comm, nullptr);
            for (size_t i = 0; i < count && what.empty(); ++i)
              if (recv[i] != value(root, static_cast<size_t>(rank) * count + i)) what = "Scatter element " + std::to_string(i);
            float one = 1.0f, total = 0;
            if (r == horaSuccess && what.empty()) r = horaAllReduce(&one, &total, 1, horaFloat, horaSum, comm, nullptr);
            if (r == horaSuccess && total != static_cast<float>(nranks)) what = "AllReduce after a Scatter";
            break;
          }
          default: {  // Gather
            send.resize(count);
            for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
            recv.assign(rank == root ? count * static_cast<size_t>(nranks) : 0, -1.0f);
            r = horaGather(send.data(), rank == root ? recv.data() : nullptr, count, horaFloat, root, comm, nullptr);
            for (size_t i = 0; rank == root && i < recv.size() && what.empty(); ++i)
              if (recv[i] != value(static_cast<int>(i / count), i % count)) what = "Gather element " + std::to_string(i);
            break;
          }
        }
        if (const std::string v = verdict(k, r, comm, what, count, root); !v.empty()) return v;
      }
      if (horaCommFinalize(comm) != horaSuccess) return std::string("finalize failed: ") + horaGetLastError(comm);
      return "";
    });
    INFO("nranks " << n << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

// The call checks over the links (src/comm/call_check.h) travel beside the calls' own messages:
// held back, sent before anything later to the successor, received before anything later from
// the predecessor, or in batches once old. A long mix of rooted calls (whose checks wait),
// calls that move nothing (whose checks go at once), groups of a rooted call with a send to the
// successor and a receive from the predecessor, and AllReduces, every result checked, then a
// finalize that receives what is left: 2500 calls, past the TCP window (1024) twice. Over TCP
// (collectives-processes-tcp) every call checks this way; over shared memory the larger ones do.
TEST_CASE("call checks keep their place among the calls' messages", "[processes][callcheck]") {
  for (int n : {2, 3, 4}) {
    auto results = runProcesses(n, [](horaComm_t comm, int rank, int nranks) -> std::string {
      const int succ = (rank + 1) % nranks, pred = (rank + nranks - 1) % nranks;
      std::vector<float> buf(20000), sum(20000), msg(16), got(16);
      for (int k = 0; k < 2500; ++k) {
        const int root = (k / 5) % nranks;
        const size_t count = k % 50 == 49 ? 20000 : 1 + static_cast<size_t>(k * 37) % 256;
        auto value = [&](int who, size_t i) { return static_cast<float>((k * 13 + who * 5 + static_cast<int>(i % 89)) % 1000); };
        horaResult_t r = horaSuccess;
        std::string what;
        switch (k % 6) {
          case 0:
          case 1:
          case 2: {  // a Broadcast
            for (size_t i = 0; i < count; ++i) buf[i] = rank == root ? value(root, i) : -1.0f;
            r = horaBroadcast(buf.data(), buf.data(), count, horaFloat, root, comm, nullptr);
            for (size_t i = 0; r == horaSuccess && i < count && what.empty(); ++i)
              if (buf[i] != value(root, i)) what = "Broadcast element " + std::to_string(i);
            break;
          }
          case 3: {  // a group: a Broadcast, a send to the successor, a receive from the predecessor
            for (size_t i = 0; i < count; ++i) buf[i] = rank == root ? value(root, i) : -1.0f;
            for (size_t i = 0; i < msg.size(); ++i) msg[i] = value(rank, i + 1000);
            std::fill(got.begin(), got.end(), -1.0f);
            horaGroupStart();
            horaBroadcast(buf.data(), buf.data(), count, horaFloat, root, comm, nullptr);
            horaSend(msg.data(), msg.size(), horaFloat, succ, comm, nullptr);
            horaRecv(got.data(), got.size(), horaFloat, pred, comm, nullptr);
            r = horaGroupEnd();
            for (size_t i = 0; r == horaSuccess && i < count && what.empty(); ++i)
              if (buf[i] != value(root, i)) what = "grouped Broadcast element " + std::to_string(i);
            for (size_t i = 0; r == horaSuccess && i < got.size() && what.empty(); ++i)
              if (got[i] != value(pred, i + 1000)) what = "the predecessor's message, element " + std::to_string(i);
            break;
          }
          case 4: {  // calls that move nothing, then a Reduce
            r = horaReduce(buf.data(), sum.data(), 0, horaFloat, horaSum, root, comm, nullptr);
            if (r == horaSuccess) r = horaBroadcast(buf.data(), buf.data(), 0, horaFloat, root, comm, nullptr);
            for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
            if (r == horaSuccess) r = horaReduce(buf.data(), sum.data(), count, horaFloat, horaSum, root, comm, nullptr);
            for (size_t i = 0; r == horaSuccess && rank == root && i < count && what.empty(); ++i) {
              float want = 0;
              for (int p = 0; p < nranks; ++p) want += value(p, i);
              if (sum[i] != want) what = "Reduce element " + std::to_string(i);
            }
            break;
          }
          default: {  // an AllReduce
            for (size_t i = 0; i < count; ++i) buf[i] = value(rank, i);
            r = horaAllReduce(buf.data(), sum.data(), count, horaFloat, horaSum, comm, nullptr);
            for (size_t i = 0; r == horaSuccess && i < count && what.empty(); ++i) {
              float want = 0;
              for (int p = 0; p < nranks; ++p) want += value(p, i);
              if (sum[i] != want) what = "AllReduce element " + std::to_string(i);
            }
            break;
          }
        }
        if (const std::string v = verdict(k, r, comm, what, count, root); !v.empty()) return v;
      }
      if (horaCommFinalize(comm) != horaSuccess) return std::string("finalize failed: ") + horaGetLastError(comm);
      return "";
    });
    INFO("nranks " << n << "\n" << describe(results));
    for (const auto& r : results) CHECK(r.ok());
  }
}

// ---- Doorbells: fence-free posts where every rank could register for membarrier ---------------

namespace {

// Small calls of every kind, each result checked, among ranks that outnumber the cores (so they
// sleep, and the doorbells ring): 3000 AllReduces, Broadcasts and Reduces with the root moving.
std::string smallCallsRight(horaComm_t comm, int rank, int nranks) {
  for (int k = 0; k < 3000; ++k) {
    const int root = k % nranks;
    float in[4], out[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 4; ++i) in[i] = static_cast<float>(rank * 10 + i + k % 7);
    horaResult_t r;
    float want[4];
    switch (k % 3) {
      case 0:
        r = horaAllReduce(in, out, 4, horaFloat, horaSum, comm, nullptr);
        for (int i = 0; i < 4; ++i) want[i] = static_cast<float>(10 * nranks * (nranks - 1) / 2 + nranks * (i + k % 7));
        break;
      case 1:
        r = horaBroadcast(in, out, 4, horaFloat, root, comm, nullptr);
        for (int i = 0; i < 4; ++i) want[i] = static_cast<float>(root * 10 + i + k % 7);
        break;
      default:
        r = horaReduce(in, out, 4, horaFloat, horaSum, root, comm, nullptr);
        for (int i = 0; i < 4; ++i) want[i] = rank == root ? static_cast<float>(10 * nranks * (nranks - 1) / 2 + nranks * (i + k % 7)) : -1;
        break;
    }
    if (r != horaSuccess) return "call " + std::to_string(k) + " failed: " + horaGetLastError(comm);
    for (int i = 0; i < 4; ++i)
      if (out[i] != want[i]) return "call " + std::to_string(k) + ": element " + std::to_string(i) + " wrong";
  }
  // A Reduce's senders may leave before its root has read: finalize waits for every rank.
  if (horaCommFinalize(comm) != horaSuccess) return std::string("finalize failed: ") + horaGetLastError(comm);
  return "";
}

// The shared-memory transport's doorbells (null where the ranks talk through another, as under
// HORA_TRANSPORTS=tcp).
const hora::shm::World* shmWorld(horaComm_t comm) { return dynamic_cast<const hora::shm::World*>(comm->stage.get()); }
bool asymmetricDoorbells(horaComm_t comm) { return shmWorld(comm) && shmWorld(comm)->asymmetric; }
}  // namespace

// Where this process may register for membarrier, so may its children: every rank's posts are
// fence-free, and small calls among more ranks than cores (which sleep, and are rung) are right.
TEST_CASE("fence-free doorbells where every rank may use membarrier, every result right", "[processes][doorbells]") {
  const bool canRegister = hora::shm::registerHeavyBarrier().empty();
  auto results = runProcesses(3, [canRegister](horaComm_t comm, int rank, int nranks) -> std::string {
    if (shmWorld(comm) && asymmetricDoorbells(comm) != canRegister)
      return canRegister ? "posts are fenced, though every rank may use membarrier" : "fence-free posts without membarrier";
    return smallCallsRight(comm, rank, nranks);
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// A rank that may not call membarrier says so, and every rank fences its posts: the same
// protocol everywhere, every result right.
TEST_CASE("a rank that may not use membarrier turns fence-free doorbells off on every rank", "[processes][doorbells]") {
  auto results = runRawProcesses(3, [](const horaUniqueId& id, int rank, int nranks) -> std::string {
    if (rank == 1 && !forbidSyscall(SYS_membarrier)) return std::string("seccomp: ") + strerror(errno);
    horaComm_t comm = nullptr;
    if (horaCommInitRank(&comm, nranks, id, rank) != horaSuccess) return "init failed";
    std::string e = asymmetricDoorbells(comm) ? "posts are fence-free though rank 1 may not use membarrier" : "";
    if (e.empty()) e = smallCallsRight(comm, rank, nranks);
    horaCommDestroy(comm);
    return e;
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// A rank asleep is rung once, however many posts come before it wakes: a Reduce's sender that
// runs ahead posts at every call, and ringing at each of them, while the woken rank waited for a
// core, cost the sender a write(2) a call (10 us where the call took 0.5).
TEST_CASE("a sleeping rank's doorbell rings once for many posts", "[processes][doorbells]") {
  // Shared by the forked ranks: rank 1 has armed (1), rank 0 has posted (2).
  auto* step = static_cast<std::atomic<int>*>(
      mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  REQUIRE(step != MAP_FAILED);
  new (step) std::atomic<int>(0);
  auto results = runProcesses(2, [step](horaComm_t comm, int rank, int) -> std::string {
    const hora::shm::World* w = shmWorld(comm);
    if (!w) return "";  // no doorbells where the ranks talk through another transport (HORA_TRANSPORTS=tcp)
    auto awaitStep = [&](int want) {
      for (int i = 0; i < 200000 && step->load() < want; ++i) usleep(50);
      return step->load() >= want;
    };
    std::string e;
    if (rank == 1) {
      w->armDoorbell();
      step->store(1);
      if (!awaitStep(2)) return "rank 0 never posted";
      uint64_t rings = 0;
      if (::read(w->doorbell.get(), &rings, sizeof rings) != static_cast<ssize_t>(sizeof rings))
        e = "the doorbell was not rung";
      else if (rings != 1)
        e = "rung " + std::to_string(rings) + " times for 100 posts";
      w->disarmDoorbell();
    } else {
      if (!awaitStep(1)) return "rank 1 never armed its doorbell";
      for (int k = 0; k < 100; ++k) w->wakeAll();
      step->store(2);
    }
    float x = 1, sum = 0;
    if (horaAllReduce(&x, &sum, 1, horaFloat, horaSum, comm, nullptr) != horaSuccess || sum != 2)
      return e + "; the AllReduce after failed";
    return e;
  });
  munmap(step, sizeof(std::atomic<int>));
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}

// ---- Shared-memory rings: mapped whole by their first message of a page or more --------------

namespace {
// Pages of [p, p + bytes) resident in memory (mincore), out of all of them.
size_t residentPages(const void* p, size_t bytes, size_t* total) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  *total = (bytes + page - 1) / page;
  std::vector<unsigned char> v(*total);
  if (mincore(const_cast<void*>(p), bytes, v.data()) != 0) return 0;
  return static_cast<size_t>(std::count_if(v.begin(), v.end(), [](unsigned char c) { return (c & 1) != 0; }));
}
}  // namespace

// A ring is allocated as it is first written (a host's n^2 rings are mostly never used); the
// first message of a page or more through it maps it whole at once, on both sides, rather than a
// page fault at a time in the calls that follow. Small messages leave the rest unmapped.
TEST_CASE("a shared-memory ring is mapped whole by its first large message, not by small ones", "[shmwarm]") {
  auto results = runProcesses(2, [](horaComm_t comm, int rank, int) -> std::string {
    auto* world = dynamic_cast<const hora::shm::World*>(comm->stage.get());
    if (!world) return "no shared-memory stage";
    const uint32_t peer = 1 - static_cast<uint32_t>(rank);
    // Rank 0 sends: its own ring to rank 1; rank 1 receives: rank 0's ring to it.
    const uint8_t* ring = rank == 0 ? world->own.ring(peer) : world->peers[peer].segment.ring(world->localIndex);
    const size_t bytes = static_cast<size_t>(world->own.ringBytes());
    std::vector<uint8_t> buf(size_t(64) << 10, static_cast<uint8_t>(rank + 1));
    auto exchange = [&](size_t n) {
      return rank == 0 ? horaSend(buf.data(), n, horaUint8, 1, comm, nullptr)
                       : horaRecv(buf.data(), n, horaUint8, 0, comm, nullptr);
    };
    size_t total = 0;
    if (exchange(100) != horaSuccess) return std::string("a small message failed: ") + horaGetLastError(comm);
    const size_t small = residentPages(ring, bytes, &total);
    if (small >= total) return "a small message mapped the whole ring (" + std::to_string(small) + " pages)";
    // Both have looked before the large message maps it (a small AllReduce goes through the
    // shared stage, not the rings).
    float one = 1;
    if (horaAllReduce(&one, &one, 1, horaFloat, horaSum, comm, nullptr) != horaSuccess)
      return std::string("the barrier failed: ") + horaGetLastError(comm);
    if (exchange(buf.size()) != horaSuccess) return std::string("a large message failed: ") + horaGetLastError(comm);
    const size_t large = residentPages(ring, bytes, &total);
    if (large != total) return "after a 64 KiB message " + std::to_string(large) + " of " + std::to_string(total) + " pages";
    for (uint8_t v : buf)
      if (v != 1) return "wrong data";
    return "";
  });
  INFO(describe(results));
  for (const auto& r : results) CHECK(r.ok());
}
