"""The operations of the torch.distributed backend "hora" that stand on the group's c10d store
beside its communicator: the receive from any source (which the library has no probe for) and
monitored_barrier (which must name ranks that never come without breaking the group). A mixin of
ProcessGroupHora (hora.torch.distributed), beside Collectives, whose _submit and _one_tensor it
uses; it relies on the group's _store, _rank, _size, _timeout_s, _any_source_on, _taken,
_last_source and _barriers."""
import time

from hora.torch._pg_tensors import _Contiguous, _wire


class StoreOps:
    """Any-source receives and monitored_barrier (see the module's doc)."""

    # -- receive from any source ---------------------------------------------------------------
    #
    # The library receives from a named rank only, and has no probe. So in a group of three or
    # more ranks created with HORA_TORCH_ANY_SOURCE=1 (on every rank), every send() first adds one
    # to a counter in the group's c10d store, the number of messages this rank has sent to that
    # destination ("hora/p2p/<dst>/<src>"); the data then goes out exactly as before. Each rank also counts, per source, the messages its receives
    # have claimed (_taken; named receives and any-source ones alike, in the order they run). A
    # receive from any source polls the counters of the other ranks until one is ahead of its
    # count, and then receives from that rank as a named receive would: messages of one pair stay
    # in order, so the message it gets is the one the counter announced.
    # Costs: every send() of such a group makes one round trip to the store's server before its
    # data goes out, whether or not any rank receives from any source (measured at 3 ranks on 2
    # cores: a 1-float message took 150 to 290 us instead of 30 to 90, which is why it is off
    # by default; without it, a receive from any source in a group of 3+ raises); a receive from
    # any source polls the store (one round trip per other rank, every 1 to 20 ms) and holds the
    # group's worker thread meanwhile, so the group's later operations wait for it. In a group of
    # two ranks the source can only be the other rank: nothing is announced, nothing polled.
    # If no rank sends within the group's timeout the receive fails, "Timed out", naming the
    # ranks it waited for; the group stays usable.

    def _announce(self, peer):
        if self._any_source_on:
            self._store.add("hora/p2p/%d/%d" % (peer, self._rank), 1)

    def _any_source(self):
        rank, n = self._rank, self._size
        if n == 2:
            return 1 - rank
        others = [(rank + 1 + i) % n for i in range(n - 1)]
        deadline = time.monotonic() + self._timeout_s
        delay = 0.001
        while True:
            start = self._last_source + 1
            for i in range(n):
                peer = (start + i) % n
                if peer == rank:
                    continue
                if self._store.add("hora/p2p/%d/%d" % (rank, peer), 0) > self._taken[peer]:
                    self._last_source = peer
                    return peer
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    "hora recv from any source: Timed out after %d ms: none of ranks %s sent rank "
                    "%d a message it had not received" % (int(self._timeout_s * 1000),
                                                       ", ".join(map(str, sorted(others))), rank))
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def recv_anysource(self, tensors, tag=0):
        tensors, t = self._one_tensor(tensors, "recv")
        if self._size > 2 and not self._any_source_on:
            raise RuntimeError(
                "recv from any source: in a group of %d ranks the hora backend needs "
                "HORA_TORCH_ANY_SOURCE=1 in every rank's environment when the group is created "
                "(every send then announces itself in the group's store first, which costs each "
                "send about 0.1-0.2 ms); or name the source rank" % self._size)
        dense = _Contiguous(t, copy_in=False)
        source = [-1]

        def issue(comm):
            peer = self._any_source()
            self._taken[peer] += 1
            source[0] = peer
            comm.recv(*_wire(dense.buf), peer)

        def finish():
            dense.back()
            return [t]

        return self._submit(issue, finish, p2p=True, src=source, title="recvAnySource",
                            inputs=tensors, tensors=[t], pure=True)

    # -- monitored barrier ----------------------------------------------------------------------
    #
    # Built on the group's c10d store, not on the communicator, so that a rank that does not come
    # leaves the group usable: each rank adds one to its arrival counter of this barrier; rank 0
    # waits for the ranks in order, each within what is left of the timeout (with wait_all_ranks,
    # every rank gets at least a look), then sets the barrier's release counter to 1 (all came)
    # or 2 (with its text under another key), and the other ranks wait for that within the
    # timeout. Limits: a rank that skips a monitored_barrier that the others call is counted in
    # the next one, as with every collective; the barrier says nothing about the communicator's
    # state (a rank stuck in a collective is named, but its collective is not).

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        if timeout is None:
            seconds = self._timeout_s
        elif hasattr(timeout, "total_seconds"):
            seconds = timeout.total_seconds()
        else:
            seconds = float(timeout)
        ms = int(seconds * 1000)
        seq = self._barriers
        self._barriers += 1
        key = "hora/monitored_barrier/%d/" % seq
        store, rank = self._store, self._rank
        start = time.monotonic()
        deadline = start + seconds
        if rank != 0:
            store.add(key + "arrived/%d" % rank, 1)
            state = _poll(lambda: store.add(key + "released", 0), deadline)
            if state == 1:
                return
            if state == 2:
                why = "rank 0 reported: %s" % store.get(key + "error").decode()
            else:
                why = "Timed out after %d ms waiting for rank 0 to release the barrier" % ms
            raise RuntimeError("Rank %d successfully reached monitoredBarrier, but received errors "
                               "while waiting for send/recv from rank 0 (hora: %s)" % (rank, why))
        missing = []
        for r in range(1, self._size):
            if not wait_all_ranks and time.monotonic() >= deadline:
                text = ("Rank 0 timed out in monitoredBarrier after %d ms (hora: %s had not been "
                        "waited for)" % (ms, _ranks(range(r, self._size))))
                self._release(key, text)
                raise RuntimeError(text)
            if not _poll(lambda: store.add(key + "arrived/%d" % r, 0), deadline):
                missing.append(r)
                if not wait_all_ranks:
                    break
        if missing:
            if len(missing) == 1:
                text = "Rank %d failed to pass monitoredBarrier in %d ms" % (missing[0], ms)
            else:
                text = "Ranks %s failed to pass monitoredBarrier in %d ms" % (_ranks(missing), ms)
            self._release(key, text)
            raise RuntimeError(text)
        store.add(key + "released", 1)

    def _release(self, key, text):
        self._store.set(key + "error", text)
        self._store.add(key + "released", 2)


def _ranks(ranks):
    return ", ".join(str(r) for r in ranks)


def _poll(value, deadline):
    """value()'s first non-zero result, or 0 once the deadline passes (looked at least once)."""
    delay = 0.001
    while True:
        v = value()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.02)
