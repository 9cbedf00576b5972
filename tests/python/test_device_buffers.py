"""hora.Comm's buffer calls on the emulated GPU (HORA_CUDA=emulate, no torch needed): NumPy arrays
and objects with __cuda_array_interface__ (as CuPy's and Numba's arrays) pass as they are, and a
device buffer's call runs in its producer's stream order.

Each producer's write is queued on its stream behind a gate (hora._device.Gate) that opens only
after the call under test has returned: a call that did not follow its producer's stream would
read the buffer before the write, whatever the timing.
"""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# TEST_DEVICE=cuda: on the GPU (tests/gpu/run-torch-gpu.sh), every rank on device 0.
CUDA = os.environ.get("TEST_DEVICE") == "cuda"
if not harness.in_rank():
    sys.exit(harness.launch_self(__file__, [2, 3], timeout=120, env={} if CUDA else {"HORA_CUDA": "emulate"}))

from hora import _core as h  # noqa: E402
from hora import _device as D  # noqa: E402

comm = h.Comm.from_env()
r, n = comm.rank, comm.size
check = harness.Checker("[%d] " % r)


class DeviceArray:
    """A 1-D array on the emulated device, as a CUDA array library hands it over: its
    __cuda_array_interface__ (version 3) names the stream its contents were written on."""

    def __init__(self, count, dtype, stream=None):
        self.dtype = np.dtype(dtype)
        self.count = count
        self.nbytes = count * self.dtype.itemsize
        self.addr = D.alloc(max(1, self.nbytes))
        self.stream = stream

    @property
    def __cuda_array_interface__(self):
        return {"shape": (self.count,), "typestr": self.dtype.str, "data": (self.addr, False),
                "version": 3, "strides": None,
                "stream": self.stream.cuda_stream if self.stream is not None else None}

    def write(self, values, stream, gate):
        """Queues a copy of values into the array on stream behind gate (done once it opens)."""
        host = np.ascontiguousarray(values, dtype=self.dtype)
        staged = D.alloc(max(1, self.nbytes))  # device memory: the copy is a stream's work
        D.copy_(staged, host.ctypes.data, self.nbytes, D.current_stream())  # (pageable: done on return)
        D.current_stream().synchronize()
        gate.hold(stream)
        D.copy_(self.addr, staged, self.nbytes, stream)
        self._staged = staged  # freed once the stream is synchronized (in read)

    def read(self):
        """The array's bytes now (no stream order: the caller has synchronized)."""
        out = np.empty(self.count, dtype=self.dtype)
        D.copy_(out.ctypes.data, self.addr, self.nbytes, D.current_stream())
        D.current_stream().synchronize()
        if getattr(self, "_staged", None):
            D.free(self._staged)
            self._staged = None
        return out

    def __del__(self):
        D.free(self.addr)


# NumPy arrays: in place and into another array, the counts and types from the arrays.
x = np.arange(1000, dtype=np.float32) + r
comm.allreduce(x)
check(np.array_equal(x, n * np.arange(1000, dtype=np.float32) + n * (n - 1) / 2), "numpy allreduce in place")
g = np.zeros(n * 3, dtype=np.int64)
comm.allgather(np.full(3, r, dtype=np.int64), g)
check(np.array_equal(g, np.repeat(np.arange(n), 3)), "numpy allgather")
try:
    comm.allgather(np.zeros(3, dtype=np.int64), np.zeros(3 * n + 1, dtype=np.int64))
    check(False, "a receive buffer of the wrong size is refused")
except ValueError as e:
    check("receive buffer holds" in str(e), "a receive buffer of the wrong size is refused")
try:
    comm.allreduce(np.zeros((4, 4), dtype=np.float32)[:, 1])
    check(False, "a strided array is refused")
except ValueError as e:
    check("contiguous" in str(e), "a strided array is refused")

# A device array written on a stream: the call follows that stream, so it sees the write.
s1 = D.Stream()
N = 1 << 16
a = DeviceArray(N, np.float32, s1)
g1 = D.Gate()
a.write(np.arange(N, dtype=np.float32) * (r + 1), s1, g1)
comm.allreduce(a)  # queued on s1 (the array's stream), after the write
g1.open()
s1.synchronize()
check(np.array_equal(a.read(), np.arange(N, dtype=np.float32) * (n * (n + 1) // 2)),
      "device allreduce after its producer's write, in the producer's stream")

# The caller names another stream: it waits for the producer's stream first.
s2 = D.Stream()
b = DeviceArray(N, np.float64, s1)
g2 = D.Gate()
b.write(np.full(N, r + 1.0), s1, g2)
out = DeviceArray(N * n, np.float64, s1)
comm.allgather(b, out, stream=s2)
g2.open()
s2.synchronize()
check(np.array_equal(out.read(), np.repeat(np.arange(1.0, n + 1), N)),
      "device allgather on another stream, after the producer's stream")

# Broadcast, alltoall and point-to-point on device arrays.
c = DeviceArray(N, np.int32, s1)
g3 = D.Gate()
c.write(np.full(N, 7 if r == n - 1 else -1, dtype=np.int32), s1, g3)
comm.broadcast(c, root=n - 1)
g3.open()
s1.synchronize()
check(np.all(c.read() == 7), "device broadcast")
d = DeviceArray(n * 4, np.int64, s1)
g4 = D.Gate()
d.write(np.arange(n * 4) + 100 * r, s1, g4)
e = DeviceArray(n * 4, np.int64, s1)
comm.alltoall(d, e)
g4.open()
s1.synchronize()
want = np.concatenate([np.arange(r * 4, r * 4 + 4) + 100 * q for q in range(n)])
check(np.array_equal(e.read(), want), "device alltoall")
if n >= 2 and r < 2:
    p = DeviceArray(N, np.uint8, s1)
    g5 = D.Gate()
    if r == 0:
        p.write(np.arange(N) % 251, s1, g5)
        comm.send(p, peer=1)
    else:
        comm.recv(p, peer=0)
    g5.open()
    s1.synchronize()
    if r == 1:
        check(np.array_equal(p.read(), (np.arange(N) % 251).astype(np.uint8)), "device send/recv")
comm.barrier()
comm.destroy()
sys.exit(check.finish())
