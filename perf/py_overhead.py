"""Latency of one small allreduce (1 float32) from Python: the raw hora._core call against
hora.torch's paths through its background engine; also the CPU an idle engine uses.

    /usr/bin/python3 perf/py_overhead.py [-n NRANKS] [-i ITERATIONS]

It starts NRANKS ranks (default 2) of itself with hora-run ($HORA_RUN, else hora-run in PATH)
and prints, from rank 0, the median and the 10th and 90th percentiles of the per-call time over
ITERATIONS calls (after a warm-up). Needs PYTHONPATH=python and the library (HORA_LIBRARY or
LD_LIBRARY_PATH) in the environment.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


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
    hvd.barrier()
    idle = []
    for seconds in (1.5, 2.0):  # rounds at the cycle time, then (after ~1 s) the quiet pace
        c0, w0 = time.process_time(), time.monotonic()
        time.sleep(seconds)
        idle.append(100.0 * (time.process_time() - c0) / (time.monotonic() - w0))
    stats = hvd.mpi_ops._stats()
    hvd.shutdown()
    if hvd.mpi_ops._env_comm is None:
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--nranks", type=int, default=2)
    ap.add_argument("-i", "--iterations", type=int, default=4000)
    args = ap.parse_args()
    if "HORA_RANK" in os.environ:
        rank_main(args.iterations)
        return 0
    runner = os.environ.get("HORA_RUN") or shutil.which("hora-run")
    if not runner:
        print("hora-run not found: set HORA_RUN to its path", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env.pop("HORA_RUN", None)
    cmd = [runner, "-n", str(args.nranks), "--no-prefix", "--timeout", "300",
           sys.executable, os.path.abspath(__file__), "-i", str(args.iterations)]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
