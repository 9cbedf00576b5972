#!/usr/bin/python3
"""What one training step's gradient reduction costs: the examples' model (make_model in
examples/fashion_mnist.py) on one fixed batch, trained step after step three ways in the same
processes: compute alone (no reduction), Hora's Horovod API (hvd.DistributedOptimizer, a hook
per gradient through the engine), and DistributedDataParallel on the "hora" backend.

    /usr/bin/python3 perf/step_overhead.py [-n NRANKS] [--steps 20] [--repeat 40]

It starts NRANKS ranks (default 2) of itself with hora-run ($HORA_RUN, else build/tools/hora-run,
else PATH); each rank runs the three ways in turn, --repeat times over (interleaved, so that
drift in the machine's speed touches all alike), --steps steps each, and rank 0 prints the median
step time of each way, the overhead of each reduction over compute alone, their ratio, and the
engine's rounds, negotiations skipped by the response cache and fused calls per step. Needs
PYTHONPATH=python (the library is then found in build/, or set HORA_LIBRARY).
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from py_overhead import ROOT, free_port, hora_run  # (perf/, this script's folder)


def rank_main(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import fashion_mnist
    from hora import _core as C
    import hora.torch as hvd
    import hora.torch.distributed  # noqa: F401  registers the backend

    torch.set_num_threads(1)
    rank, size = int(os.environ["HORA_RANK"]), int(os.environ["HORA_SIZE"])
    torch.manual_seed(42 + rank)
    x = torch.randn(args.batch_size, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch_size,))
    hvd.init(comm=C.Comm.from_env())
    dist.init_process_group("hora", init_method="env://", rank=rank, world_size=size)

    def make(kind):
        torch.manual_seed(7)
        model = fashion_mnist.make_model()
        if kind == "ddp":
            model = DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
        if kind == "horovod":
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        return model, opt

    def steps(model, opt, n):
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            opt.zero_grad()
            F.nll_loss(model(x), y).backward()
            opt.step()
            out.append(time.perf_counter() - t0)
        return out

    kinds = ["compute", "horovod", "ddp"]
    built = {k: make(k) for k in kinds}
    for k in kinds:
        steps(*built[k], 20)  # warm-up (and, for the Horovod path, the cache's first steps)
    from hora.torch import _state
    engine = _state.engine
    times = {k: [] for k in kinds}
    before = dict(engine.stats) if engine is not None else {}
    horovod_steps = 0
    for rep in range(args.repeat):
        for k in kinds[rep % 3:] + kinds[:rep % 3]:
            times[k].extend(steps(*built[k], args.steps))
            if k == "horovod":
                horovod_steps += args.steps
    after = dict(engine.stats) if engine is not None else {}
    dist.barrier()
    if rank == 0:
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print("# %d ranks, %d steps x %d repetitions per way, batch %d, the examples' model"
              % (size, args.steps, args.repeat, args.batch_size))
        print("%-40s %10s %12s" % ("way", "ms/step", "over compute"))
        for k, label in (("compute", "compute alone (no reduction)"),
                         ("horovod", "hvd.DistributedOptimizer (engine)"),
                         ("ddp", "DDP on the hora backend")):
            print("%-40s %10.3f %12s" % (label, med[k], "" if k == "compute" else
                                           "%.3f" % (med[k] - med["compute"])))
        h, d = med["horovod"] - med["compute"], med["ddp"] - med["compute"]
        print("Horovod path step - DDP step: %.3f ms" % (med["horovod"] - med["ddp"]))
        if d > 0:
            print("Horovod path overhead / DDP overhead: %.2f" % (h / d))
        if engine is not None and horovod_steps:
            per = {k: (after.get(k, 0) - before.get(k, 0)) / horovod_steps for k in after}
            print("engine per Horovod step: %.1f rounds (%.1f silent), %.1f negotiated, "
                  "%.1f cached, %.1f fused calls"
                  % (per.get("rounds", 0), per.get("silent_rounds", 0), per.get("negotiated", 0),
                     per.get("cached", 0), per.get("fused_batches", 0)))
        sys.stdout.flush()
    dist.destroy_process_group()
    hvd.shutdown()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--nranks", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20, help="steps per way and repetition")
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    if "HORA_RANK" in os.environ:
        rank_main(args)
        return 0
    runner = hora_run()
    if not runner:
        return 2
    env = dict(os.environ)
    env.pop("HORA_RUN", None)
    env["MASTER_ADDR"], env["MASTER_PORT"] = "127.0.0.1", str(free_port())
    cmd = [runner, "-n", str(args.nranks), "--no-prefix", "--timeout", "900", sys.executable,
           os.path.abspath(__file__), "--steps", str(args.steps), "--repeat", str(args.repeat),
           "--batch-size", str(args.batch_size)]
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
