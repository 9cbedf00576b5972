"""Misuse and failures in hora.torch raise on every rank, never hang.

1. Mismatches (at 2 and 3 ranks under hora-run): shapes, dtypes, ops, scale factors, kinds of
   operation, broadcast roots (out of range, or different per rank), allgather's trailing
   dimensions raise HorovodInternalError (a RuntimeError, as Horovod) on every rank; a local
   argument error on one rank raises ValueError or TypeError there, and its peers' matching
   operation fails with HorovodInternalError; Adasum of integers, a name used twice while in flight, calls
   before init(). After each, the engine still works, and unnamed operations stay aligned
   across ranks.
2. A rank dies (os._exit in the middle of an allreduce loop, 3 ranks, a communicator with a
   5 s timeout): the survivors raise HorovodInternalError from the pending operation and from
   every later one; shutdown() then init() over a fresh communicator works.
3. Operations some ranks submit and others never do (HORA_STALL_SHUTDOWN_TIME_SECONDS=2, at 2
   and 3 ranks): different names on different ranks, and one rank skipping one call of a
   sequence of named allreduces. Every rank raises ValueError naming the ranks that submitted
   the operation and those that did not; then the engine still works, and the name can be used
   again. And ranks out of step for good (one made unnamed calls the others did not, then
   waits in a barrier): after the cancellation they realign their automatic names, and every
   later unnamed call completes.
4. A rank falls silent (SIGSTOP, 2 ranks started without hora-run, a communicator with a 3 s
   timeout): the other raises HorovodInternalError, then kills it.
The short timeouts are set on a communicator made once all ranks run (not through
HORA_TIMEOUT_MS, which would also bound the launch's rendezvous, however slow the start).
Run from the repository root: /usr/bin/python3 tests/python/test_torch_errors.py
"""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

torch = harness.require_torch()

if not harness.in_rank():
    rc = harness.launch_self(__file__, [2, 3], timeout=60, env={"TEST_MODE": "mismatch"})
    if rc == 0:
        rc = harness.launch_self(__file__, [2, 3], timeout=60,
                                 env={"TEST_MODE": "stall", "HORA_STALL_SHUTDOWN_TIME_SECONDS": 2})
    if rc == 0:
        rc = harness.launch_self(__file__, [3], timeout=60, env={"TEST_MODE": "die"})
    if rc == 0:
        print("== silent peer: 2 ranks started without hora-run", flush=True)
        procs = harness.spawn(2, [harness.PYTHON, os.path.abspath(__file__)],
                              env={"TEST_MODE": "silent"})
        (rc0, out0), (rc1, out1) = harness.wait_all(procs, 60)
        sys.stdout.write("".join("[0] " + line + "\n" for line in out0.splitlines()))
        sys.stdout.write("".join("[1] " + line + "\n" for line in out1.splitlines()))
        print("rank 0 exit %s, rank 1 exit %s" % (rc0, rc1), flush=True)
        rc = 0 if rc0 == 0 and rc1 == -signal.SIGKILL else 1
        print("PASS" if rc == 0 else "FAIL", flush=True)
    sys.exit(rc)

torch.set_num_threads(1)
import hora.torch as hvd  # noqa: E402
from hora import _core as C  # noqa: E402

check = harness.Checker()
MODE = os.environ["TEST_MODE"]


def healthy(tag):
    got = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="healthy." + tag)
    check(torch.equal(got, torch.full((3,), float(hvd.size()))), "engine healthy after " + tag)


def init_with_timeout(timeout_ms):
    """hvd.init() over a communicator of all ranks whose waits give up after timeout_ms."""
    world = C.Comm.from_env()
    uid = bytearray(128)
    if world.rank == 0:
        uid[:] = C.unique_id()
    t = torch.frombuffer(uid, dtype=torch.uint8)
    world.broadcast(t.data_ptr(), t.data_ptr(), 128, C.UINT8, 0)
    hvd.init(comm=C.Comm.init_rank(world.size, bytes(uid), world.rank, timeout_ms=timeout_ms))
    return world


def raises_all(exc, fn, text, contains=None):
    e = check.raises_(exc, fn, text)
    if contains is not None and e is not None:
        check(contains in str(e), "the message names the problem (%r)" % contains)


if MODE == "mismatch":
    check.raises_(ValueError, lambda: hvd.rank(), "rank() before init()")
    check.raises_(ValueError, lambda: hvd.allreduce(torch.ones(1)), "allreduce before init()")
    hvd.init()
    R, N = hvd.rank(), hvd.size()
    eng = hvd.basics._engine
    limit = float(os.environ.get("HORA_STALL_SHUTDOWN_TIME_SECONDS") or
                  int(os.environ.get("HORA_TIMEOUT_MS") or 600000) / 1000.0)
    check(eng.shutdown_s == limit and 0 <= eng.stall_s <= limit,
          "stalled operations are cancelled after %g s by default (HORA_TIMEOUT_MS), the "
          "warning comes no later (%g s)" % (eng.shutdown_s, eng.stall_s))

    raises_all(hvd.HorovodInternalError, lambda: hvd.allreduce(torch.ones(R + 1), name="shape"),
               "allreduce with a different shape on every rank", "mismatched shapes")
    healthy("shape")
    raises_all(hvd.HorovodInternalError, lambda: hvd.allreduce(
        torch.ones(4, dtype=torch.float32 if R % 2 == 0 else torch.int32), name="dtype"),
        "allreduce float32 on even ranks, int32 on odd", "mismatched dtypes")
    healthy("dtype")
    raises_all(hvd.HorovodInternalError, lambda: hvd.allreduce(torch.ones(4), op=hvd.Sum if R == 0 else hvd.Max,
                                                 name="op"),
               "allreduce Sum on rank 0, Max elsewhere", "mismatched reduction ops")
    raises_all(hvd.HorovodInternalError, lambda: hvd.allreduce(torch.ones(4), prescale_factor=1.0 + R,
                                                 name="prescale"),
               "different prescale factors", "prescale")
    raises_all(hvd.HorovodInternalError, lambda: (hvd.allreduce(torch.ones(4), name="kind") if R == 0
                                    else hvd.broadcast(torch.ones(4), 0, name="kind")),
               "allreduce on rank 0, broadcast elsewhere, same name", "mismatched operations")
    healthy("kind")
    raises_all(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(2), N, name="root.range"),
               "broadcast from root %d of %d ranks" % (N, N), "out of range")
    raises_all(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(2), -1, name="root.negative"),
               "broadcast from root -1", "out of range")
    raises_all(hvd.HorovodInternalError, lambda: hvd.broadcast_(torch.ones(2), R, name="root.differs"),
               "broadcast with a different root on every rank", "mismatched root ranks")
    raises_all(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(R + 2), 0, name="bcast.shape"),
               "broadcast with different shapes", "mismatched shapes")
    healthy("broadcast")
    raises_all(hvd.HorovodInternalError, lambda: hvd.allgather(torch.ones(2, R + 1), name="gather.trailing"),
               "allgather with different trailing dimensions", "all dimensions but the first")
    raises_all(hvd.HorovodInternalError, lambda: hvd.reducescatter(torch.ones(N * (R + 1)), name="rs.shape"),
               "reducescatter with different shapes", "mismatched shapes")
    # A local argument error on rank 0 only: it raises at once, its peers from the operation.
    if R == 0:
        raises_all(ValueError, lambda: hvd.alltoall(torch.ones(N), splits=[N + 1] + [0] * (N - 1),
                                                     name="a2a.splits"),
                   "rank 0: alltoall splits that do not add up", "add up")
        raises_all(TypeError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64)),
                   "rank 0: allreduce of complex64 (unnamed)", "complex64")
    else:
        raises_all(hvd.HorovodInternalError, lambda: hvd.alltoall(torch.ones(N), name="a2a.splits"),
                   "alltoall whose rank 0 passed bad splits", "failed on rank 0")
        raises_all(hvd.HorovodInternalError, lambda: hvd.allreduce(torch.ones(2)),
                   "unnamed allreduce whose rank 0 passed complex64", "failed on rank 0")
    got = hvd.allreduce(torch.ones(2) * (R + 1), op=hvd.Sum)
    check(torch.equal(got, torch.full((2,), float(N * (N + 1) // 2))),
          "unnamed operations stay aligned after a failed one")
    raises_all(TypeError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum,
                                                name="adasum.int"),
               "Adasum of an integer tensor", "Adasum reduces floating tensors")
    healthy("adasum")
    xs = [torch.ones(2), torch.ones(R + 1)]
    raises_all(hvd.HorovodInternalError, lambda: hvd.grouped_allreduce(xs, name="group.bad"),
               "grouped allreduce with one mismatched member", "mismatched shapes")
    # A name reused while its operation is in flight. The operation must still be pending when
    # the second call comes, so some rank must not have submitted it yet: ranks other than 0
    # submit "dup.a" first, rank 0 submits "dup.b" first, and each submits the other name only
    # after a barrier, which every rank reaches only once its own check is done.
    first = "dup.b" if R == 0 else "dup.a"
    h_first = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name=first)
    raises_all(ValueError, lambda: hvd.allreduce_async(torch.ones(2), name=first),
               "a second operation named like one in flight", "already in flight")
    hvd.barrier()
    second = "dup.a" if R == 0 else "dup.b"
    h_second = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name=second)
    check(torch.equal(hvd.synchronize(h_first), torch.full((2,), float(N))) and
          torch.equal(hvd.synchronize(h_second), torch.full((2,), float(N))),
          "the first operations of those names complete")
    raises_all(TypeError, lambda: hvd.allreduce([1.0, 2.0]), "allreduce of a list")
    raises_all(ValueError, lambda: hvd.allgather(torch.tensor(1.0), name="gather.scalar"),
               "allgather of a 0-d tensor")
    raises_all(ValueError, lambda: hvd.poll(123456), "poll of an unknown handle")
    healthy("all")
    hvd.shutdown()
    sys.exit(check.finish())

if MODE == "stall":
    hvd.init()
    R, N = hvd.rank(), hvd.size()
    check(hvd.basics._engine.shutdown_s == 2.0, "HORA_STALL_SHUTDOWN_TIME_SECONDS=2 is used")
    others = [r for r in range(N) if r != R]

    # (a) Rank 1 names its allreduce differently from the others.
    odd = [1]
    rest = [r for r in range(N) if r not in odd]
    name = "stall.other" if R == 1 else "stall.x"
    mine, theirs = (odd, rest) if R == 1 else (rest, odd)
    raises_all(ValueError, lambda: hvd.allreduce(torch.ones(3), op=hvd.Sum, name=name),
               "allreduce %r while rank 1 uses another name" % name,
               "ranks %s submitted it, ranks %s did not" % (mine, theirs))
    healthy("different names")
    got = hvd.allreduce(torch.ones(3) * (R + 1), op=hvd.Sum, name="stall.x")
    check(torch.equal(got, torch.full((3,), float(N * (N + 1) // 2))),
          "a later allreduce named 'stall.x' on every rank starts afresh and completes")

    # (b) The last rank skips one call of a sequence of named allreduces.
    skipper = N - 1
    names = ["seq.%d" % i for i in range(4) if not (R == skipper and i == 1)]
    done, err = [], None
    try:
        for n in names:
            got = hvd.allreduce(torch.ones(2), op=hvd.Sum, name=n)
            check(torch.equal(got, torch.full((2,), float(N))), "%s completes" % n)
            done.append(n)
    except ValueError as e:
        err = e
    stuck = "seq.2" if R == skipper else "seq.1"
    check(done == ["seq.0"] and err is not None,
          "rank %d raises ValueError at %s after seq.0 completed (done %s): %s"
          % (R, stuck, done, err))
    if err is not None:
        text = str(err)
        who = ([skipper], others) if R == skipper else ([r for r in range(N) if r != skipper],
                                                         [skipper])
        check(repr(stuck) in text and "ranks %s submitted it, ranks %s did not" % who in text,
              "the message names the operation and the ranks")
    healthy("a skipped call")

    # (c) Out of step for good, as a test file that fails on one rank leaves its ranks: rank 0
    # makes an unnamed allreduce its peers never make. The others wait for it to be cancelled
    # outside the engine (a file rank 0 writes then: an operation of theirs would wait as long,
    # and be cancelled with it). Then every rank makes the same unnamed calls: they meet,
    # because the cancellation realigned the ranks' automatic names (their counts would
    # otherwise stay one apart for good, and every unnamed call stall in turn).
    flag = "/tmp/hora-test-realign-%d" % os.getppid()  # hora-run's pid: one file per job
    if R == 0:
        check.raises_(ValueError, lambda: hvd.allreduce(torch.ones(2)),
                      "rank 0's extra unnamed allreduce is cancelled")
        open(flag, "w").close()
    else:
        deadline = time.monotonic() + 120
        while not os.path.exists(flag) and time.monotonic() < deadline:
            time.sleep(0.05)
    hvd.barrier()
    if R == 0:
        os.unlink(flag)
    ok = True
    for i in range(3):
        got = hvd.allreduce(torch.ones(2) * (R + 1), op=hvd.Sum)
        ok &= torch.equal(got, torch.full((2,), float(N * (N + 1) // 2)))
        g = hvd.allgather(torch.full((1,), float(R)))
        ok &= torch.equal(g, torch.arange(N, dtype=torch.float32))
    check(ok, "after the realignment, unnamed allreduces and allgathers meet on every rank")
    check(hvd.broadcast_object("after", root_rank=0) == "after", "and so does broadcast_object")
    hvd.shutdown()
    sys.exit(check.finish())

if MODE == "die":
    world = init_with_timeout(5000)
    R, N = hvd.rank(), hvd.size()
    victim = N - 1
    err = None
    t_last_ok = time.monotonic()
    for i in range(100000):
        hs = [hvd.allreduce_async(torch.ones(1000) * j, op=hvd.Sum) for j in range(4)]
        if R == victim and i == 5:
            os._exit(0)  # dies with allreduces in flight, without shutting down
        try:
            for h in hs:
                hvd.synchronize(h)
            t_last_ok = time.monotonic()
        except Exception as e:  # noqa: B902 - the type is what is checked
            err = e
            break
    elapsed = time.monotonic() - t_last_ok
    check(isinstance(err, hvd.HorovodInternalError),
          "a survivor's pending allreduce raises HorovodInternalError after %.2f s: %s"
          % (elapsed, err))
    check(elapsed < 30, "the failure is noticed within the timeout (%.2f s)" % elapsed)
    check.raises_(hvd.HorovodInternalError, lambda: hvd.allreduce(torch.ones(2)),
                  "a later allreduce raises HorovodInternalError")
    check.raises_(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(2), 0),
                  "a later broadcast raises HorovodInternalError")
    check(issubclass(hvd.HorovodInternalError, RuntimeError), "HorovodInternalError is a "
                                                              "RuntimeError")
    hvd.shutdown()
    check(not hvd.is_initialized(), "shutdown() after the failure")
    hvd.init(comm=C.Comm.init_rank(1, C.unique_id(), 0))
    check(hvd.size() == 1 and torch.equal(hvd.allreduce(torch.ones(2) * 3, op=hvd.Sum),
                                          torch.full((2,), 3.0)),
          "init() over a fresh communicator after the failure works")
    hvd.shutdown()
    sys.exit(check.finish())

if MODE == "silent":
    world = init_with_timeout(3000)
    R = hvd.rank()
    pids = hvd.allgather(torch.tensor([os.getpid()], dtype=torch.int64)).tolist()
    for i in range(3):
        hvd.allreduce(torch.ones(4), op=hvd.Sum)
    if R == 1:
        print("stopping myself", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(60)
        os._exit(3)
    t0 = time.monotonic()
    check.raises_(hvd.HorovodInternalError,
                  lambda: [hvd.allreduce(torch.ones(4), op=hvd.Sum) for _ in range(1000000)],
                  "rank 0 raises HorovodInternalError when rank 1 stops answering")
    elapsed = time.monotonic() - t0
    check(elapsed < 30, "within the timeout (%.2f s, timeout 3 s)" % elapsed)
    os.kill(pids[1], signal.SIGKILL)
    hvd.shutdown()
    sys.exit(check.finish())
