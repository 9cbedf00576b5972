// The call check done later: its shared-stage form (call_check.h).
#include "comm/call_check.h"

#include <poll.h>

#include <algorithm>

#include "comm/comm.h"
#include "core/executor.h"

namespace hora {

static_assert(kUncheckedMost + transport::SharedStage::kCells < transport::SharedStage::kHistory);

void compareLater(horaComm* c, uint64_t callNo) {
  c->seq.comparedLater = true;
  if (!c->seq.uncheckedFrom) {
    c->seq.uncheckedFrom = callNo;
    c->stage->publishUnchecked(callNo);
  }
  c->seq.uncheckedTo = callNo;
}

// The calls this rank has not compared with its predecessor's and the predecessor has
// announced, compared; each one that agrees is done with (true: none is left). A rank that left
// a call without hearing from every other (a Broadcast's root through the stage's cells) did not
// compare it then; every rank compares such calls with one neighbour's, so that if any two ranks
// differ, two neighbours do, and the one that finds it fails the communicator (so every rank).
bool compareEarlierCalls(horaComm* c) {
  if (!c->seq.uncheckedFrom) return true;
  const transport::SharedStage& st = *c->stage;
  const int n = st.size(), me = st.index(), p = (me + n - 1) % n;
  const uint64_t upTo = std::min(c->seq.uncheckedTo, st.lastCall(p));
  for (uint64_t no = c->seq.uncheckedFrom; no <= upTo; ++no) {
    uint64_t mine = 0, theirs = 0;
    if (!st.announced(p, no, &theirs)) break;  // being written: later
    if (!st.announced(me, no, &mine))
      fail(Errc::Internal, "call #%llu of the communicator is no longer in this rank's history",
           static_cast<unsigned long long>(no));
    if (theirs != mine)
      fail(Errc::InvalidUsage,
           "mismatched calls: %s was in %s, this rank in %s (call #%llu of the communicator; found at this rank's "
           "call #%llu)",
           st.memberName(p).c_str(), transport::describeTag(theirs).c_str(), transport::describeTag(mine).c_str(),
           static_cast<unsigned long long>(no), static_cast<unsigned long long>(c->seq.collectives));
    c->seq.uncheckedFrom = no + 1;
  }
  if (c->seq.uncheckedFrom <= c->seq.uncheckedTo) {
    st.publishUnchecked(c->seq.uncheckedFrom);
    return false;
  }
  c->seq.uncheckedFrom = c->seq.uncheckedTo = 0;
  st.publishUnchecked(0);
  return true;
}

namespace {
// Throws the account a failed member (any, or `only`) published in the stage, if one did.
void throwPublished(const transport::SharedStage& st, int only) {
  std::vector<pollfd> unused;
  Errc relayed = Errc::Success;
  const std::string why = st.arm(only, &relayed, unused);
  st.disarm();
  if (relayed != Errc::Success) throw PeerFailure(why, relayed);
}
}  // namespace

void checkEarlierCalls(horaComm* c) {
  if (c->seq.uncheckedFrom && c->stage) compareEarlierCalls(c);
}

// Until this rank has compared its calls with its predecessor's and, with `everyone`, every
// member has compared its own through this rank's last call (or closed its communicator): a
// mismatch found anywhere then fails here too, relayed.
void awaitEarlierCalls(horaComm* c, bool everyone, uint64_t leave) {
  if (!c->stage || c->stage->size() < 2 || !c->seq.comparedLater) return;
  const transport::SharedStage& st = *c->stage;
  const int n = st.size(), me = st.index();
  const uint64_t last = c->seq.collectives;
  const int pred = (me + n - 1) % n;
  int waitingFor = pred;
  auto done = [&] {
    waitingFor = pred;
    if (!compareEarlierCalls(c)) return !everyone && c->seq.uncheckedTo - c->seq.uncheckedFrom + 1 < leave;
    if (!everyone) return true;
    for (int m = 0; m < n; ++m) {
      if (m == me || st.checkedThrough(m) >= last) continue;
      if (!st.closed(m)) {
        waitingFor = m;
        return false;
      }
      // It left before comparing: that is done with, unless it failed (a mismatch it found).
      throwPublished(st, m);
    }
    return true;
  };
  if (done()) return;
  struct What {
    horaComm* c;
    const int* m;
    uint64_t last;
  } what{c, &waitingFor, last};
  // It spins first, as every wait of a call does where every rank has a core: the predecessor
  // is usually a few calls behind, microseconds away.
  Waiter w(
      c->opts.timeout, &c->aborting,
      [x = &what] {
        return format("%s to compare its calls through call #%llu of the communicator with its neighbour's",
                      x->c->stage->memberName(*x->m).c_str(), static_cast<unsigned long long>(x->last));
      },
      c->spinFor);
  std::vector<pollfd> fds;
  uint64_t from = c->seq.uncheckedFrom;
  auto block = [&](milliseconds most) {
    if (c->seq.uncheckedFrom != from) {  // the predecessor moves: the timeout counts from its last step
      from = c->seq.uncheckedFrom;
      w.progressed();
    }
    fds.clear();
    Errc relayed = Errc::Success;
    const std::string gone = st.arm(waitingFor, &relayed, fds);
    if (!done()) {
      // A member that failed says why; one that left without failing is done comparing, and
      // only the predecessor's leaving is an error then (its calls can no longer be compared).
      if (!gone.empty() && (relayed != Errc::Success || waitingFor == pred || !st.closed(waitingFor))) {
        st.disarm();
        if (relayed != Errc::Success) throw PeerFailure(gone, relayed);
        throw Error(Errc::Remote, gone);
      }
      // Announcing rings no doorbell: look again every millisecond.
      (void)::poll(fds.data(), fds.size(), static_cast<int>(std::min<milliseconds::rep>(most.count(), 1)));
    }
    st.disarm();
  };
  try {
    while (!done()) w.idle(block);
  } catch (const Error& e) {
    if (e.code() != Errc::Timeout || dynamic_cast<const PeerFailure*>(&e)) throw;  // a relayed cause stands
    // A member that failed says why; the member waited for may be stopped; or it waits itself,
    // for the rank that is, and will say so: held back once, for its account.
    throwPublished(st, -1);
    const int rank = st.ranks()[static_cast<size_t>(waitingFor)];
    const std::string stalled = static_cast<size_t>(rank) < c->self().localProcs.size() && c->self().localProcs[static_cast<size_t>(rank)]
                                    ? c->self().localProcs[static_cast<size_t>(rank)].stalled()
                                    : std::string();
    if (!stalled.empty()) throw Error(Errc::Timeout, st.memberName(waitingFor) + " " + stalled + "; " + e.what());
    Waiter held(core::Executor::holdFor(c->opts.timeout), &c->aborting, [] { return std::string(); });
    const Error first = e;
    try {
      while (!done())
        held.idle([&](milliseconds most) {
          throwPublished(st, -1);
          (void)::poll(nullptr, 0, static_cast<int>(std::min<milliseconds::rep>(most.count(), 1)));
        });
    } catch (const PeerFailure&) {
      throw;
    } catch (const Error&) {
      throw first;
    }
  }
}

}  // namespace hora
