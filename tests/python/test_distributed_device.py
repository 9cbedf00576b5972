"""The torch.distributed backend "hora" on device tensors, on the emulated GPU (HORA_CUDA=emulate):
tensors over the emulated device's memory (hora._device.emulated_tensor) and the library's own
streams stand in for CUDA tensors and torch's streams, through the same lines of the backend.
With TEST_DEVICE=cuda (tests/gpu/run-torch-gpu.sh, on a machine with a GPU and torch with
CUDA) the same checks run on CUDA tensors and torch's streams, every rank on GPU 0.

What is checked, at 2 and 3 ranks: each collective's results on device tensors; that an operation
runs after the work queued before it on the caller's current stream (the producer's write sits
behind a gate, hora._device.Gate, that opens only once the call has returned: an operation that
did not wait for the caller's stream would read the old contents, whatever the timing); that
wait() orders the caller's stream after the operation (the caller reads after synchronizing its
own stream, never the group's); async work; coalesced point-to-point; mixed host and device
calls in one program order; a call with tensors on host and device at once is refused.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CUDA = os.environ.get("TEST_DEVICE") == "cuda"
if not harness.in_rank():
    harness.require_torch()
    rc = 0
    for n in (2, 3):
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": harness.free_port()}
        if not CUDA:
            env["HORA_CUDA"] = "emulate"
        rc = rc or harness.launch_self(__file__, [n], timeout=120, env=env)
    sys.exit(rc)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hora.torch.distributed  # noqa: E402,F401
from hora import _device as D  # noqa: E402

rank, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
dist.init_process_group("hora", init_method="env://", rank=rank, world_size=size)
check = harness.Checker("[%d] " % rank)
if CUDA:
    torch.cuda.set_device(0)
    rt = D.torch_runtime()
else:
    rt = D.RUNTIME
s1 = rt.Stream()  # the caller's current stream below
N = 4096


def new(shape, dtype, fill=None):
    return harness.device_tensor(shape, dtype, fill, CUDA)


def produced(values, dtype=torch.float32, gate=None):
    """A device tensor that the caller's current stream fills with values: behind gate if given
    (so not before it opens), from device memory (so the copy is the stream's work)."""
    t = new((len(values),) if not isinstance(values, torch.Tensor) else tuple(values.shape), dtype)
    src = new(tuple(t.shape), dtype, fill=torch.as_tensor(values, dtype=dtype))
    if gate is not None:
        gate.hold(rt.current_stream())
    rt.copy_(t, src, rt.current_stream())
    t._keep_src = src  # until the stream ran the copy
    return t


def read(t):
    """The tensor after the caller's stream: the caller synchronizes its own stream only."""
    rt.current_stream().synchronize()
    return t.cpu().clone()


with rt.use_stream(s1):
    # all_reduce (synchronous): after the gated write, and the caller's stream after it.
    g = D.Gate()
    x = produced(torch.arange(N, dtype=torch.float32) * (rank + 1), gate=g)
    dist.all_reduce(x)
    g.open()
    check(torch.equal(read(x), torch.arange(N, dtype=torch.float32) * (size * (size + 1) // 2)),
          "all_reduce after the caller's stream, and the caller's stream after it")

    # async_op: wait() orders the caller's stream; the CPU is not held.
    g = D.Gate()
    y = produced(torch.full((N,), float(rank)), torch.float64, gate=g)
    work = dist.all_reduce(y, op=dist.ReduceOp.MAX, async_op=True)
    g.open()
    work.wait()
    check(torch.equal(read(y), torch.full((N,), float(size - 1), dtype=torch.float64)), "async all_reduce MAX")

    # broadcast, _allgather_base, reduce_scatter_base (contiguous: straight on the stream).
    g = D.Gate()
    b = produced(torch.full((N,), 5 if rank == size - 1 else -1), torch.int32, gate=g)
    dist.broadcast(b, src=size - 1)
    g.open()
    check(torch.equal(read(b), torch.full((N,), 5, dtype=torch.int32)), "broadcast")
    g = D.Gate()
    a = produced(torch.full((8,), float(rank)), gate=g)
    out = new((8 * size,), torch.float32, fill=-1.0)
    dist._all_gather_base(out, a)
    g.open()
    check(torch.equal(read(out), torch.arange(size, dtype=torch.float32).repeat_interleave(8)),
          "_all_gather_base")
    g = D.Gate()
    rs_in = produced(torch.arange(4 * size, dtype=torch.float32) + rank, gate=g)
    rs_out = new((4,), torch.float32, fill=0.0)
    dist._reduce_scatter_base(rs_out, rs_in)
    g.open()
    want = (torch.arange(4 * size, dtype=torch.float32) * size + size * (size - 1) / 2)[4 * rank:4 * rank + 4]
    check(torch.equal(read(rs_out), want), "_reduce_scatter_base")

    # Local steps (a list of outputs): packed and unpacked in the stream's order.
    outs = [new((3,), torch.int64, fill=0) for _ in range(size)]
    dist.all_gather(outs, produced(torch.full((3,), rank), torch.int64))
    rt.current_stream().synchronize()
    check(all(torch.equal(o.cpu(), torch.full((3,), r, dtype=torch.int64)) for r, o in enumerate(outs)),
          "all_gather into a list")
    ins = [produced(torch.full((2,), 10 * rank + r), torch.int64) for r in range(size)]
    outs = [new((2,), torch.int64, fill=0) for _ in range(size)]
    dist.all_to_all(outs, ins)
    rt.current_stream().synchronize()
    check(all(torch.equal(o.cpu(), torch.full((2,), 10 * r + rank, dtype=torch.int64)) for r, o in enumerate(outs)),
          "all_to_all of lists")

    # Point-to-point: a ring of isend/irecv as one coalesced batch, and a plain send/recv.
    right, left = (rank + 1) % size, (rank - 1) % size
    g = D.Gate()
    mine = produced(torch.full((N,), float(rank)), gate=g)
    got = new((N,), torch.float32, fill=-1.0)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, right), dist.P2POp(dist.irecv, got, left)])
    g.open()
    for q in reqs:
        q.wait()
    check(torch.equal(read(got), torch.full((N,), float(left))), "batch_isend_irecv ring")
    if rank < 2:
        g = D.Gate()
        p = produced(torch.arange(N, dtype=torch.float32) if rank == 0 else torch.zeros(N), gate=g)
        if rank == 0:
            dist.send(p, dst=1)
        else:
            dist.recv(p, src=0)
        g.open()
        if rank == 1:
            check(torch.equal(read(p), torch.arange(N, dtype=torch.float32)), "send/recv")
        rt.current_stream().synchronize()

# Host and device operations in one program order; a call mixing them is refused.
h = torch.full((16,), float(rank))
dist.all_reduce(h)
d = new((16,), torch.float32, fill=float(rank))
dist.all_reduce(d)
rt.current_stream().synchronize()
check(torch.equal(h, torch.full((16,), float(size * (size - 1) // 2))) and torch.equal(h, d.cpu()),
      "host then device all_reduce")
check.raises_(ValueError, lambda: dist.all_gather([torch.zeros(16) for _ in range(size)], d),
              "tensors on host and device in one call")
dist.barrier()
dist.destroy_process_group()
sys.exit(check.finish())
