// The call check done later (HORA_CALL_CHECK). A rank whose part of a call needs no message
// from some other rank (a Broadcast's root, the ranks of a Reduce or Gather that only send, a
// Scatter's root, every rank of a call with nothing to move) can return without having heard
// from every rank. It compares such a call with its predecessor's (rank order, in a ring)
// afterwards: if any two ranks' calls differ, two neighbours' do, and the rank that finds it
// fails the communicator, so every rank, at its next call at the latest. A rank never leaves
// more than a window of calls uncompared, and horaCommFinalize waits until every rank has
// compared all of its own, so that a mismatch fails the finalize at the latest.
//
// Two media, one rule:
//  - on the shared stage (its cells' small rooted calls, coll/stage_now.cc), from the announcements
//    every rank keeps in its segment for its last calls (compareEarlierCalls);
//  - over the links (calls that run as programs of messages, where no stage holds every rank):
//    by a one-byte message to the successor, the first this call sends it, tagged with the call
//    and numbered like any frame of it (transports/frame.h), so that the receiving transport
//    compares it with its own call; none where a lone call sends the successor a message of its
//    own, whose frames carry the same tag and number (comm/link_check.cc). The sender never waits for it: a Broadcast's root sends its
//    check and its data and returns, as without the check. The transport may hold it back
//    (Connection::postHeld: TCP does) until the next message to the successor, a batch, or
//    until this rank has been asleep in a wait for a moment (the executor releases it then,
//    Executor::kHoldAsleep: the successor may be waiting for it), so a rank holds none for
//    long while it waits. The successor receives it before anything later from the
//    predecessor (at once, where its own call receives anything from the predecessor), else
//    once the oldest it expects is a window of calls old (what the link holds unread: 16384
//    calls over TCP, 256 over shared memory, 48 over verbs), together with all those
//    kCheckBatch calls younger, in one batch (LinkChecks); where the transport reads what waits
//    in one go (TCP), every check that has come is taken then, and a rank that must wait waits
//    for the oldest only (the rest of its predecessor's batch comes with it). So a rank runs at most a
//    window of calls ahead of its predecessor (n - 1 windows ahead of any rank), and hears
//    that its predecessor failed (a mismatch it found, a rank that died) within a window of
//    calls, at once where it exchanges anything with it. The
//    check goes out first, whatever the call then waits for: where ranks in different calls
//    wait on each other and no data moves, each one's check waits on its successor's link, and
//    a rank stuck for a while finds one of its own call's number with another tag there (the
//    executor's look for stray frames) and fails with the mismatch instead of a timeout.
#pragma once
#include <cstddef>
#include <cstdint>

#include "base/ring.h"

struct horaComm;

namespace hora {

// How many calls a rank may leave uncompared with its predecessor's before it waits for it: so
// a rank that only gives hears of a mismatch, or of a peer that died, within that many calls,
// and a predecessor that stopped is found by the wait. On the stage, the announcements compared
// must still be kept (the predecessor is at most kCells calls ahead: it waits to rewrite a cell).
// Over the links, the checks left waiting must fit what a link holds unread (verbs: its 128
// receive slots, less a reserve; shared memory: its ring; TCP: the socket's buffer). Measured
// with broadcast_perf at 8 bytes, 4 and 8 ranks on 2 cores, through the stage: 0.53-0.58 and
// 1.1-1.3 us per call with 48, 0.7-1.4 and 1.4-1.5 us with 16, 0.8-1.8 and 2.0-3.4 us with 8 (a
// root that waits for its readers sooner meets them more often).
inline constexpr uint64_t kUncheckedMost = 48;
// On the stage, a rank that only gives compares its calls in batches of this many (each a read
// of the predecessor's announcements, the first of them a line the predecessor writes at every
// call). Where every rank of the host has a core (horaComm::spinFor), its predecessor keeps up
// and kCompareBatchAlone calls go in a batch; where ranks share cores, a predecessor off its core
// has often not reached a batch when it is looked at, the next look is a batch later, and with
// larger batches that is more often the kUncheckedMost wall, a wait. Measured with
// perf/compare's broadcast and reduce to 512 bytes on 2 cores (docs/performance.md, "A batch of
// 32 where every rank has a core"): 32 against 8 took 0.80-0.91 the time at 2 ranks, 0.73-1.42 at
// 4 and 0.94-1.18 at 8.
inline constexpr uint64_t kCompareBatch = 8;
inline constexpr uint64_t kCompareBatchAlone = 32;
static_assert(kCompareBatchAlone < kUncheckedMost, "a batch is compared before the wall");

// How many checks the successor takes at once, when the oldest is a window of calls old: the
// window's last kCheckBatch calls (the TCP transport reads a batch in one recv()).
inline constexpr uint64_t kCheckBatch = 16;

// The call checks this rank expects from its predecessor over the links and has not received,
// oldest first.
struct LinkChecks {
  struct Pending {
    uint64_t tag = 0;        // the call's tag (a group's: coll::groupTag)
    uint64_t call = 0;       // horaComm::calls at the call, for texts and ages
    uint16_t frameCall = 0;  // the number its frames carry
  };
  RingQueue<Pending> expected{64};
  // How old an expected check gets before this rank waits for it: what the link from the
  // predecessor holds unread (transport::Connection::unreadMost), at least 2 kCheckBatch.
  uint64_t window = kUncheckedMost;
  bool used = false;  // some call was checked this way (horaCommFinalize then meets every rank)
  // How many of the oldest expected the call numbered `call` receives first: all of them when
  // it receives anything from the predecessor (they come before it on that link); else, once
  // the oldest is `window` calls old, those window - kCheckBatch old.
  size_t due(uint64_t call, bool fromPredecessor) const {
    if (fromPredecessor) return expected.size();
    if (expected.empty() || call - expected.front().call < window) return 0;
    size_t n = 0;
    while (n < expected.size() && call - expected.at(n).call >= window - kCheckBatch) ++n;
    return n;
  }
};

// The shared stage's form. compareLater: call number callNo (about to be announced) is one this
// rank leaves without having compared it with every rank's, pending from now on (said before
// the call is announced: horaCommFinalize's peers look at both). compareEarlierCalls: compares
// the calls this rank left unchecked (CallSequence::uncheckedFrom) with its predecessor's, as far
// as the predecessor has announced them; throws a mismatch; true when none is left.
void compareLater(horaComm* c, uint64_t callNo);
bool compareEarlierCalls(horaComm* c);

}  // namespace hora
