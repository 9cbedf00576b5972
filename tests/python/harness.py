"""Shared helpers for the Python tests of hora.torch.

A test script is both the launcher and the rank program:

    import harness
    torch = harness.require_torch()          # exits 77 (skip) with a message without torch
    if not harness.in_rank():                # started by hand or by meson: launch the ranks
        sys.exit(harness.launch_self(__file__, [2, 3], timeout=60))
    hvd = harness.init_hvd()                 # in a rank: hora.torch, initialised
    check = harness.Checker()
    check(value == expected, "what is checked")
    ...
    sys.exit(check.finish())

Stable interface (other tests import it):
  require_torch() -> the torch module (or sys.exit(77) with a visible SKIP line).
  in_rank() -> True inside a rank started by hora-run or spawn().
  launch(nranks, argv, timeout=60, env=None) -> (exit status, output text): runs argv under
      $HORA_RUN -n nranks --timeout timeout; output lines carry hora-run's "[r] " prefix.
  launch_self(path, rank_counts, timeout=60, env=None, args=()) -> exit status for sys.exit:
      runs `python3 path args...` at each rank count, prints the output, stops at the first
      failure.
  spawn(nranks, argv, env=None) -> list of subprocess.Popen, one per rank, started without
      hora-run (HORA_RANK, HORA_SIZE, HORA_ROOT=127.0.0.1:<free port>, HORA_SECRET), for tests
      in which a rank must die without the launcher stopping the others.
  wait_all(procs, timeout) -> list of (exit status, output text); kills what outlives timeout
      (status None then).
  init_hvd() -> hora.torch after hvd.init(), with torch.set_num_threads(1).
  examples_ready(*env_names) -> None when the variables env_names are set and the Fashion-MNIST
      files readable; else the exit status to return: 1 (a variable missing) or 77 (skip).
  Checker: check(cond, text) records and prints one check; raises_(exc_types, fn, text)
      checks that fn() raises one of exc_types and returns the exception; finish() -> 0 when
      all passed, else 1 (prints a summary).
The environment needs PYTHONPATH (python/), HORA_LIBRARY or LD_LIBRARY_PATH for libhora, and
HORA_RUN (the path of hora-run) for launch().
"""
import os
import secrets
import socket
import subprocess
import sys
import time

PYTHON = sys.executable or "/usr/bin/python3"


def require_torch():
    try:
        import torch
    except ImportError as e:
        print("SKIP: torch cannot be imported (%s)" % e, flush=True)
        sys.exit(77)
    return torch


def examples_ready(*env_names):
    for k in env_names:
        if not os.environ.get(k):
            print("FAIL: %s is not set" % k, flush=True)
            return 1
    examples = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "examples")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    import fashion_mnist
    try:
        fashion_mnist.load(train=False)
    except (OSError, ValueError) as e:
        print("SKIP: the Fashion-MNIST files are not readable: %s" % e, flush=True)
        return 77
    return None


def in_rank():
    return "HORA_RANK" in os.environ


def _env(extra):
    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(__file__))
    py = os.path.normpath(os.path.join(here, "..", "..", "python"))
    env["PYTHONPATH"] = py + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.pop("HORA_RUN", None)  # the launcher's own setting; the library would warn about it
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def launch(nranks, argv, timeout=60, env=None):
    """hora-run -n nranks argv, stopped after timeout seconds (at most HARNESS_TIMEOUT, where a
    caller with a limit of its own sets it, so that what the ranks printed is still reported)."""
    runner = os.environ.get("HORA_RUN")
    if not runner:
        return 2, "HORA_RUN (the path of hora-run) is not set"
    timeout = min(timeout, int(os.environ.get("HARNESS_TIMEOUT", timeout)))
    cmd = [runner, "-n", str(nranks), "--timeout", str(timeout)] + list(argv)
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(env),
                           timeout=timeout + 30)
    except subprocess.TimeoutExpired as e:
        return 124, (e.stdout or b"").decode("utf-8", "replace") + "\n(hora-run outlived its timeout)\n"
    return p.returncode, p.stdout.decode("utf-8", "replace")


def launch_self(path, rank_counts, timeout=60, env=None, args=()):
    for n in rank_counts:
        t0 = time.time()
        rc, out = launch(n, [PYTHON, os.path.abspath(path)] + list(args), timeout, env)
        sys.stdout.write(out)
        print("== %s at %d ranks: exit %d (%.1f s)" % (os.path.basename(path), n, rc,
                                                       time.time() - t0), flush=True)
        if rc != 0:
            print("FAIL", flush=True)
            return 1
    print("PASS", flush=True)
    return 0


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def spawn(nranks, argv, env=None):
    root = "127.0.0.1:%d" % free_port()
    secret = secrets.token_hex(32)
    procs = []
    for r in range(nranks):
        e = {"HORA_RANK": r, "HORA_SIZE": nranks, "HORA_ROOT": root, "HORA_SECRET": secret,
             "HORA_LOCAL_RANK": r, "HORA_LOCAL_SIZE": nranks}
        e.update(env or {})
        procs.append(subprocess.Popen(list(argv), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, env=_env(e)))
    return procs


def wait_all(procs, timeout):
    deadline = time.time() + timeout
    results = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(0.1, deadline - time.time()))
            results.append((p.returncode, out.decode("utf-8", "replace")))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            results.append((None, out.decode("utf-8", "replace")))
    return results


def init_hvd():
    import torch
    torch.set_num_threads(1)
    import hora.torch as hvd
    hvd.init()
    return hvd


class Checker:
    def __init__(self, prefix=""):
        self.prefix = prefix
        self.passed = 0
        self.failed = []

    def __call__(self, cond, text):
        if cond:
            self.passed += 1
            print("ok   %s%s" % (self.prefix, text), flush=True)
        else:
            self.failed.append(text)
            print("FAIL %s%s" % (self.prefix, text), flush=True)
        return bool(cond)

    def raises_(self, exc_types, fn, text):
        try:
            fn()
        except exc_types as e:
            self(True, "%s (raised %s: %s)" % (text, type(e).__name__, str(e)[:160]))
            return e
        except Exception as e:  # noqa: B902 - report the wrong exception as a failure
            self(False, "%s (raised %s instead: %s)" % (text, type(e).__name__, e))
            return e
        self(False, "%s (nothing raised)" % text)
        return None

    def finish(self):
        if self.failed:
            print("%s%d checks failed, %d passed" % (self.prefix, len(self.failed), self.passed),
                  flush=True)
            return 1
        print("%sall %d checks passed" % (self.prefix, self.passed), flush=True)
        return 0


def device_tensor(shape, dtype, fill=None, cuda=False):
    """A device tensor for the device tests: over the emulated GPU's memory (HORA_CUDA=emulate),
    or with cuda (TEST_DEVICE=cuda, on a GPU) a CUDA tensor; with fill's values when given."""
    import torch
    if not cuda:
        from hora import _device
        return _device.emulated_tensor(shape, dtype, fill)
    t = torch.empty(list(shape), dtype=dtype, device="cuda")
    if fill is not None:
        t.copy_(fill if isinstance(fill, torch.Tensor) else torch.full(list(shape), fill, dtype=dtype))
        torch.cuda.synchronize()
    return t
