"""The Fashion-MNIST examples, briefly: examples/train_mnist.py (the Horovod API of hora.torch) and
examples/train_mnist_ddp.py --backend hora (DistributedDataParallel on the "hora" backend), each
with 2 ranks for a few batches. Each must exit 0, report a test accuracy, and (rank 0) save a model
that loads into the examples' network. Then programs/horovod_synthetic.py, a script written for
horovod.torch, runs with only its import line changed: its loss must fall, both ranks must end
with identical parameters, and its checkpoint must hold the model and the optimizer state.

Run from the repository root: /usr/bin/python3 tests/python/test_examples.py (with HORA_RUN,
PYTHONPATH, HORA_LIBRARY set). Skips (77) when torch or the dataset is missing.
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

torch = harness.require_torch()

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
PYDIR = os.path.join(ROOT, "python")
sys.path.insert(0, EXAMPLES)
import fashion_mnist  # noqa: E402

ACCURACY = re.compile(r"^\[0\] epoch 1: [0-9.]+ s, test loss [0-9.]+, test accuracy ([0-9.]+)%$", re.M)
RESULT = re.compile(r"^\[0\] RESULT ranks=2 epochs=1 mean_epoch_s=[0-9.]+ test_accuracy=([0-9.]+)$", re.M)


CHANCE = 10.0      # Fashion-MNIST has 10 classes
ACCURACIES = {}    # example name -> the test accuracy rank 0 reported


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
    elif not CHANCE + 2.5 < float(m.group(1)) <= 100.0:
        # 8 batches of 2 ranks learn something: a wrong reduction (or none) stays near chance.
        problems.append("accuracy %s%% is not above chance (%g%%)" % (m.group(1), CHANCE))
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
        ACCURACIES[name] = m.group(1)
        return True
    print(out[-3000:])
    print("FAIL: %s: %s" % (script, "; ".join(problems)), flush=True)
    return False


FINAL = re.compile(r"^\[(\d)\] FINAL rank (\d) of 2 first_loss ([0-9.]+) last_loss ([0-9.]+) "
                   r"params ([0-9a-f]{64})$", re.M)


def run_horovod_program(tmp):
    """programs/horovod_synthetic.py is written for horovod.torch; only its import line changes."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs",
                           "horovod_synthetic.py")) as f:
        original = f.read().splitlines(keepends=True)
    changed = [l.replace("import horovod.torch as hvd", "import hora.torch as hvd") for l in original]
    diff = [i for i, (a, b) in enumerate(zip(original, changed)) if a != b]
    if len(diff) != 1 or any(re.match(r"\s*(import|from)\s+horovod", l) for l in changed):
        print("FAIL: the Horovod program must differ from its run in exactly its import line")
        return False
    script = os.path.join(tmp, "horovod_synthetic.py")
    with open(script, "w") as f:
        f.writelines(changed)
    saved = os.path.join(tmp, "horovod_checkpoint.pt")
    cmd = [os.environ["HORA_RUN"], "-n", "2", "--timeout", "60", sys.executable, script,
           "--checkpoint", saved]
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("HORA_RUN", None)
    print("running: a horovod.torch program with its import changed", flush=True)
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = proc.stdout
    problems = []
    finals = {int(m.group(2)): m for m in FINAL.finditer(out) if m.group(1) == m.group(2)}
    if proc.returncode != 0:
        problems.append("exit status %d" % proc.returncode)
    if sorted(finals) != [0, 1]:
        problems.append("not every rank printed its FINAL line")
    else:
        first, last = float(finals[0].group(3)), float(finals[0].group(4))
        if not last < 0.5 * first:
            problems.append("the loss did not fall by half (%.4f -> %.4f)" % (first, last))
        if finals[0].group(5) != finals[1].group(5):
            problems.append("the ranks' parameters differ after training")
        if finals[0].group(3, 4) != finals[1].group(3, 4):
            problems.append("the averaged losses differ between ranks")
    if not problems:
        state = torch.load(saved)
        if set(state) != {"model", "optimizer"} or not state["optimizer"]["state"]:
            problems.append("the checkpoint lacks the model or the optimizer state")
    if problems:
        print(out[-3000:])
        print("FAIL: horovod program: %s" % "; ".join(problems), flush=True)
        return False
    print("ok: a horovod.torch program with only its import changed trains (loss %s -> %s) and "
          "leaves identical parameters on both ranks" % (finals[0].group(3), finals[0].group(4)),
          flush=True)
    return True


def main():
    not_ready = harness.examples_ready("HORA_RUN")
    if not_ready is not None:
        return not_ready
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        ok &= run_example("hvd", "train_mnist.py", [], tmp)
        ok &= run_example("ddp", "train_mnist_ddp.py", ["--backend", "hora"], tmp)
        # The same network, seed, data and averaged gradients through two APIs: with 2 ranks
        # every average is exact, so both must end with the same model and the same accuracy.
        if len(ACCURACIES) == 2 and ACCURACIES["hvd"] != ACCURACIES["ddp"]:
            print("FAIL: the Horovod API reached %s%%, DistributedDataParallel on hora %s%%"
                  % (ACCURACIES["hvd"], ACCURACIES["ddp"]), flush=True)
            ok = False
        ok &= run_horovod_program(tmp)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
