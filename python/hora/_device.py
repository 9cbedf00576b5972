"""Device buffers and streams for hora's Python layer.

Two runtimes order work on a GPU's streams with the same small vocabulary, torch.cuda's:

  - torch's (TORCH): torch.cuda.Stream, torch.cuda.Event, torch.cuda.current_stream(), for
    tensors with is_cuda;
  - the library's own (RUNTIME, classes Stream and Event below): libhora's CUDA runtime through
    its horaInternal* entry points (src/api/device_hooks.cc), for buffers that come without
    torch's CUDA: objects with __cuda_array_interface__ (CuPy, Numba) and, on a machine without
    a GPU, the library's emulated device (HORA_CUDA=emulate), whose memory is host memory that
    a CPU tensor can view, whose streams run their work late and in order, as a GPU's do.

The code that orders collectives after a caller's stream (hora.torch, the torch.distributed
backend, hora.Comm's array calls) asks ops_for(buffer) for the runtime and then only uses
    rt.current_stream(device)   the stream the caller's work is on now
    rt.Stream(device)           a new stream
    rt.Event()                  an event: .record(stream), .query(), .synchronize()
    stream.wait_event(event), stream.wait_stream(other), stream.synchronize(), stream.cuda_stream
    rt.use_stream(stream)       a context in which current_stream() is that stream
    rt.copy_(dst, src, stream)  a copy of contiguous buffers in the stream's order
    rt.run_in_order(stream, fn) torch ops fn() on device tensors, in the stream's order
    rt.empty(shape, dtype, device, stream)  a new device tensor (for use on that stream)
so the same lines run on a GPU under torch and, in the tests, on the emulated device.

Torch's own ops on a CUDA tensor queue on torch's current stream; on a CPU tensor over emulated
memory they run at once, in the calling thread. run_in_order() covers both: under torch it
queues fn's ops on the stream, under the library's runtime it waits for the stream's queued
work and then runs them; settle() is the same for the caller's current stream.
"""
import contextlib
import ctypes
import os
import threading

from hora import _core

_p = ctypes.c_void_p

EMULATED = os.environ.get("HORA_CUDA", "").strip().lower() in ("emulate", "emulate-shared")

_bound = {}


def _fn(name, *args):
    fn = _bound.get(name)
    if fn is None:
        fn = getattr(_core.lib, name)
        fn.argtypes = list(args)
        fn.restype = ctypes.c_int
        _bound[name] = fn
    return fn


def _check(code):
    if code != _core.SUCCESS:
        raise _core.HoraError(code, _core._text(None))


def has_runtime():
    """The library exports the device runtime (an older libhora does not)."""
    try:
        getattr(_core.lib, "horaInternalDeviceOf")
        return True
    except AttributeError:
        return False


def cuda_built():
    """libhora was built with the CUDA runtime and kernels (False for an older libhora)."""
    if not has_runtime():
        return False
    try:
        fn = _fn("horaInternalCudaBuilt", ctypes.POINTER(ctypes.c_int))
    except AttributeError:
        return False
    b = ctypes.c_int()
    _check(fn(ctypes.byref(b)))
    return bool(b.value)


def device_of(addr):
    """The device that the allocation at addr lives on, -1 for host memory (or no device)."""
    if not addr:
        return -1
    d = ctypes.c_int()
    _check(_fn("horaInternalDeviceOf", _p, ctypes.POINTER(ctypes.c_int))(addr, ctypes.byref(d)))
    return d.value


class Event:
    """An event of the library's runtime (as torch.cuda.Event, without timing)."""

    def __init__(self):
        h = _p()
        _check(_fn("horaInternalEventCreate", ctypes.POINTER(_p))(ctypes.byref(h)))
        self.handle = h.value

    def record(self, stream=None):
        s = current_stream() if stream is None else stream
        _check(_fn("horaInternalEventRecord", _p, _p)(self.handle, s.cuda_stream))

    def query(self):
        code = _fn("horaInternalEventQuery", _p)(self.handle)
        if code == _core.IN_PROGRESS:
            return False
        _check(code)
        return True

    def synchronize(self):
        _check(_fn("horaInternalEventSynchronize", _p)(self.handle))

    def wait(self, stream=None):
        (current_stream() if stream is None else stream).wait_event(self)

    def __del__(self):
        h, self.handle = getattr(self, "handle", None), None
        if h:
            try:
                _fn("horaInternalEventDestroy", _p)(h)
            except Exception:  # interpreter shutdown
                pass


class Stream:
    """A stream of the library's runtime (as torch.cuda.Stream). Stream(handle=h) wraps a stream
    that someone else made (and destroys nothing); handle 0 is the legacy default stream."""

    def __init__(self, device=None, handle=None):
        self._owned = handle is None
        if handle is None:
            h = _p()
            _check(_fn("horaInternalStreamCreate", ctypes.POINTER(_p))(ctypes.byref(h)))
            handle = h.value
        self.cuda_stream = handle or 0

    def wait_event(self, event):
        _check(_fn("horaInternalStreamWaitEvent", _p, _p)(self.cuda_stream, event.handle))

    def wait_stream(self, other):
        e = Event()
        e.record(other)
        self.wait_event(e)

    def synchronize(self):
        _check(_fn("horaInternalStreamSynchronize", _p)(self.cuda_stream))

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream) and other.cuda_stream == self.cuda_stream

    def __hash__(self):
        return hash(self.cuda_stream)

    def __del__(self):
        h, self.cuda_stream = getattr(self, "cuda_stream", 0), 0
        if h and getattr(self, "_owned", False):
            try:
                _fn("horaInternalStreamDestroy", _p)(h)
            except Exception:
                pass


DEFAULT_STREAM = None  # made on first use (it loads the runtime)
_tls = threading.local()


def current_stream(device=None):
    """The stream set by use_stream() in this thread, else the legacy default stream."""
    global DEFAULT_STREAM
    s = getattr(_tls, "stream", None)
    if s is not None:
        return s
    if DEFAULT_STREAM is None:
        DEFAULT_STREAM = Stream(handle=0)
    return DEFAULT_STREAM


@contextlib.contextmanager
def use_stream(stream):
    old = getattr(_tls, "stream", None)
    _tls.stream = stream
    try:
        yield stream
    finally:
        _tls.stream = old


def copy_(dst_addr, src_addr, nbytes, stream):
    _check(_fn("horaInternalMemcpyAsync", _p, _p, ctypes.c_size_t, _p)(dst_addr, src_addr, nbytes,
                                                                          stream.cuda_stream))


class _Runtime:
    """The library's runtime in the shape of torch.cuda (see the module's doc)."""
    name = "hora"
    Stream = Stream
    Event = Event

    @staticmethod
    def current_stream(device=None):
        return current_stream(device)

    @staticmethod
    def use_stream(stream):
        return use_stream(stream)

    @staticmethod
    def copy_(dst, src, stream):
        """dst, src: contiguous tensors of one size (their memory, in stream order)."""
        copy_(dst.data_ptr(), src.data_ptr(), dst.numel() * dst.element_size(), stream)

    @staticmethod
    def run_in_order(stream, fn):
        """fn() (torch ops on emulated memory, which run at once) after stream's queued work:
        the stream is synchronized first."""
        stream.synchronize()
        return fn()

    @staticmethod
    def empty(shape, dtype, device=None, stream=None):
        return emulated_tensor(shape, dtype)


RUNTIME = _Runtime()


class _Torch:
    """torch.cuda's streams and events, for CUDA tensors."""
    name = "torch"

    def __init__(self):
        import torch
        self._cuda = torch.cuda

    def Stream(self, device=None):
        return self._cuda.Stream(device=device)

    def Event(self):
        return self._cuda.Event()

    def current_stream(self, device=None):
        return self._cuda.current_stream(device)

    def use_stream(self, stream):
        return self._cuda.stream(stream)

    @staticmethod
    def copy_(dst, src, stream):
        import torch
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)

    def run_in_order(self, stream, fn):
        """fn()'s torch ops queued on stream."""
        with self._cuda.stream(stream):
            return fn()

    def empty(self, shape, dtype, device, stream=None):
        """A new tensor on the device, its memory the caching allocator's for stream (where its
        later users are: freed, it is reused in that stream's order)."""
        import torch
        if stream is None:
            return torch.empty(shape, dtype=dtype, device=device)
        with self._cuda.stream(stream):
            return torch.empty(shape, dtype=dtype, device=device)


_TORCH = None


def torch_runtime():
    global _TORCH
    if _TORCH is None:
        _TORCH = _Torch()
    return _TORCH


def ops_for(tensor):
    """The runtime whose streams order work on this torch tensor's memory: torch's for a CUDA
    tensor; the library's for a CPU tensor that views emulated device memory (tests on machines
    without a GPU, HORA_CUDA=emulate); None for host memory."""
    if tensor.is_cuda:
        return torch_runtime()
    if EMULATED and device_of(tensor.data_ptr()) >= 0:
        return RUNTIME
    return None


def settle():
    """Before torch ops of this thread read device tensors that stream-ordered work (a
    collective) produced on the current stream: nothing to do under torch, whose ops queue on
    that stream; under the emulated device (torch's ops on its memory run at once) the current
    stream is synchronized."""
    if EMULATED:
        current_stream().synchronize()


def device_index(tensor):
    """The device a tensor's memory is on (torch's index; the emulated device is 0)."""
    if tensor.is_cuda:
        return tensor.device.index if tensor.device.index is not None else 0
    return device_of(tensor.data_ptr())


class Gate:
    """A gate on streams (pinned word + the stream's wait on it): work queued on a stream after
    hold(stream) does not start before open(). Tests use it so that what they queued behind it is
    certainly still undone when the code under test looks, on a GPU as on the emulated device."""

    def __init__(self):
        p = _p()
        _check(_fn("horaInternalHostAlloc", ctypes.POINTER(_p), ctypes.c_size_t)(ctypes.byref(p), 4))
        self.addr = p.value
        self.word = ctypes.c_uint32.from_address(self.addr)
        self.word.value = 0

    def hold(self, stream):
        _check(_fn("horaInternalStreamWaitValue", _p, _p, ctypes.c_uint32)(stream.cuda_stream,
                                                                          self.addr, 1))

    def open(self):
        self.word.value = 1

    # The word is never freed (4 bytes a gate, for tests): a free of pinned memory waits for
    # every stream, as cudaFreeHost does, and one that garbage collection makes while a stream
    # waits for a communicator's worker (a collective in flight) could hang; nor reused, since a
    # stream may still be on its way to a wait on it.


def alloc(nbytes):
    """Device memory from horaMemAlloc (on the emulated device under HORA_CUDA=emulate)."""
    p = _p()
    fn = _fn("horaMemAlloc", ctypes.POINTER(_p), ctypes.c_size_t)
    _check(fn(ctypes.byref(p), nbytes))
    return p.value


def free(addr):
    _check(_fn("horaMemFree", _p)(addr))


# Emulated device memory that tensors gave back, by size, for later emulated_tensor calls (as
# torch's caching allocator keeps CUDA memory): never handed back to the library, whose free
# waits, as cudaFree does, for every stream, so that a free that garbage collection makes while
# a stream waits for a communicator's worker (a collective in flight) could hang.
_pool = {}


def _bucket(nbytes):
    b = 512
    while b < nbytes:
        b *= 2
    return b


def emulated_tensor(shape, dtype, fill=None):
    """A torch tensor (device "cpu") over emulated device memory, which goes back to this
    module's pool (not to the library) with the last tensor over it. Only for tests under
    HORA_CUDA=emulate."""
    import torch
    n = 1
    for s in shape:
        n *= s
    esize = torch.empty((), dtype=dtype).element_size()
    nbytes = _bucket(max(1, n * esize))
    free_list = _pool.setdefault(nbytes, [])
    try:
        addr = free_list.pop()
    except IndexError:
        addr = alloc(nbytes)
    # torch.frombuffer keeps the buffer object alive as long as the storage: the memory goes
    # back with the storage's last user.
    block = type("DeviceBlock", (ctypes.c_char * nbytes,),
                 {"__del__": lambda self, a=addr, fl=free_list: fl.append(a)})
    raw = block.from_address(addr)
    t = torch.frombuffer(raw, dtype=torch.uint8)[:n * esize]
    t = t.view(dtype).view(tuple(shape))
    if fill is not None:
        t.copy_(fill if isinstance(fill, torch.Tensor) else torch.full(tuple(shape), fill, dtype=dtype))
    return t
