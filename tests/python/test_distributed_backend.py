"""The torch.distributed backend "hora" (hora.torch.distributed).

Run from the repository root: /usr/bin/python3 tests/python/test_distributed_backend.py (with
HORA_RUN, PYTHONPATH, HORA_LIBRARY set). Without a role argument it launches its ranks with
$HORA_RUN:
  collectives  2 ranks, file:// init: every collective on float32, int32 and float64 (allreduce on
               every supported dtype), each reduction op, lists of tensors, async work, p2p
  uneven       3 ranks, tcp:// init: alltoall with uneven splits, gather/scatter, reduce_scatter,
               allgather into scattered outputs, new_group on a subset
  ddp          2 ranks, env:// init: DistributedDataParallel on "hora" against the same steps on a
               "gloo" group and against one process training on the union of the batches
  failure      2 ranks: a silent peer makes the waiting rank raise once the group's timeout
               passes; a dead peer makes dist.all_reduce and DDP's backward raise
  suite_needs  3 ranks: what torch's own test suite asks of a backend: all_gather_coalesced,
               sparse all_reduce, recv from any source (several senders; no sender: Timed out),
               monitored_barrier (missing ranks named), profiler events, torch's timeout words
Each rank asserts its results and exits non-zero on a failure.
"""
import datetime
import os
import socket
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import torch.distributed as dist
except ImportError as e:  # pragma: no cover
    print("SKIP: torch cannot be imported (%s)" % e)
    sys.exit(77)

PYDIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
if PYDIR not in sys.path:
    sys.path.insert(0, PYDIR)

if not dist.is_available():  # pragma: no cover
    print("SKIP: this torch has no torch.distributed")
    sys.exit(77)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def rank_env():
    return int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])


def say(text):
    if dist.get_rank() == 0:
        print("ok: %s (%d ranks)" % (text, dist.get_world_size()), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DTYPES = [torch.float32, torch.int32, torch.float64]
ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
              torch.int8, torch.uint8]


def expect(t, values, what):
    values = torch.as_tensor(values).to(t.dtype).reshape(t.shape)
    check(torch.equal(t, values), "%s: got %s, expected %s" % (what, t.tolist(), values.tolist()))


# -- role: collectives (2 ranks) ---------------------------------------------------------------

def role_collectives(tmp):
    import hora.torch.distributed  # noqa: F401  registers "hora"
    rank, size = rank_env()
    dist.init_process_group("hora", init_method="file://" + os.path.join(tmp, "store"),
                            rank=rank, world_size=size)
    check(dist.get_backend() == "hora", "get_backend() is %r" % dist.get_backend())
    check(dist.get_rank() == rank and dist.get_world_size() == size, "rank/size")
    pg = dist.distributed_c10d._get_default_group()
    check(pg.name() == "hora" and pg.size() == size and pg.rank() == rank, "the group's name/size/rank")
    say("init_process_group(backend='hora', init_method='file://...')")
    ranks = torch.arange(size)

    for dtype in ALL_DTYPES:
        t = torch.arange(6, dtype=dtype).reshape(2, 3) + rank
        dist.all_reduce(t)
        expect(t, torch.arange(6).reshape(2, 3) * size + ranks.sum(), "all_reduce SUM %s" % dtype)
    say("all_reduce SUM on %s" % ", ".join(str(d).replace("torch.", "") for d in ALL_DTYPES))

    for dtype in DTYPES:
        base = torch.tensor([1, 2, 3, 4], dtype=dtype)
        mine = base + rank
        for op, want in [(dist.ReduceOp.PRODUCT, (base.double() * (base.double() + 1)).to(dtype)),
                         (dist.ReduceOp.MIN, base), (dist.ReduceOp.MAX, base + size - 1)]:
            t = mine.clone()
            dist.all_reduce(t, op=op)
            expect(t, want, "all_reduce %s %s" % (op, dtype))
        if dtype.is_floating_point:
            t = mine.clone()
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            expect(t, base + (size - 1) / 2.0, "all_reduce AVG %s" % dtype)

        # non-contiguous tensors are reduced in place too
        t = (torch.arange(12, dtype=dtype).reshape(3, 4) + rank).t()
        dist.all_reduce(t)
        expect(t, (torch.arange(12).reshape(3, 4) * size + ranks.sum()).t(), "all_reduce of a transposed tensor")

        # broadcast from every root
        for root in range(size):
            t = torch.full((5,), rank * 10 + 1, dtype=dtype)
            dist.broadcast(t, src=root)
            expect(t, [root * 10 + 1] * 5, "broadcast from %d %s" % (root, dtype))

        # all_gather, into separate tensors and into one
        outs = [torch.zeros(3, dtype=dtype) for _ in range(size)]
        dist.all_gather(outs, torch.full((3,), rank + 1, dtype=dtype))
        for r in range(size):
            expect(outs[r], [r + 1] * 3, "all_gather slot %d %s" % (r, dtype))
        out = torch.zeros(size * 2, dtype=dtype)
        dist.all_gather_into_tensor(out, torch.tensor([rank, rank + 5], dtype=dtype))
        expect(out, [v for r in range(size) for v in (r, r + 5)], "all_gather_into_tensor %s" % dtype)

        # reduce to every root
        for root in range(size):
            t = torch.tensor([rank + 1, 2 * rank], dtype=dtype)
            dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
            if rank == root:
                expect(t, [(ranks + 1).sum(), 2 * ranks.sum()], "reduce to %d %s" % (root, dtype))

        # reduce_scatter, from a list and from one tensor
        out = torch.zeros(2, dtype=dtype)
        dist.reduce_scatter(out, [torch.full((2,), 10 * r + rank, dtype=dtype) for r in range(size)])
        expect(out, [10 * rank * size + ranks.sum()] * 2, "reduce_scatter %s" % dtype)
        out = torch.zeros(2, dtype=dtype)
        inp = torch.arange(2 * size, dtype=dtype) + rank
        dist.reduce_scatter_tensor(out, inp)
        expect(out, (torch.arange(2 * size) * size + ranks.sum())[2 * rank:2 * rank + 2],
               "reduce_scatter_tensor %s" % dtype)

        # all_to_all_single, even split
        inp = torch.arange(3 * size, dtype=dtype) + 100 * rank
        out = torch.zeros(3 * size, dtype=dtype)
        dist.all_to_all_single(out, inp)
        expect(out, [100 * r + 3 * rank + i for r in range(size) for i in range(3)],
               "all_to_all_single %s" % dtype)

        # all_reduce_coalesced: several tensors in one call
        a, b = torch.full((3,), rank + 1, dtype=dtype), torch.full((2, 2), 2 * rank, dtype=dtype)
        dist.all_reduce_coalesced([a, b])
        expect(a, [(ranks + 1).sum()] * 3, "all_reduce_coalesced first %s" % dtype)
        expect(b, [[2 * ranks.sum()] * 2] * 2, "all_reduce_coalesced second %s" % dtype)

        # send/recv both ways (tags are accepted and ignored)
        t = torch.full((4,), rank + 7, dtype=dtype)
        if rank == 0:
            dist.send(t, dst=1, tag=3)
            dist.recv(t, src=1, tag=4)
            expect(t, [8] * 4, "recv on rank 0 %s" % dtype)
        elif rank == 1:
            got = torch.zeros(4, dtype=dtype)
            dist.recv(got, src=0, tag=3)
            expect(got, [7] * 4, "recv on rank 1 %s" % dtype)
            dist.send(t, dst=0, tag=4)
    say("all_reduce PRODUCT/MIN/MAX/AVG, broadcast, all_gather, reduce, reduce_scatter, "
        "all_to_all_single, all_reduce_coalesced, send/recv on float32, int32, float64")

    # A list of tensors in one allreduce: every entry gets the total over ranks and entries.
    pg = dist.distributed_c10d._get_default_group()
    ts = [torch.full((3,), float(rank + 1)), torch.full((3,), float(10 * (rank + 1)))]
    pg.allreduce(ts).wait()
    total = 11 * (ranks + 1).sum().item()
    expect(ts[0], [total] * 3, "allreduce of a list, first entry")
    expect(ts[1], [total] * 3, "allreduce of a list, second entry")
    # broadcast with rootTensor
    opts = dist.BroadcastOptions()
    opts.rootRank, opts.rootTensor = 1, 1
    ts = [torch.full((2,), float(rank)), torch.full((2,), float(rank + 50))]
    pg.broadcast(ts, opts).wait()
    expect(ts[0], [51.0] * 2, "broadcast rootTensor, entry 0")
    expect(ts[1], [51.0] * 2, "broadcast rootTensor, entry 1")
    say("a list of tensors in allreduce and broadcast (rootRank/rootTensor)")

    # Asynchronous work: many in flight, completed in order, futures carry the tensors.
    ts = [torch.full((1000,), float(i + rank)) for i in range(20)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    for i, w in enumerate(works):
        w.wait()
        check(w.is_completed() and w.is_success(), "work %d completed" % i)
        expect(ts[i], [2 * i + ranks.sum().item()] * 1000, "async all_reduce %d" % i)
    vals = futs[3].wait()
    check(isinstance(vals, list) and vals[0] is ts[3], "the future's value is the tensor list")
    say("20 asynchronous all_reduce calls in flight, waited in order")

    # batch_isend_irecv of large messages both ways runs as one group (no send-send stall)
    big = torch.full((1 << 20,), float(rank))
    got = torch.zeros(1 << 20)
    peer = 1 - rank
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, big, peer), dist.P2POp(dist.irecv, got, peer)])
    for q in reqs:
        q.wait()
    expect(got[:4], [float(peer)] * 4, "batch_isend_irecv")
    check(bool((got == peer).all()), "batch_isend_irecv: all of the message arrived")
    say("batch_isend_irecv exchanging 4 MiB both ways")

    # complex tensors reduce as pairs of reals
    c = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64) * (rank + 1)
    dist.all_reduce(c)
    check(torch.equal(c, torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64) * (ranks + 1).sum().item()),
          "all_reduce of complex64")

    # misuse raises at once, in the caller
    for bad, what in [(lambda: dist.all_reduce(torch.ones(2, dtype=torch.bool)), "bool tensor"),
                      (lambda: dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND), "BAND"),
                      (lambda: dist.broadcast(torch.ones(2), src=size + 3), "a root out of range"),
                      (lambda: dist.all_to_all_single(torch.zeros(3), torch.zeros(3)), "uneven rows")]:
        try:
            bad()
        except (ValueError, TypeError, RuntimeError) as e:
            if rank == 0:
                print("ok: %s raises: %s" % (what, str(e).splitlines()[0][:100]), flush=True)
        else:
            raise AssertionError("%s did not raise" % what)
    dist.barrier()
    say("complex64 all_reduce; misuse raises; barrier")

    # the object helpers ride on all_gather/broadcast of byte tensors
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "name": "r%d" % rank})
    check(objs == [{"rank": r, "name": "r%d" % r} for r in range(size)], "all_gather_object: %r" % objs)
    lst = [("from", rank), None]
    dist.broadcast_object_list(lst, src=1)
    check(lst == [("from", 1), None], "broadcast_object_list: %r" % lst)
    say("all_gather_object, broadcast_object_list")
    dist.destroy_process_group()


# -- role: uneven (3 ranks) --------------------------------------------------------------------

def role_uneven(port):
    import hora.torch.distributed  # noqa: F401
    rank, size = rank_env()
    dist.init_process_group("hora", init_method="tcp://127.0.0.1:%s" % port, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    say("init_process_group(backend='hora', init_method='tcp://...')")
    for dtype in DTYPES:
        # rank r sends (p + 1) rows of width 2 to rank p: uneven splits both ways
        in_splits = [p + 1 for p in range(size)]
        out_splits = [rank + 1] * size
        inp = torch.cat([torch.full((p + 1, 2), 10 * rank + p, dtype=dtype) for p in range(size)])
        out = torch.zeros(sum(out_splits), 2, dtype=dtype)
        dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits)
        want = torch.cat([torch.full((rank + 1, 2), 10 * r + rank, dtype=dtype) for r in range(size)])
        expect(out, want, "all_to_all_single uneven %s" % dtype)

        ins = [torch.full((p + 1,), 10 * rank + p, dtype=dtype) for p in range(size)]
        # all_to_all with per-peer sizes: rank r receives rank+1 elements from everyone
        outs = [torch.zeros(rank + 1, dtype=dtype) for _ in range(size)]
        dist.all_to_all(outs, ins)
        for r in range(size):
            expect(outs[r], [10 * r + rank] * (rank + 1), "all_to_all from %d %s" % (r, dtype))

        root = size - 1
        gl = [torch.zeros(2, dtype=dtype) for _ in range(size)] if rank == root else None
        dist.gather(torch.full((2,), rank + 3, dtype=dtype), gather_list=gl, dst=root)
        if rank == root:
            for r in range(size):
                expect(gl[r], [r + 3] * 2, "gather slot %d %s" % (r, dtype))
        got = torch.zeros(3, dtype=dtype)
        sl = [torch.full((3,), 7 * r, dtype=dtype) for r in range(size)] if rank == 1 else None
        dist.scatter(got, scatter_list=sl, src=1)
        expect(got, [7 * rank] * 3, "scatter %s" % dtype)

        # all_gather into outputs that are not one block (a strided view and separate tensors)
        block = torch.zeros(size, 4, dtype=dtype)
        outs = [block[r, ::2] for r in range(size)]
        dist.all_gather(outs, torch.tensor([rank, -rank], dtype=dtype))
        for r in range(size):
            expect(block[r], [r, 0, -r, 0], "all_gather into strided views %s" % dtype)

        # reduce_scatter with 3 ranks, MAX
        out = torch.zeros(2, dtype=dtype)
        dist.reduce_scatter(out, [torch.full((2,), (rank * 7 + p) % 5, dtype=dtype) for p in range(size)],
                            op=dist.ReduceOp.MAX)
        expect(out, [max((r * 7 + rank) % 5 for r in range(size))] * 2, "reduce_scatter MAX %s" % dtype)
    say("all_to_all_single with uneven splits, all_to_all, gather, scatter, all_gather into "
        "strided views, reduce_scatter MAX on float32, int32, float64")

    # a subgroup of ranks 0 and 2 (created by every rank, used by its members)
    sub = dist.new_group(ranks=[0, 2], backend="hora")
    if rank in (0, 2):
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t, group=sub)
        expect(t, [4.0], "all_reduce on the subgroup {0, 2}")
    dist.barrier()
    say("new_group(ranks=[0, 2], backend='hora')")
    dist.destroy_process_group()


# -- role: ddp (2 ranks) -----------------------------------------------------------------------

STEPS, BATCH = 4, 6


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.fc1 = torch.nn.Linear(4 * 6 * 6, 32)
        self.fc2 = torch.nn.Linear(32, 5)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def batches(size):
    g = torch.Generator().manual_seed(1234)
    for _ in range(STEPS):
        yield (torch.randn(size * BATCH, 1, 8, 8, generator=g), torch.randint(0, 5, (size * BATCH,), generator=g))


def train_ddp(group, rank, size, bucket_mb, hook=None):
    torch.manual_seed(7 + rank)  # differing initial weights: DDP must broadcast rank 0's
    model = Net()
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group, bucket_cap_mb=bucket_mb)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(size):
        xs, ys = x[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(xs), ys).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train_alone(size):
    torch.manual_seed(7)
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches(size):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def role_ddp():
    import hora.torch.distributed  # noqa: F401
    rank, size = rank_env()
    torch.set_num_threads(1)
    # env:// from MASTER_ADDR/MASTER_PORT (set by the launcher), RANK and WORLD_SIZE
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(size)
    dist.init_process_group("hora", init_method="env://")
    say("init_process_group(backend='hora', init_method='env://')")
    gloo = dist.new_group(backend="gloo")
    # small buckets: several allreduce calls per step, overlapping with backward
    on_hora = train_ddp(None, rank, size, bucket_mb=0.002)
    on_gloo = train_ddp(gloo, rank, size, bucket_mb=0.002)
    alone = train_alone(size)

    every = [torch.zeros_like(on_hora) for _ in range(size)]
    dist.all_gather(every, on_hora, group=gloo)  # compared through the other backend
    check(all(torch.equal(e, every[0]) for e in every), "DDP on hora: parameters differ between ranks")
    say("DDP on hora: parameters bitwise equal on every rank after %d steps" % STEPS)
    err = (on_hora - on_gloo).abs().max().item()
    check(err < 1e-5, "DDP on hora and on gloo differ by %g" % err)
    say("DDP on hora matches DDP on gloo (max difference %.2g)" % err)
    err = (on_hora - alone).abs().max().item()
    check(err < 1e-4, "DDP on hora and one process on the union of batches differ by %g" % err)
    check((on_hora - train_ddp_start()).abs().max().item() > 1e-3, "the parameters did not move")
    say("DDP on hora matches one process on the union of the batches (max difference %.2g)" % err)
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    hooked = train_ddp(None, rank, size, bucket_mb=0.002, hook=default_hooks.allreduce_hook)
    err = (on_hora - hooked).abs().max().item()
    check(err < 1e-5, "DDP on hora with allreduce_hook differs by %g" % err)
    say("DDP on hora with the Python comm hook allreduce_hook (max difference %.2g)" % err)
    dist.destroy_process_group()


def train_ddp_start():
    torch.manual_seed(7)
    return torch.cat([p.detach().reshape(-1) for p in Net().parameters()])


# -- role: failure (2 ranks) -------------------------------------------------------------------

def role_failure(tmp):
    import hora.torch.distributed  # noqa: F401
    rank, size = rank_env()
    torch.set_num_threads(1)
    dist.init_process_group("hora", init_method="file://" + os.path.join(tmp, "store"),
                            rank=rank, world_size=size)
    marker = os.path.join(tmp, "rank0-raised")
    # A silent peer: rank 1 does not take part; rank 0 raises once the group's timeout passes.
    quick = dist.new_group(backend="hora", timeout=datetime.timedelta(seconds=2))
    if rank == 0:
        t = torch.ones(4)
        try:
            dist.all_reduce(t, group=quick)
        except Exception as e:
            print("ok: a silent peer: all_reduce raised %s: %s" % (type(e).__name__, str(e)[:160]), flush=True)
        else:
            raise AssertionError("all_reduce with a silent peer returned")
        try:
            dist.all_reduce(t, group=quick)
        except Exception as e:
            print("ok: the failed group raises at once afterwards: %s" % str(e)[:100], flush=True)
        else:
            raise AssertionError("a failed group went on working")
        open(marker, "w").close()
    else:
        deadline = time.monotonic() + 40  # a bound for a broken test, not a timing assumption
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        check(os.path.exists(marker), "rank 0 never raised")
    dist.barrier()  # the default group still works

    # A dead peer: rank 1 exits abruptly between steps; rank 0's DDP backward and all_reduce raise.
    model = torch.nn.Linear(20, 3)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp(torch.randn(4, 20)).sum().backward()
    dist.barrier()
    if rank == 1:
        os._exit(0)
    try:
        for _ in range(3):
            ddp(torch.randn(4, 20)).sum().backward()
    except RuntimeError as e:
        print("ok: a dead peer: DDP backward raised: %s" % str(e).splitlines()[0][:160], flush=True)
    else:
        raise AssertionError("DDP backward with a dead peer returned")
    try:
        dist.all_reduce(torch.ones(3))
    except Exception as e:
        print("ok: a dead peer: all_reduce raised %s" % type(e).__name__, flush=True)
    else:
        raise AssertionError("all_reduce with a dead peer returned")
    try:
        dist.broadcast(torch.ones(3), src=0, async_op=True).wait()
    except Exception as e:
        print("ok: a dead peer: wait() on async work raised %s" % type(e).__name__, flush=True)
    else:
        raise AssertionError("async broadcast with a dead peer succeeded")
    os._exit(0)  # the group cannot be torn down politely any more


# -- role: torch's own suite's needs (3 ranks) --------------------------------------------------

def role_suite_needs(tmp):
    import hora.torch.distributed as hdist
    rank, size = rank_env()
    torch.set_num_threads(1)
    dist.init_process_group("hora", init_method="file://" + os.path.join(tmp, "store"),
                            rank=rank, world_size=size)

    # all_gather_coalesced: one output list per rank, each with one tensor per input
    a, b = torch.full((2,), rank + 1.0), torch.full((3, 2), 10.0 * (rank + 1))
    outs = [[torch.zeros(2), torch.zeros(3, 2)] for _ in range(size)]
    dist.all_gather_coalesced(outs, [a, b])
    for r in range(size):
        expect(outs[r][0], [r + 1.0] * 2, "all_gather_coalesced output of rank %d, input 0" % r)
        expect(outs[r][1], [10.0 * (r + 1)] * 6, "all_gather_coalesced output of rank %d, input 1" % r)
    say("all_gather_coalesced with torch's per-rank output lists")

    # sparse allreduce (SUM): the union of every rank's indices, equal indices added
    idx = torch.tensor([[0, rank + 1], [1, 2]])
    sp = torch.sparse_coo_tensor(idx, torch.tensor([1.0, float(rank + 1)]), (4, 3))
    dense = sum(torch.sparse_coo_tensor(torch.tensor([[0, r + 1], [1, 2]]),
                                        torch.tensor([1.0, float(r + 1)]), (4, 3)).to_dense()
                for r in range(size))
    dist.all_reduce(sp)
    check(sp.is_sparse and torch.equal(sp.to_dense(), dense),
          "sparse all_reduce: got %s, expected %s" % (sp.to_dense().tolist(), dense.tolist()))
    say("sparse COO all_reduce (SUM)")

    # receive from any source, several senders: rank 0 gets two messages from each other rank,
    # first one named receive from rank 2, then the rest from any source
    if rank == 0:
        got = {}
        t = torch.zeros(3)
        dist.recv(t, src=2)
        check(t.tolist() == [2.0, 0.0, 0.0], "named recv among any-source ones: %s" % t.tolist())
        got.setdefault(2, []).append(0)
        for i in range(2 * (size - 1) - 1):
            t = torch.zeros(3)
            if i % 2:
                work = dist.irecv(t)
                work.wait()
                src = work.source_rank()
            else:
                src = dist.recv(t)
            check(t[0].item() == src, "recv from any source says %d, the data says %s" % (src, t.tolist()))
            got.setdefault(src, []).append(int(t[1].item()))
        check(got == {r: [0, 1] for r in range(1, size)},
              "any-source receives: sources and per-source order %s" % got)
    else:
        for seq in range(2):
            dist.send(torch.tensor([float(rank), float(seq), 0.0]), dst=0)
    say("recv from any source with %d senders, mixed with a named recv" % (size - 1))

    # nobody sends: the receive from any source fails within the group's timeout, naming the wait
    quick = dist.new_group(backend="hora", timeout=datetime.timedelta(seconds=1))
    if rank == 0:
        try:
            dist.recv(torch.zeros(1), group=quick)
        except RuntimeError as e:
            text = str(e)
            check(" Timed out " in text and "none of ranks 1, 2 sent rank 0" in text,
                  "any-source timeout text: %s" % text)
        else:
            raise AssertionError("a receive from any source with no sender returned")
    dist.barrier()
    dist.barrier(group=quick)  # the group still works after that timeout
    say("recv from any source with no sender: Timed out, naming the ranks waited for")

    # without HORA_TORCH_ANY_SOURCE=1 when a group of 3+ is made, its sends announce nothing and
    # a receive from any source is refused at once, saying what to set
    os.environ["HORA_TORCH_ANY_SOURCE"] = "0"
    plain = dist.new_group(backend="hora")
    os.environ["HORA_TORCH_ANY_SOURCE"] = "1"
    if rank == 0:
        try:
            dist.recv(torch.zeros(1), group=plain)
        except RuntimeError as e:
            check("HORA_TORCH_ANY_SOURCE=1" in str(e), "any-source refusal text: %s" % e)
        else:
            raise AssertionError("a receive from any source without HORA_TORCH_ANY_SOURCE returned")
    dist.barrier(group=plain)
    say("recv from any source without HORA_TORCH_ANY_SOURCE: refused, saying what to set")

    # monitored_barrier: all come; one rank does not come; two do not come (wait_all_ranks)
    hdist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    hdist.monitored_barrier(timeout=datetime.timedelta(seconds=30), wait_all_ranks=True)
    one_missing = dist.new_group(backend="hora")
    two_missing = dist.new_group(backend="hora")
    short = datetime.timedelta(seconds=1)
    if rank != 2:
        try:
            hdist.monitored_barrier(one_missing, timeout=short)
        except RuntimeError as e:
            text = str(e)
            if rank == 0:
                check(text.startswith("Rank 2 failed to pass monitoredBarrier in 1000 ms"),
                      "monitored_barrier on rank 0: %s" % text)
            else:
                check(text.startswith("Rank 1 successfully reached monitoredBarrier, but received "
                                      "errors while waiting for send/recv from rank 0"),
                      "monitored_barrier on rank 1: %s" % text)
        else:
            raise AssertionError("monitored_barrier with rank 2 missing returned on rank %d" % rank)
    if rank == 0:
        try:
            hdist.monitored_barrier(two_missing, timeout=short, wait_all_ranks=True)
        except RuntimeError as e:
            check(str(e).startswith("Ranks 1, 2 failed to pass monitoredBarrier"),
                  "monitored_barrier, wait_all_ranks: %s" % e)
        else:
            raise AssertionError("monitored_barrier with ranks 1 and 2 missing returned")
        try:
            two_missing.monitored_barrier(datetime.timedelta(seconds=0))
        except RuntimeError as e:
            check(str(e).startswith("Rank 0 timed out in monitoredBarrier"),
                  "monitored_barrier with no time: %s" % e)
        else:
            raise AssertionError("monitored_barrier with a zero timeout returned")
    dist.barrier()
    dist.barrier(group=one_missing)  # the groups still work
    say("monitored_barrier: passes, names a missing rank, all missing ranks, rank 0's own timeout")

    # profiler events: "hora:<op>" with the inputs' shapes, asynchronous, one per operation
    t = torch.ones(2, 3)
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
        dist.all_reduce(t, async_op=True).wait()
    events = [e for e in prof.function_events if e.name.startswith("hora:")]
    names = sorted(e.name for e in events)
    check(names == ["hora:all_reduce", "hora:all_reduce", "hora:broadcast"],
          "autograd profiler events: %s" % names)
    for e in events:
        check(e.is_async and e.input_shapes == [[2, 3]], "event %s: async %s, shapes %s"
              % (e.name, e.is_async, e.input_shapes))
    with torch.profiler.profile(record_shapes=True) as prof:
        if rank == 0:
            dist.send(torch.ones(5), dst=1)
        elif rank == 1:
            dist.recv(torch.zeros(5), src=0)
        dist.barrier()
    names = sorted(e.name for e in prof.events() if e.name.startswith("hora:"))
    mine = {0: ["hora:barrier", "hora:send"], 1: ["hora:barrier", "hora:recv"]}.get(rank, ["hora:barrier"])
    check(names == mine, "torch.profiler events on rank %d: %s" % (rank, names))
    say("profiler events hora:all_reduce, hora:broadcast, hora:send, hora:recv, hora:barrier")

    # the group's timeout: torch's words ("Timed out") before the library's text
    quick = dist.new_group(backend="hora", timeout=datetime.timedelta(seconds=1))
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(2), group=quick)
        except RuntimeError as e:
            text = str(e)
            check(" Timed out " in text and "timed out after 1000 ms" in text,
                  "timeout text: %s" % text)
        else:
            raise AssertionError("all_reduce with silent peers returned")
    dist.barrier()
    say("a timeout says Timed out, then the library's text")


# -- launcher ----------------------------------------------------------------------------------

def run(n, role, *args, env=None, timeout=45):
    runner = os.environ.get("HORA_RUN")
    cmd = [runner, "-n", str(n), "--timeout", str(timeout), sys.executable, os.path.abspath(__file__),
           role] + [str(a) for a in args]
    print("launching %d ranks: %s" % (n, role), flush=True)
    e = dict(os.environ)
    e["PYTHONPATH"] = PYDIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(env or {})
    e.pop("HORA_RUN", None)  # the launcher's path, not a variable for the ranks
    rc = subprocess.call(cmd, env=e)
    if rc != 0:
        print("FAIL: %s with %d ranks exited with status %d" % (role, n, rc), flush=True)
    return rc == 0


def main():
    if not os.environ.get("HORA_RUN"):
        print("FAIL: HORA_RUN (the path of hora-run) is not set")
        return 1
    try:
        import hora.torch.distributed  # noqa: F401
    except ImportError as e:
        print("FAIL: hora.torch.distributed cannot be imported: %s" % e)
        return 1
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ok &= run(2, "collectives", os.path.join(tmp, "c"))
        ok &= run(3, "uneven", free_port())
        ok &= run(2, "ddp", env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
        ok &= run(2, "failure", os.path.join(tmp, "f"), env={"HORA_TIMEOUT_MS": "20000"})
        ok &= run(3, "suite_needs", os.path.join(tmp, "s"), env={"HORA_TORCH_ANY_SOURCE": "1"})
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        role, rest = sys.argv[1], sys.argv[2:]
        if role in ("collectives", "failure", "suite_needs"):
            os.makedirs(rest[0], exist_ok=True)
        {"collectives": role_collectives, "uneven": role_uneven, "ddp": role_ddp,
         "failure": role_failure, "suite_needs": role_suite_needs}[role](*rest)
        sys.exit(0)
    sys.exit(main())
