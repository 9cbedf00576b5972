"""hora.torch.SyncBatchNorm over ranks holding different local batch sizes must match
torch.nn.BatchNorm*d run in one process on the concatenated global batch: forward outputs,
input, weight and bias gradients, running statistics, and eval-mode outputs.

Run from the repository root: /usr/bin/python3 tests/python/test_sync_batch_norm.py (with
HORA_RUN, PYTHONPATH, HORA_LIBRARY set). Without HORA_RANK in the environment it launches its
ranks with $HORA_RUN (2 and 3 ranks); each rank runs every case and exits non-zero on a failure.
"""
import os
import subprocess
import sys

try:
    import torch
except ImportError as e:  # pragma: no cover
    print("SKIP: torch cannot be imported (%s)" % e)
    sys.exit(77)


def rank_env(**extra):
    """The ranks' environment: python/ of this tree first on PYTHONPATH, one OpenMP thread,
    and without HORA_RUN (the launcher's setting, which the library would warn about)."""
    env = dict(os.environ)
    py = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                       "python"))
    env["PYTHONPATH"] = py + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("HORA_RUN", None)
    env.update(extra)
    return env


def launch(counts=(2, 3), timeout=50):
    runner = os.environ.get("HORA_RUN")
    if not runner:
        print("FAIL: HORA_RUN (the path of hora-run) is not set")
        return 1
    for n in counts:
        print("launching %d ranks" % n, flush=True)
        rc = subprocess.call([runner, "-n", str(n), "--timeout", str(timeout), sys.executable,
                              os.path.abspath(sys.argv[0])], env=rank_env())
        if rc != 0:
            print("FAIL: %d ranks exited with status %d" % (n, rc))
            return 1
    print("PASS")
    return 0


def check(cond, what):
    if not cond:
        raise AssertionError(what)


ATOL32 = [1e-5]   # absolute tolerance of float32 comparisons (per case)


def close(a, b, dtype):
    tol = dict(rtol=1e-4, atol=ATOL32[0]) if dtype == torch.float32 else dict(rtol=1e-9,
                                                                             atol=1e-11)
    return torch.allclose(a.double(), b.double(), **tol)


def maxerr(a, b):
    return (a - b).abs().max().item() if a.numel() else 0.0


def run_case(hvd, what, batches, shape, dtype, reference_cls, steps=3, momentum=0.1,
             affine=True, offset=2.0, scale=3.0, exact_reference=False):
    """exact_reference: the reference runs in float64 (on the same rounded inputs), for inputs
    where float32 batch norm itself is inexact: the float32 rounding of x - mean is up to half
    an ulp of x (3e-5 at 1000), which the absolute tolerance then allows."""
    ATOL32[0] = 1e-4 if exact_reference else 1e-5
    """batches[r]: rank r's local batch size; shape: the per-sample shape (C, ...)."""
    rank, size = hvd.rank(), hvd.size()
    batches = batches[:size]
    start = sum(batches[:rank])
    mine = slice(start, start + batches[rank])
    c = shape[0]

    bn = hvd.SyncBatchNorm(c, momentum=momentum, affine=affine).to(dtype)
    ref_dtype = torch.float64 if exact_reference else dtype
    ref = reference_cls(c, momentum=momentum, affine=affine).to(ref_dtype)
    g = torch.Generator().manual_seed(7)
    if affine:
        with torch.no_grad():
            w = torch.rand(c, generator=g, dtype=torch.float64) + 0.5
            b = torch.randn(c, generator=g, dtype=torch.float64)
            bn.weight.copy_(w)
            bn.bias.copy_(b)
            ref.weight.copy_(w)
            ref.bias.copy_(b)

    for step in range(steps):
        # The same global batch on every rank; offsets and scales that differ per channel.
        n = sum(batches)
        x = (torch.randn((n,) + tuple(shape), generator=g, dtype=torch.float64) * scale + offset)
        gy = torch.randn((n,) + tuple(shape), generator=g, dtype=torch.float64)
        x, gy = x.to(dtype), gy.to(dtype)

        xl = x[mine].clone().requires_grad_(True)
        y = bn(xl)
        (y * gy[mine]).sum().backward()

        xr = x.to(ref_dtype).requires_grad_(True)
        yr = ref(xr)
        (yr * gy.to(ref_dtype)).sum().backward()

        check(close(y.detach(), yr.detach()[mine], dtype),
              "%s step %d: forward differs by %g" % (what, step, maxerr(y, yr[mine])))
        check(close(xl.grad, xr.grad[mine], dtype),
              "%s step %d: input gradient differs by %g"
              % (what, step, maxerr(xl.grad, xr.grad[mine])))
        if affine:
            # Each rank holds the gradient of its own share of the loss; the sum over ranks is
            # the global batch's gradient.
            gw = hvd.allreduce(bn.weight.grad, op=hvd.Sum, name="%s.gw.%d" % (what, step))
            gb = hvd.allreduce(bn.bias.grad, op=hvd.Sum, name="%s.gb.%d" % (what, step))
            check(close(gw, ref.weight.grad, dtype), "%s step %d: weight gradient differs by %g"
                  % (what, step, maxerr(gw, ref.weight.grad)))
            check(close(gb, ref.bias.grad, dtype), "%s step %d: bias gradient differs by %g"
                  % (what, step, maxerr(gb, ref.bias.grad)))
            bn.weight.grad = bn.bias.grad = None
            ref.weight.grad = ref.bias.grad = None
        check(close(bn.running_mean, ref.running_mean, dtype),
              "%s step %d: running_mean differs by %g"
              % (what, step, maxerr(bn.running_mean, ref.running_mean)))
        check(close(bn.running_var, ref.running_var, dtype),
              "%s step %d: running_var differs by %g"
              % (what, step, maxerr(bn.running_var, ref.running_var)))
        check(int(bn.num_batches_tracked) == int(ref.num_batches_tracked),
              "%s: num_batches_tracked %d, expected %d"
              % (what, int(bn.num_batches_tracked), int(ref.num_batches_tracked)))

    # Running statistics are bitwise identical on every rank.
    stats = torch.cat([bn.running_mean, bn.running_var]).view(torch.uint8).view(1, -1)
    every = hvd.allgather(stats, name=what + ".stats")
    check(all(torch.equal(every[r], every[0]) for r in range(size)),
          "%s: running statistics differ between ranks" % what)

    # Eval mode: the running statistics, no communication (a rank-local call).
    bn.eval()
    ref.eval()
    x = torch.randn((3,) + tuple(shape), generator=torch.Generator().manual_seed(rank),
                    dtype=torch.float64).to(dtype)
    with torch.no_grad():
        check(close(bn(x), ref(x.to(ref_dtype)), dtype), "%s: eval output differs" % what)
    if rank == 0:
        print("ok: %s, local batches %s (%d ranks)" % (what, batches, size), flush=True)


def check_process_set(hvd):
    """Ranks 0 and 2 of three normalize over their union only."""
    rank = hvd.rank()
    ps = hvd.add_process_set([0, 2])
    if rank in (0, 2):
        g = torch.Generator().manual_seed(8)
        x = torch.randn(7, 3, 2, 2, generator=g, dtype=torch.float64) + 1
        gy = torch.randn(7, 3, 2, 2, generator=g, dtype=torch.float64)
        mine = slice(0, 3) if rank == 0 else slice(3, 7)
        bn = hvd.SyncBatchNorm(3, process_set=ps).double()
        ref = torch.nn.BatchNorm2d(3).double()
        xl = x[mine].clone().requires_grad_(True)
        y = bn(xl)
        (y * gy[mine]).sum().backward()
        xr = x.clone().requires_grad_(True)
        yr = ref(xr)
        (yr * gy).sum().backward()
        check(close(y.detach(), yr.detach()[mine], torch.float64), "process set: forward")
        check(close(xl.grad, xr.grad[mine], torch.float64), "process set: input gradient")
        check(close(bn.running_var, ref.running_var, torch.float64), "process set: running_var")
    hvd.allreduce(torch.zeros(1), name="ps.done")   # every rank is done with the set
    if rank == 0:
        print("ok: SyncBatchNorm over a process set of ranks [0, 2] (3 ranks)", flush=True)


def check_join(hvd):
    """Ranks that have joined (hvd.join(): out of data) contribute zeros, count included, so
    rank 0 alone normalizes over its own batch."""
    rank = hvd.rank()
    bn = hvd.SyncBatchNorm(3).double()
    ref = torch.nn.BatchNorm2d(3).double()
    g = torch.Generator().manual_seed(21)
    if rank == 0:
        for step in range(2):
            x = torch.randn(5, 3, 2, 2, generator=g, dtype=torch.float64)
            xl = x.clone().requires_grad_(True)
            xr = x.clone().requires_grad_(True)
            y, yr = bn(xl), ref(xr)
            y.pow(2).sum().backward()
            yr.pow(2).sum().backward()
            check(close(y.detach(), yr.detach(), torch.float64)
                  and close(xl.grad, xr.grad, torch.float64)
                  and close(bn.running_var, ref.running_var, torch.float64),
                  "join: step %d differs from BatchNorm2d on rank 0's batch" % step)
    last = hvd.join()
    check(last == 0, "join: the last rank to join was %d, not 0" % last)
    if rank == 0:
        print("ok: joined ranks contribute nothing to the statistics (%d ranks)" % hvd.size(),
              flush=True)


def rank_main():
    torch.set_num_threads(1)
    import hora.torch as hvd
    hvd.init()
    nn = torch.nn
    run_case(hvd, "2d float64", [3, 5, 2], (4, 3, 3), torch.float64, nn.BatchNorm2d)
    run_case(hvd, "2d float32", [6, 2, 4], (3, 5, 4), torch.float32, nn.BatchNorm2d)
    run_case(hvd, "1d (N, C)", [4, 7, 1], (5,), torch.float64, nn.BatchNorm1d)
    run_case(hvd, "1d (N, C, L)", [2, 3, 5], (3, 6), torch.float64, nn.BatchNorm1d)
    run_case(hvd, "2d float32, mean 1000 x the deviation", [5, 3, 6], (3, 4, 4), torch.float32,
             nn.BatchNorm2d, offset=1000.0, scale=1.0, exact_reference=True)
    run_case(hvd, "3d", [2, 1, 3], (2, 2, 3, 2), torch.float64, nn.BatchNorm3d)
    run_case(hvd, "momentum=None", [3, 2, 4], (4, 2, 2), torch.float64, nn.BatchNorm2d,
             momentum=None)
    run_case(hvd, "affine=False", [3, 2, 4], (4, 2, 2), torch.float64, nn.BatchNorm2d,
             affine=False)
    run_case(hvd, "an empty local batch", [4, 0, 3], (3, 2, 2), torch.float64, nn.BatchNorm2d)

    # Misuse raises before any communication.
    bn = hvd.SyncBatchNorm(3)
    for bad in (torch.zeros(4), torch.zeros(2, 5, 2)):
        try:
            bn(bad)
            raise AssertionError("input of shape %s accepted" % (tuple(bad.shape),))
        except ValueError:
            pass
    # convert_sync_batchnorm keeps parameters and running statistics.
    model = nn.Sequential(nn.Conv2d(2, 3, 1), nn.BatchNorm2d(3))
    model[1].running_mean.fill_(0.25)
    converted = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    check(isinstance(converted[1], hvd.SyncBatchNorm)
          and converted[1].running_mean.eq(0.25).all()
          and converted[1].weight is model[1].weight, "convert_sync_batchnorm")
    if hvd.rank() == 0:
        print("ok: misuse raises ValueError; convert_sync_batchnorm", flush=True)
    if hvd.size() == 3:
        check_process_set(hvd)
    check_join(hvd)
    hvd.shutdown()


if __name__ == "__main__":
    if os.environ.get("HORA_RANK") is None:
        sys.exit(launch())
    rank_main()
