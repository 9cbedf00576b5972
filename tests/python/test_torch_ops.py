"""hora.torch collectives against values computed independently in the test, at 2 and 3 ranks.

Every rank builds every rank's input from (rank, shape, dtype) alone, so it can compute the
expected result of each collective with plain torch arithmetic in float64 and compare.
Run from the repository root: /usr/bin/python3 tests/python/test_torch_ops.py (with HORA_RUN,
PYTHONPATH=python and the library's location in the environment).
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

torch = harness.require_torch()
if not harness.in_rank():
    sys.exit(harness.launch_self(__file__, [2, 3], timeout=90))

hvd = harness.init_hvd()
R, N = hvd.rank(), hvd.size()
check = harness.Checker()

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPES = [torch.float32, torch.float64, torch.int32, torch.float16, torch.bfloat16]
SHAPES = [(), (5,), (3, 4), (2, 3, 2)]


def data(rank, shape, dtype, lo=-3, hi=3):
    """Small integers (exact in every dtype), different on every rank."""
    n = 1
    for s in shape:
        n *= s
    span = hi - lo + 1
    v = (torch.arange(n, dtype=torch.int64) * 5 + rank * 3 + 1) % span + lo
    return v.reshape(shape).to(dtype)


def scale(t, f, dtype):
    """The reference for a scale factor: floats multiply, integers multiply and truncate."""
    if dtype.is_floating_point:
        return t * f
    return torch.trunc(t * f)


def expected_allreduce(shape, dtype, op, pre=1.0, post=1.0, ranks=None, contributing=None):
    ranks = list(range(N)) if ranks is None else ranks
    contributing = ranks if contributing is None else contributing
    xs = [scale(data(r, shape, dtype).double(), pre, dtype) if r in contributing
          else torch.zeros(shape, dtype=torch.float64) for r in ranks]
    s = torch.stack(xs)
    if op in (hvd.Sum, hvd.Average):
        v = s.sum(0)
    elif op == hvd.Min:
        v = s.min(0).values
    elif op == hvd.Max:
        v = s.max(0).values
    else:
        v = s.prod(0)
    f = post / len(ranks) if op == hvd.Average else post
    return scale(v, f, dtype)


def close(got, want, dtype):
    if got.dtype != dtype or tuple(got.shape) != tuple(want.shape):
        return False
    g = got.double()
    if dtype in (torch.float16, torch.bfloat16):
        return torch.allclose(g, want, rtol=1e-2, atol=1e-2)
    if dtype == torch.float32:
        return torch.allclose(g, want, rtol=1e-6, atol=1e-6)
    return torch.equal(g, want)


OPS = [(hvd.Sum, "Sum"), (hvd.Average, "Average"), (hvd.Min, "Min"), (hvd.Max, "Max"),
       (hvd.Product, "Product")]

# ---- basics
check(N == int(os.environ["HORA_SIZE"]) and R == int(os.environ["HORA_RANK"]),
      "rank()/size() match the launcher")
check(hvd.local_size() == N and hvd.local_rank() == R, "one host: local_rank == rank")
check(hvd.cross_size() == 1 and hvd.cross_rank() == 0 and hvd.is_homogeneous(),
      "one host: cross_size 1, homogeneous")
check(hvd.is_initialized() and not hvd.mpi_enabled() and not hvd.gloo_built()
      and not hvd.nccl_built(), "capability queries")
if "TEST_CUDA_BUILT" in os.environ:  # (set by the build: whether it has CUDA)
    check(hvd.cuda_built() == (os.environ["TEST_CUDA_BUILT"] == "1"),
          "cuda_built() says whether the library has CUDA (%s)" % hvd.cuda_built())

# ---- allreduce: every op and dtype, out-of-place, in place and async
ok = True
for dtype in DTYPES:
    for op, opname in OPS:
        for shape in SHAPES:
            x = data(R, shape, dtype)
            keep = x.clone()
            want = expected_allreduce(shape, dtype, op)
            got = hvd.allreduce(x, op=op)
            if not (close(got, want, dtype) and torch.equal(x, keep)):
                ok = False
                print("allreduce %s %s %s: got %s want %s" % (opname, dtype, shape, got, want))
            y = data(R, shape, dtype)
            r = hvd.allreduce_(y, op=op)
            if not (r is y and close(y, want, dtype)):
                ok = False
                print("allreduce_ %s %s %s: got %s want %s" % (opname, dtype, shape, y, want))
check(ok, "allreduce Sum/Average/Min/Max/Product on %d dtypes and 4 shapes, in and out of "
      "place" % len(DTYPES))

ok = True
for dtype in DTYPES + [torch.int64, torch.int8, torch.uint8]:
    for op, pre, post in [(hvd.Sum, 2.0, 0.5), (hvd.Average, 3.0, 1.0), (hvd.Sum, 1.0, 0.25),
                          (hvd.Average, 0.5, 3.0), (hvd.Max, 2.0, 1.5)]:
        lo = 0 if dtype == torch.uint8 else -3
        shape = (7,)
        x = data(R, shape, dtype, lo=lo)
        h = hvd.allreduce_async(x, op=op, prescale_factor=pre, postscale_factor=post)
        got = hvd.synchronize(h)
        xs = [scale(data(r, shape, dtype, lo=lo).double(), pre, dtype) for r in range(N)]
        v = torch.stack(xs).max(0).values if op == hvd.Max else torch.stack(xs).sum(0)
        want = scale(v, post / N if op == hvd.Average else post, dtype)
        if not close(got, want, dtype):
            ok = False
            print("scaled allreduce %s pre %s post %s: got %s want %s" % (dtype, pre, post, got,
                                                                          want))
check(ok, "allreduce with prescale/postscale (integers truncate like Horovod) on 8 dtypes")

x = data(R, (4,), torch.int32)
got = hvd.allreduce(x, op=hvd.Average)
want = torch.trunc(torch.stack([data(r, (4,), torch.int32).double() for r in range(N)]).sum(0)
                   * (1.0 / N))
check(got.dtype == torch.int32 and torch.equal(got.double(), want),
      "integer Average: sum times 1/size, truncated toward zero: %s" % got.tolist())

with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    got = hvd.allreduce(torch.ones(3), average=False)
check(torch.equal(got, torch.full((3,), float(N))) and any(
    issubclass(i.category, DeprecationWarning) for i in w), "deprecated average=False sums")
check(check.raises_(ValueError, lambda: hvd.allreduce(torch.ones(1), average=True,
                                                      op=hvd.Sum), "op and average together")
      is not None, "op and average together is a ValueError")

# non-contiguous in place, bool with Max, fp16 compression, name=
base = data(R, (4, 6), torch.float32)
nc = base.t()
hvd.allreduce_(nc, op=hvd.Sum)
want = torch.stack([data(r, (4, 6), torch.float32).double() for r in range(N)]).sum(0).t()
check(close(nc, want, torch.float32) and torch.equal(base.t(), nc),
      "in-place allreduce of a non-contiguous view writes the caller's tensor")
b = torch.tensor([R == 0, False, True])
check(torch.equal(hvd.allreduce(b, op=hvd.Max), torch.tensor([True, False, True]))
      and torch.equal(hvd.allreduce(b, op=hvd.Min), torch.tensor([N == 1, False, True])),
      "bool allreduce with Max (or) and Min (and)")
check(check.raises_(TypeError, lambda: hvd.allreduce(b, op=hvd.Sum), "bool Sum") is not None,
      "bool Sum is a TypeError")
x = data(R, (6,), torch.float32)
got = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16, name="compressed")
check(got.dtype == torch.float32 and close(got, expected_allreduce((6,), torch.float32, hvd.Sum),
                                           torch.float32),
      "Compression.fp16 travels as float16 and returns float32")
got = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.bf16)
check(got.dtype == torch.float32, "Compression.bf16 returns float32")

# ---- grouped allreduce (mixed dtypes and shapes)
specs = [((3,), torch.float32), ((2, 2), torch.float64), ((5,), torch.int32),
         ((4,), torch.float16), ((), torch.bfloat16), ((3,), torch.float32)]
for op, opname in [(hvd.Sum, "Sum"), (hvd.Average, "Average"), (hvd.Max, "Max")]:
    xs = [data(R, s, d) for s, d in specs]
    outs = hvd.grouped_allreduce(xs, op=op)
    check(len(outs) == len(specs) and all(
        close(o, expected_allreduce(s, d, op), d) for o, (s, d) in zip(outs, specs)),
        "grouped_allreduce %s over %d tensors of mixed dtypes" % (opname, len(specs)))
xs = [data(R, s, d) for s, d in specs]
res = hvd.grouped_allreduce_(xs, op=hvd.Sum)
check(all(a is b for a, b in zip(res, xs)) and all(
    close(o, expected_allreduce(s, d, hvd.Sum), d) for o, (s, d) in zip(xs, specs)),
    "grouped_allreduce_ in place")
h = hvd.grouped_allreduce_async([data(R, (3,), torch.float32), data(R, (2,), torch.float64)],
                                op=hvd.Min, name="grp")
outs = hvd.synchronize(h)
check(close(outs[0], expected_allreduce((3,), torch.float32, hvd.Min), torch.float32)
      and close(outs[1], expected_allreduce((2,), torch.float64, hvd.Min), torch.float64),
      "grouped_allreduce_async with a name")

# ---- allgather: uneven first dimension
ok = True
for dtype in DTYPES + [torch.int16, torch.bool, torch.int64]:
    for trailing in [(), (3,), (2, 2)]:
        rows = [r + 1 for r in range(N)]
        x = data(R, (rows[R],) + trailing, dtype) if dtype != torch.bool else \
            data(R, (rows[R],) + trailing, torch.int32) > 0
        got = hvd.allgather(x)
        parts = [data(r, (rows[r],) + trailing, dtype) if dtype != torch.bool else
                 data(r, (rows[r],) + trailing, torch.int32) > 0 for r in range(N)]
        if not torch.equal(got, torch.cat(parts)):
            ok = False
            print("allgather %s %s: got %s" % (dtype, trailing, got))
    got = hvd.allgather(data(R, (2, 3), dtype if dtype != torch.bool else torch.int8))
    want = torch.cat([data(r, (2, 3), dtype if dtype != torch.bool else torch.int8)
                      for r in range(N)])
    ok = ok and torch.equal(got, want)
check(ok, "allgather, uneven and even first dimensions, 8 dtypes (int16 and bool as bytes)")
x = torch.zeros((0, 2)) if R == 0 else data(R, (R, 2), torch.float32)
got = hvd.allgather(x)
check(torch.equal(got, torch.cat([data(r, (r, 2), torch.float32) for r in range(1, N)])),
      "allgather where rank 0 contributes no rows")
xs = [data(R, (R + 1, 2), torch.float32), data(R, (2,), torch.int32)]
outs = hvd.grouped_allgather(xs)
check(torch.equal(outs[0], torch.cat([data(r, (r + 1, 2), torch.float32) for r in range(N)]))
      and torch.equal(outs[1], torch.cat([data(r, (2,), torch.int32) for r in range(N)])),
      "grouped_allgather")

# ---- broadcast: from every root
ok = True
for dtype in DTYPES + [torch.int64, torch.uint8]:
    for root in range(N):
        for shape in [(), (4,), (2, 3)]:
            x = data(R, shape, dtype, lo=0)
            keep = x.clone()
            got = hvd.broadcast(x, root)
            if not (torch.equal(got, data(root, shape, dtype, lo=0)) and torch.equal(x, keep)):
                ok = False
                print("broadcast %s root %d %s: got %s" % (dtype, root, shape, got))
            y = data(R, shape, dtype, lo=0)
            r = hvd.broadcast_(y, root_rank=root)
            if not (r is y and torch.equal(y, data(root, shape, dtype, lo=0))):
                ok = False
                print("broadcast_ %s root %d %s: got %s" % (dtype, root, shape, y))
check(ok, "broadcast and broadcast_ from every root, 7 dtypes, 3 shapes")
h = hvd.broadcast_async_(torch.full((3,), float(R)), N - 1, name="bcast.named")
check(torch.equal(hvd.synchronize(h), torch.full((3,), float(N - 1))), "broadcast_async_")

# ---- alltoall
ok = True
for dtype in DTYPES:
    for trailing in [(), (2,)]:
        rows = 2 * N
        x = data(R, (rows,) + trailing, dtype)
        got = hvd.alltoall(x)
        want = torch.cat([data(r, (rows,) + trailing, dtype)[2 * R:2 * R + 2] for r in range(N)])
        if not torch.equal(got, want):
            ok = False
            print("alltoall even %s %s: got %s want %s" % (dtype, trailing, got, want))


def splits_of(rank):
    return [(rank + 2 * j) % 3 for j in range(N)]


for dtype in DTYPES:
    for trailing in [(), (3,)]:
        sp = splits_of(R)
        x = data(R, (sum(sp),) + trailing, dtype)
        got, received = hvd.alltoall(x, splits=torch.tensor(sp, dtype=torch.int32))
        parts = []
        for r in range(N):
            spr = splits_of(r)
            xr = data(r, (sum(spr),) + trailing, dtype)
            off = sum(spr[:R])
            parts.append(xr[off:off + spr[R]])
        want = torch.cat(parts)
        if not (torch.equal(got, want) and received.dtype == torch.int32
                and received.tolist() == [splits_of(r)[R] for r in range(N)]):
            ok = False
            print("alltoall uneven %s %s: got %s %s want %s" % (dtype, trailing, got, received,
                                                                want))
check(ok, "alltoall with even and uneven splits (received_splits checked), 5 dtypes")
h = hvd.alltoall_async(data(R, (N,), torch.float32), splits=[1] * N)
out, rs = hvd.synchronize(h)
check(torch.equal(out, torch.stack([data(r, (N,), torch.float32)[R] for r in range(N)]))
      and rs.tolist() == [1] * N, "alltoall_async with list splits returns (output, splits)")

# ---- reducescatter: even and uneven first dimensions
ok = True
for dtype in DTYPES:
    for op, opname in [(hvd.Sum, "Sum"), (hvd.Average, "Average")]:
        for rows in [2 * N, 2 * N + 1, N + 2, 1]:
            for trailing in [(), (2,)]:
                shape = (rows,) + trailing
                x = data(R, shape, dtype)
                got = hvd.reducescatter(x, op=op)
                full = expected_allreduce(shape, dtype, op)
                counts = [rows // N + (1 if i < rows % N else 0) for i in range(N)]
                off = sum(counts[:R])
                want = full[off:off + counts[R]]
                if not close(got, want, dtype):
                    ok = False
                    print("reducescatter %s %s %s: got %s want %s" % (opname, dtype, shape, got,
                                                                     want))
check(ok, "reducescatter Sum/Average, dimension 0 of 2N, 2N+1, N+2 and 1 rows, 5 dtypes")
x = data(R, (2 * N + 1, 2), torch.float32)
got = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
full = expected_allreduce((2 * N + 1, 2), torch.float32, hvd.Sum, pre=2.0, post=0.5)
counts = [(2 * N + 1) // N + (1 if i < (2 * N + 1) % N else 0) for i in range(N)]
check(close(got, full[sum(counts[:R]):sum(counts[:R + 1])], torch.float32),
      "reducescatter with scale factors")
xs = [data(R, (N + 1, 3), torch.float64), data(R, (2 * N,), torch.int32)]
outs = hvd.grouped_reducescatter(xs, op=hvd.Sum)
ok = True
for o, (shape, dtype) in zip(outs, [((N + 1, 3), torch.float64), ((2 * N,), torch.int32)]):
    full = expected_allreduce(shape, dtype, hvd.Sum)
    counts = [shape[0] // N + (1 if i < shape[0] % N else 0) for i in range(N)]
    ok = ok and close(o, full[sum(counts[:R]):sum(counts[:R + 1])], dtype)
check(ok, "grouped_reducescatter")
check(check.raises_(ValueError, lambda: hvd.reducescatter(torch.ones(N), op=hvd.Max),
                    "reducescatter with Max") is not None, "reducescatter takes Average or Sum")

# ---- autograd
x = data(R, (3,), torch.float32).requires_grad_()
y = hvd.allreduce(x, op=hvd.Sum)
y.sum().backward()
check(torch.equal(x.grad, torch.full((3,), float(N))), "allreduce backward: allreduce of grads")
x = torch.ones(R + 1, 2, requires_grad=True)
y = hvd.allgather(x)
(y * torch.arange(y.shape[0], dtype=torch.float32).unsqueeze(1)).sum().backward()
off = sum(r + 1 for r in range(R))
want = torch.arange(off, off + R + 1, dtype=torch.float32).unsqueeze(1).expand(R + 1, 2)
check(torch.equal(x.grad, want), "allgather backward: this rank's slice of the averaged grads (Horovod's)")
x = torch.ones(2, requires_grad=True)
hvd.broadcast(x, 0).sum().backward()
check(torch.equal(x.grad, torch.full((2,), 1.0 if R == 0 else 0.0)),
      "broadcast backward: the root gets the average, others zero (Horovod's)")
x = torch.ones(2 * N + 1, requires_grad=True)
hvd.reducescatter(x, op=hvd.Average).sum().backward()
check(torch.allclose(x.grad, torch.full((2 * N + 1,), 1.0)),
      "reducescatter Average backward: the allgather of grads (Horovod's)")
x = torch.ones(2 * N, requires_grad=True)
out = hvd.alltoall(x)
(out * 2).sum().backward()
check(torch.equal(x.grad, torch.full((2 * N,), 2.0)), "alltoall backward")

# ---- poll, synchronize, barrier
h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum)
out = hvd.synchronize(h)
check(torch.equal(out, torch.full((2,), float(N))), "synchronize returns the output")
check(hvd.synchronize(h) is None, "synchronize of a used handle returns None")
h = hvd.allreduce_async(torch.ones(2))
while not hvd.poll(h):
    pass
check(hvd.poll(h) and torch.equal(hvd.synchronize(h), torch.ones(2)), "poll turns True")
# barrier: every rank leaves a mark, the last one only after seeing all the others'; a rank that
# left the barrier early would miss the last rank's mark.
import tempfile  # noqa: E402
import time  # noqa: E402
marks = hvd.broadcast_object(tempfile.mkdtemp(prefix="hora-barrier-") if R == 0 else None, 0,
                             name="barrier.dir")
def marks_of(round_):
    return len([f for f in os.listdir(marks) if f.startswith("%d." % round_)])


for round_ in range(3):
    if R == N - 1:  # the others mark before they call barrier(): this wait ends at once
        give_up = time.monotonic() + 60
        while marks_of(round_) < N - 1 and time.monotonic() < give_up:
            time.sleep(0.01)
        check(marks_of(round_) == N - 1, "barrier %d: the other ranks marked before it" % round_)
    open(os.path.join(marks, "%d.%d" % (round_, R)), "w").close()
    hvd.barrier()
    seen = marks_of(round_)
    check(seen == N, "barrier %d: every rank's mark is there once it returns (%d of %d)"
          % (round_, seen, N))
hvd.barrier()
if R == 0:
    import shutil  # noqa: E402
    shutil.rmtree(marks)

# ---- join: rank 0 runs out of data first; the others keep reducing
if R == 0:
    last = hvd.join()
else:
    got = hvd.allreduce(data(R, (4,), torch.float32), op=hvd.Sum, name="after.join")
    want = torch.stack([data(r, (4,), torch.float32).double() for r in range(1, N)]).sum(0)
    check(close(got, want, torch.float32), "allreduce Sum while rank 0 has joined: zeros from it")
    got = hvd.allreduce(data(R, (4,), torch.float64), op=hvd.Average, name="after.join.avg")
    check(close(got, want / N, torch.float64),
          "allreduce Average while rank 0 has joined divides by the full size")
    outs = hvd.grouped_allreduce([data(R, (3,), torch.float32), data(R, (5,), torch.float32),
                                  data(R, (2,), torch.int32)], op=hvd.Sum, name="after.join.grp")
    check(all(close(o, torch.stack([data(r, s, d).double() for r in range(1, N)]).sum(0), d)
              for o, (s, d) in zip(outs, [((3,), torch.float32), ((5,), torch.float32),
                                          ((2,), torch.int32)])),
          "fused grouped allreduce while rank 0 has joined")
    # As Horovod: only allreduce proceeds past joined ranks; an allgather raises on the others.
    check.raises_(hvd.HorovodInternalError,
                  lambda: hvd.allgather(data(R, (R, 2), torch.float32), name="after.join.gather"),
                  "allgather while rank 0 has joined")
    # Min, Max and Product: the joined rank contributes the op's identity, not zeros
    others = list(range(1, N))
    for dtype in (torch.float32, torch.int32, torch.bfloat16):
        for op, opname in OPS[2:]:
            got = hvd.allreduce(data(R, (5,), dtype), op=op, name="after.join.%s.%s" % (opname, dtype))
            check(close(got, expected_allreduce((5,), dtype, op, ranks=others), dtype),
                  "allreduce %s %s while rank 0 has joined: the other ranks' result" % (opname, dtype))
    outs = hvd.grouped_allreduce([data(R, (3,), torch.float32), data(R, (4,), torch.int32)],
                                 op=hvd.Max, prescale_factor=-2.0, name="after.join.grp.max")
    check(all(close(o, expected_allreduce(s, d, hvd.Max, pre=-2.0, ranks=others), d)
              for o, (s, d) in zip(outs, [((3,), torch.float32), ((4,), torch.int32)])),
          "fused Max with a negative prescale while rank 0 has joined (identity after scaling)")
    outs = hvd.grouped_allreduce([data(R, (3,), torch.float64), data(R, (6,), torch.float64)],
                                 op=hvd.Min, prescale_factor=-1.5, name="after.join.grp.min")
    check(all(close(o, expected_allreduce(s, torch.float64, hvd.Min, pre=-1.5, ranks=others),
                    torch.float64) for o, s in zip(outs, [(3,), (6,)])),
          "fused Min of one dtype with a negative prescale while rank 0 has joined")
    if R == N - 1:
        got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="last.one")
        check(torch.equal(got, torch.ones(2)), "allreduce of the last rank alone (others joined)")
    last = hvd.join()
check(last == N - 1, "join returns the last rank to join on every rank (%d)" % last)
got = hvd.allreduce(torch.ones(2), op=hvd.Sum)
check(torch.equal(got, torch.full((2,), float(N))), "allreduce after join as usual")

# ---- shutdown and init again (the launcher's communicator is kept)
hvd.shutdown()
check(not hvd.is_initialized(), "shutdown")
check(check.raises_(ValueError, lambda: hvd.rank(), "rank() after shutdown") is not None,
      "rank() after shutdown raises ValueError")
hvd.init()
check(torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N))),
      "init() after shutdown() works")
hvd.shutdown()
sys.exit(check.finish())
