"""Where hora.torch follows Horovod's behaviour because Horovod's users' code expects it, at 2 and
3 ranks under hora-run, each against values computed here:
1. gradients: allgather's and broadcast's backward average the gradient over the ranks (the
   root keeps it, the others get zeros, for broadcast); reducescatter's is the allgather of the
   output's gradient, times the set's size for Sum and 1 for Average, times the scale factors;
   the grouped forms alike;
2. float16 and bfloat16 prescale and postscale factors multiply in float32 and round once (a
   half tensor times a Python float in torch rounds the factor to half first: 1 to 2 units in
   the last place apart), for allreduce and reducescatter; Average divides by the size;
3. exception classes: ranks that disagree (shapes, dtypes, roots) raise HorovodInternalError, a
   RuntimeError, on every rank; float alltoall splits raise ValueError;
4. after a rank has joined, only allreduce proceeds: an allgather raises HorovodInternalError at
   once, whatever the other ranks call;
   allgather_object meets its peers although that allgather shifted this rank's count of
   unnamed operations;
5. sparse_allreduce_async (an allgather of indices and values) equals the dense allreduce;
   DistributedOptimizer(sparse_as_dense=True) hands a sparse gradient back (SparseAdam steps);
   broadcast_optimizer_state on a fresh optimizer leaves zero gradients where none were;
7. Adasum (op=hvd.Adasum) on float64, float32 and float16 tensors equals Horovod's reference
   tree computed here, with scale factors too; orthogonal tensors add, identical ones stay;
   DistributedOptimizer(op=Adasum) combines the ranks' local updates (not their gradients) by
   Adasum, as Horovod's Adasum optimizer does;
6. one rank's shutdown() stops every rank's engine (their operations raise
   HorovodInternalError); init() then starts afresh on every rank, those whose engine a peer
   stopped included (as Horovod's tests do between test cases).
Run from the repository root: /usr/bin/python3 tests/python/test_horovod_parity.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

torch = harness.require_torch()
if not harness.in_rank():
    sys.exit(harness.launch_self(__file__, [2, 3], timeout=120))

torch.set_num_threads(1)
import hora.torch as hvd  # noqa: E402

check = harness.Checker()
hvd.init()
R, N = hvd.rank(), hvd.size()


def data(rank, shape, dtype=torch.float32):
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n) * 3 + rank * 7) % 11 - 5).reshape(shape).to(dtype)


# ---- 1. gradients
x = data(R, (R + 1, 3), torch.float64).requires_grad_()
y = hvd.allgather(x, name="grad.allgather")
w = data(R + 5, tuple(y.shape), torch.float64)  # each rank weights the gathered rows its own way
(y * w).sum().backward()
rows = sum(r + 1 for r in range(R))
want = torch.stack([data(r + 5, tuple(y.shape), torch.float64) for r in range(N)]).mean(0)
check(torch.allclose(x.grad, want[rows:rows + R + 1]),
      "allgather's gradient: the ranks' gradients of the gathered tensor averaged, this rank's rows")

xs = [data(R, (2, 2), torch.float64).requires_grad_() for _ in range(2)]
ys = hvd.grouped_allgather(xs, name="grad.grouped_allgather")
sum((yy * (k + 1) * (R + 1)).sum() for k, yy in enumerate(ys)).backward()
mean_r = sum(r + 1 for r in range(N)) / N
check(all(torch.allclose(t.grad, torch.full((2, 2), (k + 1) * mean_r, dtype=torch.float64))
          for k, t in enumerate(xs)), "grouped_allgather's gradients: averaged too")

for root in range(N):
    x = data(R, (4,), torch.float64).requires_grad_()
    y = hvd.broadcast(x, root, name="grad.broadcast.%d" % root)
    (y * (R + 1)).sum().backward()
    want = torch.full((4,), mean_r if R == root else 0.0, dtype=torch.float64)
    check(torch.allclose(x.grad, want),
          "broadcast's gradient from root %d: the average on the root, zeros elsewhere" % root)

for op, name, factor in ((hvd.Sum, "Sum", N), (hvd.Average, "Average", 1)):
    for pre, post in ((1.0, 1.0), (0.5, 3.0)):
        x = data(R, (N * 2, 3), torch.float64).requires_grad_()
        y = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post,
                              name="grad.rs.%s.%g" % (name, pre))
        (y * (R + 1)).sum().backward()
        want = torch.cat([torch.full((2, 3), float(r + 1), dtype=torch.float64) for r in range(N)])
        want = want * factor * pre * post
        check(torch.allclose(x.grad, want),
              "reducescatter %s (scaled %g, %g): its gradient is the allgather times %d" %
              (name, pre, post, factor))
    xs = [data(R, (N, 2), torch.float64).requires_grad_() for _ in range(2)]
    ys = hvd.grouped_reducescatter(xs, op=op, name="grad.grs.%s" % name)
    sum(yy.sum() for yy in ys).backward()
    check(all(torch.allclose(t.grad, torch.full((N, 2), float(factor), dtype=torch.float64)) for t in xs),
          "grouped_reducescatter %s: times %d too" % (name, factor))

# ---- 2. float16 and bfloat16 scale factors: float32 arithmetic, one rounding
factor = 0.1915194503788923  # not a half: rounding it to half first changes results
for dtype in (torch.float16, torch.bfloat16):
    base = torch.arange(-40, 40, dtype=torch.float32).to(dtype)  # integers: exact in both
    # Prescale: only rank 0's input is not zero, so the sum is its scaled input exactly.
    t = base if R == 0 else torch.zeros_like(base)
    got = hvd.allreduce(t, op=hvd.Sum, prescale_factor=factor, name="pre.%s" % dtype)
    check(torch.equal(got, (base.float() * factor).to(dtype)),
          "allreduce %s prescale: the input times the factor in float32, rounded once" % dtype)
    # Postscale: the sum of small integers is exact, then scaled.
    t = base * (R + 1)
    got = hvd.allreduce(t, op=hvd.Sum, postscale_factor=factor, name="post.%s" % dtype)
    summed = sum(base.float() * (r + 1) for r in range(N)).to(dtype)
    check(torch.equal(got, (summed.float() * factor).to(dtype)),
          "allreduce %s postscale: the sum times the factor in float32, rounded once" % dtype)
    rs = hvd.reducescatter(torch.cat([t] * N), op=hvd.Sum, postscale_factor=factor,
                           name="rs.post.%s" % dtype)
    check(torch.equal(rs, (summed.float() * factor).to(dtype)),
          "reducescatter %s postscale: float32, rounded once" % dtype)

# An Average of floating values is the correctly rounded mean: a division by the size (not a
# multiplication by its rounded inverse, which is an ulp off for some values at 3 ranks). Every
# rank but the last contributes x, so the sum (N-1)x is exact and the mean is (N-1)x / N.
for dtype in (torch.float32, torch.float64, torch.float16):
    x = torch.arange(1, 301, dtype=torch.float32).to(dtype)
    mine = x if R < N - 1 else torch.zeros_like(x)
    want = ((x.float() * (N - 1)) / N).to(dtype) if dtype == torch.float16 else (x * (N - 1)) / N
    got = hvd.allreduce(mine, op=hvd.Average, name="avg.%s" % dtype)
    check(torch.equal(got, want), "allreduce Average %s: the correctly rounded mean" % dtype)
    rs = hvd.reducescatter(torch.cat([mine] * N), op=hvd.Average, name="rs.avg.%s" % dtype)
    check(torch.equal(rs, want), "reducescatter Average %s too" % dtype)

# ---- 3. exception classes
e = check.raises_(hvd.HorovodInternalError, lambda: hvd.allreduce(torch.ones(R + 1), name="cls.shape"),
                  "allreduce with a different shape on every rank")
check(isinstance(e, RuntimeError) and "mismatched shapes" in str(e),
      "a RuntimeError that names the mismatch")
check.raises_(hvd.HorovodInternalError,
              lambda: hvd.allgather(torch.ones(2, dtype=torch.float32 if R else torch.float64),
                                    name="cls.dtype"), "allgather with different dtypes")
check.raises_(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(3), R, name="cls.root"),
              "broadcast with a different root on every rank")
check.raises_(ValueError, lambda: hvd.alltoall(torch.ones(N), splits=torch.ones(N)),
              "alltoall with float splits")
check(torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N))),
      "the engine works after each")

# ---- 4. join, then an allgather
if R == 0:
    last = hvd.join()
else:
    # Each rank under a name of its own: it fails at once, as Horovod answers it, not once
    # the other ranks that have not joined submit the same name (they may never).
    check.raises_(hvd.HorovodInternalError,
                  lambda: hvd.allgather(torch.ones(1, 2), name="join.gather.%d" % R),
                  "an allgather while rank 0 has joined")
    last = hvd.join()
check(0 <= last < N, "join returns the rank that joined last (%d)" % last)
check(hvd.allgather_object(R) == list(range(N)),
      "allgather_object after one rank's extra (failed) unnamed allgather")
check(torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.join"), torch.full((2,), float(N))),
      "allreduce after join as usual")

# ---- 5. sparse gradients and fresh optimizers
g = torch.Generator().manual_seed(7 + R)
dense = torch.rand(9, 4, generator=g)
dense[dense < 0.7] = 0
for op, name in ((hvd.Sum, "Sum"), (hvd.Average, "Average")):
    got = hvd.sparse_allreduce_async(dense.to_sparse(), name="sparse.%s" % name, op=op)()
    want = hvd.allreduce(dense, op=op, name="dense.%s" % name)
    check(got.is_sparse and torch.allclose(got.to_dense(), want),
          "sparse_allreduce_async %s equals the dense allreduce" % name)
emb = torch.nn.Embedding(10, 3, sparse=True)
hvd.broadcast_parameters(emb.state_dict(), root_rank=0)
opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                               named_parameters=emb.named_parameters(), sparse_as_dense=True)
emb(torch.tensor([[1, 2, 4], [4, 3, 9]]) if R == 0 else torch.tensor([[1, 7]])).sum().backward()
opt.step()  # SparseAdam refuses a dense gradient
check(emb.weight.grad.is_sparse, "sparse_as_dense=True: the optimizer gets a sparse gradient back")

model = torch.nn.Linear(3, 2)
frozen = torch.nn.Parameter(torch.ones(2), requires_grad=False)
sgd = hvd.DistributedOptimizer(torch.optim.SGD(list(model.parameters()) + [frozen], lr=0.1, momentum=0.9),
                               named_parameters=list(model.named_parameters()) + [("frozen", frozen)])
hvd.broadcast_optimizer_state(sgd, root_rank=0)
check(all(p.grad is not None and not p.grad.any() for p in model.parameters()) and frozen.grad is None,
      "broadcast_optimizer_state on a fresh optimizer: zero gradients where one is wanted")

# ---- 7. Adasum against a reference computed here (Horovod's formula and tree)
def adasum_reference(vectors):
    """Horovod's test reference, in float64: pairs (0,1), (2,3), ..., then pairs of those, each
    pair a + b scaled by 1 - a.b / (2 |a|^2) and 1 - a.b / (2 |b|^2); an odd one out goes up a
    level unchanged."""
    level = [v.double().reshape(-1) for v in vectors]
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            a, b = level[i], level[i + 1]
            dot, na, nb = float((a * b).sum()), float((a * a).sum()), float((b * b).sum())
            nxt.append((1.0 - dot / na / 2 if na else 1.0) * a + (1.0 - dot / nb / 2 if nb else 1.0) * b)
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


gen = torch.Generator().manual_seed(1234)
every = [torch.randn(5, 7, generator=gen, dtype=torch.float64) for _ in range(N)]
for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 1e-5), (torch.float16, 2e-3)):
    mine = every[R].to(dtype)
    got = hvd.allreduce(mine, op=hvd.Adasum, name="adasum.%s" % dtype)
    want = adasum_reference([v.to(dtype) for v in every]).reshape(5, 7)
    check(got.dtype == dtype and torch.allclose(got.double(), want, rtol=tol, atol=tol),
          "Adasum of %s random tensors equals the reference (largest difference %.2g)"
          % (dtype, float((got.double() - want).abs().max())))
got = hvd.allreduce(every[R].float(), op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.5,
                    name="adasum.scaled")
want = adasum_reference([v.float() * 2.0 for v in every]).reshape(5, 7) * 0.5
check(torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5), "Adasum with scale factors")
basis = torch.zeros(N, N)
basis[R, R] = R + 1.0
check(torch.equal(hvd.allreduce(basis, op=hvd.Adasum, name="adasum.orthogonal"),
                  torch.diag(torch.arange(1.0, N + 1))),
      "Adasum of orthogonal tensors is their sum")
check(torch.allclose(hvd.allreduce(torch.full((4,), 3.0), op=hvd.Adasum, name="adasum.same"),
                     torch.full((4,), 3.0)), "Adasum of one tensor on every rank is that tensor")
opt_model = torch.nn.Linear(3, 2)
with torch.no_grad():
    opt_model.weight.fill_(1.0)
    opt_model.bias.fill_(0.0)
start = {k: v.clone() for k, v in opt_model.state_dict().items()}
opt = hvd.DistributedOptimizer(torch.optim.SGD(opt_model.parameters(), lr=0.1),
                               named_parameters=opt_model.named_parameters(), op=hvd.Adasum)
xin = torch.full((4, 3), float(R + 1))
opt_model(xin).sum().backward()
opt.step()
grads = [torch.full((4, 3), float(r + 1)).sum(0).repeat(2, 1) for r in range(N)]  # d(sum)/dW
want_w = start["weight"] + adasum_reference([-0.1 * g for g in grads]).reshape(2, 3)
want_b = start["bias"] + adasum_reference([torch.full((2,), -0.1 * 4)] * N)
check(torch.allclose(opt_model.weight.detach().double(), want_w, atol=1e-6)
      and torch.allclose(opt_model.bias.detach().double(), want_b, atol=1e-6),
      "DistributedOptimizer(op=Adasum): each rank's local SGD update, combined by Adasum")
# A parameter without a gradient on rank 0 (unused there): its update there is zero, and every
# rank still makes the same reductions.
pa, pb = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
opt = hvd.DistributedOptimizer(torch.optim.SGD([pa, pb], lr=0.1),
                               named_parameters=[("pa", pa), ("pb", pb)], op=hvd.Adasum)
loss = pa.sum() * (R + 1) + (pb.sum() * (R + 1) if R != 0 else 0)
loss.backward()
opt.step()
want_a = 1.0 + adasum_reference([torch.full((3,), -0.1 * (r + 1)) for r in range(N)])
want_b = 1.0 + adasum_reference([torch.zeros(3)] + [torch.full((3,), -0.1 * (r + 1)) for r in range(1, N)])
check(torch.allclose(pa.detach().double(), want_a, atol=1e-6)
      and torch.allclose(pb.detach().double(), want_b, atol=1e-6),
      "DistributedOptimizer(op=Adasum) with a parameter that has no gradient on rank 0")

# ---- 6. a peer's shutdown, then init() everywhere
if R == N - 1:
    hvd.shutdown()
else:
    check.raises_(hvd.HorovodInternalError, lambda: hvd.allreduce(torch.ones(2), name="after.peer.shutdown"),
                  "an allreduce once rank %d has shut down" % (N - 1))
hvd.init()
check(torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.reinit"), torch.full((2,), float(N))),
      "init() after a peer's shutdown starts afresh on every rank")

hvd.shutdown()
sys.exit(check.finish())
