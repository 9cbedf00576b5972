"""hora.torch.DistributedOptimizer: data-parallel training over several ranks must keep the
parameters bit-identical on every rank and match single-process training on the union of the
ranks' batches.

Run from the repository root: /usr/bin/python3 tests/python/test_optimizer.py (with HORA_RUN,
PYTHONPATH, HORA_LIBRARY set). Without HORA_RANK in the environment it launches its ranks with
$HORA_RUN (2 and 3 ranks); each rank runs every case and exits non-zero on a failure.
"""
import gc
import os
import subprocess
import sys
import warnings
import weakref

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
        cmd = [runner, "-n", str(n), "--timeout", str(timeout), sys.executable,
               os.path.abspath(sys.argv[0])]
        rc = subprocess.call(cmd, env=rank_env())
        if rc != 0:
            print("FAIL: %d ranks exited with status %d" % (n, rc))
            return 1
    # A rank that dies in the middle of training: the survivors' step() raises.
    print("launching 3 ranks, rank 1 dies after two steps", flush=True)
    # A dead process is noticed at once; the timeout only bounds the wait (and must leave
    # room for three ranks importing torch on a small machine before the rendezvous).
    env = rank_env(TEST_OPTIMIZER_MODE="peer_death", HORA_TIMEOUT_MS="20000")
    rc = subprocess.call([runner, "-n", "3", "--timeout", str(timeout), sys.executable,
                          os.path.abspath(sys.argv[0])], env=env)
    if rc != 0:
        print("FAIL: the survivors of a dead rank exited with status %d" % rc)
        return 1
    print("PASS")
    return 0


# --- rank side --------------------------------------------------------------------------

def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Net(torch.nn.Module):
    def __init__(self, dtype, unused=False):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8).to(dtype)
        self.fc2 = torch.nn.Linear(8, 3).to(dtype)
        if unused:
            self.extra = torch.nn.Linear(4, 4).to(dtype)   # never used in forward

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def make_model(dtype, unused=False):
    torch.manual_seed(1234)   # the same initial parameters on every rank
    return Net(dtype, unused)


def make_data(hvd, steps, passes, per_rank, dtype):
    """x[step][pass] and y[...] of the global batch (size * per_rank rows); every rank builds
    the same global data and trains on its own rows."""
    g = torch.Generator().manual_seed(99)
    n = hvd.size() * per_rank
    xs = [[torch.randn(n, 6, generator=g, dtype=torch.float64).to(dtype) for _ in range(passes)]
          for _ in range(steps)]
    ys = [[torch.randn(n, 3, generator=g, dtype=torch.float64).to(dtype) for _ in range(passes)]
          for _ in range(steps)]
    return xs, ys


def params_bytes(model):
    return torch.cat([p.detach().contiguous().view(-1).view(torch.uint8)
                      for p in model.parameters()])


def check_identical(hvd, model, what):
    mine = params_bytes(model)
    every = hvd.allgather(mine.view(1, -1), name="identical." + what)
    for r in range(hvd.size()):
        check(torch.equal(every[r], every[0]),
              "%s: parameters of rank %d differ bitwise from rank 0's" % (what, r))


def run_case(hvd, what, opt_factory, dtype, steps=4, passes=1, op=None, unused=False,
             compression=None, rtol=None, atol=None, freeze=False, **kwargs):
    per_rank = 5
    rank, size = hvd.rank(), hvd.size()
    model = make_model(dtype, unused)
    ref = make_model(dtype, unused)
    if freeze:   # fc1's weight is frozen (requires_grad False)
        model.fc1.weight.requires_grad_(False)
        ref.fc1.weight.requires_grad_(False)
    if kwargs.get("groups") == "all in one":
        kwargs["groups"] = [list(model.parameters())]
    opt = opt_factory(model.parameters())
    ref_opt = opt_factory(ref.parameters())
    extra = {}
    if op is not None:
        extra["op"] = op
    if compression is not None:
        extra["compression"] = compression
    dopt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                    backward_passes_per_step=passes, **extra, **kwargs)
    check(isinstance(dopt, type(opt)), "%s: not an instance of %s" % (what, type(opt).__name__))
    xs, ys = make_data(hvd, steps, passes, per_rank, dtype)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    mse = torch.nn.functional.mse_loss
    for s in range(steps):
        dopt.zero_grad()
        for k in range(passes):
            loss = mse(model(xs[s][k][mine]), ys[s][k][mine])
            loss.backward()
        dopt.step()

        # The same update in one process: the loss of the global batch as the distributed run
        # sees it (Average: the mean over ranks of the local means; Sum: their sum).
        ref_opt.zero_grad()
        for k in range(passes):
            local_means = [mse(ref(xs[s][k][r * per_rank:(r + 1) * per_rank]),
                               ys[s][k][r * per_rank:(r + 1) * per_rank]) for r in range(size)]
            total = torch.stack(local_means).sum()
            if op is None or op == hvd.Average:
                total = total / size
            total.backward()
        ref_opt.step()

    check_identical(hvd, model, what)
    if rtol is None:
        rtol, atol = (1e-5, 1e-6) if dtype == torch.float32 else (1e-10, 1e-12)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        err = (p.detach() - q.detach()).abs().max().item()
        check(torch.allclose(p.detach(), q.detach(), rtol=rtol, atol=atol),
              "%s: %s differs from single-process training by %g" % (what, name, err))
        if unused and name.startswith("extra"):
            check(torch.equal(p.detach(), make_model(dtype, True).extra.weight.detach()
                              if name.endswith("weight") else
                              make_model(dtype, True).extra.bias.detach()),
                  "%s: the unused parameter %s moved" % (what, name))
    if rank == 0:
        print("ok: %s (%d ranks)" % (what, size), flush=True)
    return dopt, model


class EmbeddingNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(20, 4, sparse=True).double()
        self.fc = torch.nn.Linear(4, 1).double()

    def forward(self, idx):
        return self.fc(self.emb(idx).sum(1))


def check_sparse(hvd, sparse_as_dense):
    """An embedding with sparse gradients: allgathered (or densified) and averaged."""
    what = "sparse gradients%s" % (", sparse_as_dense" if sparse_as_dense else "")
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(4321)
    model = EmbeddingNet()
    torch.manual_seed(4321)
    ref = EmbeddingNet()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   sparse_as_dense=sparse_as_dense)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(5)
    per_rank = 3
    for _ in range(3):
        idx = torch.randint(0, 20, (size * per_rank, 5), generator=g)
        y = torch.randn(size * per_rank, 1, generator=g, dtype=torch.float64)
        mine = slice(rank * per_rank, (rank + 1) * per_rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(idx[mine]), y[mine]).backward()
        opt.step()
        ref_opt.zero_grad()
        torch.stack([torch.nn.functional.mse_loss(ref(idx[r * per_rank:(r + 1) * per_rank]),
                                                  y[r * per_rank:(r + 1) * per_rank])
                     for r in range(size)]).mean().backward()
        ref_opt.step()
    check_identical(hvd, model, what)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        check(torch.allclose(p.detach(), q.detach(), rtol=1e-10, atol=1e-12),
              "%s: %s differs from single-process training by %g"
              % (what, name, (p.detach() - q.detach()).abs().max().item()))
    if rank == 0:
        print("ok: %s (%d ranks)" % (what, size), flush=True)


class BranchNet(torch.nn.Module):
    """A branch that only some ranks take (a dynamic graph)."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 3).double()
        self.branch = torch.nn.Linear(6, 3).double()

    def forward(self, x, take_branch):
        y = self.fc(x)
        return y + self.branch(x) if take_branch else y


def check_dynamic(hvd, opt_name, factory):
    """Rank 0 alone takes the branch: its gradient starts reducing from rank 0's backward pass
    and from the other ranks' step(), matched by name."""
    rank, size = hvd.rank(), hvd.size()
    what = "a branch taken by rank 0 only (%s)" % opt_name
    torch.manual_seed(11)
    model = BranchNet()
    torch.manual_seed(11)
    ref = BranchNet()
    opt = hvd.DistributedOptimizer(factory(model.parameters()),
                                   named_parameters=model.named_parameters())
    ref_opt = factory(ref.parameters())
    g = torch.Generator().manual_seed(3)
    per_rank = 4
    mse = torch.nn.functional.mse_loss
    for _ in range(3):
        x = torch.randn(size * per_rank, 6, generator=g, dtype=torch.float64)
        y = torch.randn(size * per_rank, 3, generator=g, dtype=torch.float64)
        rows = lambda r: slice(r * per_rank, (r + 1) * per_rank)
        opt.zero_grad()
        mse(model(x[rows(rank)], rank == 0), y[rows(rank)]).backward()
        opt.step()
        ref_opt.zero_grad()
        (torch.stack([mse(ref(x[rows(r)], r == 0), y[rows(r)]) for r in range(size)]).sum()
         / size).backward()
        ref_opt.step()
    check_identical(hvd, model, what)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        check(torch.allclose(p.detach(), q.detach(), rtol=1e-10, atol=1e-12),
              "%s: %s differs from single-process training by %g"
              % (what, name, (p.detach() - q.detach()).abs().max().item()))
    if rank == 0:
        print("ok: %s (%d ranks)" % (what, size), flush=True)


def check_overlap(hvd):
    """The allreduce of fc2's gradients is submitted while backward still has fc1 to do."""
    model = make_model(torch.float32)
    dopt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters())
    seen = {}

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.view_as(t)

        @staticmethod
        def backward(ctx, grad):
            seen["in flight"] = [p for p, (h, _) in dopt._handles.items() if h is not None]
            return grad

    x = torch.randn(4, 6)
    h = Probe.apply(model.fc1(x))
    model.fc2(torch.relu(h)).sum().backward()
    in_flight = seen["in flight"]
    check(any(p is model.fc2.weight for p in in_flight)
          and any(p is model.fc2.bias for p in in_flight),
          "fc2's allreduces had not started when backward reached fc1")
    check(not any(p is model.fc1.weight for p in in_flight),
          "fc1's gradient was reduced before it was computed")
    dopt.step()
    check_identical(hvd, model, "overlap")
    if hvd.rank() == 0:
        print("ok: gradients start reducing during backward", flush=True)


def check_process_set(hvd):
    """Ranks 0 and 2 of three train together over a process set; rank 1 is outside it and its
    DistributedOptimizer steps on its own gradients."""
    rank = hvd.rank()
    ps = hvd.add_process_set([0, 2])
    members = [0, 2]
    model = make_model(torch.float64)
    ref = make_model(torch.float64)
    sgd = lambda ps_: torch.optim.SGD(ps_, lr=0.05, momentum=0.9)
    dopt = hvd.DistributedOptimizer(sgd(model.parameters()),
                                    named_parameters=model.named_parameters(), process_set=ps)
    ref_opt = sgd(ref.parameters())
    per_rank = 4
    xs, ys = make_data(hvd, 3, 1, per_rank, torch.float64)
    rows = lambda r: slice(r * per_rank, (r + 1) * per_rank)
    mse = torch.nn.functional.mse_loss
    for s in range(3):
        dopt.zero_grad()
        mse(model(xs[s][0][rows(rank)]), ys[s][0][rows(rank)]).backward()
        dopt.step()
        ref_opt.zero_grad()
        group = members if rank in members else [rank]
        (torch.stack([mse(ref(xs[s][0][rows(r)]), ys[s][0][rows(r)]) for r in group]).sum()
         / len(group)).backward()
        ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        check(torch.allclose(p.detach(), q.detach(), rtol=1e-10, atol=1e-12),
              "process set: %s differs from single-process training by %g"
              % (name, (p.detach() - q.detach()).abs().max().item()))
    if rank in members:
        every = hvd.allgather(params_bytes(model).view(1, -1), name="ps.identical",
                              process_set=ps)
        check(torch.equal(every[0], every[1]), "process set: members' parameters differ")
    hvd.allreduce(torch.zeros(1), name="ps.done")   # every rank is done with the set
    if rank == 0:
        print("ok: a process set of ranks %s (3 ranks)" % members, flush=True)


def check_misuse(hvd):
    model = make_model(torch.float32)
    named = list(model.named_parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    dup = [("w", named[0][1]), ("w", named[1][1])] + named[2:]
    try:
        hvd.DistributedOptimizer(opt, named_parameters=dup)
        raise AssertionError("duplicate names were accepted")
    except ValueError as e:
        check("unique" in str(e), "unexpected message: %s" % e)
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=named[:2])
        raise AssertionError("parameters without names were accepted")
    except ValueError as e:
        check("not named" in str(e), "unexpected message: %s" % e)
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 named_parameters=[p for _, p in named])
        raise AssertionError("named_parameters without names was accepted")
    except ValueError:
        pass
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Sum,
                                 gradient_predivide_factor=2.0)
        raise AssertionError("gradient_predivide_factor with Sum was accepted")
    except ValueError:
        pass

    # zero_grad() between backward() and step() is refused; synchronize() then step() inside
    # skip_synchronize() is the supported way to touch the reduced gradients; step() after a
    # synchronize() without it warns.
    dopt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters())
    x = torch.ones(2, 6)
    model(x).sum().backward()
    try:
        dopt.zero_grad()
        raise AssertionError("zero_grad() with reductions in flight was accepted")
    except AssertionError as e:
        check("zero_grad" in str(e), "unexpected message: %s" % e)
    dopt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with dopt.skip_synchronize():
            dopt.step()
    check(not caught, "step() inside skip_synchronize() warned: %s" % [str(w.message) for w in caught])
    dopt.zero_grad()
    model(x).sum().backward()
    dopt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dopt.step()
    check(any("skip_synchronize" in str(w.message) for w in caught),
          "step() after synchronize() did not warn")
    # More backward passes than backward_passes_per_step before step() is an error.
    dopt.zero_grad()
    model(x).sum().backward()
    try:
        model(x).sum().backward()
        raise AssertionError("a second backward pass before step() was accepted")
    except (AssertionError, RuntimeError) as e:
        check("backward_passes_per_step" in str(e), "unexpected message: %s" % e)
    dopt.synchronize()   # completes the reduction of the first pass; the values are moot
    dopt.zero_grad()

    # A discarded DistributedOptimizer lets go of the model: its hooks neither reduce nor
    # count the backward passes of whatever trains the model next.
    gone = weakref.ref(dopt)
    del dopt
    gc.collect()
    check(gone() is None, "a discarded DistributedOptimizer is still alive")
    for _ in range(3):
        model(x).sum().backward()   # three passes, no step: fine for a plain optimizer
    if hvd.rank() == 0:
        print("ok: misuse is refused with Horovod's errors", flush=True)


def peer_death_main():
    torch.set_num_threads(1)
    import hora.torch as hvd
    hvd.init()
    model = make_model(torch.float32)
    dopt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                    named_parameters=model.named_parameters())
    x = torch.randn(4, 6)
    for step in range(4):
        if step == 2 and hvd.rank() == 1:
            os._exit(0)   # abruptly, without shutdown()
        try:
            dopt.zero_grad()
            # The failure may surface from a gradient hook (a submission to a stopped engine)
            # or from step().
            model(x).sum().backward()
            dopt.step()
        except hvd.HorovodInternalError as e:
            check(step >= 1, "step %d failed: %s" % (step, e))
            print("ok: HorovodInternalError at step %d after a peer died: %s" % (step, e), flush=True)
            os._exit(0)
    raise AssertionError("training went on after a peer died")


def rank_main():
    torch.set_num_threads(1)
    import hora.torch as hvd
    hvd.init()
    sgd = lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9)
    adam = lambda ps: torch.optim.Adam(ps, lr=0.01)
    dopt, _ = run_case(hvd, "SGD momentum float32", sgd, torch.float32)
    check(len(dopt.state_dict()["state"]) == 4, "state_dict lacks the momentum buffers")
    run_case(hvd, "SGD momentum float64", sgd, torch.float64)
    run_case(hvd, "Adam float32", adam, torch.float32)
    run_case(hvd, "Adam float64", adam, torch.float64)
    run_case(hvd, "backward_passes_per_step=2", sgd, torch.float64, passes=2)
    run_case(hvd, "op=Sum", sgd, torch.float64, op=hvd.Sum)
    run_case(hvd, "unused parameter", sgd, torch.float64, unused=True)
    run_case(hvd, "gradient_predivide_factor=2", sgd, torch.float64,
             gradient_predivide_factor=2.0)
    run_case(hvd, "groups=2", adam, torch.float64, groups=2)
    run_case(hvd, "one explicit group with a frozen weight", sgd, torch.float64,
             groups="all in one", freeze=True)
    run_case(hvd, "num_groups=3 (deprecated spelling), 2 passes", sgd, torch.float64,
             num_groups=3, passes=2)
    run_case(hvd, "fp16 compression", sgd, torch.float32, compression=hvd.Compression.fp16,
             rtol=1e-2, atol=1e-3)
    check_sparse(hvd, sparse_as_dense=False)
    check_sparse(hvd, sparse_as_dense=True)
    check_dynamic(hvd, "SGD momentum", sgd)
    check_overlap(hvd)
    if hvd.size() == 3:
        check_process_set(hvd)
    check_misuse(hvd)
    hvd.shutdown()


if __name__ == "__main__":
    if os.environ.get("HORA_RANK") is None:
        sys.exit(launch())
    if os.environ.get("TEST_OPTIMIZER_MODE") == "peer_death":
        peer_death_main()
    rank_main()
