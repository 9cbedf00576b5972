"""hora._core, the C ABI over ctypes, on numpy arrays (no torch): every collective, split,
host streams, argument errors. Buffers of several MiB sit above 4 GiB in the address space, so
a pointer passed as a 32-bit int would not survive."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

if not harness.in_rank():
    sys.exit(harness.launch_self(__file__, [1, 2, 3], timeout=120))

from hora import _core as h  # noqa: E402

comm = h.Comm.from_env()
r, n = comm.rank, comm.size
check = harness.Checker("[%d] " % r)
DT = {np.float32: h.FLOAT32, np.float64: h.FLOAT64, np.int32: h.INT32, np.int64: h.INT64,
      np.uint8: h.UINT8, np.float16: h.FLOAT16}
N = 1 << 20  # 1 Mi elements: malloc'd by mmap, far above 4 GiB

for t, code in DT.items():
    x = (np.arange(N) % 7 + r + 1).astype(t)
    y = np.zeros(N, dtype=t)
    comm.allreduce(x.ctypes.data, y.ctypes.data, N, code, h.SUM)
    want = ((np.arange(N) % 7) * n + n * (n + 1) // 2).astype(t)
    check(np.array_equal(y, want), "allreduce sum %s" % t.__name__)
    comm.allreduce(x.ctypes.data, y.ctypes.data, N, code, h.MAX)
    check(np.array_equal(y, (np.arange(N) % 7 + n).astype(t)), "allreduce max %s" % t.__name__)

send = np.arange(n * 1000, dtype=np.int64) + 1000000 * r
recv = np.full(n * 1000, -1, dtype=np.int64)
comm.alltoall(send.ctypes.data, recv.ctypes.data, 1000, h.INT64)
want = np.concatenate([np.arange(r * 1000, (r + 1) * 1000) + 1000000 * q for q in range(n)])
check(np.array_equal(recv, want), "alltoall")
comm.alltoall(send.ctypes.data, send.ctypes.data, 1000, h.INT64)
check(np.array_equal(send, want), "alltoall in place")

g = np.zeros(n * 5, dtype=np.float64)
comm.allgather(np.full(5, r, dtype=np.float64).ctypes.data, g.ctypes.data, 5, h.FLOAT64)
check(np.array_equal(g, np.repeat(np.arange(n, dtype=np.float64), 5)), "allgather")
b = np.full(9, r, dtype=np.int32)
comm.broadcast(b.ctypes.data, b.ctypes.data, 9, h.INT32, n - 1)
check(np.all(b == n - 1), "broadcast from the last rank")
comm.barrier()
check(True, "barrier")

# Split: odd and even ranks, ranked in reverse.
sub = comm.split(r % 2, -r)
members = [q for q in range(n) if q % 2 == r % 2][::-1]
check(sub.size == len(members) and members[sub.rank] == r, "split: size and key order")
s = np.array([r], dtype=np.int64)
sub.allreduce(s.ctypes.data, s.ctypes.data, 1, h.INT64, h.SUM)
check(s[0] == sum(members), "allreduce on the split")
none = comm.split(h.SPLIT_NOCOLOR if r == 0 else 0, 0)
check((none is None) == (r == 0), "split: no color gives None")
if none is not None:
    none.destroy()
sub.destroy()

# Host streams: queued work, in order, with the caller going on.
st = h.Stream()
bufs = [np.full(N, r + 1, dtype=np.float32) for _ in range(4)]
for a, c in zip(bufs, bufs[1:]):
    comm.allreduce(a.ctypes.data, c.ctypes.data, N, h.FLOAT32, h.SUM, stream=st)
st.synchronize()
check(st.query(), "query after synchronize")
want = n * (n + 1) / 2
for k in range(1, 4):
    check(np.all(bufs[k] == want), "stream step %d" % k)
    want *= n
st.destroy()

# Errors: argument errors name the problem and leave the communicator usable.
try:
    comm.allreduce(x.ctypes.data, y.ctypes.data, 4, 99, h.SUM)
    check(False, "a bad dtype raised nothing")
except h.HoraError as e:
    check(e.code == 4 and "datatype" in e.text and not e.remote, "bad dtype: %s" % e.text)
try:
    comm.broadcast(b.ctypes.data, b.ctypes.data, 9, h.INT32, n)
    check(False, "a bad root raised nothing")
except h.HoraError as e:
    check(e.code == 4 and "root" in e.text, "bad root: %s" % e.text)
check(comm.async_error() == 0, "no async error after bad arguments")
comm.destroy()
sys.exit(check.finish())
