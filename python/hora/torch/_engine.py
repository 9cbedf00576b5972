"""The background engine of hora.torch.

One thread per process owns every communicator. User calls build a Request and hand it to the
engine (submit); the thread runs in rounds. Each round, every rank's thread contributes the
descriptors of the requests it received since the last round to one allgather over the global
communicator, so after the round every rank holds the same table of who asked for what. A
request (named per process set) is ready when every member of its process set has announced it;
the ready requests are checked for agreement (kind, dtype, shape, op, root, scale factors: a
mismatch fails that request on every rank), planned in table order (compatible allreduces are
packed into fusion buffers of at most HORA_FUSION_THRESHOLD bytes) and executed. Every rank
derives the same plan from the same table, so the collectives are issued in the same order
everywhere and no coordinator is needed.

A round starts HORA_CYCLE_TIME milliseconds (default 1) after the previous one, or at once when
a request arrives while this rank has nothing in flight, so a lone synchronous call does not
wait out a cycle while gradients arriving during a backward pass still batch up. A round in
which nobody has anything to say costs one small allgather and no decoding. A rank keeps to the
cycle only while some operation waits for other ranks than itself; otherwise it spaces its
rounds 50 ms apart (idle_cycle) until it submits something.

The response cache (HORA_CACHE_CAPACITY) gives every operation that all ranks announced alike
an id, the same on every rank; a later announcement with the same descriptor is that id alone.
The allreduces run between two moments at which a caller had waited and nothing was pending (a
training step) become batches: next time a cached member is held back until its batch is all
submitted, so that a step's gradients meet in one round and one fused call per batch.

A request that some ranks of its process set announce and others do not (different names on
different ranks, a rank that skipped a call or raised before making it) cannot become ready.
After HORA_STALL_CHECK_TIME_SECONDS (default 60, 0: never) the lowest rank that announced it
prints a warning naming the ranks that have not. After HORA_STALL_SHUTDOWN_TIME_SECONDS
(default: the library's HORA_TIMEOUT_MS, 600 s unless set, so that a stall lasts no longer than
a silent peer would; 0: wait forever) it is cancelled on every rank of its process set: the rank
whose timer expires first names it in its next round's payload, and since every rank reads the
same payloads in the same round, every rank drops it from its table in that round (a later
request of that name starts afresh) and fails its pending request of that name, if it has one,
with ValueError (the engine keeps working, as after a disagreement between ranks, which fails
the operation with HorovodInternalError on every rank, as Horovod does),
saying which ranks submitted it and which did not. join() is exempt: a rank may legitimately
wait there for the others to run out of data.

A failing library call (a peer died, fell silent, or the wire broke) stops the engine: every
pending and later request fails with HorovodInternalError, and the communicators are aborted
so that the peers fail too instead of waiting. Any rank's shutdown() stops the engines of all
ranks at the same round.
"""
import ctypes
import collections
import contextlib
import json
import os
import struct
import sys
import threading
import time

import torch

from hora import _core as C
from hora.torch._execution import Execution
# The requests' vocabulary, also for the callers that build requests through this module.
from hora.torch._protocol import (  # noqa: F401
    ADASUM, ADD_SET, ALLGATHER, ALLREDUCE, ALLTOALL, AVERAGE, BARRIER, BROADCAST, D_DEVICE, D_ERROR,
    D_KIND, D_NAME, D_SET, JOIN, JOIN_NAME, KIND_NAMES, MAX, MIN, OP_NAMES, PRODUCT, REDUCESCATTER,
    REMOVE_SET, SUM, Request, SetInfo, _Entry, movable, reduce_code, subcomm,
)


# Kinds whose descriptor is the same on every rank when they agree (not allgather and alltoall,
# whose first dimension or splits differ by rank): the response cache keeps these.
_CACHEABLE = (ALLREDUCE, BROADCAST, REDUCESCATTER)


class HorovodInternalError(RuntimeError):
    """A collective could not complete because a peer or the wire failed (or the engine was
    shut down under it). Every later operation raises it too; shutdown() and init() start
    afresh."""


class HostsUpdatedInterrupt(RuntimeError):
    """Part of the elastic-training API; hora.torch never raises it."""


def _env_float(name, default):
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    try:
        return float(v)
    except ValueError:
        raise ValueError("%s=%r is not a number" % (name, v)) from None


def _env_int(name, default):
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError("%s=%r is not an integer" % (name, v)) from None


def _library_timeout_s():
    """The library's wait timeout (HORA_TIMEOUT_MS, default 600000) in seconds; an unusable
    value (which the library itself rejects) counts as the default."""
    try:
        ms = int(os.environ.get("HORA_TIMEOUT_MS", "").strip() or 600000)
    except ValueError:
        ms = 600000
    return (ms if ms > 0 else 600000) / 1000.0


def _has(symbol):
    try:
        getattr(C.lib, symbol)
        return True
    except AttributeError:
        return False


class Engine(Execution):
    """The engine of one initialisation (init() to shutdown())."""

    SLOT = 1024  # bytes per rank in a round's first allgather
    OUTSIDER_S = 1.0  # rounds at the cycle this long after an operation of a set not ours

    def __init__(self, comm, timeline=None):
        self.comm = comm
        self.rank = comm.rank
        self.size = comm.size
        cycle_ms = _env_float("HORA_CYCLE_TIME", 1.0)
        if not cycle_ms > 0:
            raise ValueError("HORA_CYCLE_TIME must be > 0 (milliseconds), not %r" % cycle_ms)
        self.cycle = cycle_ms / 1000.0
        self.threshold = _env_int("HORA_FUSION_THRESHOLD", 64 * 1024 * 1024)
        if self.threshold < 0:
            raise ValueError("HORA_FUSION_THRESHOLD must be >= 0")
        self.cache_capacity = _env_int("HORA_CACHE_CAPACITY", 1024)
        if self.cache_capacity < 0:
            raise ValueError("HORA_CACHE_CAPACITY must be >= 0 (0: no response cache)")
        # A request held back for the rest of its batch (_close_period) is announced anyway
        # after this long (a member that does not come this time: a parameter without a
        # gradient), or as soon as a caller waits.
        self.batch_wait = 50 * self.cycle
        self.stall_s = _env_float("HORA_STALL_CHECK_TIME_SECONDS", 60.0)
        self.shutdown_s = _env_float("HORA_STALL_SHUTDOWN_TIME_SECONDS", _library_timeout_s())
        if self.stall_s < 0 or self.shutdown_s < 0:
            raise ValueError("HORA_STALL_CHECK_TIME_SECONDS and HORA_STALL_SHUTDOWN_TIME_SECONDS "
                             "must be >= 0 (0 disables)")
        if self.shutdown_s > 0 and self.stall_s > self.shutdown_s:
            self.stall_s = self.shutdown_s  # warn no later than the cancellation
        self.stats = collections.Counter(rounds=0, allreduce_calls=0, allreduce_tensors=0,
                                         fused_batches=0)
        self._cv = threading.Condition(threading.Lock())
        self._incoming = []
        self._held = 0            # > 0: hold() is active, rounds take nothing from _incoming
        self._waiters = 0         # callers blocked in wait(): rounds need not wait the cycle
        self._local = {}          # (set id, name) -> Request, submitted and not completed
        self._announced = 0       # how many of _local were announced
        # Automatic names (make_name) not yet submitted, with their set's epoch then; a set's
        # epoch grows each time the ranks realign its automatic names (_realign).
        self._auto = {}
        self._epochs = collections.defaultdict(int)
        self._counters = collections.Counter()
        self._sets = {0: SetInfo(0, list(range(self.size)), comm, self.rank)}
        self._next_set_id = 1
        self._table = {}          # (set id, name) -> _Entry, in order of first announcement
        # The response cache, the same on every rank: operations that every rank announced
        # alike, by id in order of first completion, so that a later announcement of one with
        # the same descriptor is its id alone. Filled in the rounds' ready order (which every
        # rank shares), never evicted: when full, nothing more is added.
        self._cache = {}          # (set id, name) -> id
        self._cache_descs = []    # id -> (key, descriptor)
        # The keys fused with each key in its last fused allreduce: a request that the cache
        # knows waits for the rest of its batch before it is announced (up to batch_wait), so
        # that a training step's gradients meet in as many rounds as they make fused calls.
        self._batch_of = {}
        self._period = []         # (key, bytes) of the allreduces run in this period
        self._waited = False      # a caller has waited (wait()) in this period
        self._round = 0
        self._failed = None       # the HorovodInternalError that stopped the engine
        self._stopping = False    # shutdown() was called here
        self._stopped = False     # the loop has ended
        self._stop_reason = None
        self._next_round = 0.0
        self._next_stall = 0.0
        self._stalled = []        # keys whose stall time ran out here, named in the next round
        self._quiet_rounds = 0    # rounds in a row in which no rank said anything
        self.idle_cycle = max(self.cycle, 0.05)  # 50 ms, or the cycle if longer
        self._outsider_until = 0.0  # until then, rounds at the cycle even when idle
        self._fusion = None
        # Device operations (hora.torch._device_exec): one engine stream per (runtime, device),
        # a fusion buffer per stream, and what queued work still uses: (done event, objects)
        # kept until the event has completed.
        self._streams = {}
        self._dfusion = {}
        self._inflight = []
        self._keep = []           # temporaries of the device operation being queued
        self._last_device = None  # (runtime, device) of the last device allreduce
        self.timeline = timeline
        self._has_alltoall = _has("horaAllToAll")
        self._send = bytearray(self.SLOT)
        self._recv = bytearray(self.SLOT * self.size)
        self._send_c = (ctypes.c_char * self.SLOT).from_buffer(self._send)
        self._recv_c = (ctypes.c_char * (self.SLOT * self.size)).from_buffer(self._recv)
        self._thread = threading.Thread(target=self._run, name="hora-engine", daemon=True)
        self._thread.start()

    # ---- user side -------------------------------------------------------------------

    def set_info(self, set_id):
        with self._cv:
            info = self._sets.get(set_id)
        if info is None:
            raise ValueError("process set %d is not registered (removed, or added after this "
                             "handle was made?)" % set_id)
        return info

    def sets(self):
        with self._cv:
            return dict(self._sets)

    def _check_usable(self):
        if self._failed is not None:
            raise HorovodInternalError(str(self._failed))
        if self._stopping or self._stopped:
            raise HorovodInternalError(
                "hora.torch has been shut down%s; call hvd.init() again"
                % (" (%s)" % self._stop_reason if self._stop_reason else ""))

    def check_member(self, set_id):
        """Raises unless this rank can use process set set_id; returns its SetInfo."""
        with self._cv:
            self._check_usable()
            info = self._sets.get(set_id)
        if info is None:
            raise ValueError("process set %d is not registered (never added, or removed)"
                             % set_id)
        if info.index < 0:
            raise ValueError("rank %d is not a member of process set %d (ranks %s)"
                             % (self.rank, set_id, info.ranks))
        return info

    def make_name(self, set_id, label, name):
        """The request's name: the caller's, or an automatic one by call order, counted per
        process set and operation so that ranks outside one set stay aligned on the others."""
        if name is not None:
            if not isinstance(name, str):
                raise TypeError("name must be a str, not %s" % type(name).__name__)
            return name
        with self._cv:
            self._counters[(set_id, label)] += 1
            n = self._counters[(set_id, label)]
            name = "%s.noname.%d" % (label, n)
            self._auto[(set_id, name)] = self._epochs[set_id]
        return name

    def submit(self, reqs):
        """Hands requests to the engine, all in the same round."""
        now = time.perf_counter()
        with self._cv:
            self._check_usable()
            for r in reqs:
                # An automatic name given before the ranks realigned after a stall (_realign)
                # belongs to the old count: it would meet no peer.
                epoch = self._auto_epoch(r)
                if epoch is not None and epoch != self._epochs[r.set_id]:
                    raise ValueError(
                        "%s %r was named before the ranks realigned their automatic names "
                        "after a stalled operation was cancelled; submit it again"
                        % (KIND_NAMES[r.kind], r.name))
            for r in reqs:
                if (r.set_id, r.name) in self._local:
                    raise ValueError(
                        "a %s named %r is already in flight (in process set %d); names of "
                        "operations in flight must differ" % (KIND_NAMES[r.kind], r.name,
                                                              r.set_id))
            for r in reqs:
                r.t_enqueue = now
                self._local[(r.set_id, r.name)] = r
            self._incoming.extend(reqs)
            # The engine need not wake for requests that wait for the rest of their batch: the
            # batch's last one wakes it (or the engine's own timer, for the batch's time limit).
            if self._announced == 0 and self._split_waiting()[0]:
                self._cv.notify()

    def _auto_epoch(self, r):
        """The epoch of r's automatic name (a group's members share their base's), or None for
        a name the caller gave; forgets it. Call with _cv held."""
        key = (r.set_id, r.name)
        if key not in self._auto and ".noname." in r.name:
            key = (r.set_id, r.name.rsplit(".", 1)[0])
        return self._auto.pop(key, None)

    @contextlib.contextmanager
    def hold(self):
        """Requests submitted inside the block enter the negotiation together, in the first
        round after it ends, so what becomes ready together (and is fused) does not depend on
        how fast the caller submits. Rounds go on meanwhile, so peers are not held up."""
        with self._cv:
            self._held += 1
        try:
            yield
        finally:
            with self._cv:
                self._held -= 1
                self._cv.notify()

    def announce_error(self, kind, set_id, name, text):
        """Announces a request that failed its local checks, so that the peers' matching
        requests fail as well instead of waiting for this rank."""
        r = Request(kind, set_id, name, error=text)
        with self._cv:
            if self._failed is not None or self._stopping or self._stopped:
                return
            if (set_id, name) in self._local:
                return
            r.t_enqueue = time.perf_counter()
            self._local[(set_id, name)] = r
            self._incoming.append(r)
            if self._announced == 0:
                self._cv.notify()

    def wait(self, req):
        """Waits for req; returns its result or raises its error.

        While a caller waits it submits nothing more, so the cycle time (which gathers
        submissions for fusion) only delays it: rounds then follow each other at once for as
        long as they carry news (some rank announced something), and fall back to the cycle
        when they do not (an operation a peer has not submitted), so a stall does not spin."""
        self._waited = True  # (a plain store: read by the engine thread at the end of a round)
        if not req.event.is_set():
            with self._cv:
                self._waiters += 1
                self._cv.notify()
            try:
                while not req.event.wait(0.5):
                    if not self._thread.is_alive() and not req.event.is_set():
                        # Cannot happen unless the engine itself has a bug: never hang on it.
                        raise HorovodInternalError("the hora.torch engine thread has ended")
            finally:
                with self._cv:
                    self._waiters -= 1
        if req.exc is not None:
            e = req.exc
            raise type(e)(*e.args)
        return req.result

    def shutdown(self):
        with self._cv:
            self._stopping = True
            self._cv.notify()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def alive(self):
        return self._thread.is_alive()

    @property
    def stopped(self):
        """The loop has ended or is ending (a shutdown, this rank's or a peer's, or a failure)."""
        with self._cv:
            return self._stopped or self._failed is not None

    @property
    def failed(self):
        return self._failed

    # ---- engine thread -----------------------------------------------------------------

    def _run(self):
        torch.set_grad_enabled(False)
        try:
            while True:
                reqs, stop = self._wait_for_round()
                if self._round_once(reqs, stop):
                    break
            self._close(None)
        except BaseException as e:  # noqa: B902 - every failure must reach the waiters
            self._close(e)

    def _split_waiting(self):
        """(to announce now, to keep back, the time the first kept one is due) of _incoming: a
        request the cache knows is kept back until the rest of its batch (_close_period) has
        been submitted here too, for at most batch_wait, and never while a caller waits or at a
        shutdown. Call with _cv held."""
        if not self._batch_of or self._waiters or self._stopping:
            return self._incoming, [], None
        now = time.perf_counter()
        go, keep, due = [], [], None
        for r in self._incoming:
            key = (r.set_id, r.name)
            batch = self._batch_of.get(key)
            if (batch is not None and key in self._cache and now - r.t_enqueue < self.batch_wait
                    and not all(k in self._local for k in batch)):
                keep.append(r)
                t = r.t_enqueue + self.batch_wait
                due = t if due is None else min(due, t)
            else:
                go.append(r)
        return go, keep, due

    def _wait_for_round(self):
        with self._cv:
            while True:
                if self._stopping:
                    break
                now = time.monotonic()
                if now >= self._next_round:
                    break
                go, _, due = self._split_waiting()
                if not self._held and (go and self._announced == 0
                                       or self._waiters and self._quiet_rounds == 0):
                    break
                wait = self._next_round - now
                if due is not None:
                    wait = min(wait, max(due - time.perf_counter(), 0.0) + 1e-4)
                self._cv.wait(wait)
            if self._held and not self._stopping:
                reqs = []  # rounds go on (the peers wait for them), taking nothing new
            else:
                reqs, self._incoming, _ = self._split_waiting()
            self._announced += len(reqs)
            stop = self._stopping
        # Rounds idle_cycle apart (until this rank has something to say) when nothing pending
        # anywhere waits for another rank than this one: the table empty (the same on every
        # rank) and nothing said lately, or every operation in it waiting for this rank's own
        # announcement, which starts a round at once. A rank that waits for others joins the
        # rounds at the cycle and waits inside them for the ranks it waits for.
        # (An idle job then costs well under 1% of a core per rank.) Only a peer's operation
        # that this rank takes no part in (a process set it is not in) can make the first
        # round after a silence wait up to idle_cycle; for a second after one, this rank keeps
        # to the cycle even when idle, so that a run of such operations goes at the cycle's pace.
        now = time.monotonic()
        if self._waits_for_others(now):
            idle = False
        else:
            idle = not reqs and now >= self._outsider_until
        self._next_round = now + (self.idle_cycle if idle else self.cycle)
        return reqs, stop

    def _waits_for_others(self, now):
        """Whether an operation in the table waits for other ranks than this one: one this
        rank has announced, or one of a process set it is not a member of."""
        for key, e in self._table.items():
            if self.rank in e.descs:
                return True
            info = self._sets.get(key[0])
            if info is None or info.index < 0:
                return True
        return False

    def _exchange(self, payload):
        """Allgathers one byte string per rank over the global communicator."""
        S, n = self.SLOT, self.size
        k = len(payload)
        struct.pack_into("<I", self._send, 0, k)
        if 0 < k <= S - 4:
            self._send[4:4 + k] = payload
        self.comm.allgather(ctypes.addressof(self._send_c), ctypes.addressof(self._recv_c), S,
                            C.UINT8)
        lens = [struct.unpack_from("<I", self._recv, i * S)[0] for i in range(n)]
        most = max(lens)
        if most == 0:
            return None
        if most <= S - 4:
            return [bytes(self._recv[i * S + 4:i * S + 4 + lens[i]]) for i in range(n)]
        # Someone had more to say than a slot holds: a second allgather as wide as the widest.
        send = bytearray(most)
        send[:k] = payload
        recv = bytearray(most * n)
        sc = (ctypes.c_char * most).from_buffer(send)
        rc = (ctypes.c_char * (most * n)).from_buffer(recv)
        self.comm.allgather(ctypes.addressof(sc), ctypes.addressof(rc), most, C.UINT8)
        del sc, rc
        return [bytes(recv[i * most:i * most + lens[i]]) for i in range(n)]

    def _round_once(self, reqs, stop):
        if self._inflight:
            self._prune_inflight()
        stalled, self._stalled = self._stalled, []
        if reqs or stop or stalled:
            ids, descs = [], []
            for r in reqs:
                d = r.desc()
                cid = self._cache.get((r.set_id, r.name))
                if cid is not None and self._cache_descs[cid][1] == d:
                    ids.append(cid)
                else:
                    descs.append(d)
            self.stats["cached"] += len(ids)
            self.stats["negotiated"] += len(descs)
            payload = json.dumps([1 if stop else 0, descs, stalled, ids],
                                 separators=(",", ":")).encode()
        else:
            payload = b""
        payloads = self._exchange(payload)
        self._round += 1
        self.stats["rounds"] += 1
        self._quiet_rounds = self._quiet_rounds + 1 if payloads is None else 0
        if payloads is None:
            self.stats["silent_rounds"] += 1
        any_stop = False
        if payloads is not None:
            flagged = []
            for src, p in enumerate(payloads):
                if not p:
                    continue
                flag, descs, stalls, ids = json.loads(p)
                flagged.extend(stalls)
                if flag:
                    any_stop = True
                    if self._stop_reason is None:
                        self._stop_reason = ("rank %d called shutdown()" % src
                                             if src != self.rank else "shutdown() was called")
                for d in descs:
                    self._add(src, d)
                for cid in ids:
                    if not 0 <= cid < len(self._cache_descs):
                        raise HorovodInternalError(
                            "rank %d announced an operation by response-cache id %r, which rank "
                            "%d's cache (%d entries) does not hold: do the ranks set "
                            "HORA_CACHE_CAPACITY alike?" % (src, cid, self.rank,
                                                            len(self._cache_descs)))
                    self._add(src, self._cache_descs[cid][1])
            ready = self._collect_ready()
            self._remember(ready)
            if flagged:
                self._cancel_stalled(flagged)
                # The flags are in every rank's payloads: every rank realigns in this round.
                self._realign(sorted({f[0] for f in flagged}), {e.key for e, _ in ready})
            if ready:
                tl = self.timeline
                if tl is not None and tl.mark_cycles:
                    tl.instant("CYCLE_START")
                self._execute(ready)
        if self._period and self._waited and not self._local:
            self._close_period()
        if (self._table and (self.stall_s > 0 or self.shutdown_s > 0)
                and time.monotonic() >= self._next_stall):
            self._next_stall = time.monotonic() + self._stall_period
            self._stall_check()
        return any_stop

    def _add(self, src, d):
        key = (d[D_SET], d[D_NAME])
        e = self._table.get(key)
        if e is None:
            e = self._table[key] = _Entry(key)
            if key[0] != 0:
                info = self._sets.get(key[0])
                if info is None or info.index < 0:
                    # Peers use a process set this rank is not in: keep to the cycle a while.
                    self._outsider_until = time.monotonic() + self.OUTSIDER_S
        e.descs[src] = d
        e.rounds[src] = self._round
        if d[D_DEVICE]:
            e.device = True

    def _collect_ready(self):
        join = self._table.get((0, JOIN_NAME))
        joined = set(join.descs) if join is not None else ()
        ready = []
        for key, e in self._table.items():
            info = self._sets.get(key[0])
            if info is None:
                ready.append((e, "process set %d is not registered (removed?)" % key[0]))
                continue
            if len(e.descs) == len(info.ranks):
                ready.append((e, None))
                continue
            if not joined or e is join:
                continue
            missing = [r for r in info.ranks if r not in e.descs]
            kind = next(iter(e.descs.values()))[D_KIND]
            if key[0] == 0 and kind == ALLREDUCE:
                if all(r in joined for r in missing):
                    ready.append((e, None))
            elif any(r in joined for r in info.ranks):
                # At once, as Horovod answers it, without waiting for the ranks that have not
                # joined: their own calls fail alike whenever they make them.
                ready.append((e, "%s %r cannot complete: rank(s) %s called join() (only "
                                 "allreduce of the global process set proceeds past "
                                 "joined ranks, as in Horovod)"
                              % (KIND_NAMES[kind], key[1],
                                 sorted(r for r in info.ranks if r in joined))))
        for e, _ in ready:
            del self._table[e.key]
        return ready

    def _remember(self, ready):
        """Adds to the response cache the ready operations that every rank announced alike
        (in ready order, the same on every rank)."""
        for e, err in ready:
            if err is not None:
                continue
            ds = list(e.descs.values())
            d0 = ds[0]
            if d0[D_KIND] not in _CACHEABLE or d0[D_ERROR] is not None:
                continue
            if any(d != d0 for d in ds[1:]):
                continue
            cid = self._cache.get(e.key)
            if cid is not None:
                self._cache_descs[cid] = (e.key, d0)
            elif len(self._cache_descs) < self.cache_capacity:
                self._cache[e.key] = len(self._cache_descs)
                self._cache_descs.append((e.key, d0))

    def _note_allreduce(self, keys, nbytes):
        """Records allreduces run in this period (see _close_period); a program that never
        waits never closes one, so a period longer than the cache forgets what it held."""
        if len(self._period) > self.cache_capacity:
            self._period = []
        self._period.extend(zip(keys, nbytes))

    def _close_period(self):
        """A caller has waited, and this rank has nothing pending any more (the end of a
        training step, whose gradients were submitted asynchronously and then waited for): the
        allreduces run since the last such moment, cut in execution order into batches of at most
        HORA_FUSION_THRESHOLD bytes, become the batches its requests wait to complete next time
        (_split_waiting): each then meets the other ranks' in one round and one fused call, as
        a DistributedDataParallel bucket does."""
        period, self._period = self._period, []
        self._waited = False
        batches, cur, size = [], [], 0
        for key, nbytes in period:
            if key not in self._cache:
                continue
            if cur and size + nbytes > self.threshold:
                batches.append(cur)
                cur, size = [], 0
            cur.append(key)
            size += nbytes
        if cur:
            batches.append(cur)
        with self._cv:
            for keys in batches:
                batch = frozenset(keys)
                for k in keys:
                    if len(keys) > 1:
                        self._batch_of[k] = batch
                    else:
                        self._batch_of.pop(k, None)

    @property
    def _stall_period(self):
        """Seconds between two stall checks: a second, or less for short stall limits."""
        limits = [x for x in (self.stall_s, self.shutdown_s) if x > 0]
        return min([1.0] + [x / 4 for x in limits])

    def _stall_check(self):
        now = time.monotonic()
        for key, e in self._table.items():
            if (self.shutdown_s > 0 and not e.flagged and key != (0, JOIN_NAME)
                    and now - e.t_first > self.shutdown_s):
                e.flagged = True
                self._stalled.append(list(key))
            if self.stall_s > 0 and not e.warned and now - e.t_first > self.stall_s:
                e.warned = True
                info = self._sets.get(key[0])
                missing = [r for r in (info.ranks if info else []) if r not in e.descs]
                if self.rank == min(e.descs):
                    print("hora.torch: %r (process set %d) has waited %.0f s: ranks %s submitted "
                          "it, ranks %s have not" % (key[1], key[0], now - e.t_first,
                                                     sorted(e.descs), missing),
                          file=sys.stderr, flush=True)

    def _cancel_stalled(self, flagged):
        """Fails, on every rank alike, the requests that some rank named as stalled this round
        and that are still waiting (one that became ready in this round runs)."""
        for set_id, name in flagged:
            e = self._table.pop((set_id, name), None)
            if e is None:
                continue  # already cancelled (named by several ranks), or ready
            info = self._sets.get(set_id)
            ranks = info.ranks if info is not None else sorted(e.descs)
            kinds = sorted(set(KIND_NAMES[d[D_KIND]] for d in e.descs.values()))
            missing = [r for r in ranks if r not in e.descs]
            text = ("%s %r%s stalled: ranks %s submitted it, ranks %s did not within "
                    "HORA_STALL_SHUTDOWN_TIME_SECONDS=%g s, so it is cancelled on every rank "
                    "(every rank must make the same operations under the same names: did a rank "
                    "use another name, skip this call, or fail before it?)"
                    % ("/".join(kinds), name,
                       "" if set_id == 0 else " (process set %d)" % set_id, sorted(e.descs),
                       missing, self.shutdown_s))
            if self.rank in e.descs:
                self._fail_entry(e, text, ValueError)
            # else a request of that name that this rank has not announced yet (it was
            # submitted during this round) is not this one: _realign renames it.

    def _realign(self, set_ids, keep):
        """After a stalled operation of these sets was cancelled: forgets their automatically
        named entries still waiting, restarts their automatic names from 1, and renames this
        rank's own waiting requests that have one, in the order it submitted them, to be
        announced again (but not those of `keep`, which run in this round). Ranks whose calls
        drifted apart (one made a call the others did not, or failed before one) so meet again
        on the calls they make alike from then on, where every later unnamed call would
        otherwise stall in turn."""
        with self._cv:
            for key in [k for k in self._table if k[0] in set_ids and ".noname." in k[1]]:
                del self._table[key]
            for k in [k for k in self._counters if k[0] in set_ids]:
                del self._counters[k]
            for s in set_ids:
                self._epochs[s] += 1
            waiting = set(map(id, self._incoming))
            renamed, local, again = {}, {}, set()
            for key, r in self._local.items():
                if key[0] in set_ids and ".noname." in key[1] and key not in keep:
                    label, rest = key[1].split(".noname.", 1)
                    num, dot, member = rest.partition(".")
                    base = (key[0], label, num)
                    if base not in renamed:
                        self._counters[(key[0], label)] += 1
                        renamed[base] = "%s.noname.%d" % (label, self._counters[(key[0], label)])
                    r.name = renamed[base] + dot + member
                    if id(r) not in waiting:
                        self._announced -= 1
                    again.add(id(r))
                local[(r.set_id, r.name)] = r
            self._local = local
            self._incoming = [r for r in local.values() if id(r) in again or id(r) in waiting]

    # ---- agreement -------------------------------------------------------------------------

    def _fail_entry(self, e, text, exc_type=None):
        """Fails this rank's request of entry e, if it has one: with HorovodInternalError (a
        RuntimeError) where the ranks disagree about the operation, as Horovod raises, or
        exc_type."""
        r = self._take(e.key)
        if r is not None:
            r.fail((exc_type or HorovodInternalError)(text))

    def _take(self, key):
        with self._cv:
            r = self._local.pop(key, None)
            if r is not None:
                self._announced -= 1
        return r

    # ---- the end -----------------------------------------------------------------------

    def _close(self, exc):
        """Ends the loop: fails whatever is pending, frees or aborts the communicators."""
        if exc is not None:
            if isinstance(exc, C.HoraError):
                text = ("hora.torch: a collective failed (%s): %s"
                        % ("a peer or the wire failed" if exc.remote else "library error", exc))
            elif isinstance(exc, HorovodInternalError):
                text = str(exc)
            else:
                text = "hora.torch engine failed: %s: %s" % (type(exc).__name__, exc)
            err = HorovodInternalError(text)
        else:
            err = HorovodInternalError(
                "hora.torch has been shut down (%s) before this operation completed"
                % (self._stop_reason or "shutdown"))
        with self._cv:
            if exc is not None:
                self._failed = err
            self._stopped = True
            pending = list(self._local.values())
            self._local.clear()
            self._incoming = []
            self._announced = 0
            sets = list(self._sets.values())
        for r in pending:
            r.fail(HorovodInternalError(*err.args))
        self._drain_inflight()
        for s in sets:
            if s.dcomm is not None:
                try:
                    s.dcomm.abort() if exc is not None else s.dcomm.destroy()
                except C.HoraError:
                    pass
            if s.id == 0 or s.comm is None:
                continue
            try:
                s.comm.abort() if exc is not None else s.comm.destroy()
            except C.HoraError:
                pass
        if exc is not None:
            try:
                self.comm.abort()
            except C.HoraError:
                pass
        tl = self.timeline
        if tl is not None:
            tl.close()
