// The copies between device buffers and the host blocks a program runs on, as ops of the
// program (core/device_copies.h): every collective's program built over host blocks, its
// inputs copied in and its results out by a late engine (a stream that runs one copy at a time,
// in the order given, each only after it has been polled a few times, the copy made when it
// completes), all ranks in one executor over the in-memory transport (unit_coll.h). An op that
// did not wait for the copy of what it reads would read the blocks' filler; a copy out that did
// not wait for every write of its chunk would carry the filler or a partial result back.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include <catch2/catch.hpp>

#include "core/compute.h"
#include "core/device_copies.h"
#include "core/executor.h"
#include "unit_coll.h"

using namespace hora;
using namespace unit;

namespace {

constexpr uint8_t kFiller = 0x5A;

// Runs copies one at a time in the order posted, each when it has been polled kAge times.
class LateEngine final : public core::ComputeEngine {
 public:
  static constexpr int kAge = 3;
  void post(const core::Action& a, const core::Program& p, transport::Cookie cookie) override {
    queue_.push_back(Item{a, &p, cookie, 0});
    ++posted;
  }
  bool progress(std::vector<transport::Cookie>& completed) override {
    if (queue_.empty() || ++queue_.front().age < kAge) return false;
    const Item it = queue_.front();
    queue_.pop_front();
    core::runOnCpu(it.a, *it.p);
    completed.push_back(it.cookie);
    return true;
  }
  bool busy() const override { return !queue_.empty(); }
  void reset() override { queue_.clear(); }
  int posted = 0;

 private:
  struct Item {
    core::Action a;
    const core::Program* p;
    transport::Cookie cookie;
    int age;
  };
  std::deque<Item> queue_;
};

// One rank's call: its "device" buffers, the host blocks its program runs on, and the copies
// between them, laid out as the library stages a call (comm/device.cc).
struct Rank {
  std::vector<int32_t> devIn, devOut;
  std::vector<int32_t> blockIn, blockOut;  // blockIn unused in place (one block for both)
  coll::Args args;
  core::DeviceCopies copies;
  size_t resultAt = 0;  // where in devOut the result starts
};

size_t inCount(Kind k, size_t N, int n) { return k == Kind::ReduceScatter ? N * n : N; }
size_t outCount(Kind k, size_t N, int n) { return k == Kind::AllGather ? N * n : N; }
bool hasIn(Kind k, int r, int root) { return k != Kind::Broadcast || r == root; }
bool hasOut(Kind k, int r, int root) { return k != Kind::Reduce || r == root; }

void fill(std::vector<int32_t>& v) { memset(v.data(), kFiller, v.size() * sizeof(int32_t)); }

Rank makeRank(Kind k, int r, int n, size_t N, bool inPlace, int root, size_t chunkBytes) {
  Rank x;
  const size_t in = inCount(k, N, n), out = outCount(k, N, n);
  x.devIn.resize(in);
  for (size_t i = 0; i < in; ++i) x.devIn[i] = static_cast<int32_t>(mix(static_cast<uint64_t>(r) * 7919 + i) % 100000);
  x.devOut.assign(out, -1);
  x.blockOut.resize(out);
  fill(x.blockOut);
  x.args.kind = k;
  x.args.dtype = DataType::Int32;
  x.args.count = N;
  x.args.root = root;
  x.args.recvbuf = x.blockOut.data();
  x.copies.chunkBytes = chunkBytes;
  if (inPlace) {
    // The input is the output itself, or this rank's part of it (AllGather), or the output
    // the first part of it (ReduceScatter): one block, the device buffers at the same offsets.
    const size_t at = k == Kind::AllGather ? static_cast<size_t>(r) * N : 0;
    if (k == Kind::ReduceScatter) {
      // The result is this rank's block of the input, in place.
      x.blockOut.resize(in);
      fill(x.blockOut);
      x.devOut = x.devIn;
      x.resultAt = static_cast<size_t>(r) * N;
      x.args.sendbuf = x.blockOut.data();
      x.args.recvbuf = x.blockOut.data() + x.resultAt;
      x.copies.ins.push_back({x.blockOut.data(), x.devOut.data(), in * 4});
      x.copies.outs.push_back({x.devOut.data() + x.resultAt, x.blockOut.data() + x.resultAt, N * 4});
      return x;
    }
    if (k == Kind::AllGather) {
      std::copy(x.devIn.begin(), x.devIn.end(), x.devOut.begin() + static_cast<ptrdiff_t>(at));
    } else {
      x.devOut = x.devIn;
    }
    x.args.sendbuf = x.blockOut.data() + at;
    if (hasIn(k, r, root)) x.copies.ins.push_back({x.blockOut.data() + at, x.devOut.data() + at, in * 4});
    if (hasOut(k, r, root)) x.copies.outs.push_back({x.devOut.data(), x.blockOut.data(), out * 4});
    return x;
  }
  x.blockIn.resize(in);
  fill(x.blockIn);
  x.args.sendbuf = x.blockIn.data();
  if (hasIn(k, r, root)) x.copies.ins.push_back({x.blockIn.data(), x.devIn.data(), in * 4});
  if (hasOut(k, r, root)) x.copies.outs.push_back({x.devOut.data(), x.blockOut.data(), out * 4});
  return x;
}

// What rank r's device output must hold ("" when it does), else the first wrong element.
std::string verify(const std::vector<Rank>& ranks, Kind k, int r, size_t N, int root) {
  const int n = static_cast<int>(ranks.size());
  const Rank& x = ranks[static_cast<size_t>(r)];
  if (!hasOut(k, r, root)) return "";
  const size_t out = outCount(k, N, n);
  for (size_t i = 0; i < out; ++i) {
    int32_t want = 0;
    switch (k) {
      case Kind::AllReduce:
      case Kind::Reduce:
        for (const Rank& q : ranks) want += q.devIn[i];
        break;
      case Kind::Broadcast: want = ranks[static_cast<size_t>(root)].devIn[i]; break;
      case Kind::AllGather: want = ranks[i / N].devIn[i % N]; break;
      case Kind::ReduceScatter:
        for (const Rank& q : ranks) want += q.devIn[static_cast<size_t>(r) * N + i];
        break;
      default: break;
    }
    if (x.devOut[x.resultAt + i] != want)
      return "rank " + std::to_string(r) + " element " + std::to_string(i) + ": " + std::to_string(x.devOut[x.resultAt + i]) +
             ", want " + std::to_string(want);
  }
  return "";
}

std::string runBounced(Kind k, int n, size_t N, bool inPlace, const coll::Plan& plan, size_t chunkBytes) {
  // (A plan whose algorithm does not implement k: planFor's choice.)
  const int root = (n - 1) / 2;
  // (The Ranks keep their vectors' memory where the copies point: reserved, never moved.)
  std::vector<Rank> ranks;
  ranks.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) ranks.push_back(makeRank(k, r, n, N, inPlace, root, chunkBytes));
  std::vector<core::Program> progs(static_cast<size_t>(n));
  std::vector<LateEngine> engines(static_cast<size_t>(n));
  auto& pool = scratchPool();
  MemWorld w(n, 23, 0.5);
  std::vector<core::Job> jobs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto i = static_cast<size_t>(r);
    pool[i].reset();
    coll::JobShape topo{r, n};
    coll::build(ranks[i].args, topo, planFor(ranks[i].args, topo, plan), pool[i], progs[i]);
    ranks[i].copies.engine = &engines[i];
    core::addDeviceCopies(progs[i], ranks[i].copies);
    jobs[i].program = &progs[i];
    jobs[i].conns = w.table[i].data();
    jobs[i].nranks = n;
    jobs[i].copies = &engines[i];
  }
  core::Executor ex;
  ex.run(jobs, kRunTimeout);
  std::string why;
  if (!w.quiet(&why)) return "after the run: " + why;
  for (int r = 0; r < n; ++r) {
    std::string e = verify(ranks, k, r, N, root);
    if (!e.empty()) return e;
  }
  return "";
}

// The copies in and out that addDeviceCopies added to p (after its first n0 ops).
std::vector<int32_t> copyOps(const core::Program& p, size_t n0) {
  std::vector<int32_t> out;
  for (size_t i = n0; i < p.ops.size(); ++i)
    if (p.ops[i].action.active && p.ops[i].action.engine == core::Engine::Copies) out.push_back(static_cast<int32_t>(i));
  return out;
}

std::vector<int32_t> depsOf(const core::Program& p, int32_t o) {
  const core::Op& op = p.ops[static_cast<size_t>(o)];
  std::vector<int32_t> d;
  for (int32_t x : op.dep)
    if (x >= 0) d.push_back(x);
  for (uint32_t i = 0; i < op.ndepList; ++i) d.push_back(p.depLists[op.depList + i]);
  return d;
}

}  // namespace

TEST_CASE("device copies: every collective through host blocks, copied in and out chunk by chunk by a late engine",
          "[device-copies]") {
  for (Kind k : {Kind::AllReduce, Kind::Broadcast, Kind::Reduce, Kind::AllGather, Kind::ReduceScatter})
    for (int n : {1, 2, 3, 5})
      for (bool inPlace : {false, true})
        for (size_t chunkBytes : {size_t(0), size_t(64), size_t(1000)})
          for (const coll::Algorithm* algo : coll::algorithms()) {
            // Every algorithm of k that runs without a shared stage, with small chunks.
            const size_t N = 1000 + static_cast<size_t>(n);
            coll::Args a;
            a.kind = k;
            a.dtype = DataType::Int32;
            a.count = N;
            if (!algo->implements(k) || algo->unfit(a, coll::JobShape{0, n}, false)) continue;
            coll::Plan plan = kSmall;
            plan.algo = algo->id();
            INFO(kindText(k) << " n=" << n << " by " << algo->name() << (inPlace ? " in place" : "")
                             << ", copies of " << chunkBytes << " bytes");
            CHECK(runBounced(k, n, N, inPlace, plan, chunkBytes) == "");
          }
}

TEST_CASE("device copies: an op waits for the copies of what it reads, not for all of them", "[device-copies]") {
  // A ring AllReduce of 4 ranks, 16 KiB, copies of 1 KiB: 16 in, 16 out.
  const int n = 4, r = 1;
  const size_t N = 4096;
  Rank x = makeRank(Kind::AllReduce, r, n, N, false, 0, 1024);
  LateEngine engine;
  x.copies.engine = &engine;
  core::Program p;
  core::Scratch scratch;
  coll::JobShape topo{r, n};
  coll::Plan plan = kDefault;
  plan.algo = coll::Algo::Ring;
  coll::build(x.args, topo, plan, scratch, p);
  const size_t n0 = p.ops.size();
  const core::CopiesAdded added = core::addDeviceCopies(p, x.copies);
  CHECK(added.in == 16);
  CHECK(added.out == 16);
  CHECK(added.outSkipped == 0);
  const std::vector<int32_t> copies = copyOps(p, n0);
  REQUIRE(copies.size() == 32);
  const std::vector<int32_t> ins(copies.begin(), copies.begin() + 16), outs(copies.begin() + 16, copies.end());
  // Every op of the ring that reads the input depends on the copies of its own range only.
  const auto lo = reinterpret_cast<uintptr_t>(x.blockIn.data());
  size_t readers = 0;
  for (size_t i = 0; i < n0; ++i) {
    std::vector<int32_t> mine;
    for (int32_t d : depsOf(p, static_cast<int32_t>(i)))
      if (std::find(ins.begin(), ins.end(), d) != ins.end()) mine.push_back(d);
    if (mine.empty()) continue;
    ++readers;
    CHECK(mine.size() < 16);
    for (int32_t d : mine) {
      const auto src = reinterpret_cast<uintptr_t>(p.ops[static_cast<size_t>(d)].action.dst);
      CHECK(src >= lo);
      CHECK(src < lo + N * 4);
    }
  }
  CHECK(readers >= 4);
  // The first copy in is of the chunk the program's first reader needs: the ring's first send
  // is of rank 1's own block (the second quarter of the buffer), not of the buffer's start.
  const auto first = reinterpret_cast<uintptr_t>(p.ops[static_cast<size_t>(ins.front())].action.dst);
  CHECK(first != lo);
  // A copy out waits for the writes of its chunk, not for the whole program.
  for (int32_t o : outs) CHECK(depsOf(p, o).size() < n0 / 2);
}

TEST_CASE("device copies: an in-place chunk that no op writes is not copied out", "[device-copies]") {
  // The root of an in-place Broadcast: its buffer is only read.
  Rank x = makeRank(Kind::Broadcast, 0, 3, 2048, true, 0, 1024);
  core::Program p;
  core::Scratch scratch;
  coll::JobShape topo{0, 3};
  coll::build(x.args, topo, planFor(x.args, topo, kDefault), scratch, p);
  const core::CopiesAdded added = core::addDeviceCopies(p, x.copies);
  CHECK(added.in == 8);
  CHECK(added.out == 0);
  CHECK(added.outSkipped == 8);
}

TEST_CASE("device copies: a program that lets peers reach its buffers waits for every copy", "[device-copies]") {
  // A Fetch hands peers nothing, but its kind says the stage's single copy is in use: the
  // addresses peers read or write are in data no op's range shows.
  std::vector<uint8_t> block(8192, kFiller), dev(8192, 1), out(8192, 0);
  core::Program p;
  core::ProgramBuilder b(p);
  const int32_t sig = b.signal(0, 1);
  b.fetch(core::ProgramBuilder::Remote{1, nullptr, 1, 0, 4096}, block.data() + 4096, 4096, core::Deps{sig});
  const size_t n0 = p.ops.size();
  core::DeviceCopies dc;
  dc.chunkBytes = 1024;
  dc.ins.push_back({block.data(), dev.data(), 4096});
  dc.outs.push_back({out.data(), block.data(), 8192});
  const core::CopiesAdded added = core::addDeviceCopies(p, dc);
  CHECK(added.in == 1);  // whole
  CHECK(added.out == 1);
  // The signal, which depended on nothing, now waits for the copy in; the copy out for every op.
  const std::vector<int32_t> deps = depsOf(p, sig);
  REQUIRE(deps.size() == 1);
  const core::Op& join = p.ops[static_cast<size_t>(deps[0])];
  CHECK(join.kind == core::OpKind::Local);
  const std::vector<int32_t> copies = copyOps(p, n0);
  REQUIRE(copies.size() == 2);
  const std::vector<int32_t> last = depsOf(p, copies[1]);
  REQUIRE(last.size() == 1);
  CHECK(depsOf(p, last[0]).size() >= n0);
}

TEST_CASE("device copies: a program whose buffers peers reach by address waits for every copy", "[device-copies]") {
  // The root of the stage's single-copy Broadcast, out of place: it publishes its buffer's
  // address in a word of its slot (a copy of a few bytes, no range of the block) and reads
  // nothing itself; the reader copies straight out of the block.
  std::vector<uint8_t> block(8192, kFiller), dev(8192, 1), word(16, 0), published(16, 7);
  core::Program p;
  core::ProgramBuilder b(p);
  b.exposeBuffers();
  kernels::ReduceSpec raw;
  raw.dtype = DataType::Uint8;
  const int32_t publish = b.local(core::reduceAction(word.data(), published.data(), nullptr, 16, raw));
  b.signal(0, 1, core::Deps{publish});
  core::DeviceCopies dc;
  dc.chunkBytes = 1024;
  dc.ins.push_back({block.data(), dev.data(), 8192});
  const core::CopiesAdded added = core::addDeviceCopies(p, dc);
  CHECK(added.in == 1);
  const std::vector<int32_t> deps = depsOf(p, publish);
  REQUIRE(deps.size() == 1);
  const std::vector<int32_t> joined = depsOf(p, deps[0]);
  REQUIRE(joined.size() == 1);
  CHECK(p.ops[static_cast<size_t>(joined[0])].action.engine == core::Engine::Copies);
}
