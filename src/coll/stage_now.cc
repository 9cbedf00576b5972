// The one-step path of the shared stage (the flat algorithm's runNow): a lone small call, run at
// once through the stage without a program. The counters, slots and cells are stage.cc's
// (stage_layout.h), whose head says what they mean.
#include <cstring>

#include "base/error.h"
#include "base/wait.h"
#include "coll/common.h"
#include "coll/stage_layout.h"
#include "kernels/cpu/reduce.h"

namespace hora::coll {

namespace {
// dst = src, scaled first where the call's op says so (PreMulSum).
void copyIn(void* dst, const void* src, size_t count, const kernels::ReduceSpec& spec, size_t esz) {
  if (spec.premulFirst) {
    void* d[1] = {dst};
    const void* s[1] = {src};
    kernels::reduce(d, 1, s, 1, count, spec);
  } else {
    memcpy(dst, src, count * esz);
  }
}

template <class In>
void reduceFrom(void* dst, const In& in, int n, size_t offset, size_t count, const kernels::ReduceSpec& spec) {
  const void* srcs[kernels::kMaxSources];
  for (int j = 0; j < n; ++j) srcs[j] = in(j) + offset;
  void* d[1] = {dst};
  kernels::reduce(d, 1, srcs, n, count, spec);
}

// How many times a rank with a core of its own looks at its peers' notes before it waits through
// the counters (which spin on, then yield and block): a few microseconds.
constexpr int kNoteSpins = 1024;
}  // namespace

size_t flatInput(const Args& a, const JobShape& t) {
  const bool blocks = a.kind == Kind::ReduceScatter || a.kind == Kind::AllToAll || a.kind == Kind::Scatter;
  return a.count * dataTypeSize(a.dtype) * (blocks ? static_cast<size_t>(t.nranks) : 1);
}

bool inCells(const Args& a, const JobShape& t) {
  const bool rooted = a.kind == Kind::Broadcast || a.kind == Kind::Scatter || a.kind == Kind::Reduce ||
                      a.kind == Kind::Gather;
  return rooted && t.stage && t.stage->hasCells() && flatInput(a, t) <= transport::SharedStage::kCellBytes;
}

bool stageChecksLater(const Args& a, const JobShape& t) { return t.callCheck && t.nranks > 1 && inCells(a, t); }

// Every collective but send/recv, in one step: each rank puts what it shares in its slot and
// posts; once every rank has posted, each takes what it needs straight out of the slots.
//
// A small rooted call puts its data in the cell of its sequence number instead (kCells of them
// per rank): a rank that only gives (a Broadcast's or Scatter's root, a Reduce's or Gather's
// senders) posts and returns, and waits only before it rewrites a cell that a rank may still be
// reading, kCells calls on. So a root runs ahead of its readers as far as the cells allow, and a
// loop of small Broadcasts costs each rank its own work, not a meeting per call. A rank that
// reads compares the call of every rank it reads with its own (their announcements, kept for
// kHistory calls) before it reads; a rank that only gives compares its calls with its
// predecessor's later (stageChecksLater; src/comm/run.cc), so that a mismatch still fails every
// rank, at the latest at its next call.
//
// Each rank that puts something also writes its note of the call (transports/stage.h): the
// sequence number, the call's number and tag, and the input itself where it fits the note. A rank
// that reads finds there, in one cache line, what it would otherwise learn from three (its
// peer's counters, its announcement or history, its slot or cell): that the peer has put its
// input, that their calls agree, and, for the smallest calls, the input. Where a note is not
// there yet, or differs, the rank waits for the counters and compares the announcements as
// before, and that comparison says what differs.
void stageFlatNow(const Args& a, const JobShape& t, const AwaitFn& await) {
  using Note = transport::SharedStage::Note;
  const int n = t.nranks, r = t.rank;
  const size_t E = dataTypeSize(a.dtype), N = a.count, bytes = N * E;
  const Reducer red{a, n};
  const Slots slots{*t.stage, t.stage->slotBytes()};
  const uint64_t s = ++*t.stageSeq;
  const bool cells = inCells(a, t);
  const bool notes = t.stage->hasNotes() && await.callNo() != 0;
  const bool inNote = notes && flatInput(a, t) <= transport::SharedStage::kNoteBytes;
  // A call whose inputs are all in notes rewrites no slot: only its note, kCells calls on.
  const uint64_t depth = cells || inNote ? transport::SharedStage::kCells : 2;
  if (s > depth) await(kInFree, s - depth, -1, false);
  auto in = [&](int j) {
    return inNote ? t.stage->note(j, s)->data : cells ? t.stage->cell(j, s) : slots.in(j, s);
  };
  const bool twoLines = inNote && flatInput(a, t) > transport::SharedStage::kNoteLine;
  // What member j's note says of this call: 1, that it has put its input for this very call; 0,
  // not yet; -1, that it is in another call at this step (the counters' wait then says which).
  // seq alone says so; an input in both lines has the second read beside it, not after.
  auto noted = [&](int j) {
    const Note* note = t.stage->note(j, s);
    if (j == r) return 1;
    if (twoLines && note->seq2.load(std::memory_order_relaxed) != s) return 0;
    if (note->seq.load(std::memory_order_acquire) != s) return 0;
    return note->callNo == await.callNo() && note->tag == await.callTag() ? 1 : -1;
  };
  // Waits until every member (or only `only`) has put its input for this call, and compares
  // their calls: from the notes where they have it (looked at for a while first where every rank
  // has a core: a peer in step with this rank is about to write it), else through the counters.
  auto awaitInputs = [&](int only) {
    const int from = only < 0 ? 0 : only, to = only < 0 ? n : only + 1;
    for (int spin = 0; notes; ++spin) {
      int all = 1;
      for (int j = from; j < to && all == 1; ++j) all = noted(j);
      if (all == 1) return;
      if (all < 0 || !t.spins || spin >= kNoteSpins) break;
      Waiter::relax();
    }
    await(kInReady, s, only, true);
  };
  uint8_t* slot = in(r);
  switch (a.kind) {
    case Kind::AllReduce:
    case Kind::Reduce: copyIn(slot, a.sendbuf, N, red.spec(true, false), E); break;
    case Kind::ReduceScatter: copyIn(slot, a.sendbuf, N * static_cast<size_t>(n), red.spec(true, false), E); break;
    case Kind::AllGather: memcpy(slot, a.sendbuf, bytes); break;
    case Kind::AllToAll: memcpy(slot, a.sendbuf, bytes * static_cast<size_t>(n)); break;
    case Kind::Broadcast:
      if (r == a.root) memcpy(slot, a.sendbuf, bytes);
      break;
    case Kind::Gather: memcpy(slot, a.sendbuf, bytes); break;
    case Kind::Scatter:
      if (r == a.root) memcpy(slot, a.sendbuf, bytes * static_cast<size_t>(n));
      break;
    case Kind::Barrier: break;
    default: fail(Errc::Internal, "stageFlatNow: %s", kindName(a.kind));
  }
  const bool fromRoot = a.kind == Kind::Broadcast || a.kind == Kind::Scatter;
  const bool toRoot = a.kind == Kind::Reduce || a.kind == Kind::Gather;
  const bool rooted = fromRoot || toRoot;
  const bool waitsAll = (t.callCheck && !cells) || !rooted || (toRoot && r == a.root);
  const bool waits = waitsAll || (fromRoot && r != a.root);
  if (notes && !(fromRoot && r != a.root)) {  // everyone but a Broadcast's or Scatter's readers puts
    Note* note = t.stage->note(r, s);
    note->callNo = await.callNo();
    note->tag = await.callTag();
    if (twoLines) note->seq2.store(s, std::memory_order_relaxed);  // before seq: ordered by its release
    note->seq.store(s, std::memory_order_release);
    // The next call's note, last read by the peers 64 calls ago, is fetched for writing now, in
    // the background of this call's return: its first store then finds the line here, where it
    // waited for the line to leave the reader's core (and held up the next locked instruction).
    const char* next = reinterpret_cast<const char*>(t.stage->note(r, s + 1));
    __builtin_prefetch(next, 1, 3);
    if (twoLines) __builtin_prefetch(next + 64, 1, 3);  // its second line
  }
  t.stage->post(kInReady, s);
  if (!waits) {  // nothing to read: done, with one wake for all (a root's own result from its input)
    if (r == a.root && a.kind == Kind::Broadcast && a.recvbuf != a.sendbuf) memcpy(a.recvbuf, a.sendbuf, bytes);
    if (r == a.root && a.kind == Kind::Scatter) {
      const uint8_t* from = at(a.sendbuf, static_cast<size_t>(r) * N, E);
      if (from != a.recvbuf) memcpy(a.recvbuf, from, bytes);
    }
    for (Counter c : {kInFree, kOutReady, kOutFree}) t.stage->post(c, s);
    t.stage->wakeAll();
    return;
  }
  // Through the cells nobody waits for this post (a Broadcast's or Scatter's readers wait for
  // the root's alone, a Reduce's or Gather's root is the one that reads): the wake is the one
  // after the reading, for a rank waiting to rewrite a cell.
  if (!cells) t.stage->wakeAll();
  // Through the slots, every rank waits for every other's post, the root of a Broadcast or
  // Scatter and the ranks of a Reduce or Gather that only give too: each post follows its rank's
  // announcement of the call, so each rank compares its call with every other's before it
  // returns, and a mismatch (another root, say) fails every rank of the call, not only those
  // that read a slot. With HORA_CALL_CHECK=0, and through the cells, a rank waits only for what
  // it reads (the root, everyone, or no one), and after a rooted call a rank may be ahead and
  // asleep: the wake below.
  if (waitsAll) {
    awaitInputs(-1);
  } else if (fromRoot && r != a.root) {
    if (notes && !inNote) __builtin_prefetch(in(a.root));  // its line on the way beside the note's
    awaitInputs(a.root);
  }
  switch (a.kind) {
    case Kind::AllReduce: reduceFrom(a.recvbuf, in, n, 0, N, red.spec(false, true)); break;
    case Kind::Reduce:
      if (r == a.root) {
        const void* srcs[kernels::kMaxSources];
        for (int j = 0; j < n; ++j) srcs[j] = in(j);
        void* d[1] = {a.recvbuf};
        kernels::reduce(d, 1, srcs, n, N, red.spec(false, true));
      }
      break;
    case Kind::ReduceScatter:
      reduceFrom(a.recvbuf, in, n, static_cast<size_t>(r) * bytes, N, red.spec(false, true));
      break;
    case Kind::AllGather:
      for (int j = 0; j < n; ++j) {
        uint8_t* to = at(a.recvbuf, static_cast<size_t>(j) * N, E);
        if (j != r) memcpy(to, in(j), bytes);
        else if (to != a.sendbuf) memcpy(to, a.sendbuf, bytes);
      }
      break;
    case Kind::AllToAll:
      // From the slots, not sendbuf: in place, the buffer is being overwritten.
      for (int j = 0; j < n; ++j)
        memcpy(at(a.recvbuf, static_cast<size_t>(j) * N, E), in(j) + static_cast<size_t>(r) * bytes, bytes);
      break;
    case Kind::Broadcast:
      if (r != a.root) memcpy(a.recvbuf, in(a.root), bytes);
      else if (a.recvbuf != a.sendbuf) memcpy(a.recvbuf, a.sendbuf, bytes);
      break;
    case Kind::Gather:
      if (r != a.root) break;
      for (int j = 0; j < n; ++j) {
        uint8_t* to = at(a.recvbuf, static_cast<size_t>(j) * N, E);
        if (j != r) memcpy(to, in(j), bytes);
        else if (to != a.sendbuf) memcpy(to, a.sendbuf, bytes);
      }
      break;
    case Kind::Scatter: {
      // The root's own block from its input (in place, already there), the others' from its slot.
      const uint8_t* from = r == a.root ? at(a.sendbuf, static_cast<size_t>(r) * N, E)
                                        : in(a.root) + static_cast<size_t>(r) * bytes;
      if (from != a.recvbuf) memcpy(a.recvbuf, from, bytes);
      break;
    }
    default: break;
  }
  // As the programs do: the other counters follow, so that later chunks of either algorithm
  // find them in step. Nobody can be asleep waiting for them: a rank that waits for these
  // values (at slot reuse, two calls on) has seen every rank post InReady of the call between,
  // which each did after these stores. A rank waiting to rewrite a cell may be: the wake.
  for (Counter c : {kInFree, kOutReady, kOutFree}) t.stage->post(c, s);
  if (rooted && (cells || !t.callCheck)) t.stage->wakeAll();
}


}  // namespace hora::coll
