"""Tensor fusion and the timeline of hora.torch.

Three launches: the default fusion threshold (with HORA_TIMELINE set, so that rank 0 also writes
a timeline from init to shutdown), a 1 KiB threshold, and HORA_FUSION_THRESHOLD=0. In each, many
small tensors of mixed sizes and dtypes are reduced asynchronously and checked against values
computed here; the engine's count of library allreduce calls shows whether they were fused. So
that the count does not depend on timing, one burst is submitted inside the engine's hold()
(every rank's requests enter one round) and a grouped allreduce is submitted in one piece: with
the default threshold each takes one call per dtype, with 0 one call per tensor. rank 0 records a
timeline with start_timeline/stop_timeline and checks it is valid JSON with the QUEUE, FUSE,
ALLREDUCE and UNPACK phases on one row per tensor.
Run from the repository root: /usr/bin/python3 tests/python/test_torch_fusion.py
"""
import contextlib
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

torch = harness.require_torch()

if not harness.in_rank():
    tmp = tempfile.mkdtemp(prefix="hora_fusion_")
    rc = 0
    for threshold, extra in [(None, {"HORA_TIMELINE": os.path.join(tmp, "env_timeline.json")}),
                             (1024, {}), (0, {})]:
        env = {"TEST_TMPDIR": tmp, "HORA_CYCLE_TIME": "20"}
        env.update(extra)
        if threshold is not None:
            env["HORA_FUSION_THRESHOLD"] = str(threshold)
        print("== HORA_FUSION_THRESHOLD=%s" % threshold, flush=True)
        rc = harness.launch_self(__file__, [2, 3] if threshold is None else [2], timeout=60,
                                 env=env)
        if rc:
            break
    sys.exit(rc)

hvd = harness.init_hvd()
R, N = hvd.rank(), hvd.size()
check = harness.Checker()
threshold = int(os.environ.get("HORA_FUSION_THRESHOLD", 64 * 1024 * 1024))
tmp = os.environ["TEST_TMPDIR"]

DTYPES = [torch.float32, torch.float64, torch.int32, torch.float16, torch.bfloat16]
ESIZE = {torch.float32: 4, torch.float64: 8, torch.int32: 4, torch.float16: 2,
         torch.bfloat16: 2}


def data(rank, i, n, dtype):
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 5 + i) % 9 - 4
    return v.to(dtype)


def specs(count):
    """Mixed sizes (1 to 300 elements) and dtypes."""
    return [(1 + (i * 37) % 300, DTYPES[i % len(DTYPES)]) for i in range(count)]


def want_sum(i, n, dtype):
    return torch.stack([data(r, i, n, dtype).double() for r in range(N)]).sum(0)


def close(got, want, dtype):
    if got.dtype != dtype or got.shape != want.shape:
        return False
    return torch.allclose(got.double(), want, rtol=1e-2 if ESIZE[dtype] == 2 else 1e-6,
                          atol=1e-2 if ESIZE[dtype] == 2 else 1e-6)


def least_calls(S, threshold):
    """A lower bound on the fused calls for tensors S ready together: a tensor larger than the
    threshold takes a call of its own; the others of a dtype need their bytes / threshold."""
    alone, small = 0, {}
    for n, d in S:
        if n * ESIZE[d] > threshold:
            alone += 1
        else:
            small[d] = small.get(d, 0) + n * ESIZE[d]
    return alone + sum(math.ceil(b / threshold) for b in small.values())


# ---- many small tensors, submitted one by one, then synchronized


def burst(tag, held):
    """Submits 60 tensors one by one (odd ones in place), waits for them, checks their values;
    returns the number of library allreduce calls they took. held: inside the engine's hold(),
    so that every rank's 60 requests are negotiated in one round whatever the timing."""
    S = specs(60)
    before = hvd.mpi_ops._stats()
    handles, inplace = [], []
    eng = hvd.mpi_ops._eng()
    with (eng.hold() if held else contextlib.nullcontext()):
        for i, (n, dtype) in enumerate(S):
            x = data(R, i, n, dtype)
            if i % 2:
                handles.append(hvd.allreduce_async_(x, op=hvd.Sum, name="%s.%d" % (tag, i)))
                inplace.append(x)
            else:
                handles.append(hvd.allreduce_async(x, op=hvd.Sum, name="%s.%d" % (tag, i)))
                inplace.append(None)
    ok = True
    for i, (h, (n, dtype)) in enumerate(zip(handles, S)):
        out = hvd.synchronize(h)
        if inplace[i] is not None and out is not inplace[i]:
            ok = False
        if not close(out, want_sum(i, n, dtype), dtype):
            ok = False
            print("tensor %d (%d x %s): %s" % (i, n, dtype, out))
    check(ok, "%s: 60 tensors of mixed sizes and 5 dtypes, allreduce_async and allreduce_async_: "
              "right values" % tag)
    return hvd.mpi_ops._stats()["allreduce_calls"] - before["allreduce_calls"], S


# Submitted as fast as Python goes: what fuses depends on the rounds they fall in.
burst("loose", held=False)
# Held: all 60 become ready in one round, so the count of calls is exact.
calls, S = burst("held", held=True)
if threshold == 0:
    check(calls == len(S), "HORA_FUSION_THRESHOLD=0: one library call per tensor (%d)" % calls)
elif threshold >= 64 * 1024 * 1024:
    check(calls == len(DTYPES), "60 tensors ready in one round: one library call per dtype "
                                "(%d, want %d)" % (calls, len(DTYPES)))
else:
    least = least_calls(S, threshold)
    check(least <= calls < len(S), "threshold %d: %d calls for 60 tensors ready in one round "
                                   "(at least %d)" % (threshold, calls, least))

# ---- a grouped allreduce is negotiated in one round: its fusion is exact
S = specs(40)
xs = [data(R, i, n, dtype) for i, (n, dtype) in enumerate(S)]
timeline_path = os.path.join(tmp, "timeline_%d.json" % N)
hvd.start_timeline(timeline_path, mark_cycles=True)
before = hvd.mpi_ops._stats()
outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name="group")
after = hvd.mpi_ops._stats()
bc = hvd.broadcast(torch.arange(4.0) + R, 0, name="lonely.broadcast")
hvd.stop_timeline()
calls = after["allreduce_calls"] - before["allreduce_calls"]
check(all(close(o, want_sum(i, n, d), d) for i, (o, (n, d)) in enumerate(zip(outs, S)))
      and torch.equal(bc, torch.arange(4.0)), "grouped allreduce of 40 tensors: right values")
if threshold == 0:
    want_calls = len(S)
elif threshold >= 64 * 1024 * 1024:
    want_calls = len(DTYPES)
else:
    want_calls = None
    least = least_calls(S, threshold)
    check(least <= calls < len(S),
          "threshold %d: %d calls for %d tensors (at least %d)" % (threshold, calls, len(S), least))
if want_calls is not None:
    check(calls == want_calls, "grouped allreduce of 40 tensors in 5 dtypes: %d library calls "
                               "(want %d)" % (calls, want_calls))

if R == 0:
    with open(timeline_path) as f:
        events = json.load(f)
    check(isinstance(events, list) and events, "the timeline is a JSON array of events")
    rows = {e["tid"]: e["args"]["name"] for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"}
    phases = {}
    for e in events:
        if e.get("ph") == "X":
            phases.setdefault(rows.get(e["tid"]), []).append(e)
    names = ["group.%d" % i for i in range(len(S))]
    check(all(n in rows.values() for n in names) and len(set(rows.values())) == len(rows),
          "one timeline row per tensor name")
    fused_seq, lone_seq = ["QUEUE", "FUSE", "ALLREDUCE", "UNPACK"], ["QUEUE", "ALLREDUCE"]
    ok = True
    for n in names:
        evs = phases.get(n, [])
        seq = [e["name"] for e in evs]
        fused = [e["args"]["fused"] for e in evs if e["name"] == "ALLREDUCE"]
        if not fused or seq != (fused_seq if fused[0] > 1 else lone_seq):
            ok = False
            print("timeline of %s: %s" % (n, evs))
        if threshold >= 64 * 1024 * 1024 and fused[0] == 1:
            ok = False
        if threshold == 0 and fused[0] != 1:
            ok = False
    check(ok, "each tensor's phases in order: %s when fused, else %s" % (fused_seq, lone_seq))
    if threshold:
        big = [e for e in events if e.get("name") == "ALLREDUCE"]
        check(all(e["args"]["bytes"] <= threshold for e in big if e["args"]["fused"] > 1),
              "every fused allreduce fits the threshold")
        check(any(e["args"]["fused"] > 1 for e in big), "fused allreduces recorded")
    check([e["name"] for e in phases.get("lonely.broadcast", [])] == ["QUEUE", "BROADCAST"],
          "a broadcast: QUEUE then one BROADCAST event")
    check(all(e["dur"] >= 0 and e["ts"] >= 0 for e in events if e.get("ph") == "X"),
          "events have timestamps and durations")
    check(any(e.get("name") == "CYCLE_START" for e in events), "mark_cycles marks rounds")

hvd.shutdown()
env_path = os.environ.get("HORA_TIMELINE")
if env_path and R == 0:
    with open(env_path) as f:
        events = json.load(f)
    names = {e.get("name") for e in events}
    check({"QUEUE", "FUSE", "ALLREDUCE", "UNPACK"} <= names,
          "HORA_TIMELINE: valid JSON after shutdown, with all phases")
sys.exit(check.finish())
