"""hora.torch's Horovod API on device tensors, on the library's emulated GPU (HORA_CUDA=emulate):
tensors over emulated device memory (hora._device.emulated_tensor) go through the device paths
of the engine (hora.torch._device_exec) as CUDA tensors do on a GPU.

Every collective is run twice, on CPU tensors and on device copies of them, and the results must
be equal (the host path is the reference). Stream order is proven with gates (hora._device.Gate),
without timing: a producer's write queued on the caller's current stream behind a gate that
opens only after the hora call returned must be seen by the collective; synchronize() must return
while the engine's stream is held by a gate (it waits for nothing on the device), and a reader
queued on the caller's current stream after it must not run before the collective has.

A device tensor's contents are read once the caller's current stream is synchronized (torch's
ops on emulated memory run at once, outside any stream: hora._device.settle).

With TEST_DEVICE=cuda (tests/gpu/run-torch-gpu.sh, on a machine with a GPU and torch with
CUDA) the same checks run on CUDA tensors and torch's streams, every rank on GPU 0.
"""
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.require_torch()
CUDA = os.environ.get("TEST_DEVICE") == "cuda"
if not harness.in_rank():
    env = {} if CUDA else {"HORA_CUDA": "emulate"}
    rc = harness.launch_self(__file__, [2, 3], timeout=240, env=env)
    if rc == 0:
        rc = harness.launch_self(__file__, [2], timeout=120, env=env, args=["async-error"])
    sys.exit(rc)

import torch  # noqa: E402

from hora import _device as D  # noqa: E402

hvd = harness.init_hvd()
from hora.torch import _state, mpi_ops  # noqa: E402

r, n = hvd.rank(), hvd.size()
check = harness.Checker("[%d] " % r)
if CUDA:
    torch.cuda.set_device(0)
    RT = D.torch_runtime()
else:
    RT = D.RUNTIME


def newdev(shape, dtype, fill=None):
    return harness.device_tensor(shape, dtype, fill, CUDA)


def async_error():
    """A device operation that fails after it was queued: rank 1 queues its part and dies; rank
    0's part is held behind a gate until rank 1 is gone. The operation's handle completed when it
    was queued (synchronize returned); its failure is the communicator's asynchronous error, which
    poll() and synchronize() of the operations queued with it raise as HorovodInternalError."""
    import time
    pids = hvd.allgather_object(os.getpid())
    s = RT.Stream()
    with RT.use_stream(s):
        x = newdev([1 << 12], torch.float32, 0.0)
        bounced = newdev([1 << 12], torch.float32, 1.0)
        gate = D.Gate()
        if r == 0:
            gate.hold(s)
            RT.copy_(x, bounced, s)
        with _state.engine.hold():  # one round: both queued before rank 1 goes
            h1 = hvd.allreduce_async(x, op=hvd.Sum, name="doomed.1")
            h2 = hvd.allreduce_async(newdev([8], torch.float32, 1.0), op=hvd.Sum,
                                     name="doomed.2")
        hvd.synchronize(h1)  # queued: nothing has failed yet
        if r == 1:
            os._exit(0)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                os.kill(pids[1], 0)
            except ProcessLookupError:
                break
            time.sleep(0.01)
        gate.open()
        raised = None
        while time.time() < deadline and raised is None:
            try:
                if hvd.poll(h2):
                    break
            except hvd.HorovodInternalError as e:
                raised = e
        check(raised is not None, "poll raises HorovodInternalError for a device operation that "
                                  "failed after it was queued (%s)" % raised)
        check.raises_(hvd.HorovodInternalError, lambda: hvd.synchronize(h2),
                      "synchronize raises it too")
    try:
        hvd.shutdown()
    except Exception:  # noqa: BLE001 - the peer is gone
        pass
    sys.exit(check.finish())


if sys.argv[1:] == ["async-error"]:
    async_error()


def dev(t):
    """A device copy of host tensor t."""
    return newdev(list(t.shape), t.dtype, t)


def on_device(t):
    return isinstance(t, torch.Tensor) and D.ops_for(t) is RT


def same(a, b):
    D.settle()
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.cpu(), b.cpu())


def both(fn, *tensors):
    """fn on the host tensors, then on device copies: (host result, device result)."""
    host = fn(*tensors)
    return host, fn(*[dev(t) for t in tensors])


def data(shape, dtype, seed=0):
    g = torch.Generator().manual_seed(1000 * r + seed)
    x = torch.randint(1, 5, shape, generator=g).to(torch.float64)
    return x.to(dtype)


# ---- allreduce: every op, scale factors, sync, async, in place --------------------------------
ops = [("Average", hvd.Average), ("Sum", hvd.Sum), ("Min", hvd.Min), ("Max", hvd.Max),
       ("Product", hvd.Product)]
for label, op in ops:
    for dtype in (torch.float32, torch.int32, torch.float16):
        scales = [(1.0, 1.0)] if op in (hvd.Min, hvd.Max, hvd.Product) else [(1.0, 1.0), (0.5, 3.0)]
        for pre, post in scales:
            x = data([5, 3], dtype)
            h, d = both(lambda t: hvd.allreduce(t, op=op, prescale_factor=pre,
                                                postscale_factor=post), x)
            check(on_device(d) and same(h, d), "allreduce %s %s pre %g post %g" % (label, dtype, pre, post))
x = data([1000], torch.float32, 1)
hh = hvd.allreduce_async(x, op=hvd.Sum)
dx = dev(x)
dh = hvd.allreduce_async(dx, op=hvd.Sum)
check(mpi_ops._handles[dh].reqs[0].rt is RT, "a device tensor's request takes the device path")
dres = hvd.synchronize(dh)
check(mpi_ops._handles.get(dh) is None and mpi_ops._handles.get(hh) is not None, "handles")
check(on_device(dres) and same(hvd.synchronize(hh), dres), "allreduce_async + synchronize")
hx = x.clone()
hvd.allreduce_(hx, op=hvd.Average, postscale_factor=2.0)
dx = dev(x)
out = hvd.allreduce_(dx, op=hvd.Average, postscale_factor=2.0)
check(out is dx and same(hx, dx), "allreduce_ in place")
hx = x.clone()
hvd.synchronize(hvd.allreduce_async_(hx, op=hvd.Max))
dx = dev(x)
check(hvd.synchronize(hvd.allreduce_async_(dx, op=hvd.Max)) is dx and same(hx, dx),
      "allreduce_async_ in place")
# In place on a non-contiguous device view: reduced in a contiguous device copy, written back.
base = data([6, 8], torch.float64, 2)
hb, db = base.clone(), dev(base)
hvd.allreduce_(hb[:, ::2], op=hvd.Sum, prescale_factor=0.25)
hvd.allreduce_(db[:, ::2], op=hvd.Sum, prescale_factor=0.25)
check(same(hb, db), "allreduce_ on a non-contiguous device view")

# ---- grouped allreduce: fused batches of several dtypes, and a host tensor among them -------
group = [data([4, 4], torch.float32, 3), data([17], torch.float32, 4), data([3], torch.float64, 5),
         data([9], torch.int64, 6), data([2, 5], torch.float16, 7), data([8], torch.float32, 8)]
eng = _state.engine
before = eng.stats["fused_batches"]
h, d = both(lambda *ts: hvd.grouped_allreduce(list(ts), op=hvd.Average, prescale_factor=0.5), *group)
check(all(on_device(t) for t in d) and same(h, d), "grouped_allreduce, several dtypes")
check(eng.stats["fused_batches"] - before >= 2, "grouped_allreduce fused (%d batches)"
      % (eng.stats["fused_batches"] - before))
hg = [t.clone() for t in group]
dg = [dev(t) for t in group]
hvd.grouped_allreduce_(hg, op=hvd.Sum, postscale_factor=0.5)
hvd.synchronize(hvd.grouped_allreduce_async_(dg, op=hvd.Sum, postscale_factor=0.5))
check(same(hg, dg), "grouped_allreduce_ in place (async)")
mixed_h = [data([6], torch.float32, 9), data([7], torch.float32, 10)]
mixed_d = [dev(mixed_h[0]), mixed_h[1].clone()]  # one device tensor, one host tensor, one batch
res_h = hvd.grouped_allreduce(mixed_h, op=hvd.Sum)
res_d = hvd.grouped_allreduce(mixed_d, op=hvd.Sum)
check(on_device(res_d[0]) and not on_device(res_d[1]) and same(res_h, res_d),
      "a host and a device tensor fused in one batch")

x = data([9], torch.float32, 24)
h = hvd.allreduce(x, op=hvd.Average)
d = hvd.allreduce(dev(x) if r == 0 else x.clone(), op=hvd.Average)
check(on_device(d) == (r == 0) and same(h, d),
      "a device tensor on rank 0, host tensors on the others (all through device memory)")

# ---- allgather (uneven first dimensions), grouped ----------------------------------------------
x = data([r + 1, 3], torch.float32, 11)
h, d = both(hvd.allgather, x)
check(on_device(d) and same(h, d) and d.shape[0] == n * (n + 1) // 2, "allgather, uneven rows")
x = data([2, 2], torch.int64, 12)
h, d = both(hvd.allgather, x)
check(on_device(d) and same(h, d), "allgather, even rows")
xs = [data([r + 2], torch.float64, 13), data([1, 4], torch.int32, 14)]
h, d = both(lambda *ts: hvd.grouped_allgather(list(ts)), *xs)
check(all(on_device(t) for t in d) and same(h, d), "grouped_allgather")

# ---- broadcast --------------------------------------------------------------------------------
x = data([33], torch.float32, 15)
h, d = both(lambda t: hvd.broadcast(t, root_rank=n - 1), x)
check(on_device(d) and same(h, d), "broadcast")
hx, dx = x.clone(), dev(x)
hvd.broadcast_(hx, root_rank=0)
check(hvd.broadcast_(dx, root_rank=0) is dx and same(hx, dx), "broadcast_ in place")

# ---- alltoall ---------------------------------------------------------------------------------
x = data([2 * n, 3], torch.float32, 16)
h, d = both(hvd.alltoall, x)
check(on_device(d) and same(h, d), "alltoall, even")
splits = [(r + j) % 3 for j in range(n)]
x = data([sum(splits), 2], torch.int64, 17)
(ho, hs), (do, ds) = both(lambda t: hvd.alltoall(t, splits=splits), x)
check(on_device(do) and same(ho, do) and torch.equal(hs.cpu(), ds.cpu()), "alltoall with splits")

# ---- reducescatter ------------------------------------------------------------------------------
for rows in (2 * n, 2 * n + 1):
    x = data([rows, 3], torch.float32, 18)
    for op, pre, post in ((hvd.Average, 1.0, 1.0), (hvd.Sum, 0.5, 2.0)):
        h, d = both(lambda t: hvd.reducescatter(t, op=op, prescale_factor=pre,
                                                postscale_factor=post), x)
        check(on_device(d) and same(h, d), "reducescatter of %d rows, op %d" % (rows, op))
xs = [data([n, 2], torch.float64, 19), data([n + 1], torch.float32, 20)]
h, d = both(lambda *ts: hvd.grouped_reducescatter(list(ts), op=hvd.Sum), *xs)
check(same(h, d), "grouped_reducescatter")

# ---- sparse allreduce ---------------------------------------------------------------------------
idx = torch.tensor([[0, 2, 3 + r], [1, 0, r]], dtype=torch.int64)
vals = data([3, 2], torch.float32, 21)
hs = torch.sparse_coo_tensor(idx, vals, (8, 4, 2)).coalesce()
# The device tensor's indices and values stay in device memory (coalesced as they are).
ds = torch._sparse_coo_tensor_unsafe(dev(hs.indices()), dev(hs.values()), hs.shape)._coalesced_(True)
check(on_device(ds._values()), "the sparse input's values are on the device")
h = hvd.sparse_allreduce_async(hs, op=hvd.Average)()
d = hvd.sparse_allreduce_async(ds, op=hvd.Average)()
check(same(h.to_dense(), d.to_dense()), "sparse_allreduce_async")

# ---- Adasum (bounced through host memory) ------------------------------------------------------
for dtype in (torch.float32, torch.float64, torch.float16):
    x = data([7, 3], dtype, 22) - 2
    h, d = both(lambda t: hvd.allreduce(t, op=hvd.Adasum, prescale_factor=0.5), x)
    check(on_device(d) and same(h, d), "Adasum %s" % dtype)

# ---- stream order -------------------------------------------------------------------------------
# The producer's write, queued on the caller's current stream behind a gate that opens only after
# the hora call returned, is what the collective works on. Where the engine queues everything on
# its stream (no scaling), the gate opens only once synchronize() has returned: the operation is
# then certainly queued, and the write certainly not done.
N = 1 << 14
s = RT.Stream()


bouncing = []  # the sources of the queued writes, alive until the end


def gated_write(value, dtype=torch.float32):
    x = newdev([N], dtype, 0.0)
    bounced = newdev([N], dtype, float(value))
    bouncing.append(bounced)
    gate = D.Gate()
    gate.hold(s)
    RT.copy_(x, bounced, s)
    return x, gate


with RT.use_stream(s):
    x, gate = gated_write(r + 1)
    out = hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum))
    check(float(x[0]) == 0.0, "synchronize returned before the producer's write (Sum)")
    gate.open()
    s.synchronize()
    check(torch.all(out == n * (n + 1) / 2).item(), "the allreduce saw the write queued before it")
    x, gate = gated_write(r + 1)
    y = newdev([N], torch.float32, float(r + 2))
    outs = hvd.synchronize(hvd.grouped_allreduce_async([x, y], op=hvd.Sum))
    gate.open()
    s.synchronize()
    check(torch.all(outs[0] == n * (n + 1) / 2).item() and torch.all(outs[1] == n * (n + 3) / 2).item(),
          "the fused allreduce (packed on the engine's stream) saw the write queued before it")
    x, gate = gated_write(r + 1)
    out = hvd.synchronize(hvd.allgather_async(x))
    gate.open()
    s.synchronize()
    check(torch.equal(out.cpu(), torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(N)),
          "the allgather saw the write queued before it")
    x, gate = gated_write(r + 1, torch.float64)
    hvd.synchronize(hvd.broadcast_async_(x, root_rank=n - 1))
    gate.open()
    s.synchronize()
    check(torch.all(x == n).item(), "the broadcast saw the write queued before it")
    # With scaling, the engine runs torch ops in its stream's order (on the emulated device: once
    # the stream's earlier work is done): the gate opens once the call returned.
    x, gate = gated_write(r + 1)
    h = hvd.allreduce_async(x, op=hvd.Average, prescale_factor=2.0)
    check(float(x[0]) == 0.0, "the producer's write is still held (Average, scaled)")
    gate.open()
    out = hvd.synchronize(h)
    s.synchronize()
    check(torch.all(out == (n + 1)).item(), "the scaled allreduce saw the write queued before it")

    # synchronize() returns while the engine's stream is held (it waits for nothing on the device)
    # and the reader queued after it on the current stream runs only after the collective.
    estream = next(iter(eng._streams.values()))
    egate = D.Gate()
    egate.hold(estream)
    x = newdev([N], torch.float64, float(r + 1))
    h = hvd.allreduce_async(x, op=hvd.Sum)
    watchdog = threading.Timer(30.0, egate.open)  # only if synchronize waited for the device
    watchdog.start()
    out = hvd.synchronize(h)
    check(watchdog.is_alive(), "synchronize returned while the engine's stream was held")
    check(not hvd.poll(hvd.allreduce_async(newdev([4], torch.float64, 1.0), op=hvd.Sum,
                                           name="held")),
          "poll is False while the work is queued but not done")
    reader = newdev([N], torch.float64, -1.0)
    RT.copy_(reader, out, s)
    check(float(reader[0]) == -1.0, "the reader on the current stream waits for the collective")
    egate.open()
    watchdog.cancel()
    s.synchronize()
    check(torch.all(reader == n * (n + 1) / 2).item(), "the reader saw the result")
    held = [hd for hd in list(mpi_ops._handles) if mpi_ops._handles[hd].reqs[0].name == "held"][0]
    while not hvd.poll(held):
        pass
    check(torch.all(hvd.synchronize(held) == n).item(), "poll is True once the work is done")

# ---- broadcast_parameters, broadcast_optimizer_state, DistributedOptimizer ----------------------


def model_run(on_dev):
    torch.manual_seed(7 + r)  # different on each rank: broadcast_parameters makes them equal
    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    if on_dev:
        for p in m.parameters():
            p.data = dev(p.data)
            p.grad = dev(torch.zeros_like(p.data))  # backward accumulates into it, in place
    opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=m.named_parameters())
    g = torch.Generator().manual_seed(100 + r)
    for _ in range(3):
        xb = torch.randn(4, 6, generator=g)
        yb = torch.randn(4, 2, generator=g)
        opt.zero_grad()
        D.settle()
        loss = torch.nn.functional.mse_loss(m(xb), yb)
        loss.backward()
        opt.step()
    D.settle()
    devs = all(on_device(p) for p in m.parameters())
    return [p.detach().clone() for p in m.parameters()], devs


host_params, _ = model_run(False)
dev_params, devs = model_run(True)
check(devs and same(host_params, dev_params),
      "DistributedOptimizer on device parameters: the CPU run's parameters")
every = hvd.allgather(torch.cat([p.reshape(-1) for p in dev_params]).reshape(1, -1))
check(all(torch.equal(every[0].cpu(), every[i].cpu()) for i in range(n)), "the ranks' parameters agree")
check(hvd.broadcast_object({"rank": r}, root_rank=n - 1) == {"rank": n - 1}, "broadcast_object")

# ---- SyncBatchNorm on device inputs -------------------------------------------------------------
bn_h = hvd.SyncBatchNorm(3)
bn_d = hvd.SyncBatchNorm(3)
xin = data([r + 2, 3, 4], torch.float32, 23)
yh = bn_h(xin.clone().requires_grad_())
yd = bn_d(dev(xin).requires_grad_())
check(same(yh, yd) and same(bn_h.running_var, bn_d.running_var), "SyncBatchNorm")

# ---- join: a joined rank contributes from host memory to the others' device allreduces -------
if r == n - 1:
    last = hvd.join()
else:
    out = hvd.allreduce(dev(torch.full([5], float(r + 1))), op=hvd.Sum, name="beside.joined")
    D.settle()
    check(on_device(out) and torch.all(out == n * (n - 1) / 2).item(),
          "a device allreduce beside a joined rank")
    last = hvd.join()
check(0 <= last < n - 1, "join returns the last rank to join (%d)" % last)

# ---- the end: nothing in flight once the engine is shut down -----------------------------------
x = newdev([N], torch.float32, 1.0)
hvd.synchronize(hvd.allreduce_async_(x, op=hvd.Sum))
hvd.shutdown()
D.settle()
check(torch.all(x == n).item() and not eng._inflight, "shutdown drains the device work in flight")
sys.exit(check.finish())
