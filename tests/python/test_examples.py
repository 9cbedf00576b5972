"""The Fashion-MNIST examples, briefly: examples/train_mnist.py (the Horovod API of hora.torch) and
examples/train_mnist_ddp.py --backend hora (DistributedDataParallel on the "hora" backend), each
with 2 ranks for a few batches. Each must exit 0, report a test accuracy, and (rank 0) save a model
that loads into the examples' network.

Run from the repository root: /usr/bin/python3 tests/python/test_examples.py (with HORA_RUN,
PYTHONPATH, HORA_LIBRARY set). Skips (77) when torch or the dataset is missing.
"""
import os
import re
import subprocess
import sys
import tempfile

try:
    import torch
except ImportError as e:  # pragma: no cover
    print("SKIP: torch cannot be imported (%s)" % e)
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
PYDIR = os.path.join(ROOT, "python")
sys.path.insert(0, EXAMPLES)
import fashion_mnist  # noqa: E402

ACCURACY = re.compile(r"^\[0\] epoch 1: [0-9.]+ s, test loss [0-9.]+, test accuracy ([0-9.]+)%$", re.M)
RESULT = re.compile(r"^\[0\] RESULT ranks=2 epochs=1 mean_epoch_s=[0-9.]+ test_accuracy=([0-9.]+)$", re.M)


def run_example(name, script, extra, tmp):
    saved = os.path.join(tmp, name + ".pt")
    cmd = [os.environ["HORA_RUN"], "-n", "2", "--timeout", "50", sys.executable,
           os.path.join(EXAMPLES, script), "--epochs", "1", "--limit-batches", "8", "--log-interval", "4",
           "--save", saved] + extra
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    for k in ("HORA_RUN", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        env.pop(k, None)
    print("running: %s" % " ".join(cmd[5:]), flush=True)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout
    problems = []
    if proc.returncode != 0:
        problems.append("exit status %d" % proc.returncode)
    m = ACCURACY.search(out)
    if not m:
        problems.append("no test accuracy line from rank 0")
    elif not 0.0 <= float(m.group(1)) <= 100.0:
        problems.append("accuracy %s%% out of range" % m.group(1))
    r = RESULT.search(out)
    if not r:
        problems.append("no RESULT line from rank 0")
    if re.search(r"^\[1\] (epoch|RESULT)", out, re.M):
        problems.append("rank 1 printed the results too (only rank 0 should)")
    if not problems:
        state = torch.load(saved)
        model = fashion_mnist.make_model()
        model.load_state_dict(state)  # raises when the saved model does not fit
        print("ok: %s exits 0, reports test accuracy %s%% after 8 batches, saves a model that loads"
              % (script + (" " + " ".join(extra) if extra else ""), m.group(1)), flush=True)
        return True
    print(out[-3000:])
    print("FAIL: %s: %s" % (script, "; ".join(problems)), flush=True)
    return False


def main():
    if not os.environ.get("HORA_RUN"):
        print("FAIL: HORA_RUN (the path of hora-run) is not set")
        return 1
    try:
        fashion_mnist.load(train=False)
    except (OSError, ValueError) as e:
        print("SKIP: the Fashion-MNIST files are not readable: %s" % e)
        return 77
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ok &= run_example("hvd", "train_mnist.py", [], tmp)
        ok &= run_example("ddp", "train_mnist_ddp.py", ["--backend", "hora"], tmp)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
