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
    "BFLOAT16", "SUM", "PROD", "MAX", "MIN", "AVG", "SPLIT_NOCOLOR", "dtype_size",
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
    return None if stream is None else stream.handle


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

    def allreduce(self, send, recv, count, dtype, op, stream=None):
        self._call("horaAllReduce", send, recv, count, dtype, op, self.handle, _stream_handle(stream))

    def broadcast(self, send, recv, count, dtype, root, stream=None):
        self._call("horaBroadcast", send, recv, count, dtype, root, self.handle, _stream_handle(stream))

    def reduce(self, send, recv, count, dtype, op, root, stream=None):
        self._call("horaReduce", send, recv, count, dtype, op, root, self.handle, _stream_handle(stream))

    def allgather(self, send, recv, sendcount, dtype, stream=None):
        self._call("horaAllGather", send, recv, sendcount, dtype, self.handle, _stream_handle(stream))

    def reduce_scatter(self, send, recv, recvcount, dtype, op, stream=None):
        self._call("horaReduceScatter", send, recv, recvcount, dtype, op, self.handle, _stream_handle(stream))

    def alltoall(self, send, recv, count, dtype, stream=None):
        self._call("horaAllToAll", send, recv, count, dtype, self.handle, _stream_handle(stream))

    def barrier(self, stream=None):
        self._call("horaBarrier", self.handle, _stream_handle(stream))

    def send(self, buf, count, dtype, peer, stream=None):
        self._call("horaSend", buf, count, dtype, peer, self.handle, _stream_handle(stream))

    def recv(self, buf, count, dtype, peer, stream=None):
        self._call("horaRecv", buf, count, dtype, peer, self.handle, _stream_handle(stream))

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
