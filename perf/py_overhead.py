"""Latency of one small allreduce (1 float32) from Python: the raw hora._core call and
hora.torch's paths through its background engine, beside the same call from C and torch's own
gloo backend; also the CPU an idle engine uses.

    /usr/bin/python3 perf/py_overhead.py [-n NRANKS] [-i ITERATIONS] [--no-c] [--no-gloo]

It starts NRANKS ranks (default 2) of itself with hora-run ($HORA_RUN, else
build/tools/hora-run, else PATH) and prints, from rank 0, the median and the 10th and 90th
percentiles of the per-call time over ITERATIONS calls (after a warm-up). The gloo row is
torch.distributed.all_reduce on the same tensor in the same processes. Then, unless --no-c, it
runs allreduce_perf (--c-tool, else build/perf, else PATH) for 4 bytes on NRANKS processes under hora-run and
prints its mean time per call: the C floor of the Python rows. Needs PYTHONPATH=python (the
library is then found in build/, or set HORA_LIBRARY).
"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))]


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    out = []
    clock = time.perf_counter_ns
    for _ in range(iters):
        t0 = clock()
        fn()
        out.append((clock() - t0) / 1000.0)
    return out


def gloo_samples(iters, t):
    """torch.distributed.all_reduce (gloo) of t in these ranks, or None if MASTER_PORT is unset."""
    if "MASTER_PORT" not in os.environ:
        return None
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://", rank=int(os.environ["HORA_RANK"]),
                            world_size=int(os.environ["HORA_SIZE"]))
    try:
        return timed(lambda: dist.all_reduce(t), iters, 200)
    finally:
        dist.destroy_process_group()


def rank_main(iters):
    import torch
    torch.set_num_threads(1)
    from hora import _core as C
    import hora.torch as hvd

    comm = C.Comm.from_env()
    t = torch.ones(1)
    p = t.data_ptr()
    rows = []
    samples = timed(lambda: comm.allreduce(p, p, 1, C.FLOAT32, C.SUM), iters * 5, 2000)
    rows.append(("hora._core Comm.allreduce (raw)", samples))
    gloo = gloo_samples(iters, t)

    hvd.init(comm=comm)
    rows.append(("hvd.allreduce (engine, autograd wrapper)",
                 timed(lambda: hvd.allreduce(t, op=hvd.Sum), iters, 200)))
    rows.append(("hvd.allreduce_ (engine, in place)",
                 timed(lambda: hvd.allreduce_(t, op=hvd.Sum), iters, 200)))
    rows.append(("hvd.synchronize(hvd.allreduce_async_)",
                 timed(lambda: hvd.synchronize(hvd.allreduce_async_(t, op=hvd.Sum)), iters, 200)))
    batch = [torch.ones(1) for _ in range(16)]
    rows.append(("16 x allreduce_async_ then synchronize (per tensor)",
                 [x / 16 for x in timed(lambda: [hvd.synchronize(h) for h in [
                     hvd.allreduce_async_(b, op=hvd.Sum) for b in batch]], iters // 4, 50)]))
    if gloo is not None:
        rows.append(("torch.distributed.all_reduce (gloo)", gloo))
    hvd.barrier()
    idle = []
    for seconds in (1.5, 2.0):  # rounds at the cycle time, then (after ~1 s) the quiet pace
        c0, w0 = time.process_time(), time.monotonic()
        time.sleep(seconds)
        idle.append(100.0 * (time.process_time() - c0) / (time.monotonic() - w0))
    stats = hvd.mpi_ops._stats()
    hvd.shutdown()
    if hvd.basics._env_comm is None:
        comm.destroy()
    if int(os.environ["HORA_RANK"]) == 0:
        n = int(os.environ["HORA_SIZE"])
        print("one float32 allreduce at %d ranks, HORA_CYCLE_TIME=%s ms (times in us)"
              % (n, os.environ.get("HORA_CYCLE_TIME", "1")))
        print("%-52s %9s %9s %9s %7s" % ("path", "median", "p10", "p90", "calls"))
        for name, xs in rows:
            print("%-52s %9.1f %9.1f %9.1f %7d" % (name, statistics.median(xs),
                                                   percentile(xs, 10), percentile(xs, 90),
                                                   len(xs)))
        print("idle engine, CPU per process: %.1f%% of a core in the first 1.5 s, %.1f%% in "
              "the next two (%d engine rounds in all)" % (idle[0], idle[1], stats["rounds"]))
        sys.stdout.flush()


def built_or_path(relative, name):
    built = os.path.join(ROOT, "build", relative)
    return built if os.path.exists(built) else shutil.which(name)


def hora_run():
    """hora-run: $HORA_RUN, else build/tools/hora-run, else PATH; None (and why, printed) if none."""
    runner = os.environ.get("HORA_RUN") or built_or_path(os.path.join("tools", "hora-run"), "hora-run")
    if not runner:
        print("hora-run not found: set HORA_RUN to its path", file=sys.stderr)
    return runner


def c_floor(runner, env, nranks, iters, tool=None):
    """Mean us per 4-byte float sum allreduce from C: allreduce_perf's out-of-place time."""
    tool = tool or built_or_path(os.path.join("perf", "allreduce_perf"), "allreduce_perf")
    if not tool:
        print("allreduce_perf not found: no C row", file=sys.stderr)
        return None
    cmd = [runner, "-n", str(nranks), "--no-prefix", "--timeout", "300", tool, "-b", "4", "-e", "4",
           "-n", str(iters * 5), "-w", "2000", "-c", "0"]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
    # data row: size count type redop root time algbw busbw #wrong time algbw busbw #wrong
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == "4" and re.fullmatch(r"[0-9.]+", f[5]):
            return float(f[5])
    raise SystemExit("py_overhead: no 4-byte row in allreduce_perf's output:\n" + out)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--nranks", type=int, default=2)
    ap.add_argument("-i", "--iterations", type=int, default=4000)
    ap.add_argument("--no-c", action="store_true", help="skip the C row (allreduce_perf)")
    ap.add_argument("--no-gloo", action="store_true", help="skip torch's gloo row")
    ap.add_argument("--c-tool", metavar="PATH", help="allreduce_perf to run (default: build/perf, else PATH)")
    args = ap.parse_args()
    if "HORA_RANK" in os.environ:
        rank_main(args.iterations)
        return 0
    runner = hora_run()
    if not runner:
        return 2
    env = dict(os.environ)
    env.pop("HORA_RUN", None)
    if not args.no_gloo:
        env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(free_port())
    cmd = [runner, "-n", str(args.nranks), "--no-prefix", "--timeout", "300",
           sys.executable, os.path.abspath(__file__), "-i", str(args.iterations)]
    rc = subprocess.call(cmd, env=env)
    if rc != 0 or args.no_c:
        return rc
    us = c_floor(runner, env, args.nranks, args.iterations, args.c_tool)
    if us is not None:
        print("%-52s %9.2f  (mean of %d calls, allreduce_perf -b 4 -e 4, %d processes)"
              % ("C: horaAllReduce (allreduce_perf)", us, args.iterations * 5, args.nranks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
