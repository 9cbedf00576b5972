"""The torch.distributed backend "hora".

Importing this module registers the backend, after which

    import hora.torch.distributed
    torch.distributed.init_process_group(backend="hora", init_method=..., rank=..., world_size=...)

works with every init method (env://, tcp://, file://) and with
torch.nn.parallel.DistributedDataParallel unchanged.

Each process group owns one Hora communicator and one worker thread. Every operation on host
tensors is queued to that thread, which runs the collective on the tensors' memory in place
(contiguous CPU tensors pass by address, without a copy) and then completes a
torch.futures.Future. Callers go on at once: DistributedDataParallel's gradient buckets reduce
while autograd computes the next ones.

CUDA tensors (the backend registers for "cpu" and "cuda"): the caller's thread queues the
operation on the group's stream for that GPU, which first waits for the caller's current stream
(an event), and records an event after it; the library's calls take that stream and return once
queued, as NCCL's do. wait() makes the caller's current stream wait for that event and does not
block the CPU; DistributedDataParallel gets a CUDA-aware future that does the same. The tensors
stay referenced by the work object and by the group until the event has passed, so the caching
allocator cannot hand their memory out while the GPU may still use it (no record_stream).
Host work queued before a device operation is issued first, so that every rank calls the
library in program order.

A failure (a dead or silent peer, an exhausted timeout) completes the future with the HoraError;
every later operation of the group fails at once with the same error. wait() on a work object that
the torch.distributed functions return raises it; DistributedDataParallel raises it from backward().

Rendezvous: rank 0 creates a Hora unique id and publishes it in the c10d store that
init_process_group hands to the backend; the other ranks read it from there. The group's timeout
bounds how long any wait on a peer lasts (unless it is torch's default and HORA_TIMEOUT_MS is set,
in which case the library reads the environment).

Point-to-point: send() and recv() ignore the tag; sends of large messages wait for the receiver, so
two ranks that exchange large messages should use torch.distributed.batch_isend_irecv, whose
operations run together as one group.
"""
import collections
import datetime
import os

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d
from torch.distributed import distributed_c10d as _dc10d

from hora import _core, _device
from hora.torch import _pg_worker
from hora.torch._pg_collectives import Collectives
from hora.torch._pg_store import StoreOps
from hora.torch._pg_worker import (GroupFailedError, _DeviceOp, _Engine, _has, _Job, _OnStream,
                                   _PyWork, _python_caller, _unwrap)

__all__ = ["ProcessGroupHora", "BACKEND_NAME", "GroupFailedError", "create_process_group",
           "monitored_barrier"]

BACKEND_NAME = "hora"
_UID_KEY = "hora/unique_id"


class ProcessGroupHora(Collectives, StoreOps, _c10d.ProcessGroup):
    """A torch.distributed process group on one Hora communicator (see the module's doc)."""

    def __init__(self, store, rank, size, timeout=_dc10d.default_pg_timeout):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        timeout_ms = None
        if isinstance(timeout, datetime.timedelta):
            if not (timeout == _dc10d.default_pg_timeout and os.environ.get("HORA_TIMEOUT_MS")):
                timeout_ms = max(1, min(int(timeout.total_seconds() * 1000), 2 ** 31 - 1))
        if rank == 0:
            uid = _core.unique_id()
            store.set(_UID_KEY, uid)
        else:
            uid = store.get(_UID_KEY)
        comm = _core.Comm.init_rank(size, bytes(uid), rank, timeout_ms=timeout_ms)
        self._store = store
        self._timeout_s = (timeout_ms / 1000.0 if timeout_ms is not None
                           else _default_timeout_s(timeout))
        # HORA_TORCH_ANY_SOURCE=1: sends announce themselves, so recv() may omit the source
        self._any_source_on = size > 2 and os.environ.get("HORA_TORCH_ANY_SOURCE", "0").strip() == "1"
        self._taken = [0] * size  # messages from each rank claimed by this rank's receives
        self._last_source = rank
        self._barriers = 0  # monitored barriers so far
        self._engine = _Engine(comm, "hora-pg-r%d" % rank)
        _pg_worker._ENGINES.add(self._engine)
        self._coalescing = None
        self._coalescing_device = None
        self._streams = {}  # (runtime, device) -> the group's stream there
        self._inflight = collections.deque()  # device operations whose tensors are held
        self._has_alltoall = _has("horaAllToAll")
        self._has_barrier = _has("horaBarrier")

    # -- plumbing -----------------------------------------------------------------------------

    def __del__(self):
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.shutdown()

    def shutdown(self, wait_s=30):
        """Finish queued work, destroy the communicator and stop the worker thread."""
        self._engine.shutdown(wait_s)

    def _submit(self, issue, finish, p2p=False, src=-1, title=None, inputs=(), tensors=(), pure=False):
        """Queues one operation: host tensors to the group's thread; device tensors on the
        group's stream for their device, from this thread (_device_job). tensors: all of the
        operation's tensors; pure: issue() and finish() do nothing but library calls when they
        are contiguous. title names its profiler event, "hora:<title>", recorded with the shapes
        of the tensors in inputs while a torch profiler runs: the event starts here and ends when
        the work completes (an asynchronous event)."""
        dev = self._device_of(tensors) if tensors else None
        engine = self._engine
        if dev is None:
            job = _Job(issue, finish, torch.futures.Future(), p2p)
            op = None
        else:
            job, op = self._device_job(issue, finish, p2p, tensors, pure, *dev)
        future = job.future
        record = _pg_worker._record_start(title, inputs)
        if record is not None:  # before the job runs, so that its completion ends the event
            future = _pg_worker._record_end_on(record, future)
        if engine.error is not None:
            job.future.set_exception(GroupFailedError("an earlier operation of this hora process "
                                                      "group failed: %s" % engine.error))
        elif self._coalescing is not None:
            self._coalescing.append(job)
            if op is not None:
                self._coalescing_device = dev
        elif op is None:
            engine.submit([job])
        else:
            engine.run_now([job], dev[0].use_stream(op.stream), lambda: self._device_comm(*dev))
        checked = future.then(_unwrap)
        if _python_caller(2):
            return _PyWork(future, checked, src, op)
        return _c10d._create_work_from_future(checked)

    # -- device tensors -------------------------------------------------------------------------

    def _device_of(self, tensors):
        """(runtime, device index) when the tensors are on a device, else None; all of one call's
        tensors must then be on that one device."""
        rt = _device.ops_for(tensors[0])
        if rt is None and not any(t.is_cuda for t in tensors):
            return None
        index = _device.device_index(tensors[0]) if rt is not None else -1
        for t in tensors:
            if _device.ops_for(t) is not rt or _device.device_index(t) != index:
                raise ValueError("the hora backend takes the tensors of one call on one device; "
                                 "here they are on %s" % sorted({str(x.device) for x in tensors}))
        return rt, index

    def _device_comm(self, rt, index):
        """The group's communicator for device work on this GPU, split from the group's by the
        first device operation (every rank makes it at the same operation): the library binds a
        communicator to the device current when it is made, which for the group's own was
        whatever was current at init_process_group, and torch.cuda.set_device may come after."""
        def make(comm):
            if rt.name == "torch":
                with torch.cuda.device(index):
                    return comm.split(0, self._rank)
            return comm.split(0, self._rank)
        return self._engine.device_comm((rt.name, index), make)

    def _stream_for(self, rt, index):
        key = (rt.name, index)
        s = self._streams.get(key)
        if s is None:
            s = self._streams[key] = rt.Stream(index) if rt.name == "torch" else rt.Stream()
        return s

    def _device_job(self, issue, finish, p2p, tensors, pure, rt, index):
        """The job of an operation on device tensors, run on the group's stream for the device
        after the caller's current stream (an event), with the results' event recorded after it.
        The library's calls take that stream, so they return once queued. Local steps (packing,
        copies back into non-contiguous tensors) are torch operations queued on the same stream;
        on the library's own runtime (the emulated device of the tests), whose streams torch does
        not know, the stream is synchronized before them instead."""
        stream = self._stream_for(rt, index)
        while self._inflight and self._inflight[0].done():
            self._inflight.popleft()
        op = _DeviceOp(rt, index, stream, list(tensors))
        self._inflight.append(op)
        host_order = rt is _device.RUNTIME and not (pure and all(t.is_contiguous() for t in tensors))
        handle = stream.cuda_stream

        def dev_issue(_comm):
            if host_order:
                stream.synchronize()
            issue(_OnStream(self._device_comm(rt, index), handle))

        def dev_finish():
            if host_order:
                stream.synchronize()
            value = finish()
            op.record_done()
            return value

        if rt.name == "torch":  # a future that orders its users after the stream (set on it)
            future = torch.futures.Future(devices=[torch.device("cuda", index)])
        else:
            future = torch.futures.Future()
        return _Job(dev_issue, dev_finish, future, p2p), op

    def _start_coalescing(self):
        if self._coalescing is not None:
            raise RuntimeError("hora process group: coalescing already started")
        self._coalescing = []

    def _end_coalescing(self, reqs=None):
        jobs, self._coalescing = self._coalescing, None
        dev, self._coalescing_device = self._coalescing_device, None
        if jobs is None:
            raise RuntimeError("hora process group: _end_coalescing without _start_coalescing")
        if jobs and dev is None:
            self._engine.submit(jobs)
        elif jobs:
            self._engine.run_now(jobs, dev[0].use_stream(self._stream_for(*dev)),
                                 lambda: self._device_comm(*dev))

    def _peer(self, r, what):
        if not isinstance(r, int) or not 0 <= r < self._size:
            raise ValueError("%s %r is not a rank of this group of %d" % (what, r, self._size))
        return r

    # -- identity -----------------------------------------------------------------------------

    def getBackendName(self):
        return BACKEND_NAME

    def name(self):
        return BACKEND_NAME

    def _get_backend_name(self):
        return BACKEND_NAME

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def __repr__(self):
        return "ProcessGroupHora(rank=%d, size=%d)" % (self._rank, self._size)


def _default_timeout_s(timeout):
    env = os.environ.get("HORA_TIMEOUT_MS")
    if env:
        try:
            return max(int(env), 1) / 1000.0
        except ValueError:
            pass
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return _dc10d.default_pg_timeout.total_seconds()


def create_process_group(store, rank, size, timeout):
    """The creator registered with torch.distributed.Backend.register_backend."""
    return ProcessGroupHora(store, rank, size, timeout)


def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
    """torch.distributed.monitored_barrier for a hora group (torch 1.13's own refuses every group
    but gloo's before it reaches the group): see ProcessGroupHora.monitored_barrier."""
    pg = _dc10d._get_default_group() if group is None else group
    if _dc10d._rank_not_in_group(pg):
        return None
    if not isinstance(pg, ProcessGroupHora):
        return dist.monitored_barrier(group, timeout, wait_all_ranks=wait_all_ranks)
    return pg.monitored_barrier(timeout, wait_all_ranks=wait_all_ranks)


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    try:
        dist.Backend.register_backend(BACKEND_NAME, create_process_group, devices=["cpu", "cuda"])
    except TypeError:  # a torch whose register_backend takes no devices (before 2.0): all of them
        dist.Backend.register_backend(BACKEND_NAME, create_process_group)


_register()
