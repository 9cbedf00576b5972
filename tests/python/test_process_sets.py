"""Process sets in hora.torch, at 3 ranks: sets {0, 2} and {1, 2} (overlapping in rank 2)
registered with add_process_set and through init(process_sets=...); every collective on them
against values computed here; operations on both sets in flight at once on rank 2; a
non-member's use of a set, a duplicate set, a broadcast root outside the set and removal of the
global set all raise; remove_process_set unregisters (also with an operation still in flight on
the set). The sets' communicators come from horaCommSplit.
Run from the repository root: /usr/bin/python3 tests/python/test_process_sets.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

torch = harness.require_torch()
if not harness.in_rank():
    sys.exit(harness.launch_self(__file__, [3], timeout=60))

torch.set_num_threads(1)
import hora.torch as hvd  # noqa: E402

check = harness.Checker()
pre = hvd.ProcessSet([2, 0])
hvd.init(process_sets=[pre])
R, N = hvd.rank(), hvd.size()
assert N == 3, "this test runs at 3 ranks"


def data(rank, shape, dtype=torch.float32):
    n = 1
    for s in shape:
        n *= s
    return ((torch.arange(n) * 3 + rank * 7) % 11 - 5).reshape(shape).to(dtype)


check(pre.process_set_id is not None and pre.ranks == [0, 2], "init(process_sets=[{0, 2}])")
check(pre.size() == 2 and pre.included() == (R in (0, 2))
      and pre.rank() == {0: 0, 2: 1}.get(R), "size(), included(), rank() of {0, 2}")
b = hvd.add_process_set([1, 2])
check(b.ranks == [1, 2] and b.size() == 2 and b.rank() == {1: 0, 2: 1}.get(R),
      "add_process_set([1, 2])")
check(hvd.global_process_set.process_set_id == 0 and hvd.global_process_set.size() == N,
      "global_process_set covers every rank")
e = check.raises_(ValueError, lambda: hvd.add_process_set([0, 2]),
                  "registering {0, 2} a second time")
check(e is not None and "already registered" in str(e), "the message says so")
check.raises_(ValueError, lambda: hvd.add_process_set([0, 5]), "a set with rank 5 of 3")
check.raises_(ValueError, lambda: hvd.remove_process_set(hvd.global_process_set),
              "removing the global process set")


def members(ps):
    return ps.ranks


for ps in (pre, b):
    mine = R in ps.ranks
    tag = "{%s}" % ", ".join(map(str, ps.ranks))
    if not mine:
        e = check.raises_(ValueError, lambda: hvd.allreduce(torch.ones(2), process_set=ps),
                          "rank %d: allreduce on %s, which it is not in" % (R, tag))
        check(e is not None and "not a member" in str(e), "the message says not a member")
        check.raises_(ValueError, lambda: hvd.barrier(process_set=ps), "barrier on it too")
        continue
    m = ps.ranks
    k = ps.rank()
    # allreduce Sum and Average
    got = hvd.allreduce(data(R, (5,)), op=hvd.Sum, process_set=ps)
    want = sum(data(r, (5,)) for r in m)
    check(torch.equal(got, want), "%s allreduce Sum" % tag)
    got = hvd.allreduce(data(R, (5,), torch.float64), process_set=ps)
    check(torch.allclose(got, want.double() / len(m)), "%s allreduce Average divides by 2" % tag)
    outs = hvd.grouped_allreduce([data(R, (3,)), data(R, (2, 2), torch.int32)], op=hvd.Max,
                                 process_set=ps)
    check(torch.equal(outs[0], torch.stack([data(r, (3,)) for r in m]).max(0).values)
          and torch.equal(outs[1], torch.stack([data(r, (2, 2), torch.int32)
                                                for r in m]).max(0).values),
          "%s grouped allreduce Max" % tag)
    # allgather, uneven
    got = hvd.allgather(data(R, (R + 1, 2)), process_set=ps)
    check(torch.equal(got, torch.cat([data(r, (r + 1, 2)) for r in m])),
          "%s allgather with uneven rows, in set order" % tag)
    # broadcast: the root is a global rank
    for root in m:
        got = hvd.broadcast(data(R, (4,)), root, process_set=ps)
        check(torch.equal(got, data(root, (4,))), "%s broadcast from global rank %d" % (tag, root))
    outside = [r for r in range(N) if r not in m][0]
    e = check.raises_(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(2), outside, process_set=ps),
                      "%s broadcast from rank %d, outside the set" % (tag, outside))
    check(e is not None and "not a member" in str(e), "the message says the root is outside")
    # alltoall with uneven splits
    sp = [1 + k, 2]
    got, rs = hvd.alltoall(data(R, (sum(sp), 3)), splits=sp, process_set=ps)
    parts = []
    for i, r in enumerate(m):
        spr = [1 + i, 2]
        parts.append(data(r, (sum(spr), 3))[sum(spr[:k]):sum(spr[:k + 1])])
    check(torch.equal(got, torch.cat(parts)) and rs.tolist() == [[1 + i, 2][k] for i in range(2)],
          "%s alltoall with uneven splits" % tag)
    # reducescatter, uneven
    got = hvd.reducescatter(data(R, (5, 2)), op=hvd.Sum, process_set=ps)
    full = sum(data(r, (5, 2)) for r in m)
    check(torch.equal(got, full[:3] if k == 0 else full[3:]),
          "%s reducescatter of 5 rows: 3 and 2" % tag)
    hvd.barrier(process_set=ps)
    check(True, "%s barrier" % tag)

# Rank 2 is in both sets: operations on both in flight at once, in opposite orders of naming.
if R == 2:
    h1 = hvd.allreduce_async(torch.ones(3), op=hvd.Sum, name="x", process_set=b)
    h2 = hvd.allreduce_async(torch.ones(3) * 2, op=hvd.Sum, name="x", process_set=pre)
    got1, got2 = hvd.synchronize(h1), hvd.synchronize(h2)
elif R == 0:
    got2 = hvd.allreduce(torch.ones(3) * 2, op=hvd.Sum, name="x", process_set=pre)
    got1 = None
else:
    got1 = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="x", process_set=b)
    got2 = None
check((got1 is None or torch.equal(got1, torch.full((3,), 2.0)))
      and (got2 is None or torch.equal(got2, torch.full((3,), 4.0))),
      "the same name in two sets, both in flight on rank 2")

# Global operations still work alongside.
got = hvd.allreduce(torch.ones(2), op=hvd.Sum)
check(torch.equal(got, torch.full((2,), 3.0)), "global allreduce alongside the sets")

# Removal.
check(hvd.remove_process_set(b) is True and b.process_set_id is None, "remove_process_set")
check.raises_(ValueError, lambda: hvd.allreduce(torch.ones(2), process_set=b),
              "using a removed set")
check(hvd.remove_process_set(b) is False, "removing it again returns False")
c = hvd.add_process_set(hvd.ProcessSet([1, 2]))
check(c.process_set_id is not None and c.process_set_id != 0,
      "the same ranks can be registered again after removal")
if R in (1, 2):
    got = hvd.allreduce(torch.ones(2) * R, op=hvd.Sum, process_set=c)
    check(torch.equal(got, torch.full((2,), 3.0)), "allreduce on the new set")
hvd.remove_process_set(c)
hvd.remove_process_set(pre)

# An operation still in flight on a set when its members remove it (rank 1, outside the set,
# asks for the removal first): the operation completes, then the set goes.
d = hvd.add_process_set([0, 2])
h = hvd.allreduce_async(torch.ones(2) * R, op=hvd.Sum, process_set=d) if R != 1 else None
check(hvd.remove_process_set(d) is True, "removing a set with an allreduce in flight on it")
if h is not None:
    check(torch.equal(hvd.synchronize(h), torch.full((2,), 2.0)),
          "that allreduce completed with the right value")
hvd.shutdown()
sys.exit(check.finish())
