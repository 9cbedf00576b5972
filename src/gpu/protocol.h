// The device-initiated collectives of the ranks of one host: the collective is a kernel on the
// caller's stream, which moves and reduces the data itself through the regions of the ranks
// (each rank's own device memory, mapped into every other's once, by CUDA IPC or, between ranks
// of one process, as the pointer itself) and synchronises through counters in those regions. No
// host thread, event or stream wait is on this path.
//
// The steps are written once, here, as code for the host and the device over a policy (X) that
// says how a block's threads share work, load and store a counter, read the clock and pause:
// protocol.cu runs them as a CUDA kernel (X = a block of threads), protocol_host.cc on the
// emulated GPU (X = one thread of the emulated stream), so the suite runs the very state
// machine a GPU runs.
//
// Each rank's region, per block b (a block is a channel of its own: its piece of every chunk,
// its counters and its slots):
//   - counters that only the owner writes, each only growing: kIn (chunks deposited), kOut
//     (chunks whose reduced part is in the out-slot), kFreed (chunks the owner has finished
//     reading from every region), kLlDone (LL calls read), and the call the owner is in with its
//     tag, so that a member waiting on another can tell a mismatched call from a late one;
//   - two LL buffers (block 0 only uses them): for a small call, the data and a flag in one
//     8-byte store (4 bytes of data, the call's LL number), so that a reader sees data and flag
//     together and no counter round trip is needed;
//   - two slots, each an in-area and an out-area of slotBytes;
//   - for send/recv (the first kP2pBlocks blocks), per peer j: a Pair of words (chunks deposited
//     for j, chunks from j consumed, the size of the transfer each deposited chunk belongs to)
//     and two p2p slots of p2pBytes that this rank deposits j's chunks in.
//
// The protocols, per collective (n ranks, each chunk g of a call posted as the value g):
//   LL (the call's bytes per rank at most kLlBytes): each contributor writes its data as LL words
//     into its buffer (LL number s, buffer s % 2; first it waits until the readers are done with
//     call s - 2, kLlDone); each reader polls the words of the buffers it needs until their flag
//     is s, unpacks them (into its landing area, or straight into the output), reduces, and
//     posts kLlDone = s. One pass, no counter.
//   counters (larger): per chunk, wait until the readers have freed the slot used two chunks
//     before (kFreed >= g - 2), deposit this rank's part into its in-area, post kIn = g; then
//       AllReduce: reduce part r of the chunk from every in-area into this rank's out-area and the
//                  output, post kOut = g, copy the other parts from the others' out-areas;
//       Broadcast: the root deposits, the others copy its in-area;
//       Reduce: the root reduces every in-area into the output;
//       AllGather: copy every in-area to its place in the output;
//       ReduceScatter: the in-area holds the chunk of each of the n blocks; reduce block r's;
//     post kFreed = g. Two slots: a chunk's deposit overlaps the previous chunk's reads.
//   send/recv (a batch's, below): a transfer of B bytes is cut into chunks of p2pBytes, chunk i
//     on block i % p2pBlocks; per pair and block, chunk g (counted over every transfer between
//     the two) goes through the sender's p2p slot g % 2 for that receiver: the sender waits until
//     the receiver has consumed chunk g - 2, deposits, writes B beside it and posts sent = g; the
//     receiver waits for sent >= g, checks B against its own (another size is a mismatch, named),
//     copies the chunk out and posts acked = g. A block moves whichever of its transfers can move
//     (a rank may send to and receive from a peer in one group, in either order), the transfers
//     between one pair in one direction in their order.
//
// A batch is one launch of several calls (a group): every block runs its part of each collective
// in order, then of all the send/recvs together.
//
// Every wait polls the abort word of the rank's status (host-mapped memory the host sets on
// horaCommAbort, when it finds a peer dead, or when the communicator fails) and its deadline:
// the first failure is written to the status (what it waited for, from whom), every other wait
// of the kernel ends, and the kernel returns; the host turns the status into the communicator's
// error naming the culprit (comm/device.cc). A GPU never hangs on a peer.
#pragma once
#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define HORA_PD __host__ __device__ __forceinline__
#else
#define HORA_PD inline
#endif

namespace hora::gpu {

inline constexpr int kMaxRanks = 8;
inline constexpr int kMaxBlocks = 32;
inline constexpr size_t kLlBytes = size_t(16) << 10;  // a call's bytes per rank through LL, at most
inline constexpr size_t kDirectBytes = size_t(256) << 10;  // a direct call's bytes per block, at least
inline constexpr int kSlots = 2;

enum class Coll : uint8_t { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, Send, Recv };
HORA_PD bool isP2p(Coll c) { return c == Coll::Send || c == Coll::Recv; }
// kCall: the last call the owner announced; kTag + call % 3: the tags of its last three calls.
// A direct call (below): kSend and kRecv, the owner's buffers, published by kPtrs = the call's
// number; kDone = the call's number once the owner's block has written its part everywhere.
// kSent and kAcked are a Pair's words (send/recv), named so in a failure's report.
enum Counter : int { kIn = 0, kOut = 1, kFreed = 2, kLlDone = 3, kCall = 4, kTag = 5, kDone = 8, kSend = 9,
                     kRecv = 10, kPtrs = 11, kSent = 12, kAcked = 13 };
inline constexpr int kTags = 3;
// SizeMismatch: a send of another size than its receive (target: this rank's bytes; seen: the
// peer's).
enum class Code : uint32_t { Ok = 0, Aborted = 1, TimedOut = 2, Mismatch = 3, SizeMismatch = 4 };

struct alignas(64) Counters {
  uint64_t c[16];
};

// Send/recv between this rank (the owner) and a peer, per block: sent, the chunks deposited for
// the peer (its p2p slots); acked, the chunks from the peer consumed; total[g % kSlots], the
// size of the transfer that deposited chunk g belongs to. Owner-written, each only growing.
struct alignas(64) Pair {
  uint64_t sent, acked;
  uint64_t total[2];
  uint64_t pad[4];
};
inline constexpr int kP2pBlocks = 8;  // the blocks that carry send/recv
inline constexpr int kMaxCalls = 16;  // the calls of one launch (a Batch)

// What a block has done so far, in its owner's region, read and advanced by each of its kernels
// (not by the host): a call's numbers come from here, so a CUDA graph that captured the launch
// replays it with the numbers of the replay.
struct alignas(64) BlockState {
  uint64_t calls;   // calls
  uint64_t chunks;  // chunks (the value of the last kIn, kOut and kFreed posted)
  uint64_t ll;      // LL calls (the last kLlDone posted)
  uint64_t claim;   // block 0's: non-zero once a block of this rank has written a failure
  uint64_t finished, cut;  // its kernels returned, and cut short: copied to the Status, which is
                           // host memory that a kernel writes but never reads back (a round trip)
  uint64_t pad[2];
};

// Where everything is in each rank's region (the same on every rank).
struct Layout {
  int blocks = 1;
  size_t slotBytes = size_t(1) << 20;  // each of a slot's two areas, per block
  size_t p2pBytes = size_t(256) << 10;  // a send/recv chunk, per block and peer
  HORA_PD int p2pBlocks() const { return blocks < kP2pBlocks ? blocks : kP2pBlocks; }
  HORA_PD size_t countersAt(int b) const { return static_cast<size_t>(b) * sizeof(Counters); }
  HORA_PD size_t stateAt(int b) const { return kMaxBlocks * sizeof(Counters) + static_cast<size_t>(b) * sizeof(BlockState); }
  HORA_PD size_t llAt(int buf) const {
    return kMaxBlocks * (sizeof(Counters) + sizeof(BlockState)) + static_cast<size_t>(buf) * 2 * kLlBytes;
  }
  // Where the LL data of member j lands, unpacked (ReduceScatter: its part for this rank).
  HORA_PD size_t landingAt(int j) const { return llAt(2) + static_cast<size_t>(j) * kLlBytes; }
  HORA_PD size_t pairAt(int b, int peer) const {
    return landingAt(kMaxRanks) + (static_cast<size_t>(b) * kMaxRanks + static_cast<size_t>(peer)) * sizeof(Pair);
  }
  // (Everything before the first slot starts at 0: the host zeroes it once.)
  HORA_PD size_t slotAt(int b, int slot, int out) const {
    return pairAt(kP2pBlocks, 0) + ((static_cast<size_t>(b) * kSlots + slot) * 2 + out) * slotBytes;
  }
  HORA_PD size_t p2pSlotAt(int b, int peer, int slot) const {
    return slotAt(blocks, 0, 0) +
           ((static_cast<size_t>(b) * kMaxRanks + static_cast<size_t>(peer)) * kSlots + static_cast<size_t>(slot)) * p2pBytes;
  }
  HORA_PD size_t bytes() const { return p2pSlotAt(p2pBlocks(), 0, 0); }
};

// In host-mapped memory, one per rank and communicator: the host's abort word and the kernel's
// account of its first failure. The device only loads and stores here, never an atomic
// read-modify-write (which host memory over PCIe does not support): a failure is claimed first
// by an atomic on the rank's own device memory, and each block counts its own kernels.
struct Status {
  uint32_t abort;  // non-zero: every wait ends (the host's, or a failing block's)
  uint32_t code;   // Code of the first failure (0 while none)
  int32_t peer;    // the rank waited for
  int32_t counter;  // Counter, or -1 for an LL word
  uint64_t call;    // the call's number on this communicator's device path
  uint64_t target, seen;  // the value waited for, and the last seen
  uint64_t theirTag;      // Mismatch: the peer's tag for the same call number
  // By block (each written by that block alone, in its kernels' stream order): its kernels
  // that have returned, and those of them cut short (before the end of their call).
  uint64_t finished[kMaxBlocks];
  uint64_t cut[kMaxBlocks];
};
// What the host reads of them.
inline uint64_t sumOf(const uint64_t* perBlock) {
  uint64_t s = 0;
  for (int b = 0; b < kMaxBlocks; ++b) s += __atomic_load_n(&perBlock[b], __ATOMIC_ACQUIRE);
  return s;
}

// A call, as the kernel (or the emulated stream) runs it.
struct Desc {
  Coll coll = Coll::AllReduce;
  int rank = 0, nranks = 1, root = 0;  // Send, Recv: root is the peer
  size_t bytes = 0;   // per rank: AllReduce, Broadcast, Reduce: the buffer; AllGather: the send
                      // buffer; ReduceScatter: the receive buffer; Send, Recv: the message
  size_t esize = 1;   // element size: parts are cut at elements
  const void* send = nullptr;
  void* recv = nullptr;
  uint8_t* regions[kMaxRanks] = {};
  Layout layout;
  int blocks = 1;          // launched: the first `blocks` of the layout's (blocksFor)
  bool ll = false;         // by LL (fitsLl)
  bool oneGpu = false;     // every rank's region on this GPU (ranks as threads of one): the
                           // counters need ordering among its SMs only, not across the system
  bool direct = false;     // reads and writes the ranks' buffers in place (Run::direct)
  uint64_t tag = 0;        // what the call is (kind, count, type, op, root): equal on every rank
  Status* status = nullptr;
  uint64_t timeoutNs = 0;
  // The reduction (kernels::ReduceSpec's, without PreMulSum, which does not take this path).
  int dtype = 0, op = 0;
  bool divide = false;
  uint64_t divisor = 1;
};

// The chunk unit of a call per block: ReduceScatter's in-area holds a piece of each of the n
// blocks.
HORA_PD size_t unitOf(const Desc& d) {
  size_t unit = d.coll == Coll::ReduceScatter ? d.layout.slotBytes / static_cast<size_t>(d.nranks) : d.layout.slotBytes;
  unit -= unit % d.esize;
  return unit;
}
// Chunks per block of a call (every rank computes the same).
HORA_PD uint64_t chunksOf(const Desc& d) {
  if (d.ll || d.direct || d.bytes == 0) return 0;
  const size_t step = unitOf(d) * static_cast<size_t>(d.blocks);
  return (d.bytes + step - 1) / step;
}
// The blocks a call launches, the same on every rank: one for an LL call, else as many as its
// chunks fill, up to the layout's. A block not launched keeps its numbers for a later call (each
// block's are its own).
HORA_PD int blocksFor(const Desc& d) {
  if (d.ll || d.bytes == 0) return 1;
  if (d.direct) {  // a block per kDirectBytes at least
    const size_t want = (d.bytes + kDirectBytes - 1) / kDirectBytes;
    return want < static_cast<size_t>(d.layout.blocks) ? static_cast<int>(want) : d.layout.blocks;
  }
  const size_t unit = unitOf(d);
  const size_t want = unit ? (d.bytes + unit - 1) / unit : 1;
  return want < static_cast<size_t>(d.layout.blocks) ? static_cast<int>(want) : d.layout.blocks;
}
// Whether a call of these bytes per rank goes by LL.
HORA_PD bool fitsLl(Coll c, size_t bytes, int nranks) {
  const size_t own = c == Coll::ReduceScatter ? bytes * static_cast<size_t>(nranks) : bytes;
  return bytes > 0 && own <= kLlBytes;
}

// A block's account of a kernel's part it ran (a call, or a batch's send/recvs): in its state,
// then in the status the host reads (finished; cut: it stopped before the end).
template <class X>
HORA_PD void account(const X& x, const Desc& d, int b, bool whole) {
  x.sync();
  if (x.tid() != 0) return;
  BlockState* state = reinterpret_cast<BlockState*>(d.regions[d.rank] + d.layout.stateAt(b));
  const uint64_t cut = X::load64(&state->cut) + (whole ? 0 : 1), finished = X::load64(&state->finished) + 1;
  X::store64(&state->cut, cut);
  X::store64(&state->finished, finished);
  X::fenceSystem();
  X::store64(&d.status->cut[b], cut);
  X::store64(&d.status->finished[b], finished);
}

// Records the first failure (of any block of this rank) in the status and stops every wait.
template <class X>
HORA_PD void recordFailure(const Desc& d, Code code, int peer, int counter, uint64_t call, uint64_t target, uint64_t seen,
                           uint64_t theirs) {
  uint64_t* claim = &reinterpret_cast<BlockState*>(d.regions[d.rank] + d.layout.stateAt(0))->claim;
  if (X::claim(claim)) {  // the account first, then its code: the host reads the code first
    d.status->peer = peer;
    d.status->counter = counter;
    d.status->call = call;
    d.status->target = target;
    d.status->seen = seen;
    d.status->theirTag = theirs;
    X::fenceSystem();
    X::store32(&d.status->code, static_cast<uint32_t>(code));
  }
  X::fenceSystem();
  X::store32(&d.status->abort, 1u);
}

template <class X>
struct Run {
  X& x;
  const Desc& d;
  int b;  // the block
  // This call's numbers, from the block's state: the call (announced, for the mismatch check),
  // the chunks before it, and its LL number.
  uint64_t call = 0, chunkBase = 0;
  uint32_t llSeq = 0;

  HORA_PD Counters* counters(int j) const {
    return reinterpret_cast<Counters*>(d.regions[j] + d.layout.countersAt(b));
  }
  HORA_PD bool stopped() const { return X::load32(&d.status->abort) != 0; }

  HORA_PD void fail(Code code, int peer, int counter, uint64_t target, uint64_t seen, uint64_t theirs) const {
    recordFailure<X>(d, code, peer, counter, call, target, seen, theirs);
  }

  // Whether member j is not in another call under this call's number (as far as it can be
  // told: it has announced this number, and not three more since); records the mismatch.
  HORA_PD bool sameCall(int j) const {
    const Counters* theirs = counters(j);
    const uint64_t at = X::load64(&theirs->c[kCall]);
    if (at < call || at - call >= kTags) return true;
    const uint64_t t = X::load64(&theirs->c[kTag + static_cast<int>(call % kTags)]);
    if (X::load64(&theirs->c[kCall]) - call >= kTags || t == d.tag) return true;
    fail(Code::Mismatch, j, -1, 0, 0, t);
    return false;
  }

  // Polls `word` (member `peer`'s counter) until it reaches target; false when the kernel must
  // stop (an abort, the deadline, or a mismatched call of that member). Any one thread.
  HORA_PD bool until(const uint64_t* word, uint64_t target, int peer, int counter) const {
    uint64_t start = 0;
    unsigned spins = 0;
    for (;;) {
      const uint64_t v = X::load64(word);
      if (v >= target) return true;
      // (The abort word is host memory: a read is a round trip over the bus, so it is read
      // with the other checks, not at every poll.)
      if ((++spins & 63) == 0) {
        if (stopped()) return false;
        if (!sameCall(peer)) return false;
        const uint64_t now = X::now();
        if (!start) start = now;
        else if (now - start > d.timeoutNs) {
          fail(Code::TimedOut, peer, counter, target, v, 0);
          return false;
        }
      }
      X::pause(spins);
    }
  }

  // Thread 0 waits for `counter` of every member in [first, last] but `skip` to reach target;
  // the block then goes on together, or stops together.
  HORA_PD bool all(int counter, uint64_t target, int first, int last, int skip) const {
    bool ok = true;
    if (x.tid() == 0)
      for (int j = first; j <= last && ok; ++j)
        if (j != skip) ok = until(&counters(j)->c[counter], target, j, counter);
    return x.agree(ok);
  }
  HORA_PD bool everyone(int counter, uint64_t target) const { return all(counter, target, 0, d.nranks - 1, d.rank); }

  // Orders this rank's stores before the next for its peers: among one GPU's SMs where every
  // rank is on it (a system-wide fence costs more), else across GPUs and the host.
  HORA_PD void fence() const {
    if (d.oneGpu) X::fenceDevice();
    else X::fenceSystem();
  }

  HORA_PD void post(int counter, uint64_t value) const {
    x.sync();  // every thread's stores before
    if (x.tid() == 0) {
      fence();
      X::store64(&counters(d.rank)->c[counter], value);
    }
  }

  HORA_PD void announce() const {
    if (x.tid() == 0) {
      Counters* mine = counters(d.rank);
      X::store64(&mine->c[kTag + static_cast<int>(call % kTags)], d.tag);
      fence();
      X::store64(&mine->c[kCall], call);
      fence();  // before any data of the call
    }
    x.sync();
  }

  // ---- LL ----
  HORA_PD uint64_t* llWords(int j, int buf) const { return reinterpret_cast<uint64_t*>(d.regions[j] + d.layout.llAt(buf)); }

  // This rank's `bytes` at src into its LL buffer, flagged s.
  HORA_PD void llWrite(const uint8_t* src, size_t bytes, uint64_t* words, uint32_t s) const {
    const size_t n = (bytes + 3) / 4;
    for (size_t i = static_cast<size_t>(x.tid()); i < n; i += static_cast<size_t>(x.nthreads())) {
      uint32_t v = 0;
      const size_t at = i * 4;
      if (at + 4 <= bytes) v = X::read32(src + at);
      else
        for (size_t k = 0; at + k < bytes; ++k) v |= static_cast<uint32_t>(src[at + k]) << (8 * k);
      X::store64(&words[i], static_cast<uint64_t>(s) << 32 | v);
    }
  }

  // Member j's bytes [from, from + bytes) of its buffer, once flagged s, into dst. Every thread
  // polls its own words; false (for every thread) when the kernel stops.
  HORA_PD bool llRead(int j, const uint64_t* words, size_t from, size_t bytes, uint8_t* dst, uint32_t s) const {
    const size_t first = from / 4, end = (from + bytes + 3) / 4;
    bool ok = true;
    for (size_t i = first + static_cast<size_t>(x.tid()); i < end && ok; i += static_cast<size_t>(x.nthreads())) {
      const uint64_t* w = &words[i];
      uint64_t v = X::load64(w);
      if (static_cast<uint32_t>(v >> 32) != s) {
        uint64_t start = 0;
        unsigned spins = 0;
        while (static_cast<uint32_t>((v = X::load64(w)) >> 32) != s) {
          if ((++spins & 63) == 0) {
            if (stopped() || !sameCall(j)) {
              ok = false;
              break;
            }
            const uint64_t now = X::now();
            if (!start) start = now;
            else if (now - start > d.timeoutNs) {
              fail(Code::TimedOut, j, -1, s, v >> 32, 0);
              ok = false;
              break;
            }
          }
          X::pause(spins);
        }
        if (!ok) break;
      }
      const uint32_t data = static_cast<uint32_t>(v);
      const size_t at = i * 4;  // the word's first byte, in the buffer
      if (at >= from && at + 4 <= from + bytes) {
        X::write32(dst + (at - from), data);
      } else {
        for (size_t k = 0; k < 4; ++k)
          if (at + k >= from && at + k < from + bytes) dst[at + k - from] = static_cast<uint8_t>(data >> (8 * k));
      }
    }
    // Its words were this call's: it announced the call before writing them.
    if (ok && x.tid() == 0) ok = sameCall(j);
    return x.agree(ok);
  }

  HORA_PD bool ll() const {
    const int n = d.nranks, r = d.rank;
    const uint32_t s = llSeq;
    const int buf = static_cast<int>(s & 1);
    const uint8_t* send = static_cast<const uint8_t*>(d.send);
    uint8_t* recv = static_cast<uint8_t*>(d.recv);
    uint8_t* mine = d.regions[r];
    // The root of a Reduce reads its own input where it is; a Broadcast's other ranks send none.
    const bool contributes = d.coll == Coll::Broadcast ? r == d.root : d.coll != Coll::Reduce || r != d.root;
    // Whose buffers this rank reads.
    int rFirst = 0, rLast = n - 1;
    if (d.coll == Coll::Broadcast && r != d.root) rFirst = rLast = d.root;
    if (contributes) {
      // Every member is done with call s - 2, the last to use this buffer (whoever read it then:
      // the roots change from call to call).
      if (s > 2 && !everyone(kLlDone, s - 2)) return false;
      const size_t own = d.coll == Coll::ReduceScatter ? d.bytes * static_cast<size_t>(n) : d.bytes;
      llWrite(send, own, llWords(r, buf), s);
    }
    const bool reduces = d.coll == Coll::AllReduce || d.coll == Coll::ReduceScatter || (d.coll == Coll::Reduce && r == d.root);
    const bool gathers = d.coll == Coll::AllGather || (d.coll == Coll::Broadcast && r != d.root);
    if (reduces) {
      const void* srcs[kMaxRanks];
      const size_t part = d.coll == Coll::ReduceScatter ? static_cast<size_t>(r) * d.bytes : 0;
      for (int j = 0; j < n; ++j) {
        if (j == r) {
          srcs[j] = send + part;
          continue;
        }
        uint8_t* landing = mine + d.layout.landingAt(j);
        if (!llRead(j, llWords(j, buf), part, d.bytes, landing, s)) return false;
        srcs[j] = landing;
      }
      x.reduce(recv, srcs, n, d.bytes / d.esize, d);
    } else if (gathers) {
      for (int j = rFirst; j <= rLast; ++j) {
        uint8_t* to = d.coll == Coll::AllGather ? recv + static_cast<size_t>(j) * d.bytes : recv;
        if (j == r) continue;
        if (!llRead(j, llWords(j, buf), 0, d.bytes, to, s)) return false;
      }
    }
    // This rank's own part of the output.
    if (d.coll == Coll::AllGather) x.copy(recv + static_cast<size_t>(r) * d.bytes, send, d.bytes);
    if (d.coll == Coll::Broadcast && r == d.root) x.copy(recv, send, d.bytes);
    post(kLlDone, s);
    return true;
  }

  // ---- direct: every rank a thread of this process on this GPU ----
  // A call between ranks whose buffers this kernel can address (threads of one process on one
  // GPU) reads and writes them in place: no slot, no chunk. Block b takes slice b of the buffer:
  // it waits for every rank's block b to publish its buffers for the call, does its share, posts
  // kDone and waits for every rank's block b to have done the same (so that no rank's kernel
  // ends while its buffers are still read or written). The shares:
  //   AllReduce, Reduce: part r of the slice, reduced from every rank's input into every rank's
  //     output (Reduce: the root's);
  //   ReduceScatter: this rank's output slice, reduced from its block of every rank's input;
  //   AllGather: this rank's input slice, copied to its place in every rank's output;
  //   Broadcast: this rank's output slice, copied from the root's input.
  // Each element is read once from each input it needs and written once to each output.
  HORA_PD bool direct() const {
    const int n = d.nranks, r = d.rank;
    if (x.tid() == 0) {
      Counters* mine = counters(r);
      X::store64(&mine->c[kSend], static_cast<uint64_t>(reinterpret_cast<uintptr_t>(d.send)));
      X::store64(&mine->c[kRecv], static_cast<uint64_t>(reinterpret_cast<uintptr_t>(d.recv)));
      fence();
      X::store64(&mine->c[kPtrs], call);
    }
    if (!everyone(kPtrs, call)) return false;
    const size_t count = d.bytes / d.esize, unit = d.esize < 16 ? 16 / d.esize : 1, e = d.esize;
    const auto roundUp = [unit](size_t v) { return (v + unit - 1) / unit * unit; };
    const auto clip = [](size_t v, size_t hi) { return v < hi ? v : hi; };
    const size_t per = roundUp((count + static_cast<size_t>(d.blocks) - 1) / static_cast<size_t>(d.blocks));
    const size_t sa = clip(static_cast<size_t>(b) * per, count), se = clip(sa + per, count);
    const uint8_t* send[kMaxRanks];
    uint8_t* recv[kMaxRanks];
    for (int j = 0; j < n; ++j) {
      const Counters* theirs = counters(j);
      send[j] = reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(X::load64(&theirs->c[kSend])));
      recv[j] = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(X::load64(&theirs->c[kRecv])));
    }
    const void* srcs[kMaxRanks];
    void* dsts[kMaxRanks];
    switch (d.coll) {
      case Coll::AllReduce:
      case Coll::Reduce: {
        const size_t pp = roundUp((se - sa + static_cast<size_t>(n) - 1) / static_cast<size_t>(n));
        const size_t pa = clip(sa + static_cast<size_t>(r) * pp, se), pe = clip(pa + pp, se);
        for (int j = 0; j < n; ++j) srcs[j] = send[j] + pa * e;
        if (d.coll == Coll::AllReduce) {
          for (int j = 0; j < n; ++j) dsts[j] = recv[j] + pa * e;
          x.reduceN(dsts, n, srcs, n, pe - pa, d);
        } else {  // (only the root has an output)
          dsts[0] = recv[d.root] + pa * e;
          x.reduceN(dsts, 1, srcs, n, pe - pa, d);
        }
        break;
      }
      case Coll::ReduceScatter:
        for (int j = 0; j < n; ++j) srcs[j] = send[j] + (static_cast<size_t>(r) * count + sa) * e;
        dsts[0] = recv[r] + sa * e;
        x.reduceN(dsts, 1, srcs, n, se - sa, d);
        break;
      case Coll::AllGather:
        for (int j = 0; j < n; ++j) x.copy(recv[j] + (static_cast<size_t>(r) * count + sa) * e, send[r] + sa * e, (se - sa) * e);
        break;
      case Coll::Broadcast:
        x.copy(recv[r] + sa * e, send[d.root] + sa * e, (se - sa) * e);
        break;
      case Coll::Send:
      case Coll::Recv: break;  // (P2p's)
    }
    post(kDone, call);
    return everyone(kDone, call);
  }

  // ---- counters ----
  HORA_PD uint8_t* slot(int j, uint64_t g, int out) const {
    return d.regions[j] + d.layout.slotAt(b, static_cast<int>(g % kSlots), out);
  }

  HORA_PD bool chunks() const {
    const int n = d.nranks, r = d.rank;
    const size_t unit = unitOf(d), step = unit * static_cast<size_t>(d.blocks);
    const uint64_t k = chunksOf(d);
    const uint8_t* send = static_cast<const uint8_t*>(d.send);
    uint8_t* recv = static_cast<uint8_t*>(d.recv);
    for (uint64_t i = 0; i < k; ++i) {
      const uint64_t g = chunkBase + i + 1;
      size_t off = static_cast<size_t>(i) * step + static_cast<size_t>(b) * unit;
      size_t len = 0;
      if (off < d.bytes) len = d.bytes - off < unit ? d.bytes - off : unit;
      else off = d.bytes;
      // The slot of chunk g - 2 is free on every member.
      if (g > kSlots && !everyone(kFreed, g - kSlots)) return false;
      uint8_t* in = slot(r, g, 0);
      switch (d.coll) {
        case Coll::Broadcast:
          if (r == d.root) x.copy(in, send + off, len);
          break;
        case Coll::ReduceScatter:
          for (int j = 0; j < n; ++j) x.copy(in + static_cast<size_t>(j) * len, send + static_cast<size_t>(j) * d.bytes + off, len);
          break;
        default:
          x.copy(in, send + off, len);
      }
      post(kIn, g);
      const void* srcs[kMaxRanks];
      switch (d.coll) {
        case Coll::AllReduce: {
          if (!everyone(kIn, g)) return false;
          // Part j of the chunk: [j * part, (j + 1) * part), cut at elements.
          size_t part = (len / d.esize + static_cast<size_t>(n) - 1) / static_cast<size_t>(n) * d.esize;
          const size_t at = static_cast<size_t>(r) * part < len ? static_cast<size_t>(r) * part : len;
          const size_t mineLen = len - at < part ? len - at : part;
          for (int j = 0; j < n; ++j) srcs[j] = slot(j, g, 0) + at;
          x.reduce2(slot(r, g, 1) + at, recv + off + at, srcs, n, mineLen / d.esize, d);
          post(kOut, g);
          if (!everyone(kOut, g)) return false;
          for (int j = 0; j < n; ++j) {
            if (j == r) continue;
            const size_t ja = static_cast<size_t>(j) * part < len ? static_cast<size_t>(j) * part : len;
            const size_t jl = len - ja < part ? len - ja : part;
            x.copy(recv + off + ja, slot(j, g, 1) + ja, jl);
          }
          break;
        }
        case Coll::Broadcast:
          if (r == d.root) {
            if (recv != send) x.copy(recv + off, send + off, len);
          } else {
            if (!all(kIn, g, d.root, d.root, r)) return false;
            x.copy(recv + off, slot(d.root, g, 0), len);
          }
          break;
        case Coll::Reduce:
          if (r == d.root) {
            if (!everyone(kIn, g)) return false;
            for (int j = 0; j < n; ++j) srcs[j] = slot(j, g, 0);
            x.reduce(recv + off, srcs, n, len / d.esize, d);
          }
          break;
        case Coll::AllGather:
          if (!everyone(kIn, g)) return false;
          for (int j = 0; j < n; ++j) {
            uint8_t* to = recv + static_cast<size_t>(j) * d.bytes + off;
            if (j == r) {
              if (to != send + off) x.copy(to, send + off, len);
            } else {
              x.copy(to, slot(j, g, 0), len);
            }
          }
          break;
        case Coll::ReduceScatter:
          if (!everyone(kIn, g)) return false;
          for (int j = 0; j < n; ++j) srcs[j] = slot(j, g, 0) + static_cast<size_t>(r) * len;
          x.reduce(recv + off, srcs, n, len / d.esize, d);
          break;
        case Coll::Send:
        case Coll::Recv: break;  // (P2p's)
      }
      post(kFreed, g);
    }
    // Everyone whose data this rank read was in this very call.
    if (k && x.tid() == 0)
      for (int j = 0; j < n; ++j)
        if (j != r && !sameCall(j)) break;
    return true;
  }

  HORA_PD void operator()() {
    BlockState* state = reinterpret_cast<BlockState*>(d.regions[d.rank] + d.layout.stateAt(b));
    call = x.share(X::load64(&state->calls)) + 1;
    chunkBase = x.share(X::load64(&state->chunks));
    llSeq = static_cast<uint32_t>(x.share(X::load64(&state->ll)) + (d.ll ? 1 : 0));
    bool whole = false;
    if (!stopped()) {
      announce();
      whole = d.ll ? b != 0 || ll() : d.direct ? direct() : chunks();
    }
    x.sync();
    if (x.tid() == 0) {
      X::store64(&state->calls, call);
      X::store64(&state->chunks, chunkBase + chunksOf(d));
      X::store64(&state->ll, llSeq);
    }
    account(x, d, b, whole);
  }
};

// ---- send/recv ----
// A batch's send/recvs on block b (b < p2pBlocks). d: any of them (the communicator's parts:
// rank, regions, layout, status, deadline).
template <class X>
struct P2p {
  X& x;
  const Desc* calls;
  int ncalls;
  const Desc& d;
  int b;

  HORA_PD Pair* pair(int owner, int peer) const { return reinterpret_cast<Pair*>(d.regions[owner] + d.layout.pairAt(b, peer)); }
  HORA_PD uint8_t* slot(int owner, int peer, uint64_t g) const {
    return d.regions[owner] + d.layout.p2pSlotAt(b, peer, static_cast<int>(g % kSlots));
  }
  HORA_PD bool stopped() const { return X::load32(&d.status->abort) != 0; }
  HORA_PD void fail(Code code, int peer, int counter, uint64_t target, uint64_t seen) const {
    recordFailure<X>(d, code, peer, counter, 0, target, seen, 0);
  }
  HORA_PD void fence() const {
    if (d.oneGpu) X::fenceDevice();
    else X::fenceSystem();
  }
  // Chunks of a transfer of `bytes` on this block, and chunk k of them's place in the transfer.
  HORA_PD uint64_t chunksHere(size_t bytes) const {
    const uint64_t n = (bytes + d.layout.p2pBytes - 1) / d.layout.p2pBytes, nb = static_cast<uint64_t>(d.layout.p2pBlocks());
    return n / nb + (static_cast<uint64_t>(b) < n % nb ? 1 : 0);
  }
  HORA_PD size_t offsetOf(uint64_t k) const {
    return static_cast<size_t>(static_cast<uint64_t>(b) + k * static_cast<uint64_t>(d.layout.p2pBlocks())) * d.layout.p2pBytes;
  }

  // Whether call i may move its next chunk (g) now; else *seen is what it waits on.
  HORA_PD bool ready(const Desc& c, uint64_t g, uint64_t* seen) const {
    const int j = c.root, r = d.rank;
    if (c.coll == Coll::Send) {
      if (g <= kSlots) return true;
      *seen = X::load64(&pair(j, r)->acked);
      return *seen >= g - kSlots;
    }
    *seen = X::load64(&pair(j, r)->sent);
    return *seen >= g;
  }

  HORA_PD bool run() const {
    const int r = d.rank;
    // Per call: its chunks here, the number of the first, those moved. The transfers between
    // two ranks in one direction go in their order: their chunks are numbered in that order, a
    // later chunk waits for what an earlier one waits for, and the calls are looked at in order.
    uint64_t first[kMaxCalls], count[kMaxCalls], moved[kMaxCalls];
    uint64_t sentAt[kMaxRanks], ackedAt[kMaxRanks];
    for (int j = 0; j < d.nranks; ++j) {
      sentAt[j] = x.share(X::load64(&pair(r, j)->sent));
      ackedAt[j] = x.share(X::load64(&pair(r, j)->acked));
    }
    for (int i = 0; i < ncalls; ++i) {
      const Desc& c = calls[i];
      count[i] = moved[i] = 0;
      if (!isP2p(c.coll)) continue;
      count[i] = chunksHere(c.bytes);
      uint64_t& at = c.coll == Coll::Send ? sentAt[c.root] : ackedAt[c.root];
      first[i] = at + 1;
      at += count[i];
    }
    uint64_t start = 0;
    unsigned spins = 0;
    for (;;) {
      // Thread 0 picks a call that can move (-1: none; -2: all done; -3: stop).
      int pick = -2;
      if (x.tid() == 0) {
        int waiting = -1;
        uint64_t target = 0, seen = 0;
        for (int i = 0; i < ncalls; ++i) {
          if (moved[i] == count[i]) continue;
          if (pick == -2) pick = -1;
          uint64_t s = 0;
          const uint64_t g = first[i] + moved[i];
          if (ready(calls[i], g, &s)) {
            // What the peer wrote before its post (the chunk, or its read of the slot) comes
            // before this block's reads and writes of it.
            fence();
            pick = i;
            break;
          }
          if (waiting < 0) {
            waiting = i;
            target = calls[i].coll == Coll::Send ? g - kSlots : g;
            seen = s;
          }
        }
        if (pick == -1) {
          if ((++spins & 63) == 0) {
            const uint64_t now = X::now();
            if (stopped()) {
              pick = -3;
            } else if (!start) {
              start = now;
            } else if (now - start > d.timeoutNs && waiting >= 0) {
              fail(Code::TimedOut, calls[waiting].root, calls[waiting].coll == Coll::Send ? kAcked : kSent, target, seen);
              pick = -3;
            }
          }
          if (pick == -1) X::pause(spins);
        } else {
          spins = 0;
          start = 0;
        }
      }
      pick = static_cast<int>(static_cast<int64_t>(x.share(static_cast<uint64_t>(static_cast<int64_t>(pick)))));
      if (pick == -2) return true;
      if (pick == -3) return false;
      if (pick < 0) continue;
      const Desc& c = calls[pick];
      const int j = c.root;
      const uint64_t g = first[pick] + moved[pick];
      const size_t off = offsetOf(moved[pick]);
      const size_t len = c.bytes - off < d.layout.p2pBytes ? c.bytes - off : d.layout.p2pBytes;
      if (c.coll == Coll::Send) {
        x.copy(slot(r, j, g), static_cast<const uint8_t*>(c.send) + off, len);
        x.sync();
        if (x.tid() == 0) {
          Pair* mine = pair(r, j);
          X::store64(&mine->total[g % kSlots], static_cast<uint64_t>(c.bytes));
          fence();
          X::store64(&mine->sent, g);
        }
      } else {
        bool same = true;
        if (x.tid() == 0) {
          const uint64_t theirs = X::load64(&pair(j, r)->total[g % kSlots]);
          if (theirs != static_cast<uint64_t>(c.bytes)) {
            fail(Code::SizeMismatch, j, kSent, c.bytes, theirs);
            same = false;
          }
        }
        if (!x.agree(same)) return false;
        x.copy(static_cast<uint8_t*>(c.recv) + off, slot(j, r, g), len);
        x.sync();
        if (x.tid() == 0) {
          fence();
          X::store64(&pair(r, j)->acked, g);
        }
      }
      ++moved[pick];
    }
  }
};

// The calls of one launch (a group, or a lone send or recv), in the caller's order.
struct Batch {
  int ncalls = 0;
  int blocks = 1;  // launched: the most any call needs (with send/recv, at least p2pBlocks)
  Desc calls[kMaxCalls];
};

// Block b's part of a batch: each collective in order (a block a call does not launch keeps its
// numbers), then every send/recv together.
template <class X>
HORA_PD void runBatch(X& x, const Batch& t, int b) {
  const Desc* p2p = nullptr;
  for (int i = 0; i < t.ncalls; ++i) {
    const Desc& d = t.calls[i];
    if (isP2p(d.coll)) {
      if (!p2p) p2p = &d;
    } else if (b < d.blocks) {
      Run<X>{x, d, b}();
    }
  }
  if (!p2p || b >= p2p->layout.p2pBlocks()) return;
  const P2p<X> run{x, t.calls, t.ncalls, *p2p, b};
  const bool whole = !run.stopped() && run.run();
  account(x, *p2p, b, whole);
}

}  // namespace hora::gpu
