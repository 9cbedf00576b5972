// The shared-stage algorithms, when every rank of the communicator is a member of one shared
// stage (transports/stage.h; shared memory among the ranks of one host today).
//
// Each rank's region of the stage has four slots of C bytes (in[0], in[1], out[0], out[1]) and
// four counters that only it writes and every other rank reads:
//
//   InReady   the chunk whose input is in my in-slot       OutReady  ... whose slice is in my out-slot
//   InFree    the chunk whose in-slots I have read         OutFree   ... whose out-slots I have read
//
// Chunks are numbered by one sequence shared by every call on the host (JobShape::stageSeq), and
// chunk s uses slots s%2, so chunk s+1 fills the other slots while chunk s is still being read
// (a single copy of a Broadcast only a word in the in-slot: singleCopyBroadcast).
//
// Flat (small buffers, one chunk): copy my input in, post InReady, wait for everyone's, then
// reduce all n inputs straight out of the n in-slots, in rank order, into my result. One wait:
// the latency of one flag. Each rank reads n*N*E bytes.
//
// Slice (the rest, pipelined by chunk): copy in, post, wait; reduce my 1/n slice of the chunk
// from all n in-slots into my out-slot and, in the same pass, into my result; post OutReady,
// wait for everyone's; copy the n-1 other slices out of their out-slots into my result. Each rank copies N*E in, reads N*E and writes N*E/n
// reducing, and copies N*E out: about 5 N*E bytes of memory traffic against the ring's
// 9(n-1)/n N*E through transport rings, and 2 waits per chunk instead of 2(n-1) steps.
//
// Every element is reduced once, by one rank, in rank order: all ranks get the same bits.
#include <cstring>

#include "base/error.h"
#include "coll/algorithm.h"
#include "coll/common.h"
#include "coll/stage_layout.h"
#include "kernels/cpu/reduce.h"

namespace hora::coll {

namespace {
// At 2 processes the root of an in-place single-copy Broadcast writes half of it into the
// reader's result itself (singleCopyBroadcast): the kernel's copy runs at about 12 GB/s on a core
// (broadcast_perf -a 3, 2 ranks on 2 cores: 4 MiB in 158-163 us against 365-378 alone, 64 KiB
// in 5.3 against 8.1). Threads copy at memory speed on one core (4 MiB in 93 us alone, 103-106
// split), so they do not split.
bool splitBroadcast(const Args& a, const JobShape& t) {
  return t.nranks == 2 && a.sendbuf == a.recvbuf && t.stage->memberAccess() == transport::SharedStage::Access::Kernel;
}

// Waiting for a counter to reach s-2 or less is waiting for nothing.
int32_t waitFor(core::ProgramBuilder& b, Counter c, uint64_t s, core::Deps d = {}) {
  return s >= 3 ? b.wait(c, s - 2, d) : -1;
}
}  // namespace

void stageAllReduce(const Args& a, const JobShape& t, const Plan& p, core::Scratch& scratch, core::ProgramBuilder& b) {
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  const Reducer red{a, n};
  if (red.single(a.sendbuf, b) || N == 0) return;
  const Slots slots{*t.stage, t.stage->slotBytes()};
  const size_t C = std::max<size_t>(1, slots.C / E);  // elements per chunk
  const bool flat = p.algo == Algo::Flat;
  const void** srcs = scratch.array<const void*>(static_cast<size_t>(n), nullptr);
  for (size_t k = 0; k * C < N; ++k) {
    const Range chunk{k * C, std::min(N, (k + 1) * C)};
    const uint64_t s = ++*t.stageSeq;
    // My input in.
    int32_t freeIn = waitFor(b, kInFree, s);
    int32_t in = b.local(core::reduceAction(slots.in(r, s), at(a.sendbuf, chunk.begin, E), nullptr, chunk.size(),
                                            red.spec(true, false)),
                         core::Deps{freeIn});
    int32_t all = b.wait(kInReady, s, core::Deps{b.signal(kInReady, s, core::Deps{in})});
    if (flat) {
      for (int j = 0; j < n; ++j) srcs[static_cast<size_t>(j)] = slots.in(j, s);
      int32_t done = b.localAll(core::reduceAction(at(a.recvbuf, chunk.begin, E), nullptr, nullptr, chunk.size(),
                                                   red.spec(false, true)),
                                &all, 1, srcs, static_cast<size_t>(n));
      // Nothing to read from out-slots: keep the other counters in step for later chunks.
      for (Counter c : {kInFree, kOutReady, kOutFree}) b.signal(c, s, core::Deps{done});
      continue;
    }
    // My slice of the chunk, reduced from every in-slot into my out-slot.
    const Range mine = segment(chunk.size(), n, r);
    int32_t freeOut = waitFor(b, kOutFree, s);
    for (int j = 0; j < n; ++j) srcs[static_cast<size_t>(j)] = slots.in(j, s) + mine.begin * E;
    // Reduced once into my out-slot, for the others, and into my result, in the same pass.
    core::Action slice = core::reduceAction(slots.out(r, s) + mine.begin * E, nullptr, nullptr, mine.size(),
                                            red.spec(false, true));
    slice.dst2 = at(a.recvbuf, chunk.begin + mine.begin, E);
    const int32_t before[2] = {all, freeOut};
    int32_t reduced = mine.size() ? b.localAll(slice, before, 2, srcs, static_cast<size_t>(n))
                                  : b.local(core::Action{}, core::Deps{all, freeOut});
    b.signal(kInFree, s, core::Deps{reduced});
    int32_t gathered = b.wait(kOutReady, s, core::Deps{b.signal(kOutReady, s, core::Deps{reduced})});
    // Every other slice out into my result.
    for (int j = 0; j < n; ++j) {
      const Range theirs = segment(chunk.size(), n, j);
      if (j == r || !theirs.size()) continue;
      gathered = b.local(core::reduceAction(at(a.recvbuf, chunk.begin + theirs.begin, E), slots.out(j, s) + theirs.begin * E,
                                            nullptr, theirs.size(), red.spec(false, false)),
                         core::Deps{gathered});
    }
    b.signal(kOutFree, s, core::Deps{gathered});
  }
}

// A Broadcast larger than a cell, through the root's slots, pipelined by chunk: the root copies
// chunk s of its buffer into its in-slot s%2 and posts InReady; every other rank copies it from
// there straight into its result and posts InFree, which frees the slot for chunk s+2. The
// root's data crosses memory once into the slot and once per reader, against twice per rank
// along the chain (into the transport's ring and out of it, at every hop), and no rank forwards
// anything: all readers copy the same chunk at once, while the root fills the next. Every rank
// waits for every other's InReady of each chunk (the readers post theirs on arrival), so the
// call check sees every rank's announcement, as the flat call's does.
//
// The single copy (the algorithm "single"), where the stage can reach its members' memory
// (memberAccess): the root publishes where its buffer lies, in its in-slot of one chunk number,
// and every reader copies the buffer from there into its result itself, in one pass (threads of
// one process: a memcpy; processes: process_vm_readv), all readers at once; the root then waits
// until every reader has, so that its buffer is not changed while read. At 2 processes, in
// place, the root writes the second half into the reader's result itself (its address in the
// reader's word) while the reader reads the first. The root's data crosses memory once per
// reader and never into a slot, and a reader needs nothing of the root between the start and
// the end of its copy; but root and readers meet at every call, where the slots' root runs
// ahead of its readers (which is faster between 2 processes depends on the machine: cost.h's
// kernelCopy).
namespace {
// One call of the single copy: a chunk number of its own, and this rank's word in its in-slot of
// that chunk (publish: where buf lies, `bytes` long, what it puts itself, and where a writer
// writes if not there), written once the slot is free.
struct SingleCopyCall {
  const Slots slots;
  const int r;
  const uint64_t s, bytes;
  core::Scratch& scratch;
  core::ProgramBuilder& b;
  kernels::ReduceSpec raw;
  SingleCopyCall(const Args& a, const JobShape& t, core::Scratch& sc, core::ProgramBuilder& pb)
      : slots{*t.stage, t.stage->slotBytes()}, r(t.rank), s(++*t.stageSeq), bytes(a.count * dataTypeSize(a.dtype)),
        scratch(sc), b(pb) {
    raw.dtype = DataType::Uint8;
    b.exposeBuffers();
  }
  int32_t publish(const void* buf, uint64_t put, const void* result = nullptr) {
    using Published = transport::SharedStage::Published;
    auto* mine = static_cast<Published*>(scratch.get(sizeof(Published)));
    *mine = Published{s, reinterpret_cast<uintptr_t>(buf), bytes, put, reinterpret_cast<uintptr_t>(result)};
    return b.local(core::reduceAction(slots.in(r, s), mine, nullptr, sizeof(Published), raw),
                   core::Deps{waitFor(b, kInFree, s)});
  }
};

void singleCopyBroadcast(const Args& a, const JobShape& t, core::Scratch& scratch, core::ProgramBuilder& b) {
  if (a.count == 0) return;
  // Each rank's word, in its in-slot of the chunk: the root's says where its buffer is and
  // what it puts itself, a reader's where its result is.
  SingleCopyCall call(a, t, scratch, b);
  const int r = call.r;
  const uint64_t s = call.s, bytes = call.bytes;
  const Slots& slots = call.slots;
  const kernels::ReduceSpec raw = call.raw;
  auto publish = [&](const void* buf, uint64_t put) { return call.publish(buf, put); };
  if (r == a.root) {
    // At 2 processes the root, in place, writes the second half into the reader's result itself
    // while the reader reads the first: two cores copy, where one would (the root's own copy
    // out of place is as large as the reader's, so then it puts nothing).
    const uint64_t putBytes = splitBroadcast(a, t) ? (bytes / 2) & ~uint64_t(4095) : 0;
    int32_t in = publish(a.sendbuf, putBytes);
    if (a.sendbuf != a.recvbuf) b.local(core::reduceAction(a.recvbuf, a.sendbuf, nullptr, bytes, raw));
    int32_t all = b.wait(kInReady, s, core::Deps{b.signal(kInReady, s, core::Deps{in})});
    int32_t put = all;
    if (putBytes) {
      const core::ProgramBuilder::Remote reader{1 - r, slots.in(1 - r, s), s, bytes - putBytes, bytes};
      put = b.put(reader, at(a.sendbuf, bytes - putBytes, 1), putBytes, core::Deps{all});
    }
    b.signal(kOutReady, s, core::Deps{put});
    // The readers' words are read (a Put reads its word first): they may rewrite them.
    int32_t read = b.wait(kInFree, s, core::Deps{b.signal(kInFree, s, core::Deps{put})});
    b.signal(kOutFree, s, core::Deps{read});
  } else {
    int32_t all = b.wait(kInReady, s, core::Deps{b.signal(kInReady, s, core::Deps{publish(a.recvbuf, 0)})});
    const core::ProgramBuilder::Remote root{a.root, slots.in(a.root, s), s, 0, bytes};
    int32_t read = b.fetch(root, a.recvbuf, bytes, core::Deps{all});
    b.signal(kInFree, s, core::Deps{read});
    // The root's part, where it puts one, is in once it posts.
    int32_t whole = b.wait(kOutReady, s, core::Deps{b.signal(kOutReady, s, core::Deps{read})});
    b.signal(kOutFree, s, core::Deps{whole});
  }
}

// The single copy of an AllGather: every rank publishes where its block lies (its input, in
// its in-slot's word of one chunk number), then reads every other rank's block from there
// straight into its result, in one pass each, starting after its own rank so that no two ranks
// read the same block first; then it waits until every rank has read its block, so that the
// block is not changed while read. Each block crosses memory once per reader and never into a
// slot: a rank reads (n-1) blocks and, out of place, copies its own.
void singleCopyAllGather(const Args& a, const JobShape& t, core::Scratch& scratch, core::ProgramBuilder& b) {
  if (a.count == 0) return;
  SingleCopyCall call(a, t, scratch, b);
  const int n = t.nranks, r = call.r;
  const uint64_t s = call.s, bytes = call.bytes;
  const Slots& slots = call.slots;
  int32_t in = call.publish(a.sendbuf, 0);
  int32_t all = b.wait(kInReady, s, core::Deps{b.signal(kInReady, s, core::Deps{in})});
  uint8_t* const out = static_cast<uint8_t*>(a.recvbuf);
  int32_t own = -1;
  if (a.sendbuf != out + static_cast<size_t>(r) * bytes)
    own = b.local(core::reduceAction(out + static_cast<size_t>(r) * bytes, a.sendbuf, nullptr, bytes, call.raw));
  int32_t read = all;
  for (int i = 1; i < n; ++i) {
    const int q = (r + i) % n;
    const core::ProgramBuilder::Remote from{q, slots.in(q, s), s, 0, bytes};
    read = b.fetch(from, out + static_cast<size_t>(q) * bytes, bytes, core::Deps{read});
  }
  int32_t done = b.wait(kInFree, s, core::Deps{b.signal(kInFree, s, core::Deps{read, own})});
  // Nothing goes through the out-slots: the other counters are kept in step for later chunks.
  b.signal(kOutReady, s, core::Deps{done});
  b.signal(kOutFree, s, core::Deps{done});
}

// The single copy of a Reduce, at 2 ranks: each reads the other's input where it lies, a chunk
// at a time into a buffer of its own, and reduces it there, so that both cores reduce at once
// where the chain's root reduces every byte that the sender copied into the link. The root
// publishes its input and its result, and makes the first part of the result, kReduceRootShare
// of it: it reads the sender's input and reduces it with its own into its result. The sender
// makes the rest: it reads that part of the root's input, adds its own and writes the sum into
// the root's result, one more copy through the kernel, so its part is the smaller. Both take
// the root's input first and the sender's second: every element has the same operands in the
// same order whoever makes it. The call ends when both have read and written, so that neither
// input is changed while the other reads it.
constexpr size_t kReduceChunkBytes = size_t(256) << 10;
constexpr double kReduceRootShare = 0.625;
size_t reduceRootElems(size_t n) { return n - n / 8 * 3; }  // kReduceRootShare of n, rounded up

void singleCopyReduce(const Args& a, const JobShape& t, core::Scratch& scratch, core::ProgramBuilder& b) {
  if (a.count == 0) return;
  SingleCopyCall call(a, t, scratch, b);
  const Reducer red{a, t.nranks};
  const int r = call.r, other = 1 - r;
  const uint64_t s = call.s;
  const size_t E = dataTypeSize(a.dtype), N = a.count, h = reduceRootElems(N);
  const size_t C = std::max<size_t>(1, kReduceChunkBytes / E);
  const bool root = r == a.root;
  int32_t in = call.publish(a.sendbuf, 0, root ? a.recvbuf : nullptr);
  int32_t all = b.wait(kInReady, s, core::Deps{b.signal(kInReady, s, core::Deps{in})});
  const Range part = root ? Range{0, h} : Range{h, N};
  uint8_t* bufs[2] = {static_cast<uint8_t*>(scratch.get(C * E)), static_cast<uint8_t*>(scratch.get(C * E))};
  int32_t last[2] = {all, all};  // the last op on each buffer
  const kernels::ReduceSpec spec = red.spec(true, true);
  for (size_t k = part.begin, i = 0; k < part.end; k += C, i ^= 1) {
    const size_t m = std::min(C, part.end - k);
    const core::ProgramBuilder::Remote theirs{other, call.slots.in(other, s), s, k * E, call.bytes};
    int32_t got = b.fetch(theirs, bufs[i], m * E, core::Deps{last[i]});
    if (root) {
      last[i] = b.local(core::reduceAction(at(a.recvbuf, k, E), at(a.sendbuf, k, E), bufs[i], m, spec), core::Deps{got});
    } else {
      int32_t sum = b.local(core::reduceAction(bufs[i], bufs[i], at(a.sendbuf, k, E), m, spec), core::Deps{got});
      last[i] = b.put(theirs, bufs[i], m * E, core::Deps{sum});
    }
  }
  int32_t done = b.wait(kInFree, s, core::Deps{b.signal(kInFree, s, core::Deps{last[0], last[1]})});
  b.signal(kOutReady, s, core::Deps{done});
  b.signal(kOutFree, s, core::Deps{done});
}
}  // namespace

void stageBroadcast(const Args& a, const JobShape& t, const Plan& p, core::Scratch&, core::ProgramBuilder& b) {
  const int r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (N == 0) return;
  const Slots slots{*t.stage, t.stage->slotBytes()};
  const size_t C = std::max<size_t>(1, std::min(slots.C, p.chunkBytes) / E);  // elements per chunk
  const bool root = r == a.root;
  const kernels::ReduceSpec copy = Reducer{a, t.nranks}.spec(false, false);
  for (size_t k = 0; k * C < N; ++k) {
    const Range chunk{k * C, std::min(N, (k + 1) * C)};
    const uint64_t s = ++*t.stageSeq;
    int32_t ready;
    if (root) {
      // Into the slot and, out of place, into the root's own result while the chunk is in cache
      // (two copies of the bytes: core::runOnCpu).
      core::Action fill = core::reduceAction(slots.in(r, s), at(a.sendbuf, chunk.begin, E), nullptr, chunk.size(), copy);
      if (a.sendbuf != a.recvbuf) fill.dst2 = at(a.recvbuf, chunk.begin, E);
      int32_t in = b.local(fill, core::Deps{waitFor(b, kInFree, s)});
      ready = b.wait(kInReady, s, core::Deps{b.signal(kInReady, s, core::Deps{in})});
    } else {
      int32_t all = b.wait(kInReady, s, core::Deps{b.signal(kInReady, s)});
      ready = b.local(core::reduceAction(at(a.recvbuf, chunk.begin, E), slots.in(a.root, s), nullptr, chunk.size(), copy),
                      core::Deps{all});
    }
    // Read (or, at the root, nothing to read): the other counters follow, for later chunks.
    for (Counter c : {kInFree, kOutReady, kOutFree}) b.signal(c, s, core::Deps{ready});
  }
}

// The hierarchical AllReduce with its phases within the host through the host's shared stage
// (hier.cc has the phases; this is the same plan with slots for messages). Per chunk of a slot:
// copy in, post, wait; reduce this rank's slice of the chunk out of the L in-slots into its
// out-slot; all-reduce that slice with the ranks of its team on the other hosts, in place in the
// out-slot (`inner`, spliced in by buildOnTeam); post, wait; copy the L slices out of the
// out-slots into the result. Chunks pipeline as in stageAllReduce: while one chunk's slice
// crosses the network, the next is reduced.
void stageHierAllReduce(const Args& a, const JobShape& t, const Plan& p, const Algorithm& inner,
                        const int* team, size_t teamSize, int teamIndex, core::Scratch& scratch,
                        core::ProgramBuilder& b) {
  const transport::SharedStage& st = *t.hostStage;
  const int L = st.size(), i = st.index();
  const size_t E = dataTypeSize(a.dtype), N = a.count;
  if (N == 0) return;
  const Reducer red{a, t.nranks};
  const Slots slots{st, st.slotBytes()};
  const size_t C = std::max<size_t>(1, slots.C / E);
  Args sum = a;  // inputs are scaled as they are copied in; Avg divides between hosts
  if (a.op == RedOp::PreMulSum) sum.op = RedOp::Sum;
  Args between = sum;
  if (a.op == RedOp::Avg) between.divideBy = a.divideBy ? a.divideBy : t.nranks;
  const void** srcs = scratch.array<const void*>(static_cast<size_t>(L), nullptr);
  for (size_t k = 0; k * C < N; ++k) {
    const Range chunk{k * C, std::min(N, (k + 1) * C)};
    const uint64_t s = ++*t.hostStageSeq;
    int32_t in = b.local(core::reduceAction(slots.in(i, s), at(a.sendbuf, chunk.begin, E), nullptr, chunk.size(),
                                            red.spec(true, false)),
                         core::Deps{waitFor(b, kInFree, s)});
    int32_t all = b.wait(kInReady, s, core::Deps{b.signal(kInReady, s, core::Deps{in})});
    const Range mine = segment(chunk.size(), L, i);
    uint8_t* slice = slots.out(i, s) + mine.begin * E;
    for (int j = 0; j < L; ++j) srcs[static_cast<size_t>(j)] = slots.in(j, s) + mine.begin * E;
    int32_t freeOut = waitFor(b, kOutFree, s);
    const int32_t before[2] = {all, freeOut};
    int32_t reduced = mine.size() ? b.localAll(core::reduceAction(slice, nullptr, nullptr, mine.size(),
                                                                  Reducer{sum, L}.spec(false, false)),
                                               before, 2, srcs,
                                               static_cast<size_t>(L))
                                  : b.local(core::Action{}, core::Deps{all, freeOut});
    b.signal(kInFree, s, core::Deps{reduced});
    Args sub = between;
    sub.sendbuf = sub.recvbuf = slice;
    sub.count = mine.size();
    int32_t done = buildOnTeam(inner, sub, team, teamSize, teamIndex, p, scratch, b, reduced);
    int32_t gathered = b.wait(kOutReady, s, core::Deps{b.signal(kOutReady, s, core::Deps{done})});
    int32_t firstCopy = -1, lastCopy = -1;  // the copies out are consecutive ops
    for (int j = 0; j < L; ++j) {
      const Range theirs = segment(chunk.size(), L, j);
      if (!theirs.size()) continue;
      lastCopy = b.local(core::reduceAction(at(a.recvbuf, chunk.begin + theirs.begin, E),
                                            slots.out(j, s) + theirs.begin * E, nullptr, theirs.size(),
                                            Reducer{sum, 1}.spec(false, false)),
                         core::Deps{gathered});
      if (firstCopy < 0) firstCopy = lastCopy;
    }
    b.signal(kOutFree, s, core::Deps{firstCopy < 0 ? gathered : b.join(firstCopy, lastCopy + 1)});
  }
}

namespace {
// The largest input (bytes per rank) with which the flat algorithm beats the ring or chain for
// the collectives other than AllReduce: perf/*_perf -S 1 -a 3 on 2 cores (so 4 and 8 ranks are
// oversubscribed), flat against the ring and chain: up to 4 KiB at 2 ranks, 32 KiB at 3 to 7,
// 16 KiB at 8 or more. Gather and Scatter, against the direct and binomial algorithms, take the
// same limits.
size_t flatLimit(int nranks) {
  if (nranks == 2) return size_t(4) << 10;
  return nranks >= 8 ? size_t(16) << 10 : size_t(32) << 10;
}

// A lone Broadcast above a cell (or a slot) runs as a program, pipelined through the root's
// slots (stageBroadcast), as one in a group does; a lone one that fits goes through the cells
// (or a slot) at once.
bool pipelinedBroadcast(const Args& a, const JobShape& t) {
  const size_t bytes = a.count * dataTypeSize(a.dtype);
  return a.kind == Kind::Broadcast && a.count > 0 && t.stage &&
         (bytes > transport::SharedStage::kCellBytes || bytes > t.stage->slotBytes());
}

constexpr const char* kNoStage = "it needs every rank in one shared stage (the ranks of one host, with shared memory on)";

const char* needsStage(const JobShape& t) {
  if (!t.stage) return kNoStage;
  if (t.nranks > kernels::kMaxSources) return "it reduces every rank's slot at once, 16 ranks at most";
  return nullptr;
}

// Flat: one wait, then every rank takes what it needs straight out of the n slots. Traffic per
// rank: its input in (2N), the n inputs read (N its own, (n-1)N from peers), its result out (N).
// Gather: the root reads (n-1)N from peers and writes nN out; Scatter (N the root's n blocks):
// each rank reads its N/n from the root's slot.
class Flat final : public Algorithm {
 public:
  Algo id() const override { return Algo::Flat; }
  bool implements(Kind k) const override { return k != Kind::Send && k != Kind::Recv; }
  const char* unfit(const Args& a, const JobShape& t, bool alone) const override {
    if (const char* why = needsStage(t)) return why;
    if (a.kind == Kind::AllReduce) return nullptr;  // as a program, in chunks of a slot
    // A Broadcast as a program too (stageBroadcast): one above a cell, or any in a group.
    if (a.kind == Kind::Broadcast && a.count > 0 && (pipelinedBroadcast(a, t) || !alone)) return nullptr;
    // The others run only at once, through one slot, and where they beat the ring or chain.
    if (!alone) return "it runs this collective only as a lone call, not in a group";
    if (a.kind == Kind::Barrier) return nullptr;
    if (a.count == 0) return "there is nothing to move";
    const size_t in = flatInput(a, t);
    if (in > t.stage->slotBytes()) return "the input is larger than a slot of the stage (HORA_CHUNK_BYTES)";
    // Through the cells a rooted call does not meet its peers: it beats the ring and chain up to a cell.
    if (in > flatLimit(t.nranks) && !inCells(a, t)) return "the input is above the size where it was measured to beat the ring and chain";
    return nullptr;
  }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    if (a.kind == Kind::Barrier) return waitUs(c.stage, t, c);
    if (pipelinedBroadcast(a, t)) {
      // A pipeline of two stages: the root's copy of a chunk into its slot (a chunk read, a
      // chunk written) beside the readers' copies of the chunk before it out of the slot (a
      // chunk from the stage, a chunk written). The first fill and the last read stand alone;
      // between them each step takes the longer of the two. A wait per chunk and one more.
      const double N = static_cast<double>(a.count * dataTypeSize(a.dtype));
      const double C = std::min(N, static_cast<double>(t.stage ? t.stage->slotBytes() : N));
      const double chunks = std::ceil(N / std::max(1.0, C));
      const double root = bytesUs(2 * C, c.memoryGBps, t), reader = bytesUs(C, c.stage.gbps, t) + bytesUs(C, c.memoryGBps, t);
      return c.base("flat", a.kind) + (chunks + 1) * waitUs(c.stage, t, c) +
             c.factor("flat", a.kind) * (root + reader + (chunks - 1) * std::max(root, reader));
    }
    const double N = static_cast<double>(flatInput(a, t)), n = t.nranks;
    const bool blocks = a.kind == Kind::ReduceScatter || a.kind == Kind::AllToAll || a.kind == Kind::Scatter;
    const double perRank = blocks ? N / n : N;
    const double peers = a.kind == Kind::Broadcast || a.kind == Kind::Scatter ? perRank : (n - 1) * perRank;
    const double out = a.kind == Kind::Gather ? n * perRank : perRank;
    return waitUs(c.stage, t, c) +
           c.factor("flat", a.kind) * (bytesUs(2 * N + 2 * out, c.memoryGBps, t) + bytesUs(peers, c.stage.gbps, t));
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    if (a.kind == Kind::Broadcast) stageBroadcast(a, t, p, s, b);
    else stageAllReduce(a, t, p, s, b);
  }
  bool runsNow(const Args& a, const JobShape& t) const override {
    if (a.kind == Kind::Barrier) return true;
    return a.count > 0 && flatInput(a, t) <= t.stage->slotBytes() && !pipelinedBroadcast(a, t);
  }
  void runNow(const Args& a, const JobShape& t, const AwaitFn& await) const override { stageFlatNow(a, t, await); }
};

// Slice: per chunk two waits; traffic per rank 3N + 3N/n locally and 2(n-1)N/n from peers.
class Slice final : public Algorithm {
 public:
  Algo id() const override { return Algo::Slice; }
  bool implements(Kind k) const override { return k == Kind::AllReduce; }
  const char* unfit(const Args&, const JobShape& t, bool) const override { return needsStage(t); }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype)), n = t.nranks;
    const double chunks = t.stage ? std::max(1.0, std::ceil(N / static_cast<double>(t.stage->slotBytes()))) : 1;
    return c.base("slice", a.kind) + 2 * chunks * waitUs(c.stage, t, c) +
           c.factor("slice", a.kind) * (bytesUs(3 * N + 3 * N / n, c.memoryGBps, t) + bytesUs(2 * (n - 1) * N / n, c.stage.gbps, t));
  }
  void build(const Args& a, const JobShape& t, const Plan& p, core::Scratch& s, core::ProgramBuilder& b) const override {
    stageAllReduce(a, t, p, s, b);
  }
};

constexpr size_t kAllGatherKernelMin = size_t(16) << 10;

// Single: the single copy of a Broadcast (singleCopyBroadcast). Traffic: each reader reads N
// from the root's buffer and writes N; the root, out of place, copies N into its result while
// they read. Two waits, whatever the size: the root's publication, and the readers' end. And of
// an AllGather (singleCopyAllGather): each rank reads the n-1 other blocks of B bytes where
// they lie, one after another, and writes them; two waits.
class SingleCopy final : public Algorithm {
 public:
  Algo id() const override { return Algo::SingleCopy; }
  bool implements(Kind k) const override { return k == Kind::Broadcast || k == Kind::AllGather || k == Kind::Reduce; }
  const char* unfit(const Args& a, const JobShape& t, bool) const override {
    using Access = transport::SharedStage::Access;
    if (!t.stage) return kNoStage;
    if (a.count == 0) return "there is nothing to move";
    if (a.kind == Kind::Reduce) {
      if (t.nranks != 2) return "a Reduce reads through it at 2 ranks only";
      if (a.op == RedOp::PreMulSum) return "each rank scales its own input (PreMulSum)";
      if (t.stage->memberAccess() == Access::Direct)
        return "between threads the chain reduces out of the link at memory speed";
    }
    switch (t.stage->memberAccess()) {
      case Access::None:
        return "the ranks may not read each other's memory (HORA_SHM_SINGLE_COPY=0, or a system call refused)";
      case Access::Kernel:
        // Readers of the root's pages contend in the kernel: 4 MiB at 4 processes took 1453 us
        // against 924 through the root's slots. An AllGather's readers read n-1 different
        // blocks, each from its own process, in different orders: 4 processes in place, 1 MiB
        // in all in 226 us against the ring's 344 and Open MPI's 452 (perf/compare -a 3).
        if (t.nranks != 2 && a.kind == Kind::Broadcast)
          return "between processes it reads through the kernel, at 2 ranks only";
        // A system call and the pinning of the pages per block: 2 processes on 2 cores, in
        // place, took 4.6 us at 8 KiB a rank against the ring's 3.5, 5.3 at 16 KiB against 5.4,
        // 6.9 at 32 KiB against 7.7 (allgather_perf -a 3, medians of 5 alternating rounds).
        if (a.kind == Kind::AllGather && a.count * dataTypeSize(a.dtype) <= kAllGatherKernelMin)
          return "between processes it is no faster than the ring up to 16 KiB a rank";
        break;
      case Access::Direct:
        break;
    }
    // Below a cell's size the cells are faster: there the root runs ahead of its readers,
    // where the single copy meets them at every call (threads, 2 ranks: 16 KiB in 0.6-0.7 us).
    if (a.kind == Kind::Broadcast && a.count * dataTypeSize(a.dtype) <= transport::SharedStage::kCellBytes &&
        t.stage->hasCells())
      return "it is slower than the stage's cells up to a cell's size";
    return nullptr;
  }
  double predictUs(const Args& a, const JobShape& t, const Costs& c) const override {
    const double N = static_cast<double>(a.count * dataTypeSize(a.dtype));
    if (a.kind == Kind::Reduce) {
      // The root reads its share of the sender's input through the kernel and reduces it (three
      // passes of memory: two inputs and the result); the sender reads the rest of the root's
      // input, adds its own and writes the sums into the root's result (two copies through the
      // kernel). Each copy of a chunk pays the kernel's latency.
      const double rootBytes = kReduceRootShare * N, senderBytes = N - rootBytes;
      const double chunk = static_cast<double>(kReduceChunkBytes);
      const double rootUs = std::ceil(rootBytes / chunk) * c.kernelCopy.latencyUs + bytesUs(rootBytes, c.kernelCopy.gbps, t) +
                            bytesUs(3 * rootBytes, c.memoryGBps, t);
      const double senderUs = 2 * std::ceil(senderBytes / chunk) * c.kernelCopy.latencyUs +
                              bytesUs(2 * senderBytes, c.kernelCopy.gbps, t) + bytesUs(3 * senderBytes, c.memoryGBps, t);
      return c.base("single", a.kind) + 2 * waitUs(c.stage, t, c) + c.factor("single", a.kind) * std::max(rootUs, senderUs);
    }
    if (a.kind == Kind::AllGather) {
      // The n-1 other blocks, one after another; a rank's copy of its own block out of place is
      // left out, so that every rank predicts alike (only it knows whether it is in place).
      const double others = static_cast<double>(t.nranks - 1);
      const bool kernel = t.stage && t.stage->memberAccess() == transport::SharedStage::Access::Kernel;
      const double read = kernel ? others * c.kernelCopy.latencyUs + bytesUs(others * N, c.kernelCopy.gbps, t)
                                 : bytesUs(others * N, c.stage.gbps, t) + bytesUs(others * N, c.memoryGBps, t);
      return c.base("single", a.kind) + 2 * waitUs(c.stage, t, c) + c.factor("single", a.kind) * read;
    }
    const double own = a.sendbuf != a.recvbuf ? bytesUs(2 * N, c.memoryGBps, t) : 0;  // the root's copy, meanwhile
    double read;
    if (t.stage && t.stage->memberAccess() == transport::SharedStage::Access::Kernel) {
      // Through the kernel; in place at 2 processes the root writes half while the reader reads half.
      const double mine = a.sendbuf == a.recvbuf && t.nranks == 2 ? N / 2 : N;
      read = c.kernelCopy.latencyUs + bytesUs(mine, c.kernelCopy.gbps, t);
    } else {
      // Every reader reads the root's buffer (from another core: the stage's rate) and writes
      // it into its result, all at once.
      read = bytesUs(N, c.stage.gbps, t) + bytesUs(N, c.memoryGBps, t);
    }
    return c.base("single", a.kind) + 2 * waitUs(c.stage, t, c) + c.factor("single", a.kind) * std::max(read, own);
  }
  void build(const Args& a, const JobShape& t, const Plan&, core::Scratch& s, core::ProgramBuilder& b) const override {
    if (a.kind == Kind::AllGather) singleCopyAllGather(a, t, s, b);
    else if (a.kind == Kind::Reduce) singleCopyReduce(a, t, s, b);
    else singleCopyBroadcast(a, t, s, b);
  }
};
}  // namespace

const Algorithm& algorithmFlat() {
  static const Flat a;
  return a;
}

const Algorithm& algorithmSlice() {
  static const Slice a;
  return a;
}

const Algorithm& algorithmSingleCopy() {
  static const SingleCopy a;
  return a;
}

}  // namespace hora::coll
