// The call check over the links (call_check.h): the jobs that send and receive it.
#include "comm/link_check.h"

#include <algorithm>

#include "base/log.h"
#include "comm/comm.h"

namespace hora {

void CheckPlans::reserve(size_t n) {
  if (programs.size() < n) programs.resize(n);
  if (of.size() < n) of.resize(n);
}

namespace {
// Whether program p has an op of `kind` (a Send or Recv) with `peer`.
bool exchanges(const core::Program& p, core::OpKind kind, int peer) {
  for (const core::Op& o : p.ops)
    if (o.kind == kind && o.peer == peer) return true;
  return false;
}
bool receivesFrom(const core::Program& p, int peer) { return exchanges(p, core::OpKind::Recv, peer); }
bool sendsTo(const core::Program& p, int peer) { return exchanges(p, core::OpKind::Send, peer); }

// The job that sends call check k to c's successor (where the link does not hold it back), in
// program slot `slot`.
core::Job checkSendJob(CheckPlans& cp, size_t slot, horaComm* c, const LinkChecks::Pending& k, trace::Entry* entry) {
  core::Program& p = cp.programs[slot];
  p.clear();
  coll::buildCheckSend(c->shape, k.tag, c->scratch, p);
  p.call = k.frameCall;
  cp.of[slot] = CheckOf{c, k.call, true};
  core::Job j = jobOf(c, &p, entry);  // with the call's entry: the flight recorder sees its waits
  j.describe = describeCheck;
  j.describeCtx = &cp.of[slot];
  return j;
}

}  // namespace

// While this rank is stuck: the frames waiting from the predecessor, against the call checks this
// rank expects (they come first on that link, oldest first); each that agrees is taken, so
// that one of a call whose ranks differ is found behind them.
std::string earlierCheck(void* ctx, transport::Connection* conn, int peer) {
  auto* c = static_cast<horaComm*>(ctx);
  LinkChecks& lc = c->seq.linkChecks;
  if (peer != (c->self().rank + c->self().nranks - 1) % c->self().nranks) return {};
  while (!lc.expected.empty()) {
    // Those that agree, together (one read where the transport can).
    const size_t took = conn->takePendingFrames(
        lc.expected.size(),
        [](void* ctx, size_t i, uint16_t call, uint64_t tag) {
          const LinkChecks::Pending& e = static_cast<const LinkChecks*>(ctx)->expected.at(i);
          return e.frameCall == call && e.tag == tag;
        },
        &lc);
    for (size_t i = 0; i < took; ++i) lc.expected.pop();
    if (took) continue;
    // None: the first frame waiting, if one is, is another call's, or another collective's.
    uint16_t call = 0;
    uint64_t tag = 0;
    if (lc.expected.empty() || !conn->pendingFrame(&call, &tag)) return {};
    const LinkChecks::Pending& e = lc.expected.front();
    if (e.frameCall != call || e.tag == tag) return {};
    return format("mismatched calls: %s was in %s, this rank in %s (call #%llu on this rank; found at its call #%llu)",
                  c->self().peers[static_cast<size_t>(peer)].name().c_str(), transport::describeTag(tag).c_str(),
                  transport::describeTag(e.tag).c_str(), static_cast<unsigned long long>(e.call),
                  static_cast<unsigned long long>(c->seq.calls.load()));
  }
  return {};
}


std::string describeCheck(const void* ctx) {
  const auto* k = static_cast<const CheckOf*>(ctx);
  if (!k->call)
    return format("horaCommFinalize's meeting of every rank, after its call checks, on rank %d of %d", k->c->self().rank,
                  k->c->self().nranks);
  if (k->last)
    return format("the call checks of its calls #%llu to #%llu, received in %s", static_cast<unsigned long long>(k->call),
                  static_cast<unsigned long long>(k->last), k->c->describeCall().c_str());
  return format("the call check of its call #%llu, %s in %s", static_cast<unsigned long long>(k->call),
                k->send ? "sent" : "received", k->c->describeCall().c_str());
}

// The job that receives the n oldest call checks c expects from its predecessor, in order, in
// one program (each receive with its own call's tag and number), in program slot `slot`; they
// are taken off the expected.
core::Job checkRecvJob(CheckPlans& cp, size_t slot, horaComm* c, size_t n, trace::Entry* entry) {
  LinkChecks& lc = c->seq.linkChecks;
  core::Program& p = cp.programs[slot];
  p.clear();
  const LinkChecks::Pending& first = lc.expected.front();
  coll::buildCheckRecv(c->shape, first.tag, c->scratch, p);
  p.call = first.frameCall;
  cp.of[slot] = CheckOf{c, first.call, false, n > 1 ? lc.expected.at(n - 1).call : 0};
  for (size_t i = 1; i < n; ++i)
    coll::addCheckRecv(c->shape, lc.expected.at(i).tag, lc.expected.at(i).frameCall, c->scratch, p);
  for (size_t i = 0; i < n; ++i) lc.expected.pop();
  core::Job j = jobOf(c, &p, entry);
  j.describe = describeCheck;
  j.describeCtx = &cp.of[slot];
  return j;
}

// The call checks of this call or group over the links (comm/call_check.h), for each of its
// communicators, into cp.jobs, to go first on their links as point-to-point traffic does:
// the call's own check to the successor, and the checks due from the predecessor (the call's
// own among them where it receives anything from the predecessor: the check comes first).
// Where the stage holds every rank, into cp.lateJobs: the ranks' meeting after the call.
void planChecks(CheckPlans& cp, const std::vector<horaComm*>& comms,
                const std::vector<std::pair<horaComm*, coll::Args>>& calls, const std::vector<core::Program>& programs,
                const std::vector<coll::Args>& adjusted, const std::vector<size_t>& atOnce,
                const std::vector<trace::Traced>& traced) {
  cp.jobs.clear();
  cp.lateJobs.clear();
  cp.reserve(3 * comms.size());  // each: a check sent, a batch received, or a meeting
  size_t slot = 0;
  std::vector<uint64_t>& tags = cp.tags;
  for (horaComm* c : comms) {
    LinkChecks& lc = c->seq.linkChecks;
    const int n = c->self().nranks;
    if (n < 2) continue;
    bool agree = false;
    uint16_t last = 0;
    trace::Entry* entry = nullptr;  // the flight recorder's entry of the group's last collective
    const core::Program* lone = nullptr;  // c's one collective, where it has one
    tags.clear();
    for (size_t i = 0; i < calls.size(); ++i) {
      const coll::Kind kind = calls[i].second.kind;
      if (calls[i].first != c || kind == coll::Kind::Send || kind == coll::Kind::Recv ||
          std::find(atOnce.begin(), atOnce.end(), i) != atOnce.end())
        continue;
      tags.push_back(programs[i].tag);
      last = programs[i].call;
      entry = traced[i].entry;
      agree |= coll::needsAgreement(adjusted[i], c->shape);
      lone = tags.size() == 1 ? &programs[i] : nullptr;
    }
    if (c->shape.stage) {
      // Where the stage holds every rank, the ranks meet instead (a dissemination barrier after
      // the call's other jobs): a call there that moves nothing must not leave a rank that runs
      // on through the stage's slots, whose sequence the others did not take.
      if (!agree) continue;
      core::Program& p = cp.programs[slot];
      p.clear();
      coll::buildAgreement(c->shape, coll::groupTag(tags), c->scratch, p);
      p.call = last;  // its frames carry the number of the group's last collective: a rank a call behind fails
      cp.lateJobs.push_back(jobOf(c, &p, entry));
      ++slot;
      continue;
    }
    if (!agree && lc.expected.empty()) continue;
    const uint64_t now = c->seq.calls.load(std::memory_order_relaxed);
    const int succ = (c->self().rank + 1) % n, pred = (c->self().rank + n - 1) % n;
    if (agree) {
      const LinkChecks::Pending mine{coll::groupTag(tags), now, last};
      lc.used = true;
      transport::Connection* toSucc = c->connPtrs[static_cast<size_t>(succ)];
      // A lone collective that sends its successor a message needs no check besides: each of its
      // frames carries the call's tag and number, which the successor's receive compares with
      // its own call (transports/frame.h), as it would the check. The successor, in the same
      // call, receives from this rank and expects no check; in another call it finds this
      // rank's frame where it expects a check or a check where it expects a frame, and either
      // is a mismatch (a chain's Broadcast: only the last rank's check to the root is left).
      const bool carried = lone && sendsTo(*lone, succ);
      if (!carried && toSucc->holdsBack()) {
        // The transport holds it back, to go with the next message to the successor or a batch
        // of them: the successor takes it no sooner (call_check.h), and the executor releases it
        // before this rank waits for anything (every job of c names the link: jobOf). Nothing
        // waits for it, so it needs no job: posted now, it goes ahead of the call's messages.
        static const uint8_t kCheckByte = 0;
        toSucc->setCall(last);
        toSucc->postHeld(&kCheckByte, 1, mine.tag, transport::kNoCookie);
      } else if (!carried) {
        cp.jobs.push_back(checkSendJob(cp, slot++, c, mine, entry));
        cp.jobs.back().pointToPoint = true;
      }
      if (!lone || !receivesFrom(*lone, pred)) lc.expected.push(mine);
    }
    bool fromPred = false;
    for (size_t i = 0; i < calls.size() && !fromPred; ++i) fromPred = calls[i].first == c && receivesFrom(programs[i], pred);
    if (lc.due(now, fromPred)) {
      // Where the transport can take what waits in one read (TCP): every check that has come
      // is taken now, the due ones and those behind them, so that a rank that runs a window
      // ahead of its predecessor takes the checks in large batches, not a job of kCheckBatch
      // receives every kCheckBatch calls. One that differs is left to the receive below, which
      // fails with the mismatch as the call runs.
      transport::Connection* fromPredConn = c->connPtrs[static_cast<size_t>(pred)];
      if (fromPredConn->holdsBack()) {
        (void)earlierCheck(c, fromPredConn, pred);
        // Still due: the rank waits for the oldest only. The predecessor writes its checks
        // in batches (of transport::Connection's kHeldMost over TCP): the rest of that batch
        // comes with it and is taken at the next call, by one read.
        if (!fromPred && lc.due(now, false)) {
          cp.jobs.push_back(checkRecvJob(cp, slot++, c, 1, entry));
          cp.jobs.back().pointToPoint = true;
          continue;
        }
      }
    }
    if (const size_t due = lc.due(now, fromPred)) {
      cp.jobs.push_back(checkRecvJob(cp, slot++, c, due, entry));
      cp.jobs.back().pointToPoint = true;
    }
  }
}

}  // namespace hora
