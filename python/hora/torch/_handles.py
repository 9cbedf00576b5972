"""The requests and handles of hora.torch's collectives (hora.torch.mpi_ops): a call's requests
are named, checked and handed to the background engine, and its handle id is what poll() and
synchronize() take. Device tensors (CUDA; in tests, the library's emulated device) are marked
with the stream they must follow, and a device operation's failure after it was queued is raised
by poll() and synchronize().
"""
import itertools

import torch

from hora import _core as C
from hora import _device
from hora.torch import _engine as E
from hora.torch._state import eng as _eng
from hora.torch.process_sets import _set_id

HorovodInternalError = E.HorovodInternalError

_handles = {}
_handle_ids = itertools.count(1)


def _emulated(tensor):
    """A CPU tensor over the emulated device's memory (tests under HORA_CUDA=emulate)."""
    return _device.EMULATED and not tensor.is_cuda and _device.ops_for(tensor) is not None


def _contiguous(tensor):
    if tensor.is_contiguous():
        return tensor
    if _emulated(tensor):
        # torch's copy would land in host memory: a device copy, once the current stream's
        # work on tensor is done (torch's ops on emulated memory run at once).
        out = _device.emulated_tensor(list(tensor.shape), tensor.dtype)
        _device.RUNTIME.run_in_order(_device.current_stream(), lambda: out.copy_(tensor))
        return out
    return tensor.contiguous()


def _empty_like(c):
    """A new contiguous tensor where c is (c contiguous)."""
    if _emulated(c):
        return _device.emulated_tensor(list(c.shape), c.dtype)
    return torch.empty_like(c, memory_format=torch.contiguous_format)


def _mark_device(reqs):
    """Notes the device requests' runtime and device, and records their ready event on the
    caller's current stream (what the operation must come after). True if there is one."""
    any_device = False
    for r in reqs:
        t = r.tensor
        if t is None or not (t.is_cuda or _device.EMULATED):
            continue
        rt = _device.ops_for(t)
        if rt is None:
            continue
        r.rt = rt
        r.dev = _device.device_index(t)
        r.stream = rt.current_stream(r.dev)
        r.ready = rt.Event()
        r.ready.record(r.stream)
        any_device = True
    return any_device


def _async_failure(engine, r):
    """The HorovodInternalError of a queued device operation whose communicator failed since
    (the library's asynchronous error), else None."""
    c = r.comm
    if c is None:
        return None
    if c.handle is None:  # destroyed, or aborted by the engine's failure
        f = engine.failed
        return HorovodInternalError(str(f)) if f is not None else None
    try:
        code = c.async_error()
    except C.HoraError as ex:
        code = ex.code
    if code in (C.SUCCESS, C.IN_PROGRESS):
        return None
    return HorovodInternalError("hora.torch: a collective on device tensors failed after it "
                                "was queued: %s" % (c.last_error() or "error %d" % code))


class _Handle:
    __slots__ = ("engine", "reqs", "finish", "device")

    def __init__(self, engine, reqs, finish, device=False):
        self.engine = engine
        self.reqs = reqs
        self.finish = finish
        self.device = device


def _enqueue(kind, label, name, process_set, build, count=None):
    """Names, checks (announcing a failed check so that the peers fail too) and submits one
    request (count None) or a group of `count`; returns a handle id. build(names) returns
    (requests, finish), finish mapping the list of results to what synchronize returns."""
    eng = _eng()
    set_id = _set_id(process_set)
    eng.check_member(set_id)
    base = eng.make_name(set_id, label, name)
    names = [base] if count is None else ["%s.%d" % (base, i) for i in range(count)]
    try:
        reqs, finish = build(set_id, names)
    except (TypeError, ValueError, NotImplementedError) as ex:
        for n in names:
            eng.announce_error(kind, set_id, n, "%s: %s" % (type(ex).__name__, ex))
        raise
    device = _mark_device(reqs)
    eng.submit(reqs)
    h = next(_handle_ids)
    _handles[h] = _Handle(eng, reqs, finish, device)
    return h


def poll(handle):
    """True when the operation of handle has completed (synchronize then returns at once)."""
    h = _handles.get(handle)
    if h is None:
        raise ValueError("unknown handle %r (already synchronized?)" % (handle,))
    if not all(r.event.is_set() for r in h.reqs):
        return False
    if h.device:
        # Queued, and done on the device (an error: raised by synchronize).
        for r in h.reqs:
            if r.done is not None and not r.done.query():
                return False
        for r in h.reqs:
            ex = _async_failure(h.engine, r)
            if ex is not None:
                raise ex
    return True


def synchronize(handle):
    """Waits for the operation of handle and returns its output (None for an unknown handle).
    Raises HorovodInternalError if communication failed or the ranks disagreed about the
    operation (shapes, dtypes, ops, roots: as Horovod), ValueError/TypeError for a bad argument
    on some rank (there; its peers get HorovodInternalError), ValueError if some ranks of its
    process set did not submit it within HORA_STALL_SHUTDOWN_TIME_SECONDS (then it is cancelled
    on every rank).

    For device tensors it returns once the operation is queued on the device, having made the
    current stream wait for it: work queued on that stream afterwards sees the output (the CPU
    does not wait for the device). A failure of the queued work that the communicator reports
    by then raises HorovodInternalError here (and in poll())."""
    h = _handles.pop(handle, None)
    if h is None:
        return None
    results = [h.engine.wait(r) for r in h.reqs]
    if h.device:
        for r in h.reqs:
            if r.done is not None:
                ex = _async_failure(h.engine, r)
                if ex is not None:
                    raise ex
                r.rt.current_stream(r.dev).wait_event(r.done)
    return h.finish(results)


def _first(results):
    return results[0]
