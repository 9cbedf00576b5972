"""PyTorch's own torch.distributed test suite (DistributedTest._DistTestBase, from
torch/testing/_internal/distributed/distributed_test.py) on the backend "hora".

    /usr/bin/python3 tests/python/torch_dist_suite.py [-k PATTERN] [--world-sizes 2,3] [--gloo]

(with PYTHONPATH and HORA_LIBRARY set as for the other Python tests). The suite is the one that
torch's test/distributed/test_distributed_spawn.py drives for gloo: its cases gate themselves on
the environment variable BACKEND, so it runs with BACKEND=gloo and gloo's expectations, while every
process group it creates (init_process_group and new_group with backend "gloo") is a hora group.
The cases then see the truth about their groups: dist.get_backend() says "hora". Three things
are adapted at run time, in this driver's processes only (torch's files are read, never changed):
  - the suite's lists of backends whose profiler events it checks also name "hora", so that its
    checks of "hora:all_reduce" and the like run instead of being skipped;
  - torch 1.13's dist.monitored_barrier refuses any group but gloo's before it reaches the group;
    for hora groups it calls hora.torch.distributed.monitored_barrier, the group's own;
  - DistTestCases.backend_feature["plugin"] names "hora" (a backend registered from Python).

Each world size runs in a process of its own (the suite reads BACKEND and WORLD_SIZE on import);
each case starts its ranks as the suite does (spawn, or fork with --start fork, which is faster).
Every case is reported as PASS, FAIL, ERROR or SKIP. With --gloo the same cases run on torch's
gloo first, and only the cases gloo passes count. The exit status is 1 when a case fails on hora
that is not in IMPOSSIBLE below (and, with --gloo, that gloo passes), else 0; 77 when torch or
its test suite cannot be imported.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYDIR = os.path.normpath(os.path.join(HERE, "..", "..", "python"))

# Cases that cannot pass on hora by construction, with the reason. Names are the suite's method
# names; a world size after a colon limits the entry to it.
IMPOSSIBLE = {
    # The suite asserts that the default group's backend is the one it was asked for ("gloo");
    # the group is a hora group and says so.
    "test_get_backend": "asserts dist.get_backend() == 'gloo'; the group is hora",
}

_CHILD = os.environ.get("TORCH_DIST_SUITE_BACKEND")  # "hora" or "gloo" in the suite's processes


def _adapt_to_hora():
    """Make the suite's "gloo" groups hora groups (see the module's doc)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d
    from torch.testing._internal import common_distributed
    from torch.testing._internal.distributed import distributed_test
    import hora.torch.distributed as hdist

    make_group = c10d._new_process_group_helper

    def new_process_group(group_size, group_rank, global_ranks_in_group, backend, store,
                          *args, **kwargs):
        if dist.Backend(backend) == dist.Backend.GLOO:
            backend = hdist.BACKEND_NAME
        return make_group(group_size, group_rank, global_ranks_in_group, backend, store,
                          *args, **kwargs)

    c10d._new_process_group_helper = new_process_group

    torch_monitored_barrier = dist.monitored_barrier

    def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
        pg = c10d._get_default_group() if group is None else group
        if isinstance(pg, hdist.ProcessGroupHora):
            return hdist.monitored_barrier(group, timeout, wait_all_ranks=wait_all_ranks)
        return torch_monitored_barrier(group, timeout, wait_all_ranks=wait_all_ranks)

    dist.monitored_barrier = monitored_barrier
    c10d.monitored_barrier = monitored_barrier

    for name in ("PROFILING_SUPPORTED_BACKENDS", "CUDA_PROFILING_SUPPORTED_BACKENDS",
                 "SEND_RECV_PROFILING_SUPPORTED_BACKENDS"):
        getattr(distributed_test, name).append(hdist.BACKEND_NAME)
    common_distributed.DistTestCases.backend_feature["plugin"].add(hdist.BACKEND_NAME)


def _import_suite():
    """torch's test modules import expecttest (a test dependency that a torch installation may
    lack) and parse sys.argv on import; the suite's distributed cases use neither, so a missing
    expecttest is stood in for by plain unittest, and the modules see no arguments."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        import types
        stand_in = types.ModuleType("expecttest")
        stand_in.TestCase, stand_in.ACCEPT = unittest.TestCase, False
        sys.modules["expecttest"] = stand_in
    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        from torch.testing._internal.distributed import distributed_test
    finally:
        sys.argv = argv
    return distributed_test


if _CHILD:
    if PYDIR not in sys.path:
        sys.path.insert(0, PYDIR)
    _suite = _import_suite()
    DistributedTest, TestDistBackend = _suite.DistributedTest, _suite.TestDistBackend
    if _CHILD == "hora":
        _adapt_to_hora()

    class TorchDistSuite(TestDistBackend, DistributedTest._DistTestBase):
        def setUp(self):
            super().setUp()
            if os.environ.get("TORCH_DIST_SUITE_START") == "fork":
                import multiprocessing
                self._start_processes(multiprocessing.get_context("fork").Process)
            else:
                self._spawn_processes()


class _Recorder(unittest.TextTestResult):
    """Writes one JSON line per case to the file that the parent reads."""

    def __init__(self, out, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._out = out
        self._t0 = None

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def _record(self, test, outcome, detail=""):
        name = test.id().rsplit(".", 1)[-1]
        self._out.write(json.dumps({"case": name, "outcome": outcome, "detail": detail[-3000:],
                                    "seconds": round(time.monotonic() - self._t0, 2)}) + "\n")
        self._out.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "PASS")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "FAIL", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "ERROR", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "SKIP", str(reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._record(test, "SKIP", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._record(test, "FAIL", "unexpected success")


def _child_main(out_path, patterns):
    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(TorchDistSuite)
    if patterns:
        names = [n for n in names if any(re.search(p, n) for p in patterns)]
    suite = unittest.TestSuite(TorchDistSuite(n) for n in names)
    with open(out_path, "a") as out:
        runner = unittest.TextTestRunner(stream=sys.stderr, verbosity=0,
                                         resultclass=lambda *a, **k: _Recorder(out, *a, **k))
        runner.run(suite)
    return 0


def _run_world(backend, size, patterns, start, case_timeout, log):
    with tempfile.TemporaryDirectory(prefix="hora-torch-suite-") as tmp:
        out_path = os.path.join(tmp, "results.jsonl")
        env = dict(os.environ)
        env["PYTHONPATH"] = PYDIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update({
            "TORCH_DIST_SUITE_BACKEND": backend, "TORCH_DIST_SUITE_START": start,
            "BACKEND": "gloo", "WORLD_SIZE": str(size), "TEMP_DIR": tmp,
            "INIT_METHOD": "file://" + os.path.join(tmp, "init"),
            "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(case_timeout),
            "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
            "HORA_TORCH_ANY_SOURCE": "1",  # the suite receives from any source at 3 ranks
        })
        cmd = [sys.executable, os.path.abspath(__file__), "--child", out_path]
        for p in patterns:
            cmd += ["-k", p]
        with open(log, "a") as logf:
            logf.write("== %s, %d ranks: %s\n" % (backend, size, " ".join(cmd)))
            logf.flush()
            rc = subprocess.call(cmd, env=env, stdout=logf, stderr=logf)
        results = {}
        if os.path.exists(out_path):
            with open(out_path) as f:
                for line in f:
                    r = json.loads(line)
                    results[r["case"]] = r
        if rc != 0:
            print("the %s run at %d ranks exited with status %d (see %s)" % (backend, size, rc, log),
                  flush=True)
        return results


def _impossible(case, size):
    return IMPOSSIBLE.get(case) or IMPOSSIBLE.get("%s:%d" % (case, size))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", action="append", default=[], metavar="PATTERN",
                    help="run only the cases whose name matches this regular expression (repeatable)")
    ap.add_argument("--world-sizes", default="2,3")
    ap.add_argument("--gloo", action="store_true",
                    help="run the cases on torch's gloo too and count only those that gloo passes")
    ap.add_argument("--start", choices=("spawn", "fork"), default="spawn",
                    help="how each case starts its ranks (the suite's own way is spawn)")
    ap.add_argument("--case-timeout", type=int, default=120, help="seconds per case (the suite kills its ranks then)")
    ap.add_argument("--log", default=None, help="the ranks' output (default: a file in the temporary directory)")
    ap.add_argument("--json", default=None, help="write every case's outcome to this file")
    ap.add_argument("--verbose", "-v", action="store_true", help="print the failures' tracebacks")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        return _child_main(args.child, args.k)

    try:
        import torch.distributed as dist
        if not dist.is_available():
            raise ImportError("this torch has no torch.distributed")
        import torch.testing._internal  # noqa: F401
    except ImportError as e:
        print("SKIP: torch's distributed test suite cannot be imported (%s)" % e)
        return 77

    log = args.log or os.path.join(tempfile.mkdtemp(prefix="hora-torch-suite-log-"), "ranks.log")
    sizes = [int(s) for s in args.world_sizes.split(",") if s]
    t0 = time.monotonic()
    report = {}
    bad = []
    for size in sizes:
        gloo = None
        if args.gloo:
            t = time.monotonic()
            gloo = _run_world("gloo", size, args.k, args.start, args.case_timeout, log)
            print("gloo, %d ranks: %d cases in %.0f s" % (size, len(gloo), time.monotonic() - t), flush=True)
        t = time.monotonic()
        hora = _run_world("hora", size, args.k, args.start, args.case_timeout, log)
        print("hora, %d ranks: %d cases in %.0f s" % (size, len(hora), time.monotonic() - t), flush=True)
        counts = {}
        for case in sorted(hora):
            r = hora[case]
            g = gloo.get(case) if gloo is not None else None
            outcome = r["outcome"]
            note = ""
            if outcome in ("FAIL", "ERROR"):
                if g is not None and g["outcome"] != "PASS":
                    note = "(gloo: %s)" % g["outcome"]
                elif _impossible(case, size):
                    note = "(impossible: %s)" % _impossible(case, size)
                else:
                    bad.append((size, case))
            elif g is not None and g["outcome"] != "PASS":
                note = "(gloo: %s)" % g["outcome"]
            counts[outcome] = counts.get(outcome, 0) + 1
            print("%-5s %d %s %s" % (outcome, size, case, note), flush=True)
            # A case that fails the run shows its traceback always (CI keeps only this output).
            if outcome in ("FAIL", "ERROR") and (args.verbose or (bad and bad[-1] == (size, case))):
                print(r["detail"], flush=True)
        line = "hora, %d ranks: %s" % (size, ", ".join("%d %s" % (v, k) for k, v in sorted(counts.items())))
        if gloo is not None:
            gloo_pass = {c for c, r in gloo.items() if r["outcome"] == "PASS"}
            both = {c for c in gloo_pass if hora.get(c, {}).get("outcome") == "PASS"}
            line += "; gloo passes %d, hora passes %d of them" % (len(gloo_pass), len(both))
        print(line, flush=True)
        report[size] = {"hora": hora, "gloo": gloo}
    print("total %.0f s; ranks' output in %s" % (time.monotonic() - t0, log), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if bad:
        print("FAIL: %d cases fail on hora: %s" % (len(bad), ", ".join("%s (%d ranks)" % (c, s) for s, c in bad)))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
