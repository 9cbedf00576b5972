"""hora.torch's response cache and batches, at 2 and 3 ranks under hora-run, against values
computed here and the engine's own counters:
1. a second step that submits the same names, shapes and dtypes announces every operation by
   its cache id (no descriptor negotiated), and the results are right;
2. the gradients of a step (async allreduces, then synchronize, as DistributedOptimizer does)
   are reduced in one fused call per step once the first step has run: each waits, before it is
   announced, for the rest of the step's batch;
3. a cached name submitted with another shape is negotiated afresh and reduced right; ranks that
   disagree (one the cached shape, the other a new one) fail alike with HorovodInternalError,
   the cache does not hide it;
4. a step in which a batch member is never submitted still completes: a caller's wait releases
   what waits for the batch, and so does the batch's time limit when nobody waits (poll());
5. broadcast hits the cache too; HORA_CACHE_CAPACITY=0 (the second job) turns the cache off;
6. ranks whose caches differ (the third job: rank 0 has none) fail with HorovodInternalError,
   rank 0 naming HORA_CACHE_CAPACITY, instead of hanging or misreading the id.
The cycle is 20 ms here, so that a batch waits up to a second for a member that comes late
(50 cycles), against the 90 ms over which a step here submits its four: the counts do not
depend on the machine's speed.
Run from the repository root: /usr/bin/python3 tests/python/test_response_cache.py
"""
import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

torch = harness.require_torch()
if not harness.in_rank():
    rc = harness.launch_self(__file__, [2, 3], timeout=180, env={"HORA_CYCLE_TIME": "20"})
    if rc == 0:
        rc = harness.launch_self(__file__, [2], timeout=180,
                                 env={"HORA_CYCLE_TIME": "20", "HORA_CACHE_CAPACITY": "0"})
    if rc == 0:
        rc = harness.launch_self(__file__, [2], timeout=180,
                                 env={"HORA_CYCLE_TIME": "20", "CACHE_SKEW": "1"})
    sys.exit(rc)

torch.set_num_threads(1)
import hora.torch as hvd  # noqa: E402
from hora.torch import basics  # noqa: E402

check = harness.Checker()
if os.environ.get("CACHE_SKEW"):
    # 6. rank 0 without a cache, rank 1 with one: rank 1's announcement by id cannot be read on
    # rank 0, which fails, naming the setting, and so does rank 1, instead of either hanging.
    if os.environ["HORA_RANK"] == "0":
        os.environ["HORA_CACHE_CAPACITY"] = "0"
    hvd.init()
    check(torch.equal(hvd.allreduce(torch.ones(3), op=hvd.Sum, name="skew"), torch.full((3,), 2.0)),
          "caches that differ: the first call, negotiated on both ranks")
    try:
        hvd.allreduce(torch.ones(3), op=hvd.Sum, name="skew")
        check(False, "caches that differ: the second call should fail")
    except hvd.HorovodInternalError as e:
        check(hvd.rank() != 0 or "HORA_CACHE_CAPACITY" in str(e),
              "caches that differ: HorovodInternalError (%s)" % e)
    hvd.shutdown()
    sys.exit(check.finish())
hvd.init()
R, N = hvd.rank(), hvd.size()
CACHE = os.environ.get("HORA_CACHE_CAPACITY") != "0"
SHAPES = [(3, 4), (5,), (2, 2, 2), (7,)]


def stats():
    return collections.Counter(basics._stats())


def tensors(step, shapes=SHAPES):
    return [torch.full(s, float(R + 1 + step + i)) for i, s in enumerate(shapes)]


def expect(step, shapes=SHAPES):
    return [torch.full(s, float(sum(r + 1 + step + i for r in range(N)))) for i, s in enumerate(shapes)]


def one_step(step, shapes=SHAPES, prefix="grad"):
    """A step's gradients as a backward pass makes them: one at a time, 30 ms apart (more than
    a cycle, so that without the batches each would go in a round of its own)."""
    ts = tensors(step, shapes)
    hs = []
    for i, t in enumerate(ts):
        if i:
            time.sleep(0.03)
        hs.append(hvd.allreduce_async_(t, op=hvd.Sum, name="%s.%d" % (prefix, i)))
    return [hvd.synchronize(h) for h in hs]


# ---- 1 and 2: steps of the same operations
before = stats()
outs = one_step(0)
check(all(torch.equal(o, e) for o, e in zip(outs, expect(0))), "step 0: the sums")
first = stats()
per_step = []
for step in range(1, 6):
    a = stats()
    outs = one_step(step)
    b = stats()
    per_step.append({k: b.get(k, 0) - a.get(k, 0) for k in ("cached", "negotiated", "fused_batches",
                                                          "allreduce_calls")})
    check(all(torch.equal(o, e) for o, e in zip(outs, expect(step))), "step %d: the sums" % step)
if CACHE:
    check(first.get("negotiated", 0) - before.get("negotiated", 0) == len(SHAPES),
          "step 0 negotiates every operation: %s" % first)
    check(all(p["cached"] == len(SHAPES) and p["negotiated"] == 0 for p in per_step),
          "later steps announce every operation by its cache id: %s" % per_step)
    check(all(p["fused_batches"] == 1 and p["allreduce_calls"] == 1 for p in per_step[1:]),
          "from the second cached step on, one fused call per step: %s" % per_step)
else:
    check(all(p["cached"] == 0 and p["negotiated"] == len(SHAPES) for p in per_step),
          "HORA_CACHE_CAPACITY=0: nothing is cached: %s" % per_step)

# ---- 3. a cached name with another shape
a = stats()
outs = one_step(9, [(3, 5), (5,), (2, 2, 2), (7,)])
b = stats()
check(all(torch.equal(o, e) for o, e in zip(outs, expect(9, [(3, 5), (5,), (2, 2, 2), (7,)]))),
      "a cached name with another shape: the sums")
if CACHE:
    check(b["negotiated"] - a["negotiated"] >= 1, "the changed shape is negotiated afresh")
shape = (3, 4) if R == 0 else (4, 3)
check.raises_(hvd.HorovodInternalError,
              lambda: hvd.allreduce(torch.ones(shape), op=hvd.Sum, name="grad.0"),
              "ranks disagree on a cached name's shape")
check(torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="after.mismatch"),
                  torch.full((2,), float(N))), "the engine goes on after the disagreement")

# ---- 4. a batch member that never comes
for step in range(3):  # the batch of the four again
    one_step(20 + step)
ts = tensors(30)[:3]
hs = [hvd.allreduce_async_(t, op=hvd.Sum, name="grad.%d" % i) for i, t in enumerate(ts)]
outs = [hvd.synchronize(h) for h in hs]
check(all(torch.equal(o, e) for o, e in zip(outs, expect(30)[:3])),
      "three of a batch of four, then synchronize: the sums")
for step in range(3):
    one_step(40 + step)
ts = tensors(50)[:3]
hs = [hvd.allreduce_async_(t, op=hvd.Sum, name="grad.%d" % i) for i, t in enumerate(ts)]
deadline = time.monotonic() + 60
while not all(hvd.poll(h) for h in hs) and time.monotonic() < deadline:
    time.sleep(0.01)
check(all(hvd.poll(h) for h in hs), "three of a batch of four, polled: they complete without a wait")
outs = [hvd.synchronize(h) for h in hs]
check(all(torch.equal(o, e) for o, e in zip(outs, expect(50)[:3])), "three of four, polled: the sums")

# ---- 5. broadcast
for step in range(3):
    t = torch.full((4,), float(R * 10 + step))
    a = stats()
    out = hvd.broadcast(t, root_rank=N - 1, name="bcast")
    b = stats()
    check(torch.equal(out, torch.full((4,), float((N - 1) * 10 + step))), "broadcast %d" % step)
    if CACHE and step > 0:
        check(b["cached"] - a["cached"] == 1 and b["negotiated"] == a["negotiated"],
              "broadcast %d announced by its cache id" % step)

hvd.shutdown()
sys.exit(check.finish())
