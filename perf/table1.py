#!/usr/bin/python3
"""Table I: the Fashion-MNIST demo on 1, 2 and 4 processes, Hora's Horovod API against torch's own
gloo backend under DistributedDataParallel (and, unless --no-hora-ddp, DDP on the "hora" backend).

Every configuration trains the same model on the same data, sampler, seed, per-rank batch and
learning-rate scaling; the runs are interleaved (each repetition runs every process count and
variant, in a rotating order) so that drift in the machine's speed touches all of them alike.
Prints a Markdown table: per-epoch training time (the mean over the epochs of a run, the median
over repetitions) and the final test accuracy (averaged over the ranks, as the demo reports it).

    /usr/bin/python3 perf/table1.py [--epochs 2] [--batch-size 64] [--procs 1,2,4] [--repeat 3]
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULT = re.compile(r"RESULT ranks=(\d+) epochs=(\d+) mean_epoch_s=([0-9.]+) test_accuracy=([0-9.]+)")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", default="1,2,4", help="comma-separated process counts")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per-rank training batch")
    p.add_argument("--lr", type=float, default=0.01, help="per-rank learning rate (scaled by the size)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--repeat", type=int, default=3, help="repetitions of the whole interleaved set")
    p.add_argument("--limit-batches", type=int, default=0, help="batches per epoch (0: the whole epoch)")
    p.add_argument("--variants", default="hora,gloo-ddp,hora-ddp",
                   help="which to run: hora (train_mnist.py), gloo-ddp and hora-ddp (train_mnist_ddp.py)")
    p.add_argument("--python", default=sys.executable, help="interpreter of the ranks")
    p.add_argument("--hora-run", default=os.environ.get("HORA_RUN") or _default_hora_run(),
                   help="path of hora-run (default: $HORA_RUN, else build/tools/hora-run, else PATH)")
    p.add_argument("--data-dir", default=None, help="Fashion-MNIST directory (the demo's default if unset)")
    p.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    p.add_argument("--exit-grace", type=float, default=60,
                   help="seconds a run may take to exit after printing its result before it is stopped")
    p.add_argument("--json", metavar="PATH", help="also write every run's numbers here")
    return p.parse_args()


def _default_hora_run():
    candidate = os.path.join(ROOT, "build", "tools", "hora-run")
    if os.path.exists(candidate):
        return candidate
    return shutil.which("hora-run") or "hora-run"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


VARIANTS = [
    ("hora", "train_mnist.py", []),
    ("gloo-ddp", "train_mnist_ddp.py", ["--backend", "gloo"]),
    ("hora-ddp", "train_mnist_ddp.py", ["--backend", "hora"]),
]


def run_one(args, variant, n):
    name, script, extra = variant
    cmd = [args.hora_run, "-n", str(n), "--timeout", str(args.timeout), args.python,
           os.path.join(ROOT, "examples", script), "--epochs", str(args.epochs),
           "--batch-size", str(args.batch_size), "--lr", str(args.lr), "--seed", str(args.seed),
           "--log-interval", "0"] + extra
    if args.limit_batches:
        cmd += ["--limit-batches", str(args.limit_batches)]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    env = dict(os.environ)
    env.pop("HORA_RUN", None)
    py = os.path.join(ROOT, "python")
    env["PYTHONPATH"] = py + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if script.endswith("_ddp.py"):
        env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(free_port())
    start = time.perf_counter()
    out, stalled, rc = _run_until_result(cmd, env, args.timeout, args.exit_grace)
    wall = time.perf_counter() - start
    m = RESULT.search(out)
    if (rc != 0 and not stalled) or not m:
        sys.stderr.write(out[-4000:])
        raise SystemExit("table1: %s on %d process(es) failed (status %d): %s"
                         % (name, n, rc, " ".join(cmd)))
    if stalled:
        print("# %s on %d process(es) reported its result but did not exit within %.0f s; stopped it"
              % (name, n, args.exit_grace), file=sys.stderr, flush=True)
    return {"variant": name, "procs": n, "epoch_s": float(m.group(3)), "accuracy": float(m.group(4)),
            "wall_s": wall, "exit_stalled": stalled}


def _run_until_result(cmd, env, timeout, grace):
    """Runs a launch; returns (output, stalled, status). A launch that printed its RESULT line
    but has not exited grace seconds later is stopped (SIGTERM to hora-run, which forwards it to
    the ranks, then SIGKILL) and counted as stalled: its numbers stand."""
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline, seen = time.monotonic() + timeout + 30, None
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            if seen is None:
                log.seek(0)
                if RESULT.search(log.read()):
                    seen = time.monotonic()
                    deadline = min(deadline, seen + grace)
        stalled = proc.poll() is None
        if stalled:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.seek(0)
        return log.read(), stalled and seen is not None, proc.returncode


def main():
    args = parse_args()
    procs = [int(x) for x in args.procs.split(",") if x]
    wanted = [x for x in args.variants.split(",") if x]
    unknown = set(wanted) - {v[0] for v in VARIANTS}
    if unknown:
        raise SystemExit("table1: unknown variant(s) %s" % ", ".join(sorted(unknown)))
    variants = [v for v in VARIANTS if v[0] in wanted]
    runs = []
    order = [(n, v) for n in procs for v in variants]
    began = time.perf_counter()
    load_before = os.getloadavg()[0]
    for rep in range(args.repeat):
        shift = rep % len(variants)  # rotate which variant goes first at each process count
        for n in procs:
            for v in variants[shift:] + variants[:shift]:
                r = run_one(args, v, n)
                r["repeat"] = rep
                runs.append(r)
                print("# rep %d: %-8s on %d process(es): %.2f s/epoch, accuracy %.2f%% (run %.0f s)"
                      % (rep, r["variant"], n, r["epoch_s"], 100 * r["accuracy"], r["wall_s"]),
                      file=sys.stderr, flush=True)
    total = time.perf_counter() - began

    def pick(name, n):
        rs = [r for r in runs if r["variant"] == name and r["procs"] == n]
        if not rs:
            return None, None
        return statistics.median(r["epoch_s"] for r in rs), rs[-1]["accuracy"]

    def cell(x, fmt):
        return "-" if x is None else fmt % x

    cols = ["processes", "Hora epoch time (s)", "Hora test accuracy", "torch gloo DDP epoch time (s)",
            "gloo accuracy", "ratio (gloo / Hora time)", "DDP on hora backend epoch time (s)",
            "DDP on hora accuracy"]
    print("Fashion-MNIST, %d epoch(s), batch %d per rank, lr %g x processes, seed %d; median of %d "
          "interleaved repetition(s); %d CPU core(s); load average %.1f before, %.1f after; total %.0f s"
          % (args.epochs, args.batch_size, args.lr, args.seed, args.repeat, os.cpu_count(), load_before,
             os.getloadavg()[0], total))
    print()
    print("| " + " | ".join(cols) + " |")
    print("|" + "|".join("---:" for _ in cols) + "|")
    for n in procs:
        h_t, h_a = pick("hora", n)
        g_t, g_a = pick("gloo-ddp", n)
        d_t, d_a = pick("hora-ddp", n)
        pct = lambda a: None if a is None else 100 * a  # noqa: E731
        row = [str(n), cell(h_t, "%.2f"), cell(pct(h_a), "%.2f%%"), cell(g_t, "%.2f"),
               cell(pct(g_a), "%.2f%%"), cell(g_t / h_t if g_t and h_t else None, "%.2f"),
               cell(d_t, "%.2f"), cell(pct(d_a), "%.2f%%")]
        print("| " + " | ".join(row) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "order": [(n, v[0]) for n, v in order], "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
