"""The worker thread and the work objects of the torch.distributed backend "hora"
(hora.torch.distributed): each process group's one thread that calls its communicator, the jobs
queued to it, and the work and future objects handed to torch's Python and C++ callers.
"""
import atexit
import datetime
import functools
import os
import queue
import sys
import threading
import weakref

import torch
from torch._C import _distributed_c10d as _c10d
from torch.distributed import distributed_c10d as _dc10d

from hora import _core


class GroupFailedError(RuntimeError):
    """An operation of a process group that an earlier failure (a dead or silent peer) broke."""


class _Job:
    """One operation: issue() makes the library calls, finish() runs after them (and after the
    group's end when issued inside one) and returns the future's value."""
    __slots__ = ("issue", "finish", "future", "p2p")

    def __init__(self, issue, finish, future, p2p=False):
        self.issue, self.finish, self.future, self.p2p = issue, finish, future, p2p


class _Engine:
    """The communicator and the one thread that calls it for host tensors. Work on device
    tensors is queued on a CUDA stream by the caller's thread instead (run_now), after the
    host work queued before it: the library's calls on a stream return once queued."""

    def __init__(self, comm, name):
        self.comm = comm
        self.error = None
        self.closed = False
        self.queue = queue.SimpleQueue()
        self.lock = threading.Lock()  # one issuer at a time: the thread, or a caller (run_now)
        self.idle = threading.Condition()
        self.queued = 0  # batches submitted and not yet run
        self.device_comms = {}  # (runtime, device) -> the communicator of device work there
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def submit(self, jobs):
        if self.closed:
            raise RuntimeError("the hora process group was shut down")
        with self.idle:
            self.queued += 1
        self.queue.put(jobs)

    def run_now(self, jobs, context, before=None):
        """Runs jobs in the calling thread, inside context (a stream's), once the batches
        submitted before have run, so that every rank issues its calls in program order;
        before() first, outside any group (it may make a communicator)."""
        if self.closed:
            raise RuntimeError("the hora process group was shut down")
        with self.idle:
            self.idle.wait_for(lambda: self.queued == 0)
        with self.lock:
            if before is not None and self.error is None and self.comm is not None:
                try:
                    before()
                except Exception as e:  # the split failed: so do these jobs
                    if isinstance(e, _core.HoraError) and e.remote:
                        self.error = e
                        self._abort()
                    self._fail(jobs, e)
                    return
            with context:
                self._run(jobs)

    def _loop(self):
        torch.set_grad_enabled(False)  # results land in tensors that may require grad
        while True:
            jobs = self.queue.get()
            if jobs is None:
                break
            with self.lock:
                self._run(jobs)
            with self.idle:
                self.queued -= 1
                self.idle.notify_all()
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
                e = _torch_words(e)
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

    def device_comm(self, key, make):
        """The communicator for device work keyed by key (runtime, device), made by make(comm)
        on first use (a collective: the caller is in program order, under the lock)."""
        c = self.device_comms.get(key)
        if c is None:
            c = self.device_comms[key] = make(self.comm)
        return c

    def _abort(self):
        comms = [self.comm] + list(self.device_comms.values())
        self.comm = None
        self.device_comms = {}
        for comm in comms:
            if comm is not None:
                try:
                    comm.abort()
                except _core.HoraError:
                    pass

    def _close(self):
        comms = list(self.device_comms.values()) + [self.comm]
        self.comm = None
        self.device_comms = {}
        for comm in comms:
            if comm is None:
                continue
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


class _OnStream:
    """A communicator whose calls all go on one CUDA stream (the group's, for a device)."""
    __slots__ = ("_comm", "_stream")

    def __init__(self, comm, stream):
        self._comm, self._stream = comm, stream

    def __getattr__(self, name):
        method = getattr(self._comm, name)
        if name in ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall",
                    "barrier", "send", "recv"):
            return functools.partial(method, stream=self._stream)
        return method


class _DeviceOp:
    """An operation queued on a process group's stream for a device: the caller's stream (then)
    is waited for by `ready`, `done` is recorded after the operation, and the tensors stay
    referenced here until the work object and the group's in-flight list let go of them (no
    record_stream: the caching allocator cannot reuse their memory while the stream may read
    it, since whoever frees them orders after `done` or the group holds them until it passed)."""
    __slots__ = ("rt", "index", "stream", "done_event", "tensors")

    def __init__(self, rt, index, stream, tensors):
        self.rt, self.index, self.stream, self.tensors = rt, index, stream, tensors
        ready = rt.Event()
        ready.record(rt.current_stream(index))
        stream.wait_event(ready)
        self.done_event = None

    def record_done(self):
        self.done_event = self.rt.Event()
        self.done_event.record(self.stream)

    def done(self):
        return self.done_event is None or self.done_event.query()

    def order_current(self):
        """The caller's current stream waits for the operation (the CPU does not)."""
        if self.done_event is not None:
            self.rt.current_stream(self.index).wait_event(self.done_event)


def _torch_words(e):
    """The library's timeout with the words of torch's own backends in front ("Timed out"),
    which torch's tests and users match; the library's text, which names the culprit, follows."""
    if isinstance(e, _core.HoraError) and e.code == _TIMEOUT and not e.text.startswith(_TIMED_OUT):
        return _core.HoraError(e.code, _TIMED_OUT + e.text)
    return e


_TIMEOUT = 8  # horaTimeout
_TIMED_OUT = "hora process group: Timed out waiting for a peer: "

_ENGINES = weakref.WeakSet()


@atexit.register
def _shutdown_all():
    for engine in list(_ENGINES):
        engine.shutdown(wait_s=10)


class _PyWork(_c10d.Work):
    """Work handed to Python callers: wait() raises the operation's error. (C++ callers such as
    DistributedDataParallel get torch's future-wrapping work instead, which they check through
    its future.)"""

    def __init__(self, future, checked, rank=-1, device=None):
        super().__init__()
        self._future = future
        self._checked = checked
        self._src = rank
        self._device = device  # a _DeviceOp for work queued on a CUDA stream

    def wait(self, timeout=None):
        if timeout is not None and timeout != _dc10d.default_pg_timeout and not self._future.done():
            seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout / 1000.0
            done = threading.Event()
            self._future.add_done_callback(lambda _f: done.set())
            if seconds > 0 and not done.wait(seconds):
                raise RuntimeError("hora work: Timed out waiting for the operation, not complete "
                                   "after %.3f s" % seconds)
        self._future.wait()
        if self._device is not None:
            self._device.order_current()
        return True

    def is_completed(self):
        return self._future.done() and (self._device is None or self._device.done())

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
        if self._device is not None and self._future.done():
            self._device.order_current()

    def source_rank(self):
        # a receive from any source learns its source when it runs: a one-element list
        return self._src[0] if isinstance(self._src, list) else self._src

    def _source_rank(self):
        return self.source_rank()


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


def _record_start(title, inputs):
    """A torch profiler event "hora:<title>" with the shapes of inputs, begun on the calling
    thread; None when no profiler runs (then an operation costs one check)."""
    if title is None or not torch.autograd._profiler_enabled():
        return None
    tensors = [t for t in inputs if isinstance(t, torch.Tensor)]
    return torch.autograd._record_function_with_args_enter("hora:" + title, *tensors)


def _record_end_on(record, future):
    """The future that completes after future, once the event is ended. The end runs in the
    completing thread with the calling thread's profiler state, which torch's future callbacks
    carry along (a RecordFunction ended from Python on another thread is lost)."""
    return torch.ops.profiler._call_end_callbacks_on_jit_fut(record, future)


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
