"""The C ABI of libhora through ctypes: communicators, collectives on raw pointers, host streams.

Everything here takes addresses (ints) and element counts, so any buffer (a torch tensor's
data_ptr(), a numpy array's ctypes.data) passes without a copy. Every failing call raises
HoraError with the library's last-error text. ctypes releases the GIL for the duration of each
call, so other Python threads run while a collective waits for peers.

The library is found, in order: $HORA_LIBRARY; the path recorded at install time
(hora/_install.py, written by meson install); build/libhora.so next to the source tree this
package sits in (so the package is usable from a build tree with PYTHONPATH=python); the
system's libhora.so.0.
"""
import contextlib
import ctypes
import ctypes.util
import os
import threading

__all__ = [
    "HoraError", "Comm", "Stream", "unique_id", "lib", "version",
    "INT8", "UINT8", "INT32", "UINT32", "INT64", "UINT64", "FLOAT16", "FLOAT32", "FLOAT64",
    "BFLOAT16", "SUM", "PROD", "MAX", "MIN", "AVG", "SPLIT_NOCOLOR", "dtype_size", "as_buffer",
]

# horaDataType_t
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = range(10)
FLOAT8E4M3, FLOAT8E5M2 = 10, 11
_SIZES = {INT8: 1, UINT8: 1, INT32: 4, UINT32: 4, INT64: 8, UINT64: 8, FLOAT16: 2, FLOAT32: 4,
          FLOAT64: 8, BFLOAT16: 2, FLOAT8E4M3: 1, FLOAT8E5M2: 1}
# horaRedOp_t
SUM, PROD, MAX, MIN, AVG = range(5)
SPLIT_NOCOLOR = -1
# horaResult_t
SUCCESS, IN_PROGRESS = 0, 7
_RESULT_NAMES = {0: "horaSuccess", 1: "horaUnhandledCudaError", 2: "horaSystemError",
                 3: "horaInternalError", 4: "horaInvalidArgument", 5: "horaInvalidUsage",
                 6: "horaRemoteError", 7: "horaInProgress", 8: "horaTimeout"}


def dtype_size(dtype):
    return _SIZES[dtype]


class HoraError(RuntimeError):
    """A call into libhora failed. code is the horaResult_t, text the library's explanation."""

    def __init__(self, code, text):
        self.code = code
        self.text = text
        super().__init__("%s (%s)" % (text, _RESULT_NAMES.get(code, "result %d" % code)))

    @property
    def remote(self):
        """True when a peer or the wire failed (dead, silent or malformed), not an argument."""
        return self.code in (2, 3, 6, 8)


def _candidates():
    env = os.environ.get("HORA_LIBRARY")
    if env:
        yield env
        return
    try:
        from hora import _install  # written by meson install
        yield _install.LIBRARY
    except ImportError:
        pass
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "..", "..", "build", "libhora.so")
    found = ctypes.util.find_library("hora")
    if found:
        yield found
    yield "libhora.so.0"


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append("%s: no such file" % path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("libhora not found (set HORA_LIBRARY to its path): " + "; ".join(errors))


lib = _load()

_p, _i, _sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t


def _sig(name, *args):
    fn = getattr(lib, name)
    fn.argtypes = list(args)
    fn.restype = ctypes.c_int
    return fn


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


class _Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("cgaClusterSize", ctypes.c_int), ("minCTAs", ctypes.c_int),
                ("maxCTAs", ctypes.c_int), ("netName", ctypes.c_char_p), ("splitShare", ctypes.c_int),
                ("trafficClass", ctypes.c_int), ("commName", ctypes.c_char_p), ("timeoutMs", ctypes.c_int)]


_UNDEF = -2147483648
lib.horaGetLastError.argtypes = [_p]
lib.horaGetLastError.restype = ctypes.c_char_p
lib.horaGetErrorString.argtypes = [_i]
lib.horaGetErrorString.restype = ctypes.c_char_p
_sig("horaGetVersion", ctypes.POINTER(_i))
_sig("horaGetUniqueId", ctypes.POINTER(_UniqueId))
_sig("horaCommInitRankConfig", ctypes.POINTER(_p), _i, _UniqueId, _i, ctypes.POINTER(_Config))
_sig("horaCommInitFromEnv", ctypes.POINTER(_p))
_sig("horaCommDestroy", _p)
_sig("horaCommAbort", _p)
_sig("horaCommFinalize", _p)
_sig("horaCommGetAsyncError", _p, ctypes.POINTER(_i))
_sig("horaCommCount", _p, ctypes.POINTER(_i))
_sig("horaCommUserRank", _p, ctypes.POINTER(_i))
_sig("horaRedOpCreatePreMulSum", ctypes.POINTER(_i), _p, _i, _i, _p)
_sig("horaRedOpDestroy", _i, _p)
_sig("horaAllReduce", _p, _p, _sz, _i, _i, _p, _p)
_sig("horaBroadcast", _p, _p, _sz, _i, _i, _p, _p)
_sig("horaReduce", _p, _p, _sz, _i, _i, _i, _p, _p)
_sig("horaAllGather", _p, _p, _sz, _i, _p, _p)
_sig("horaReduceScatter", _p, _p, _sz, _i, _i, _p, _p)
_sig("horaSend", _p, _sz, _i, _i, _p, _p)
_sig("horaRecv", _p, _sz, _i, _i, _p, _p)
_sig("horaGroupStart")
_sig("horaGroupEnd")
# Newer entry points: bound when first used, so that an older library still loads.
_LATE = {
    "horaCommSplit": (_p, _i, _i, ctypes.POINTER(_p), ctypes.POINTER(_Config)),
    "horaAllToAll": (_p, _p, _sz, _i, _p, _p),
    "horaBarrier": (_p, _p),
    "horaStreamCreate": (ctypes.POINTER(_p),),
    "horaStreamSynchronize": (_p,),
    "horaStreamQuery": (_p,),
    "horaStreamDestroy": (_p,),
}


def _fn(name):
    fn = getattr(lib, name)
    if name in _LATE and fn.argtypes is None:  # (restype is c_int by default: not a marker)
        fn.argtypes = list(_LATE[name])
        fn.restype = ctypes.c_int
    return fn


def _text(comm_handle):
    t = lib.horaGetLastError(comm_handle)
    return t.decode("utf-8", "replace") if t else ""


def _check(code, comm_handle=None):
    if code != SUCCESS:
        raise HoraError(code, _text(comm_handle))


def version():
    v = _i()
    _check(lib.horaGetVersion(ctypes.byref(v)))
    return v.value


def unique_id():
    """A new rendezvous id (128 bytes). The calling process hosts the rendezvous."""
    u = _UniqueId()
    _check(lib.horaGetUniqueId(ctypes.byref(u)))
    return ctypes.string_at(ctypes.addressof(u), ctypes.sizeof(u))  # .internal stops at a NUL


def _config(timeout_ms=None, name=None):
    c = _Config(ctypes.sizeof(_Config), 0x686f7261, version(), _UNDEF, _UNDEF, _UNDEF, _UNDEF, None,
                _UNDEF, _UNDEF, None, _UNDEF)
    if name is not None:
        c.commName = name.encode()
    if timeout_ms is not None:
        c.timeoutMs = int(timeout_ms)
    return c


def _stream_handle(stream):
    """The handle a call takes for `stream`: None (blocking), a host Stream, a CUDA stream as an
    int or as an object of torch (.cuda_stream), CuPy (.ptr) or Numba (.handle.value)."""
    if stream is None or isinstance(stream, int):
        return stream
    for attr in ("handle", "cuda_stream", "ptr"):
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
        if v is not None and isinstance(getattr(v, "value", None), int):
            return v.value
    raise TypeError("not a stream: %r" % (stream,))


# ---- buffers: torch tensors, objects with __cuda_array_interface__ or __array_interface__ ----

_TYPESTRS = {"f4": FLOAT32, "f8": FLOAT64, "f2": FLOAT16, "i1": INT8, "u1": UINT8, "i4": INT32,
             "u4": UINT32, "i8": INT64, "u8": UINT64, "b1": UINT8}
_TORCH_CODES = None


def _torch_code(dtype):
    global _TORCH_CODES
    if _TORCH_CODES is None:
        import torch
        _TORCH_CODES = {torch.float32: FLOAT32, torch.float64: FLOAT64, torch.float16: FLOAT16,
                        torch.bfloat16: BFLOAT16, torch.int8: INT8, torch.uint8: UINT8,
                        torch.int32: INT32, torch.int64: INT64, torch.bool: UINT8}
    try:
        return _TORCH_CODES[dtype]
    except KeyError:
        raise TypeError("hora cannot move %s" % dtype) from None


class Buffer:
    """A contiguous buffer as the library takes it: address, element count, dtype code, and for
    device memory the stream its producer wrote it on (None: no stream to follow)."""
    __slots__ = ("addr", "count", "dtype", "device", "stream", "owner")

    def __init__(self, addr, count, dtype, device=False, stream=None, owner=None):
        self.addr, self.count, self.dtype = addr, count, dtype
        self.device, self.stream, self.owner = device, stream, owner


def _contiguous(shape, strides, itemsize):
    if strides is None:
        return True
    want = itemsize
    for dim, st in zip(reversed(shape), reversed(strides)):
        if dim != 1 and st != want:
            return False
        want *= dim
    return True


def _from_interface(obj, iface, device):
    shape = tuple(iface["shape"])
    typestr = iface["typestr"]
    code = _TYPESTRS.get(typestr[1:])
    if code is None or (typestr[0] == ">" and typestr[1:] not in ("i1", "u1", "b1")):
        raise TypeError("hora cannot move elements of type %r" % typestr)
    addr, readonly = iface["data"]
    if not _contiguous(shape, iface.get("strides"), _SIZES[code]):
        raise ValueError("hora takes contiguous buffers (C order); this one has strides %s"
                         % (iface.get("strides"),))
    count = 1
    for d in shape:
        count *= d
    stream = None
    if device:
        s = iface.get("stream")  # version 3: 1 the legacy default, 2 per-thread default
        stream = 0 if s == 1 else s
    return Buffer(addr or 0, count, code, device, stream, obj)


def as_buffer(obj):
    """The Buffer of a torch tensor, an object with __cuda_array_interface__ (CuPy, Numba, a CUDA
    tensor) or __array_interface__ (NumPy). A CUDA tensor brings torch's current stream."""
    if type(obj).__module__ == "torch" or hasattr(obj, "data_ptr") and hasattr(obj, "is_cuda"):
        if not obj.is_contiguous():
            raise ValueError("hora takes contiguous tensors")
        if obj.is_complex():
            import torch
            obj = torch.view_as_real(obj)
        stream = None
        if obj.is_cuda:
            import torch
            stream = torch.cuda.current_stream(obj.device).cuda_stream
        return Buffer(obj.data_ptr(), obj.numel(), _torch_code(obj.dtype), obj.is_cuda, stream, obj)
    iface = getattr(obj, "__cuda_array_interface__", None)
    if iface is not None:
        return _from_interface(obj, iface, True)
    iface = getattr(obj, "__array_interface__", None)
    if iface is not None:
        return _from_interface(obj, iface, False)
    raise TypeError("hora takes a torch tensor or an object with __cuda_array_interface__ or "
                    "__array_interface__, not %s" % type(obj).__name__)


def _call_stream(bufs, stream):
    """The stream a call on these buffers runs on: the caller's `stream` if given (made to wait for
    each device buffer's producer stream), else the first device buffer's producer stream."""
    producers = [b.stream for b in bufs if b.device and b.stream is not None]
    if stream is None:
        if not producers:
            return None
        stream = producers[0]
    handle = _stream_handle(stream)
    others = {p for p in producers if p != handle}
    if others:
        from hora import _device
        for p in others:
            e = _device.Event()
            e.record(_device.Stream(handle=p))
            _device.Stream(handle=handle).wait_event(e)
    return handle


class Comm:
    """One rank's communicator. Methods take addresses and element counts."""

    def __init__(self, handle):
        self.handle = handle
        r, n = _i(), _i()
        _check(lib.horaCommUserRank(handle, ctypes.byref(r)), handle)
        _check(lib.horaCommCount(handle, ctypes.byref(n)), handle)
        self.rank, self.size = r.value, n.value
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls):
        """The communicator of the launcher's environment (hora-run, torchrun, srun, mpirun)."""
        h = _p()
        _check(lib.horaCommInitFromEnv(ctypes.byref(h)))
        return cls(h.value)

    @classmethod
    def init_rank(cls, nranks, uid, rank, timeout_ms=None, name=None):
        u = _UniqueId()
        if len(uid) != 128:
            raise ValueError("a unique id has 128 bytes, not %d" % len(uid))
        ctypes.memmove(ctypes.addressof(u), bytes(uid), 128)  # .internal = would stop at a NUL
        h = _p()
        cfg = _config(timeout_ms, name)
        _check(lib.horaCommInitRankConfig(ctypes.byref(h), nranks, u, rank, ctypes.byref(cfg)))
        return cls(h.value)

    def _call(self, name, *args):
        if self.handle is None:
            raise HoraError(5, "%s: the communicator was destroyed" % name)
        _check(_fn(name)(*args), self.handle)

    # Each collective takes either addresses (ints) with an element count and a dtype code, or
    # buffers (see as_buffer): then recv defaults to send (in place), the count and dtype come
    # from the buffer, and a device buffer's call runs on its producer's stream unless `stream`
    # names another (which then waits for the producer's).

    def allreduce(self, send, recv=None, count=None, dtype=None, op=SUM, stream=None):
        if not isinstance(send, int):
            s, r = self._pair(send, recv, 1)
            stream = _call_stream((s, r), stream)
            send, recv, count, dtype = s.addr, r.addr, s.count, s.dtype
        self._call("horaAllReduce", send, recv, count, dtype, op, self.handle, _stream_handle(stream))

    def broadcast(self, send, recv=None, count=None, dtype=None, root=0, stream=None):
        if not isinstance(send, int):
            s, r = self._pair(send, recv, 1)
            stream = _call_stream((s, r), stream)
            send, recv, count, dtype = s.addr, r.addr, s.count, s.dtype
        self._call("horaBroadcast", send, recv, count, dtype, root, self.handle, _stream_handle(stream))

    def reduce(self, send, recv=None, count=None, dtype=None, op=SUM, root=0, stream=None):
        if not isinstance(send, int):
            s, r = self._pair(send, recv, 1)
            stream = _call_stream((s, r), stream)
            send, recv, count, dtype = s.addr, r.addr, s.count, s.dtype
        self._call("horaReduce", send, recv, count, dtype, op, root, self.handle, _stream_handle(stream))

    def allgather(self, send, recv, sendcount=None, dtype=None, stream=None):
        if not isinstance(send, int):
            s, r = self._pair(send, recv, self.size)
            stream = _call_stream((s, r), stream)
            send, recv, sendcount, dtype = s.addr, r.addr, s.count, s.dtype
        self._call("horaAllGather", send, recv, sendcount, dtype, self.handle, _stream_handle(stream))

    def reduce_scatter(self, send, recv, recvcount=None, dtype=None, op=SUM, stream=None):
        if not isinstance(send, int):
            r, s = self._pair(recv, send, self.size)
            stream = _call_stream((s, r), stream)
            send, recv, recvcount, dtype = s.addr, r.addr, r.count, s.dtype
        self._call("horaReduceScatter", send, recv, recvcount, dtype, op, self.handle, _stream_handle(stream))

    def alltoall(self, send, recv, count=None, dtype=None, stream=None):
        if not isinstance(send, int):
            s, r = self._pair(send, recv, 1)
            if s.count % self.size:
                raise ValueError("alltoall: %d elements do not split in %d" % (s.count, self.size))
            stream = _call_stream((s, r), stream)
            send, recv, count, dtype = s.addr, r.addr, s.count // self.size, s.dtype
        self._call("horaAllToAll", send, recv, count, dtype, self.handle, _stream_handle(stream))

    def barrier(self, stream=None):
        self._call("horaBarrier", self.handle, _stream_handle(stream))

    def send(self, buf, count=None, dtype=None, peer=None, stream=None):
        if not isinstance(buf, int):
            b = as_buffer(buf)
            stream = _call_stream((b,), stream)
            buf, count, dtype = b.addr, b.count, b.dtype
        self._call("horaSend", buf, count, dtype, peer, self.handle, _stream_handle(stream))

    def recv(self, buf, count=None, dtype=None, peer=None, stream=None):
        if not isinstance(buf, int):
            b = as_buffer(buf)
            stream = _call_stream((b,), stream)
            buf, count, dtype = b.addr, b.count, b.dtype
        self._call("horaRecv", buf, count, dtype, peer, self.handle, _stream_handle(stream))

    @staticmethod
    def _pair(send, recv, ratio):
        """The buffers of a call whose recv holds ratio x send's elements (recv None: send)."""
        s = as_buffer(send)
        r = s if recv is None else as_buffer(recv)
        if r.dtype != s.dtype:
            raise TypeError("the send and receive buffers differ in element type")
        if r.count != s.count * ratio:
            raise ValueError("the receive buffer holds %d elements where %d x %d are needed"
                             % (r.count, ratio, s.count))
        return s, r

    def premul_sum(self, scalar_addr, dtype):
        """A reduction op "sum of scalar * input" (the scalar of type dtype at scalar_addr)."""
        op = _i()
        self._call("horaRedOpCreatePreMulSum", ctypes.byref(op), scalar_addr, dtype, 1, self.handle)
        return op.value

    def destroy_op(self, op):
        self._call("horaRedOpDestroy", op, self.handle)

    def split(self, color, key, timeout_ms=None, name=None):
        """Collective over this communicator: the communicator of the ranks with this color,
        ranked by key; None for color SPLIT_NOCOLOR."""
        h = _p()
        cfg = _config(timeout_ms, name)
        self._call("horaCommSplit", self.handle, color, key, ctypes.byref(h), ctypes.byref(cfg))
        return Comm(h.value) if h.value else None

    def async_error(self):
        """0, or the horaResult_t that put the communicator in its error state."""
        e = _i()
        self._call("horaCommGetAsyncError", self.handle, ctypes.byref(e))
        return e.value

    def last_error(self):
        return _text(self.handle)

    def destroy(self):
        if self.handle is not None:
            h, self.handle = self.handle, None
            _check(lib.horaCommDestroy(h))

    def abort(self):
        if self.handle is not None:
            h, self.handle = self.handle, None
            _check(lib.horaCommAbort(h))


@contextlib.contextmanager
def group():
    """Calls issued inside run together at the end (horaGroupStart/horaGroupEnd)."""
    _check(lib.horaGroupStart())
    try:
        yield
    finally:
        _check(lib.horaGroupEnd())


class Stream:
    """A host stream: work enqueued on it runs in order on its own progress thread."""

    def __init__(self):
        h = _p()
        _check(_fn("horaStreamCreate")(ctypes.byref(h)))
        self.handle = h.value

    def synchronize(self):
        _check(_fn("horaStreamSynchronize")(self.handle))

    def query(self):
        """True when all enqueued work is done; raises HoraError if some of it failed."""
        code = _fn("horaStreamQuery")(self.handle)
        if code == IN_PROGRESS:
            return False
        _check(code)
        return True

    def destroy(self):
        if self.handle is not None:
            h, self.handle = self.handle, None
            _check(_fn("horaStreamDestroy")(h))
