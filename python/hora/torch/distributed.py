"""The torch.distributed backend "hora".

Importing this module registers the backend, after which

    import hora.torch.distributed
    torch.distributed.init_process_group(backend="hora", init_method=..., rank=..., world_size=...)

works with every init method (env://, tcp://, file://) and with
torch.nn.parallel.DistributedDataParallel unchanged.

Each process group owns one Hora communicator and one worker thread. Every operation is queued
to that thread, which runs the collective on the tensors' memory in place (contiguous CPU tensors
pass by address, without a copy) and then completes a torch.futures.Future. Callers go on at once:
DistributedDataParallel's gradient buckets reduce while autograd computes the next ones.

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
import atexit
import ctypes
import datetime
import os
import queue
import sys
import threading
import weakref

import torch
import torch.distributed as dist
from torch._C import _distributed_c10d as _c10d
from torch.distributed import distributed_c10d as _dc10d

from hora import _core

__all__ = ["ProcessGroupHora", "BACKEND_NAME", "GroupFailedError", "create_process_group"]

BACKEND_NAME = "hora"
_UID_KEY = "hora/unique_id"

_DTYPES = {
    torch.float32: _core.FLOAT32, torch.float64: _core.FLOAT64, torch.float16: _core.FLOAT16,
    torch.bfloat16: _core.BFLOAT16, torch.int32: _core.INT32, torch.int64: _core.INT64,
    torch.int8: _core.INT8, torch.uint8: _core.UINT8,
}
_COMPLEX = {torch.complex64: torch.float32, torch.complex128: torch.float64}

_RedOpType = _c10d.ReduceOp.RedOpType
_OPS = {
    _RedOpType.SUM: _core.SUM, _RedOpType.PRODUCT: _core.PROD, _RedOpType.MIN: _core.MIN,
    _RedOpType.MAX: _core.MAX, _RedOpType.AVG: _core.AVG,
}


class GroupFailedError(RuntimeError):
    """An operation of a process group that an earlier failure (a dead or silent peer) broke."""


def _op_code(reduce_op):
    kind = getattr(reduce_op, "op", reduce_op)
    try:
        return _OPS[kind]
    except (KeyError, TypeError):
        raise ValueError("the hora backend does not support the reduction %s (it supports SUM, "
                         "PRODUCT, MIN, MAX and AVG)" % (getattr(kind, "name", kind),)) from None


def _check_tensor(t, what="tensor"):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, not %s" % (what, type(t).__name__))
    if t.device.type != "cpu":
        raise ValueError("the hora backend works on CPU tensors; %s is on %s" % (what, t.device))
    if t.is_sparse:
        raise ValueError("the hora backend does not support sparse tensors (%s)" % what)
    if t.dtype not in _DTYPES and t.dtype not in _COMPLEX:
        raise TypeError("the hora backend does not support %s (%s)" % (t.dtype, what))


def _wire(t):
    """(address, element count, dtype code) of a contiguous tensor, complex as pairs of reals."""
    if t.dtype in _COMPLEX:
        t = torch.view_as_real(t)
    return t.data_ptr(), t.numel(), _DTYPES[t.dtype]


def _elems(t):
    return t.numel() * (2 if t.dtype in _COMPLEX else 1)


def _check_op_dtype(op, dtype):
    if dtype in _COMPLEX and op not in (_core.SUM, _core.AVG):
        raise ValueError("the hora backend reduces complex tensors with SUM and AVG only")


class _Staged:
    """A contiguous stand-in for a tensor; copied back after the operation when it is a copy."""

    def __init__(self, t, copy_in=True):
        self.target = t
        if t.is_contiguous():
            self.buf = t
        else:
            self.buf = t.contiguous() if copy_in else torch.empty_like(t, memory_format=torch.contiguous_format)

    def back(self):
        if self.buf is not self.target:
            self.target.copy_(self.buf)


def _consecutive(tensors):
    """True when equal-sized contiguous tensors lie back to back in one block of memory."""
    if not tensors or not all(t.is_contiguous() for t in tensors):
        return False
    nbytes = tensors[0].numel() * tensors[0].element_size()
    base = tensors[0].data_ptr()
    return all(t.dtype == tensors[0].dtype and t.numel() == tensors[0].numel()
               and t.data_ptr() == base + i * nbytes for i, t in enumerate(tensors))


def _flat_view(tensors):
    """One 1-D tensor over the memory of consecutive tensors (see _consecutive)."""
    first = tensors[0]
    try:
        return first.as_strided((first.numel() * len(tensors),), (1,), first.storage_offset())
    except RuntimeError:  # beyond the storage: not one block after all
        return None


class _Job:
    """One operation: issue() makes the library calls, finish() runs after them (and after the
    group's end when issued inside one) and returns the future's value."""
    __slots__ = ("issue", "finish", "future", "p2p")

    def __init__(self, issue, finish, future, p2p=False):
        self.issue, self.finish, self.future, self.p2p = issue, finish, future, p2p


class _Engine:
    """The communicator and the one thread that calls it."""

    def __init__(self, comm, name):
        self.comm = comm
        self.error = None
        self.closed = False
        self.queue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def submit(self, jobs):
        if self.closed:
            raise RuntimeError("the hora process group was shut down")
        self.queue.put(jobs)

    def _loop(self):
        torch.set_grad_enabled(False)  # results land in tensors that may require grad
        while True:
            jobs = self.queue.get()
            if jobs is None:
                break
            self._run(jobs)
        self._close()

    def _run(self, jobs):
        if self.error is None:
            try:
                if len(jobs) == 1:
                    jobs[0].issue(self.comm)
                else:
                    with _core.group():
                        for job in jobs:
                            job.issue(self.comm)
            except Exception as e:  # the library, or a bad argument found late
                if isinstance(e, _core.HoraError) and e.remote:
                    # the communicator is broken: abort it now, so that the peers fail at once
                    # too instead of waiting out their timeout on this rank
                    self.error = e
                    self._abort()
                self._fail(jobs, e)
                return
        if self.error is not None:
            self._fail(jobs, GroupFailedError("an earlier operation of this hora process group "
                                              "failed: %s" % self.error))
            return
        for job in jobs:
            try:
                value = job.finish()
            except Exception as e:
                job.future.set_exception(e)
            else:
                job.future.set_result(value)

    @staticmethod
    def _fail(jobs, exc):
        for job in jobs:
            if not job.future.done():
                job.future.set_exception(exc)

    def _abort(self):
        comm, self.comm = self.comm, None
        if comm is not None:
            try:
                comm.abort()
            except _core.HoraError:
                pass

    def _close(self):
        comm, self.comm = self.comm, None
        if comm is None:
            return
        try:
            if self.error is not None:
                comm.abort()
            else:
                comm.destroy()
        except _core.HoraError:
            pass

    def shutdown(self, wait_s=None):
        if not self.closed:
            self.closed = True
            self.queue.put(None)
        if wait_s is not None and self.thread is not threading.current_thread():
            self.thread.join(wait_s)


_ENGINES = weakref.WeakSet()


@atexit.register
def _shutdown_all():
    for engine in list(_ENGINES):
        engine.shutdown(wait_s=10)


class _PyWork(_c10d.Work):
    """Work handed to Python callers: wait() raises the operation's error. (C++ callers such as
    DistributedDataParallel get torch's future-wrapping work instead, which they check through
    its future.)"""

    def __init__(self, future, checked, rank=-1):
        super().__init__()
        self._future = future
        self._checked = checked
        self._src = rank

    def wait(self, timeout=None):
        if timeout is not None and timeout != _dc10d.default_pg_timeout and not self._future.done():
            seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout / 1000.0
            done = threading.Event()
            self._future.add_done_callback(lambda _f: done.set())
            if seconds > 0 and not done.wait(seconds):
                raise RuntimeError("hora work: timed out after %.3f s" % seconds)
        self._future.wait()
        return True

    def is_completed(self):
        return self._future.done()

    def is_success(self):
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:
            return False
        return True

    def exception(self):
        if not self._future.done():
            return None
        try:
            self._future.value()
        except Exception as e:
            return e
        return None

    def get_future(self):
        return self._checked

    def result(self):
        return self._future.value()

    def synchronize(self):
        pass

    def source_rank(self):
        return self._src

    def _source_rank(self):
        return self._src


_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_C10D_FILE = os.path.abspath(_dc10d.__file__)
_caller_kinds = {}


def _python_caller(depth):
    """True when the method was called from Python code that keeps the work object itself: the
    torch.distributed functions or user code. False when torch's C++ (DistributedDataParallel's
    reducer, broadcast_coalesced, parameter checks) called it, from inside torch's Python: C++
    must get a work object it can wait on without Python."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:
        return False
    name = frame.f_code.co_filename
    kind = _caller_kinds.get(name)
    if kind is None:
        path = os.path.abspath(name)
        kind = path == _C10D_FILE or not path.startswith(_TORCH_DIR)
        _caller_kinds[name] = kind
    return kind


class ProcessGroupHora(_c10d.ProcessGroup):
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
        self._engine = _Engine(comm, "hora-pg-r%d" % rank)
        _ENGINES.add(self._engine)
        self._coalescing = None
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

    def _submit(self, issue, finish, p2p=False, src=-1):
        future = torch.futures.Future()
        job = _Job(issue, finish, future, p2p)
        engine = self._engine
        if engine.error is not None:
            future.set_exception(GroupFailedError("an earlier operation of this hora process group "
                                                  "failed: %s" % engine.error))
        elif self._coalescing is not None:
            self._coalescing.append(job)
        else:
            engine.submit([job])
        checked = future.then(_unwrap)
        if _python_caller(2):
            return _PyWork(future, checked, src)
        return _c10d._create_work_from_future(checked)

    def _start_coalescing(self):
        if self._coalescing is not None:
            raise RuntimeError("hora process group: coalescing already started")
        self._coalescing = []

    def _end_coalescing(self, reqs=None):
        jobs, self._coalescing = self._coalescing, None
        if jobs is None:
            raise RuntimeError("hora process group: _end_coalescing without _start_coalescing")
        if jobs:
            self._engine.submit(jobs)

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

    # -- collectives --------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if not tensors:
            raise ValueError("allreduce: no tensors")
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        for t in tensors:
            _check_tensor(t)
            if t.dtype != tensors[0].dtype or t.shape != tensors[0].shape:
                raise ValueError("allreduce: the tensors of the list differ in dtype or shape")
        _check_op_dtype(op, tensors[0].dtype)
        if len(tensors) == 1:
            staged = [_Staged(tensors[0])]
            buf = staged[0].buf
        else:
            staged = None
            buf = None

        def issue(comm):
            nonlocal buf
            if buf is None:  # several local tensors: combine them first, then across ranks
                buf = _local_reduce([t.contiguous() for t in tensors], op)
                comm.allreduce(*_addr2(buf), _core.SUM if op == _core.AVG else op)
                if op == _core.AVG:
                    buf.div_(self._size * len(tensors))
            else:
                comm.allreduce(*_addr2(buf), op)

        def finish():
            if staged is not None:
                staged[0].back()
            else:
                for t in tensors:
                    t.copy_(buf)
            return list(tensors)

        return self._submit(issue, finish)

    def allreduce_coalesced(self, tensors, opts=None):
        if not tensors:
            raise ValueError("allreduce_coalesced: no tensors")
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        for t in tensors:
            _check_tensor(t)
            _check_op_dtype(op, t.dtype)
        by_dtype = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)

        flats = {}

        def issue(comm):
            for dtype, ts in by_dtype.items():
                flat = torch.cat([t.reshape(-1) for t in ts])
                flats[dtype] = flat
            with _core.group():
                for flat in flats.values():
                    comm.allreduce(*_addr2(flat), op)

        def finish():
            for dtype, ts in by_dtype.items():
                off = 0
                flat = flats[dtype]
                for t in ts:
                    n = t.numel()
                    t.copy_(flat[off:off + n].view_as(t))
                    off += n
            return list(tensors)

        return self._submit(issue, finish)

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if not tensors:
            raise ValueError("broadcast: no tensors")
        root = opts.rootRank if opts is not None else 0
        root_tensor = opts.rootTensor if opts is not None else 0
        self._peer(root, "broadcast root")
        if not 0 <= root_tensor < len(tensors):
            raise ValueError("broadcast: rootTensor %d is not an index of the %d tensors"
                             % (root_tensor, len(tensors)))
        for t in tensors:
            _check_tensor(t)
        src = tensors[root_tensor]
        staged = _Staged(src, copy_in=(self._rank == root))
        buf = staged.buf

        def issue(comm):
            comm.broadcast(*_addr3(buf, buf), root)

        def finish():
            staged.back()
            for i, t in enumerate(tensors):
                if i != root_tensor:
                    t.copy_(src)
            return list(tensors)

        return self._submit(issue, finish)

    def reduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if len(tensors) != 1:
            raise ValueError("reduce: the hora backend takes exactly one tensor")
        t = tensors[0]
        _check_tensor(t)
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        _check_op_dtype(op, t.dtype)
        root = self._peer(opts.rootRank if opts is not None else 0, "reduce root")
        staged = _Staged(t)
        buf = staged.buf

        def issue(comm):
            addr, n, dt = _wire(buf)
            comm.reduce(addr, addr, n, dt, op, root)

        def finish():
            if self._rank == root:
                staged.back()
            return [t]

        return self._submit(issue, finish)

    def allgather(self, output_lists, input_tensors, opts=None):
        if isinstance(input_tensors, torch.Tensor):
            input_tensors = [input_tensors]
        if len(input_tensors) != 1 or len(output_lists) != 1:
            raise ValueError("allgather: the hora backend takes one input tensor and one output list")
        inp, outs = input_tensors[0], list(output_lists[0])
        _check_tensor(inp, "input")
        if len(outs) != self._size:
            raise ValueError("allgather: the output list has %d tensors for a group of %d"
                             % (len(outs), self._size))
        for o in outs:
            _check_tensor(o, "output")
            if o.dtype != inp.dtype or o.numel() != inp.numel():
                raise ValueError("allgather: every output must match the input's dtype and size")
        src = inp.contiguous()
        flat = _flat_view(outs) if _consecutive(outs) else None
        dst = flat if flat is not None else torch.empty((self._size * inp.numel(),), dtype=inp.dtype)

        def issue(comm):
            addr, n, dt = _wire(src)
            comm.allgather(addr, _wire(dst)[0], n, dt)

        def finish():
            if flat is None:
                chunks = dst.view(self._size, -1)
                for i, o in enumerate(outs):
                    o.copy_(chunks[i].view_as(o))
            return [outs]

        return self._submit(issue, finish)

    def _allgather_base(self, output, input, opts=None):
        _check_tensor(input, "input")
        _check_tensor(output, "output")
        if output.dtype != input.dtype or output.numel() != self._size * input.numel():
            raise ValueError("_allgather_base: the output must hold size x input elements of its dtype")
        src = input.contiguous()
        staged = _Staged(output, copy_in=False)

        def issue(comm):
            addr, n, dt = _wire(src)
            comm.allgather(addr, _wire(staged.buf)[0], n, dt)

        def finish():
            staged.back()
            return [output]

        return self._submit(issue, finish)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        if len(output_lists) != len(input_tensors):
            raise ValueError("allgather_coalesced: one output list per input tensor")
        if not input_tensors:
            raise ValueError("allgather_coalesced: no tensors")
        dtype = input_tensors[0].dtype
        for t in input_tensors:
            _check_tensor(t, "input")
            if t.dtype != dtype:
                raise ValueError("allgather_coalesced: the inputs must share one dtype")
        for outs, t in zip(output_lists, input_tensors):
            if len(outs) != self._size or any(o.numel() != t.numel() or o.dtype != dtype for o in outs):
                raise ValueError("allgather_coalesced: each output list needs one tensor per rank "
                                 "shaped like its input")
        sizes = [t.numel() for t in input_tensors]
        total = sum(sizes)
        dst = torch.empty((self._size * total,), dtype=dtype)
        src = [None]

        def issue(comm):
            src[0] = torch.cat([t.reshape(-1) for t in input_tensors])
            addr, n, dt = _wire(src[0])
            comm.allgather(addr, _wire(dst)[0], n, dt)

        def finish():
            per_rank = dst.view(self._size, total)
            for r in range(self._size):
                off = 0
                for i, n in enumerate(sizes):
                    output_lists[i][r].copy_(per_rank[r, off:off + n].view_as(output_lists[i][r]))
                    off += n
            return [o for outs in output_lists for o in outs]

        return self._submit(issue, finish)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        if isinstance(output_tensors, torch.Tensor):
            output_tensors = [output_tensors]
        if len(output_tensors) != 1 or len(input_lists) != 1:
            raise ValueError("reduce_scatter: the hora backend takes one output tensor and one input list")
        out, ins = output_tensors[0], list(input_lists[0])
        _check_tensor(out, "output")
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        _check_op_dtype(op, out.dtype)
        if len(ins) != self._size:
            raise ValueError("reduce_scatter: the input list has %d tensors for a group of %d"
                             % (len(ins), self._size))
        for t in ins:
            _check_tensor(t, "input")
            if t.dtype != out.dtype or t.numel() != out.numel():
                raise ValueError("reduce_scatter: every input must match the output's dtype and size")
        flat = _flat_view(ins) if _consecutive(ins) else None
        staged = _Staged(out, copy_in=False)
        src = [flat]

        def issue(comm):
            if src[0] is None:
                src[0] = torch.cat([t.reshape(-1) for t in ins])
            addr, n, dt = _wire(staged.buf)
            comm.reduce_scatter(_wire(src[0])[0], addr, n, dt, op)

        def finish():
            staged.back()
            return [out]

        return self._submit(issue, finish)

    def _reduce_scatter_base(self, output, input, opts=None):
        _check_tensor(output, "output")
        _check_tensor(input, "input")
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        _check_op_dtype(op, output.dtype)
        if input.dtype != output.dtype or input.numel() != self._size * output.numel():
            raise ValueError("_reduce_scatter_base: the input must hold size x output elements of its dtype")
        src = input.contiguous()
        staged = _Staged(output, copy_in=False)

        def issue(comm):
            addr, n, dt = _wire(staged.buf)
            comm.reduce_scatter(_wire(src)[0], addr, n, dt, op)

        def finish():
            staged.back()
            return [output]

        return self._submit(issue, finish)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _check_tensor(output, "output")
        _check_tensor(input, "input")
        if output.dtype != input.dtype:
            raise ValueError("alltoall_base: input and output differ in dtype")
        n = self._size
        in_splits = _splits(input, input_split_sizes, n, "input")
        out_splits = _splits(output, output_split_sizes, n, "output")
        src = input.contiguous()
        staged = _Staged(output, copy_in=False)
        even = not input_split_sizes and not output_split_sizes
        use_native = even and self._has_alltoall
        rank = self._rank

        def issue(comm):
            if use_native:
                addr, cnt, dt = _wire(src)
                comm.alltoall(addr, _wire(staged.buf)[0], cnt // n, dt)
            else:
                _exchange(comm, rank, src, in_splits, staged.buf, out_splits)

        def finish():
            staged.back()
            return [output]

        return self._submit(issue, finish)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        n = self._size
        if len(output_tensors) != n or len(input_tensors) != n:
            raise ValueError("alltoall: one input and one output tensor per rank")
        for t in list(output_tensors) + list(input_tensors):
            _check_tensor(t)
            if t.dtype != input_tensors[0].dtype:
                raise ValueError("alltoall: the tensors must share one dtype")
        srcs = [t.contiguous() for t in input_tensors]
        staged = [_Staged(t, copy_in=False) for t in output_tensors]
        rank = self._rank

        def issue(comm):
            with _core.group():
                for peer in range(n):
                    if peer == rank:
                        staged[peer].buf.copy_(srcs[peer].view_as(staged[peer].buf))
                        continue
                    if srcs[peer].numel():
                        comm.send(*_wire(srcs[peer]), peer)
                    if staged[peer].buf.numel():
                        comm.recv(*_wire(staged[peer].buf), peer)

        def finish():
            for s in staged:
                s.back()
            return list(output_tensors)

        return self._submit(issue, finish)

    def gather(self, output_lists, input_tensors, opts=None):
        if len(input_tensors) != 1:
            raise ValueError("gather: the hora backend takes one input tensor")
        inp = input_tensors[0]
        _check_tensor(inp, "input")
        root = self._peer(opts.rootRank if opts is not None else 0, "gather root")
        rank = self._rank
        if rank == root:
            if len(output_lists) != 1 or len(output_lists[0]) != self._size:
                raise ValueError("gather: the root needs one output list with a tensor per rank")
            outs = list(output_lists[0])
            for o in outs:
                _check_tensor(o, "output")
                if o.dtype != inp.dtype or o.numel() != inp.numel():
                    raise ValueError("gather: every output must match the input's dtype and size")
        else:
            if output_lists and any(len(x) for x in output_lists):
                raise ValueError("gather: only the root passes output tensors")
            outs = []
        src = inp.contiguous()
        staged = [_Staged(o, copy_in=False) for o in outs]

        def issue(comm):
            if rank != root:
                comm.send(*_wire(src), root)
                return
            with _core.group():
                for peer in range(self._size):
                    if peer == rank:
                        staged[peer].buf.copy_(src.view_as(staged[peer].buf))
                    else:
                        comm.recv(*_wire(staged[peer].buf), peer)

        def finish():
            for s in staged:
                s.back()
            return outs if outs else [inp]

        return self._submit(issue, finish)

    def scatter(self, output_tensors, input_lists, opts=None):
        if len(output_tensors) != 1:
            raise ValueError("scatter: the hora backend takes one output tensor")
        out = output_tensors[0]
        _check_tensor(out, "output")
        root = self._peer(opts.rootRank if opts is not None else 0, "scatter root")
        rank = self._rank
        if rank == root:
            if len(input_lists) != 1 or len(input_lists[0]) != self._size:
                raise ValueError("scatter: the root needs one input list with a tensor per rank")
            ins = [t.contiguous() for t in input_lists[0]]
            for t in ins:
                _check_tensor(t, "input")
                if t.dtype != out.dtype or t.numel() != out.numel():
                    raise ValueError("scatter: every input must match the output's dtype and size")
        else:
            if input_lists and any(len(x) for x in input_lists):
                raise ValueError("scatter: only the root passes input tensors")
            ins = []
        staged = _Staged(out, copy_in=False)

        def issue(comm):
            if rank != root:
                comm.recv(*_wire(staged.buf), root)
                return
            with _core.group():
                for peer in range(self._size):
                    if peer == rank:
                        staged.buf.copy_(ins[peer].view_as(staged.buf))
                    else:
                        comm.send(*_wire(ins[peer]), peer)

        def finish():
            staged.back()
            return [out]

        return self._submit(issue, finish)

    def barrier(self, opts=None):
        token = torch.zeros(1, dtype=torch.int32)
        native = self._has_barrier

        def issue(comm):
            if native:
                comm.barrier()
            else:
                comm.allreduce(*_addr2(token), _core.SUM)

        def finish():
            return [token]

        return self._submit(issue, finish)

    def send(self, tensors, dst, tag=0):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if len(tensors) != 1:
            raise ValueError("send: the hora backend takes exactly one tensor")
        t = tensors[0]
        _check_tensor(t)
        peer = self._peer(dst, "send destination")
        if peer == self._rank:
            raise ValueError("send: a rank cannot send to itself")
        src = t.contiguous()

        def issue(comm):
            comm.send(*_wire(src), peer)

        def finish():
            return [t]

        return self._submit(issue, finish, p2p=True)

    def recv(self, tensors, src, tag=0):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if len(tensors) != 1:
            raise ValueError("recv: the hora backend takes exactly one tensor")
        t = tensors[0]
        _check_tensor(t)
        peer = self._peer(src, "recv source")
        if peer == self._rank:
            raise ValueError("recv: a rank cannot receive from itself")
        staged = _Staged(t, copy_in=False)

        def issue(comm):
            comm.recv(*_wire(staged.buf), peer)

        def finish():
            staged.back()
            return [t]

        return self._submit(issue, finish, p2p=True, src=peer)

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("the hora backend has no receive from any source; name the source rank")

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        self.barrier().wait()


def _unwrap(future):
    """The value of a completed future, raised when it failed. Chained with then(), it makes a
    future that torch's C++ sees as failed: set_exception alone completes a future with the
    exception as its value, which C++ code such as DistributedDataParallel's reducer would take
    for tensors."""
    return future.value()


def _has(symbol):
    try:
        getattr(_core.lib, symbol)
    except AttributeError:
        return False
    return True


def _addr2(t):
    addr, n, dt = _wire(t)
    return addr, addr, n, dt


def _addr3(a, b):
    addr, n, dt = _wire(a)
    return addr, _wire(b)[0], n, dt


def _local_reduce(ts, op):
    acc = ts[0].clone()
    for t in ts[1:]:
        if op in (_core.SUM, _core.AVG):
            acc.add_(t)
        elif op == _core.PROD:
            acc.mul_(t)
        elif op == _core.MIN:
            torch.minimum(acc, t, out=acc)
        else:
            torch.maximum(acc, t, out=acc)
    return acc


def _splits(t, sizes, n, what):
    """Element offsets and counts of the n row blocks of t (dim 0)."""
    rows = t.shape[0] if t.dim() else 1
    per_row = _elems(t) // rows if rows else 0
    if not sizes:
        if rows % n:
            raise ValueError("alltoall_base: the %s's %d rows do not split evenly in %d" % (what, rows, n))
        sizes = [rows // n] * n
    sizes = list(sizes)
    if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != rows:
        raise ValueError("alltoall_base: the %s split sizes %s do not cover its %d rows in %d parts"
                         % (what, sizes, rows, n))
    out, off = [], 0
    for s in sizes:
        out.append((off * per_row, s * per_row))
        off += s
    return out


def _exchange(comm, rank, src, in_splits, dst, out_splits):
    s_addr, _, dt = _wire(src)
    d_addr, _, _ = _wire(dst)
    es = _core.dtype_size(dt)
    with _core.group():
        for peer, ((so, sn), (do, dn)) in enumerate(zip(in_splits, out_splits)):
            if peer == rank:
                if sn != dn:
                    raise ValueError("alltoall_base: this rank sends itself %d elements but expects %d"
                                     % (sn, dn))
                if sn:
                    ctypes.memmove(d_addr + do * es, s_addr + so * es, sn * es)
                continue
            if sn:
                comm.send(s_addr + so * es, sn, dt, peer)
            if dn:
                comm.recv(d_addr + do * es, dn, dt, peer)


def create_process_group(store, rank, size, timeout):
    """The creator registered with torch.distributed.Backend.register_backend."""
    return ProcessGroupHora(store, rank, size, timeout)


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(BACKEND_NAME, create_process_group)


_register()
