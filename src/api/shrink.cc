// horaCommShrink: a communicator of the ranks that remain, made without a new unique id and
// without the parent's links, which a failure may have closed.
//
// Every communicator opens, at init, a listening socket it does not accept from (its "rejoin"
// listener) and tells every peer its address in the peer record. A shrink is led by the lowest
// rank that remains: it serves the new communicator's rendezvous on that listener, and every
// other survivor joins it there. The rendezvous's secret is derived from the parent's (a keyed
// hash of the shrink's number on the parent and the excluded ranks), so only ranks of the
// parent that agree on the excluded set can join, and two shrinks of one parent never meet. A
// survivor that disagrees (another list) fails its handshake and is turned away; the others
// then time out naming the ranks that never joined.
#include <sodium.h>
#include <unistd.h>

#include <algorithm>

#include "api/guard.h"
#include "base/log.h"
#include "comm/config.h"
#include "comm/group.h"

using namespace hora;
using api::guard;

namespace {

Secret shrinkSecret(const horaComm* c, const std::vector<int>& excluded) {
  std::string msg = "hora shrink";
  const uint32_t n = static_cast<uint32_t>(c->shrinks);
  msg.append(reinterpret_cast<const char*>(&n), sizeof n);
  for (int r : excluded) msg.append(reinterpret_cast<const char*>(&r), sizeof r);
  Secret s;
  crypto_generichash(s.bytes, sizeof s.bytes, reinterpret_cast<const unsigned char*>(msg.data()), msg.size(),
                     c->self().secret.bytes, sizeof c->self().secret.bytes);
  return s;
}

// After a failure: stops the calls other threads have in flight on the parent (they return an
// error at their next idle round), and waits until they have left it. The parent stays
// allocated, failed, for the caller to destroy.
void stopCalls(horaComm* c) {
  c->aborting.store(true);
  uint64_t one = 1;
  if (c->wakeFd.valid()) (void)!::write(c->wakeFd.get(), &one, sizeof one);
  Waiter w(c->opts.timeout, nullptr,
           [] { return std::string("other threads to leave their calls on the communicator being shrunk"); });
  // This thread is one of the callers (api/guard.h counts it).
  while (c->busy.load() || c->callers.load() > 1) w.idle();
}

}  // namespace

HORA_API horaResult_t horaCommShrink(horaComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                     horaComm_t* newcomm, horaConfig_t* config, int shrinkFlags) {
  return api::guardPending("horaCommShrink", comm, [&] {
    horaComm* c = api::checkComm(comm);
    if (!newcomm) fail(Errc::InvalidArgument, "newcomm is NULL");
    *newcomm = nullptr;
    if (shrinkFlags != HORA_SHRINK_DEFAULT && shrinkFlags != HORA_SHRINK_ABORT)
      fail(Errc::InvalidArgument, "shrinkFlags %d is invalid: use HORA_SHRINK_DEFAULT (0) or HORA_SHRINK_ABORT (1)",
           shrinkFlags);
    if (excludeRanksCount < 0) fail(Errc::InvalidArgument, "excludeRanksCount must be >= 0 (got %d)", excludeRanksCount);
    if (excludeRanksCount > 0 && !excludeRanksList) fail(Errc::InvalidArgument, "excludeRanksList is NULL");
    if (group::active()) fail(Errc::InvalidUsage, "horaCommShrink inside horaGroupStart/horaGroupEnd is not supported");
    std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
    std::sort(excluded.begin(), excluded.end());
    for (size_t i = 0; i < excluded.size(); ++i) {
      if (excluded[i] < 0 || excluded[i] >= c->self().nranks)
        fail(Errc::InvalidArgument, "excluded rank %d is out of range [0, %d)", excluded[i], c->self().nranks);
      if (i > 0 && excluded[i] == excluded[i - 1])
        fail(Errc::InvalidArgument, "rank %d is excluded twice", excluded[i]);
    }
    if (std::binary_search(excluded.begin(), excluded.end(), c->self().rank))
      fail(Errc::InvalidUsage, "rank %d is in the exclude list: only the ranks that remain call horaCommShrink",
           c->self().rank);
    if (c->asyncError() != Errc::Success && shrinkFlags != HORA_SHRINK_ABORT)
      fail(Errc::InvalidUsage, "the communicator has failed (%s): shrink it with HORA_SHRINK_ABORT",
           horaGetErrorString(static_cast<horaResult_t>(c->asyncError())));
    if (c->self().peers.empty() || !c->rejoin.valid())
      fail(Errc::InvalidUsage, "the communicator was never connected: it cannot be shrunk");
    const CommOptions o = api::inherit(c, config);
    if (shrinkFlags == HORA_SHRINK_ABORT) stopCalls(c);

    std::vector<int> survivors;
    for (int k = 0; k < c->self().nranks; ++k)
      if (!std::binary_search(excluded.begin(), excluded.end(), k)) survivors.push_back(k);
    const int leader = survivors.front();
    const int newRank = static_cast<int>(std::find(survivors.begin(), survivors.end(), c->self().rank) - survivors.begin());
    UniqueId id;
    id.secret = shrinkSecret(c, excluded);
    ++c->shrinks;
    std::shared_ptr<RendezvousEnd> end;
    if (c->self().rank == leader) {
      // The rendezvous runs on a second descriptor of the listener: its end closes that one,
      // and the listener stays for a later shrink.
      Fd listener(::dup(c->rejoin.get()));
      if (!listener.valid()) fail(Errc::System, "dup: %s", errnoText(errno).c_str());
      trackSocket(listener.get());
      end = std::make_shared<RendezvousEnd>();
      id = startRendezvous(std::move(listener), id.secret, o.timeout, end, static_cast<int>(survivors.size()));
    } else {
      id.root = c->self().peers[static_cast<size_t>(leader)].rejoin;
    }
    HORA_INFO(log::kInit, "horaCommShrink: %zu of %d ranks remain (%zu excluded), led by rank %d at %s", survivors.size(),
              c->self().nranks, excluded.size(), leader, id.root.str().c_str());
    const milliseconds timeout = o.timeout;
    // The leader's process serves the rendezvous: it returns only once every survivor has been
    // served, or a leader that exits at once would leave one waiting for its last answer.
    return api::makeComm(newcomm, id, static_cast<int>(survivors.size()), newRank, o,
                               [end, timeout] {
                                 if (end) end->await(timeout);
                               });
  });
}
