"""hora.torch broadcast_parameters, broadcast_optimizer_state, broadcast_object and
allgather_object.

Run from the repository root: /usr/bin/python3 tests/python/test_functions.py (with HORA_RUN,
PYTHONPATH, HORA_LIBRARY set). Without HORA_RANK in the environment it launches its ranks with
$HORA_RUN (2 and 3 ranks); each rank runs every check and exits non-zero on a failure.
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


def say(hvd, text):
    if hvd.rank() == 0:
        print("ok: %s (%d ranks)" % (text, hvd.size()), flush=True)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 3)
        self.bn = torch.nn.BatchNorm2d(3)
        self.fc = torch.nn.Linear(12, 2).double()

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1).double())


def all_equal_bytes(hvd, tensors, what):
    """Every rank holds bitwise the same tensors."""
    mine = torch.cat([t.detach().contiguous().view(-1).view(torch.uint8) for t in tensors])
    every = hvd.allgather(mine.view(1, -1), name="equal." + what)
    return all(torch.equal(every[r], every[0]) for r in range(hvd.size()))


def check_broadcast_parameters(hvd):
    rank, root = hvd.rank(), hvd.size() - 1
    torch.manual_seed(100 + rank)           # different initial parameters on every rank
    model = Net()
    model.bn.running_mean.add_(rank)       # and different buffers
    model.bn.num_batches_tracked.fill_(rank + 7)
    check(not all_equal_bytes(hvd, list(model.state_dict().values()), "before"),
          "models start out equal: the check would prove nothing")
    torch.manual_seed(100 + root)
    expected = Net()
    expected.bn.running_mean.add_(root)
    expected.bn.num_batches_tracked.fill_(root + 7)

    # A state_dict (parameters and buffers) ...
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    for (k, v), (k2, w) in zip(model.state_dict().items(), expected.state_dict().items()):
        check(k == k2 and torch.equal(v, w), "state_dict entry %s is not the root's" % k)
    check(all_equal_bytes(hvd, list(model.state_dict().values()), "state_dict"),
          "state_dicts differ after broadcast_parameters")
    say(hvd, "broadcast_parameters(state_dict) makes differently initialized models equal")

    # ... and named_parameters(), whose tensors require grad, from root 0.
    torch.manual_seed(200 + rank)
    model = Net()
    torch.manual_seed(200)
    expected = Net()
    hvd.broadcast_parameters(model.named_parameters(), root_rank=0)
    for (k, v), w in zip(model.named_parameters(), expected.parameters()):
        check(torch.equal(v.detach(), w.detach()), "parameter %s is not rank 0's" % k)
        check(v.requires_grad, "parameter %s lost requires_grad" % k)
    # The broadcast parameters still train.
    model(torch.randn(2, 2, 4, 4)).sum().backward()
    check(model.conv.weight.grad is not None, "no gradient after broadcast_parameters")
    say(hvd, "broadcast_parameters(named_parameters) from rank 0")

    try:
        hvd.broadcast_parameters(42, root_rank=0)
        raise AssertionError("broadcast_parameters accepted an int")
    except ValueError:
        pass


def train_locally(model, opt, rank, steps):
    g = torch.Generator().manual_seed(300 + rank)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(3, 2, 4, 4, generator=g)).pow(2).mean().backward()
        opt.step()


def optimizer_state_items(opt):
    """Every tensor and scalar of the state and the hyperparameters, in a fixed order."""
    sd = opt.state_dict()
    tensors, scalars = [], []
    for idx in sorted(sd["state"]):
        for key in sorted(sd["state"][idx]):
            v = sd["state"][idx][key]
            if isinstance(v, torch.Tensor):
                tensors.append(v)
            else:
                scalars.append((idx, key, v))
    for g in sd["param_groups"]:
        scalars.append(sorted((k, repr(v)) for k, v in g.items()))
    return tensors, scalars


def check_optimizer_state(hvd, name, factory, root, empty_ranks=()):
    rank = hvd.rank()
    torch.manual_seed(5)
    model = Net()
    opt = factory(model.parameters(), rank)
    if rank not in empty_ranks:
        train_locally(model, opt, rank, steps=rank + 1)   # different state on every rank
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    hvd.broadcast_optimizer_state(opt, root_rank=root)

    tensors, scalars = optimizer_state_items(opt)
    every = hvd.allgather_object(scalars, name="scalars." + name)
    for r, s in enumerate(every):
        check(s == every[root], "%s: rank %d's optimizer scalars %s differ from the root's %s"
              % (name, r, s, every[root]))
    counts = hvd.allgather_object(len(tensors), name="ntensors." + name)
    check(len(set(counts)) == 1, "%s: state tensor counts differ: %s" % (name, counts))
    check(all_equal_bytes(hvd, tensors or [torch.zeros(1)], "opt." + name),
          "%s: optimizer state tensors differ after broadcast_optimizer_state" % name)
    # The values are the root's: replay the root's own training here and compare.
    torch.manual_seed(5)
    ref_model = Net()
    ref_opt = factory(ref_model.parameters(), root)
    if root not in empty_ranks:
        train_locally(ref_model, ref_opt, root, steps=root + 1)
    ref_tensors, ref_scalars = optimizer_state_items(ref_opt)
    check(scalars == ref_scalars and len(tensors) == len(ref_tensors)
          and all(torch.equal(a, b) for a, b in zip(tensors, ref_tensors))
          and all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                      ref_model.state_dict().values())),
          "%s: the state and parameters after the broadcast are not root %d's" % (name, root))
    if root in empty_ranks:
        check(not opt.state_dict()["state"], "%s: the root's state was empty, this rank's "
              "is not" % name)
    else:
        check(len(opt.state_dict()["state"]) == len(list(model.parameters())),
              "%s: the state does not cover every parameter" % name)

    # After the broadcast, identical steps keep every rank identical.
    g = torch.Generator().manual_seed(77)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(3, 2, 4, 4, generator=g)).pow(2).mean().backward()
        opt.step()
    check(all_equal_bytes(hvd, list(model.state_dict().values()), "after." + name),
          "%s: models diverge after the state broadcast" % name)
    say(hvd, "broadcast_optimizer_state %s" % name)


def check_broadcast_optimizer_state(hvd):
    size = hvd.size()
    sgd = lambda ps, rank: torch.optim.SGD(ps, lr=0.01 * (rank + 1), momentum=0.9,
                                           weight_decay=1e-3 * rank)
    adam = lambda ps, rank: torch.optim.Adam(ps, lr=0.001 * (rank + 1),
                                             betas=(0.9, 0.99 - 0.01 * rank))
    check_optimizer_state(hvd, "SGD momentum", sgd, root=0)
    check_optimizer_state(hvd, "Adam", adam, root=size - 1)
    check_optimizer_state(hvd, "Adam, empty state on non-root ranks", adam, root=0,
                          empty_ranks=range(1, size))
    check_optimizer_state(hvd, "SGD, empty state on the root", sgd, root=0, empty_ranks=(0,))
    check_optimizer_state(hvd, "Adam, empty everywhere", adam, root=1,
                          empty_ranks=range(size))

    # Per-group hyperparameters travel too.
    torch.manual_seed(5)
    model = Net()
    opt = torch.optim.SGD([{"params": model.conv.parameters(), "lr": 0.5 + hvd.rank()},
                           {"params": model.fc.parameters()}], lr=0.1 * (hvd.rank() + 1),
                          momentum=0.5)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    check(opt.param_groups[0]["lr"] == 0.5 and abs(opt.param_groups[1]["lr"] - 0.1) < 1e-15,
          "learning rates were not broadcast: %s" % [g["lr"] for g in opt.param_groups])
    say(hvd, "broadcast_optimizer_state of per-group learning rates")

    # Different parameter groups on different ranks: a ValueError on every rank, no hang.
    params = list(model.parameters())
    opt = torch.optim.SGD(params if hvd.rank() == 0 else params[:2], lr=0.1)
    try:
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        raise AssertionError("mismatched optimizers were accepted")
    except ValueError:
        pass
    say(hvd, "mismatched optimizers raise ValueError on every rank")


def check_objects(hvd):
    rank, size = hvd.rank(), hvd.size()
    root = size - 1
    obj = {"rank": rank, "list": list(range(rank * 50)), "nested": {"t": (rank, "x" * rank)},
           "tensor": torch.arange(rank + 1, dtype=torch.float64), "none": None}
    got = hvd.broadcast_object(obj, root_rank=root)
    check(got["rank"] == root and got["list"] == list(range(root * 50))
          and got["nested"] == {"t": (root, "x" * root)} and got["none"] is None
          and torch.equal(got["tensor"], torch.arange(root + 1, dtype=torch.float64)),
          "broadcast_object returned %r" % (got,))
    check(hvd.broadcast_object("only rank 0's string" if rank == 0 else None) ==
          "only rank 0's string", "broadcast_object from the default root")
    say(hvd, "broadcast_object")

    every = hvd.allgather_object(obj)
    check(len(every) == size, "allgather_object returned %d objects" % len(every))
    for r, o in enumerate(every):
        check(o["rank"] == r and o["list"] == list(range(r * 50))
              and o["nested"] == {"t": (r, "x" * r)}
              and torch.equal(o["tensor"], torch.arange(r + 1, dtype=torch.float64)),
              "allgather_object: entry %d is %r" % (r, o))
    # Sizes that differ a lot between ranks, one of them tiny.
    every = hvd.allgather_object(b"z" * (100000 * rank) if rank else 0, name="sizes")
    check(every == [0] + [b"z" * (100000 * r) for r in range(1, size)],
          "allgather_object of very different sizes")
    say(hvd, "allgather_object with objects of different sizes")

    # An object that cannot be pickled raises on every rank instead of leaving peers waiting.
    unpicklable = lambda: None
    try:
        hvd.broadcast_object(unpicklable if rank == root else None, root_rank=root)
        raise AssertionError("broadcast_object of a lambda did not raise")
    except ValueError as e:
        check("pickle" in str(e), "unexpected message: %s" % e)
    try:
        hvd.allgather_object(unpicklable if rank == 0 else rank)
        raise AssertionError("allgather_object of a lambda did not raise")
    except ValueError as e:
        check("pickle" in str(e), "unexpected message: %s" % e)
    check(hvd.broadcast_object("after", root_rank=0) == "after", "broadcast_object after a "
          "failure")
    say(hvd, "unpicklable objects raise ValueError on every rank")


def check_process_set(hvd):
    """The helpers over a process set of ranks 0 and 2 (of three); roots are global ranks."""
    rank = hvd.rank()
    ps = hvd.add_process_set([0, 2])
    if rank in (0, 2):
        torch.manual_seed(400 + rank)
        model = Net()
        torch.manual_seed(402)
        expected = Net()
        hvd.broadcast_parameters(model.state_dict(), root_rank=2, process_set=ps)
        for (k, v), w in zip(model.state_dict().items(), expected.state_dict().values()):
            check(torch.equal(v, w), "process set: %s is not rank 2's" % k)
        got = hvd.broadcast_object({"from": rank}, root_rank=2, process_set=ps)
        check(got == {"from": 2}, "process set: broadcast_object returned %r" % (got,))
        every = hvd.allgather_object([rank] * (rank + 1), process_set=ps)
        check(every == [[0], [2, 2, 2]], "process set: allgather_object returned %r" % every)
    hvd.allreduce(torch.zeros(1), name="ps.done")   # every rank is done with the set
    if rank == 0:
        print("ok: broadcast_parameters, broadcast_object, allgather_object over a process set "
              "(3 ranks)", flush=True)


def rank_main():
    torch.set_num_threads(1)
    import hora.torch as hvd
    hvd.init()
    check_broadcast_parameters(hvd)
    check_broadcast_optimizer_state(hvd)
    check_objects(hvd)
    if hvd.size() == 3:
        check_process_set(hvd)
    hvd.shutdown()


if __name__ == "__main__":
    if os.environ.get("HORA_RANK") is None:
        sys.exit(launch())
    rank_main()
