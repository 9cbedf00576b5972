"""PyTorch on a GPU through Hora, the training half (tests/gpu/run-torch-gpu.sh runs it):

  examples   the Horovod-API example (examples/train_mnist.py) one epoch at 1 and 2 ranks, on the
             CPU and on the GPU (every rank on GPU 0), with the same seed: the test accuracies
             must agree within --tolerance (float sums differ in order between CPU and GPU)
  ddp        the DDP example (examples/train_mnist_ddp.py --backend hora) likewise at 2 ranks

Each run's line "RESULT ranks=.. mean_epoch_s=.. test_accuracy=.." is parsed; a table of them is
printed; the exit status is 1 when a run fails or two accuracies disagree.
    /usr/bin/python3 tests/gpu/torch_gpu_check.py examples|ddp --data-dir DIR [--tolerance 0.02]
(HORA_LIBRARY, PYTHONPATH set by the caller).
"""
import argparse
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import harness  # noqa: E402

RESULT = re.compile(r"RESULT ranks=(\d+) epochs=\d+ mean_epoch_s=([0-9.]+) test_accuracy=([0-9.]+)")


def run(script, ranks, device, data_dir, extra=(), env=None):
    argv = [sys.executable, os.path.join(ROOT, "examples", script), "--epochs", "1",
            "--device", device, "--data-dir", data_dir, "--log-interval", "0"] + list(extra)
    e = dict(env or {})
    e.setdefault("HORA_TIMEOUT_MS", "60000")
    t0 = time.time()
    procs = harness.spawn(ranks, argv, env=e)
    results = harness.wait_all(procs, timeout=240)
    out = "".join(o for _, o in results)
    ok = all(rc == 0 for rc, _ in results)
    m = RESULT.search(out)
    if not ok or not m:
        print(out[-4000:])
        return None
    return {"ranks": ranks, "device": device, "epoch_s": float(m.group(2)),
            "accuracy": float(m.group(3)), "wall_s": time.time() - t0}


def compare(rows, tolerance):
    print("%-10s %5s %-5s %10s %10s" % ("example", "ranks", "dev", "epoch s", "accuracy"))
    bad = 0
    by = {}
    for name, r in rows:
        if r is None:
            bad += 1
            continue
        by[(name, r["ranks"], r["device"])] = r
        print("%-10s %5d %-5s %10.3f %10.4f" % (name, r["ranks"], r["device"], r["epoch_s"], r["accuracy"]))
    for (name, ranks, dev), r in sorted(by.items()):
        if dev != "cuda":
            continue
        cpu = by.get((name, ranks, "cpu"))
        if cpu is None:
            continue
        diff = abs(r["accuracy"] - cpu["accuracy"])
        verdict = "same" if diff <= tolerance else "DIFFERENT"
        bad += diff > tolerance
        print("%s at %d ranks: GPU %.4f, CPU %.4f (|diff| %.4f, tolerance %.4f): %s; epoch %.2fx the CPU's"
              % (name, ranks, r["accuracy"], cpu["accuracy"], diff, tolerance, verdict,
                 r["epoch_s"] / cpu["epoch_s"] if cpu["epoch_s"] else 0.0))
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=("examples", "ddp"))
    p.add_argument("--data-dir", required=True)
    p.add_argument("--tolerance", type=float, default=0.02)
    args = p.parse_args()
    rows = []
    if args.what == "examples":
        for ranks in (1, 2):
            for dev in ("cpu", "cuda"):
                rows.append(("horovod", run("train_mnist.py", ranks, dev, args.data_dir)))
    else:
        for dev in ("cpu", "cuda"):
            port = harness.free_port()
            rows.append(("ddp-hora", run("train_mnist_ddp.py", 2, dev, args.data_dir, ["--backend", "hora"],
                                         env={"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})))
    return compare(rows, args.tolerance)


if __name__ == "__main__":
    sys.exit(main())
