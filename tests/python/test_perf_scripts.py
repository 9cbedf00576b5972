"""perf/table1.py, perf/py_overhead.py and perf/step_overhead.py, briefly, so that docs/python.md's
measuring commands keep working: Table I on 1 and 2 processes for a few batches of every variant
(Hora's Horovod API, torch gloo under DDP, DDP on the "hora" backend), the small-allreduce
overhead at 2 ranks with its gloo and C rows, and the per-step overhead at 2 ranks for 10 steps
(whose engine line must show every gradient announced by its response-cache id). Each must exit
0 and print every row with numbers in range.

Run from the repository root: /usr/bin/python3 tests/python/test_perf_scripts.py (with HORA_RUN,
PYTHONPATH, HORA_LIBRARY and ALLREDUCE_PERF set). Skips (77) when torch or the dataset is missing.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

harness.require_torch()
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

NUM = r"([0-9]+\.[0-9]+)"


def run(cmd):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        env.pop(k, None)
    print("running: %s" % " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=240)
    return proc.returncode, proc.stdout


def check_table1(tmp):
    problems = []
    out_json = os.path.join(tmp, "t1.json")
    rc, out = run([sys.executable, os.path.join(ROOT, "perf", "table1.py"), "--procs", "1,2",
                   "--epochs", "1", "--limit-batches", "4", "--repeat", "1", "--timeout", "100",
                   "--json", out_json])
    if rc != 0:
        return ["table1.py exit status %d" % rc], out
    rows = []
    for n in (1, 2):
        # | n | hora s | hora acc% | gloo s | gloo acc% | ratio | hora-ddp s | hora-ddp acc% |
        row = re.search(r"^\| %d \| %s \| %s%% \| %s \| %s%% \| %s \| %s \| %s%% \|$"
                        % (n, NUM, NUM, NUM, NUM, NUM, NUM, NUM), out, re.M)
        if not row:
            problems.append("no complete row for %d process(es)" % n)
            continue
        times = [float(row.group(i)) for i in (1, 3, 6)]
        accs = [float(row.group(i)) for i in (2, 4, 7)]
        if not all(t > 0 for t in times):
            problems.append("%d process(es): an epoch time is not positive: %s" % (n, times))
        if not all(0.0 <= a <= 100.0 for a in accs):
            problems.append("%d process(es): an accuracy is out of range: %s" % (n, accs))
        rows.append((n, float(row.group(5))))
    with open(out_json) as f:
        runs = json.load(f)["runs"]
    # One repetition: each median is the run's own time, so the ratio is exactly theirs.
    epoch = {(r["variant"], r["procs"]): r["epoch_s"] for r in runs}
    for n, ratio in rows:
        want = epoch.get(("gloo-ddp", n), 0) / epoch.get(("hora", n), float("inf"))
        if abs(ratio - want) > 0.006:
            problems.append("%d process(es): the ratio %.2f is not gloo's time over Hora's (%.3f)"
                            % (n, ratio, want))
    got = sorted((r["variant"], r["procs"]) for r in runs)
    want = sorted((v, n) for v in ("hora", "gloo-ddp", "hora-ddp") for n in (1, 2))
    if got != want:
        problems.append("the JSON holds runs %s, not %s" % (got, want))
    return problems, out


def check_overhead():
    problems = []
    rc, out = run([sys.executable, os.path.join(ROOT, "perf", "py_overhead.py"), "-n", "2", "-i", "200",
                   "--c-tool", os.environ["ALLREDUCE_PERF"]])
    if rc != 0:
        return ["py_overhead.py exit status %d" % rc], out
    for path in ("hora._core Comm.allreduce (raw)", "hvd.allreduce (engine, autograd wrapper)",
                 "hvd.allreduce_ (engine, in place)", "hvd.synchronize(hvd.allreduce_async_)",
                 "16 x allreduce_async_ then synchronize (per tensor)",
                 "torch.distributed.all_reduce (gloo)"):
        m = re.search(r"^%s +%s +%s +%s +(\d+)$" % (re.escape(path), NUM, NUM, NUM), out, re.M)
        if not m:
            problems.append("no row for %r" % path)
        elif not 0 < float(m.group(2)) <= float(m.group(1)) <= float(m.group(3)):
            problems.append("%r: median %s is not between p10 %s and p90 %s (or not positive)"
                            % (path, m.group(1), m.group(2), m.group(3)))
    if not re.search(r"^C: horaAllReduce \(allreduce_perf\) +%s " % NUM, out, re.M):
        problems.append("no C row")
    if not re.search(r"^idle engine, CPU per process: %s%% .* %s%% in the next two" % (NUM, NUM), out, re.M):
        problems.append("no idle-engine line")
    return problems, out


def check_step_overhead():
    rc, out = run([sys.executable, os.path.join(ROOT, "perf", "step_overhead.py"), "-n", "2",
                   "--steps", "10", "--repeat", "1"])
    if rc != 0:
        return ["step_overhead.py exit status %d" % rc], out
    problems = []
    for way in ("compute alone (no reduction)", "hvd.DistributedOptimizer (engine)",
                "DDP on the hora backend"):
        if not re.search(r"^%s +%s" % (re.escape(way), NUM), out, re.M):
            problems.append("no row for %r" % way)
    m = re.search(r"^engine per Horovod step: %s rounds \(%s silent\), %s negotiated, %s cached, "
                  r"%s fused calls$" % ((NUM,) * 5), out, re.M)
    if not m:
        problems.append("no engine line")
    elif float(m.group(4)) != 8.0 or float(m.group(3)) != 0.0:
        problems.append("the model's 8 gradients are not all announced by their cache ids after "
                        "the warm-up steps")
    return problems, out


def main():
    not_ready = harness.examples_ready("HORA_RUN", "ALLREDUCE_PERF")
    if not_ready is not None:
        return not_ready
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name, check in (("table1.py", lambda: check_table1(tmp)), ("py_overhead.py", check_overhead),
                            ("step_overhead.py", check_step_overhead)):
            problems, out = check()
            if problems:
                ok = False
                print(out[-4000:])
                print("FAIL: %s: %s" % (name, "; ".join(problems)), flush=True)
            else:
                print("ok: %s prints every row" % name, flush=True)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
