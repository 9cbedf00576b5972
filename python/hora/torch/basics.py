"""Initialisation and the queries of hora.torch: init() and shutdown(), the ranks and sizes of
the current initialisation, the *_built/*_enabled answers of Horovod's API, and the timeline.

This module holds the state of the current initialisation (the layout, the launcher's
communicator) and starts and stops the engine, which the other modules read from
hora.torch._state.
"""
import atexit
import ctypes
import os
import socket
import sys
import threading

from hora import _core as C
from hora.torch import _engine as E
from hora.torch import _state
from hora.torch import process_sets as _ps
from hora.torch.timeline import Timeline

_lock = threading.RLock()
_layout = None        # rank, size, local and cross ranks of the current initialisation
_env_comm = None      # the launcher's communicator, kept across shutdown()/init() while healthy
_owned_comm = None    # a communicator init() made from a list of ranks (destroyed at shutdown)


# ---- initialisation ---------------------------------------------------------------------------

def __getattr__(name):
    # basics._engine, which tests read: the running engine, kept in _state.
    if name == "_engine":
        return _state.engine
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def _host_layout(comm):
    """Local and cross ranks from the host names of all ranks (one allgather)."""
    name = socket.gethostname().encode()[:63]
    send = ctypes.create_string_buffer(name.ljust(64, b"\0"), 64)
    recv = ctypes.create_string_buffer(64 * comm.size)
    comm.allgather(ctypes.addressof(send), ctypes.addressof(recv), 64, C.UINT8)
    hosts = [recv.raw[64 * i:64 * (i + 1)] for i in range(comm.size)]
    local_index = []
    seen = {}
    for h in hosts:
        local_index.append(seen.get(h, 0))
        seen[h] = seen.get(h, 0) + 1
    me = comm.rank
    cross = [r for r in range(comm.size) if local_index[r] == local_index[me]]
    return {
        "rank": me, "size": comm.size,
        "local_rank": local_index[me], "local_size": seen[hosts[me]],
        "cross_rank": cross.index(me), "cross_size": len(cross),
        "homogeneous": len(set(seen.values())) == 1,
    }


# Variables by which a launcher tells a process its rank; without any of them, init() runs
# alone (size 1), as a script started by hand does under Horovod. (A Slurm batch script is
# not a launcher of its processes: srun is, and sets SLURM_STEP_ID.)
_LAUNCHER_VARS = ("HORA_RANK", "HORA_SIZE", "HORA_ID", "HORA_ROOT", "OMPI_COMM_WORLD_SIZE",
                  "PMI_SIZE", "PMIX_RANK", "SLURM_STEP_ID", "WORLD_SIZE", "RANK")
_store_inits = 0      # unique ids passed through torch's store so far (one key each)


def _info(text):
    if os.environ.get("HORA_DEBUG", "").strip().upper() in ("INFO", "TRACE"):
        print("%s:%d hora.torch INFO %s" % (socket.gethostname(), os.getpid(), text),
              file=sys.stderr, flush=True)


def _id_through_torch_store():
    """Under torchrun, with no Hora rendezvous of its own: a unique id from rank 0, through torch's
    store, as NCCL's and Gloo's backends get theirs. The store is the default process group's
    when torch.distributed is initialised, else torchrun's agent store at MASTER_ADDR:MASTER_PORT,
    else one that rank 0 hosts beside MASTER_PORT (MASTER_PORT + 10000, as horaCommInitFromEnv
    would). Returns the id's hex, or None where that does not apply (not torchrun, or the
    environment names a rendezvous itself)."""
    global _store_inits
    env = os.environ
    if "TORCHELASTIC_RUN_ID" not in env or any(
            v in env for v in ("HORA_ID", "HORA_ROOT", "HORA_RANK", "HORA_SIZE")):
        return None
    import datetime
    import torch.distributed as dist
    rank, size = int(env["RANK"]), int(env["WORLD_SIZE"])
    timeout = datetime.timedelta(milliseconds=int(env.get("HORA_TIMEOUT_MS", "600000")))
    prefix = "hora/unique_id/%s/%d" % (env.get("TORCHELASTIC_RESTART_COUNT", "0"), _store_inits)
    _store_inits += 1
    if dist.is_available() and dist.is_initialized():
        store, where = dist.distributed_c10d._get_default_store(), "the default process group's store"
    else:
        addr, port = env["MASTER_ADDR"], int(env["MASTER_PORT"])
        if env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
            store = dist.TCPStore(addr, port, size, False, timeout)
            where = "torchrun's agent store at %s:%d (MASTER_ADDR, MASTER_PORT)" % (addr, port)
        else:
            port = port + 10000 if port + 10000 <= 65535 else port - 10000
            store = dist.TCPStore(addr, port, size, rank == 0, timeout)
            where = ("a store rank 0 hosts at %s:%d (MASTER_ADDR, MASTER_PORT + 10000: MASTER_PORT "
                     "is torch's)" % (addr, port))
    if rank == 0:
        uid = C.unique_id()
        store.set(prefix, uid)
    else:
        uid = store.get(prefix)
    # Rank 0 keeps a store it hosts until every rank has read the id.
    store.set("%s/read/%d" % (prefix, rank), b"1")
    if rank == 0:
        store.wait(["%s/read/%d" % (prefix, r) for r in range(size)], timeout)
    _info("the unique id comes through %s under key %s" % (where, prefix))
    return bytes(uid).hex()


def _launcher_comm():
    try:
        uid = _id_through_torch_store()
        if uid is None:
            return C.Comm.from_env()
        # horaCommInitFromEnv still takes rank and size from the launchers, with all its
        # checks; only the rendezvous is the id just exchanged.
        os.environ["HORA_ID"] = uid
        try:
            return C.Comm.from_env()
        finally:
            del os.environ["HORA_ID"]
    except C.HoraError:
        if any(v in os.environ for v in _LAUNCHER_VARS):
            raise
    tasks = os.environ.get("SLURM_NTASKS", "1")
    if "SLURM_JOB_ID" in os.environ and tasks.isdigit() and int(tasks) > 1:
        print("hora.torch WARN: running alone (size 1) in a Slurm job of %s tasks without a step: "
              "start the ranks with srun to run them as one job" % tasks, file=sys.stderr, flush=True)
    return C.Comm.init_rank(1, C.unique_id(), 0)


def init(comm=None, process_sets=None):
    """Starts hora.torch on this rank (collective over all ranks).

    comm: None for the launcher's communicator (hora-run, torchrun, srun, mpirun environments;
    kept and reused by a later init() after a clean shutdown(); a process started without a
    launcher runs alone, size 1), a hora._core.Comm to run over,
    or a list of global ranks to run over a subset of the launcher's ranks.
    process_sets: ProcessSet objects (or rank lists) to register at once, as add_process_set
    would; the same on every rank. The string "dynamic" is accepted and ignored: process sets
    can always be added later.
    A second init() without a shutdown() in between does nothing, unless this rank's engine has
    stopped meanwhile (another rank called shutdown(), or it failed): then it starts afresh, as
    after a shutdown() here (the other ranks' next init() does the same).
    """
    global _layout, _env_comm, _owned_comm
    with _lock:
        stale = _state.engine is not None and (_state.engine.stopped or not _state.engine.alive())
    if stale:
        shutdown()
    with _lock:
        if _state.engine is not None:
            return
        owned = None
        if comm is None:
            if _env_comm is None or _env_comm.handle is None:
                _env_comm = _launcher_comm()
            world = _env_comm
        elif isinstance(comm, C.Comm):
            if comm.handle is None:
                raise ValueError("init(comm=...): that communicator was destroyed or aborted")
            world = comm
        elif isinstance(comm, (list, tuple, range)):
            if _env_comm is None or _env_comm.handle is None:
                _env_comm = _launcher_comm()
            ranks = sorted(set(int(r) for r in comm))
            if not ranks or ranks[0] < 0 or ranks[-1] >= _env_comm.size:
                raise ValueError("init(comm=%r): ranks must lie in [0, %d)"
                                 % (list(comm), _env_comm.size))
            world = owned = E.subcomm(_env_comm, ranks)
            if world is None:
                raise ValueError("init(comm=%r): rank %d is not in that list"
                                 % (ranks, _env_comm.rank))
        else:
            raise TypeError("init(comm=...) takes None, a hora._core.Comm or a list of ranks, "
                            "not %s" % type(comm).__name__)
        layout = _host_layout(world)
        timeline = None
        path = os.environ.get("HORA_TIMELINE")
        if path and world.rank == 0:
            mark = os.environ.get("HORA_TIMELINE_MARK_CYCLES", "0") not in ("", "0")
            timeline = Timeline(path, mark)
        try:
            _state.engine = E.Engine(world, timeline)
        except BaseException:
            if timeline is not None:
                timeline.close()
            raise
        _layout = layout
        _owned_comm = owned
        _ps.global_process_set.process_set_id = 0
        _ps.global_process_set.ranks = list(range(world.size))
    if process_sets is not None and process_sets != "dynamic":
        for ps in process_sets:
            _ps.add_process_set(ps)


def shutdown():
    """Stops hora.torch on this rank, and with it the engines of all ranks (their pending and
    later operations raise HorovodInternalError). init() may follow."""
    global _layout, _env_comm, _owned_comm
    with _lock:
        eng, _state.engine = _state.engine, None
        owned, _owned_comm = _owned_comm, None
        _layout = None
    if eng is None:
        return
    eng.shutdown()
    if eng.failed is not None:
        if _env_comm is not None and _env_comm.handle is None:
            _env_comm = None
    elif owned is not None:
        try:
            owned.destroy()
        except C.HoraError:
            pass
    for ps in list(_ps._registered.values()):
        ps.process_set_id = None
    _ps._registered.clear()


atexit.register(shutdown)


def _stats():
    """The engine's counters (rounds, silent_rounds, allreduce_calls, allreduce_tensors,
    fused_batches, and the operations this rank announced by descriptor, negotiated, and by
    response-cache id, cached): for tests and diagnostics."""
    return dict(_state.eng().stats)


def is_initialized():
    return _state.engine is not None


def _lay(key):
    lay = _layout
    if lay is None:
        raise _state.not_initialized()
    return lay[key]


def rank():
    """This process's rank among all ranks."""
    return _lay("rank")


def size():
    """The number of ranks."""
    return _lay("size")


def local_rank():
    """This process's rank among the ranks of its host."""
    return _lay("local_rank")


def local_size():
    """The number of ranks on this process's host."""
    return _lay("local_size")


def cross_rank():
    """This process's rank among the ranks with its local rank (one per host)."""
    return _lay("cross_rank")


def cross_size():
    """The number of ranks with this process's local rank (the number of hosts when
    homogeneous)."""
    return _lay("cross_size")


def is_homogeneous():
    """True when every host runs the same number of ranks."""
    return _lay("homogeneous")


def mpi_threads_supported():
    _lay("rank")
    return False


def mpi_enabled():
    return False


def mpi_built():
    return False


def gloo_enabled():
    return False


def gloo_built():
    return False


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    """True when libhora was built with CUDA: CUDA tensors then go through every call (a machine
    without a GPU has none to pass). nccl_built() stays 0: the device collectives are Hora's."""
    from hora import _device
    return _device.cuda_built()


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts writing the timeline to file_path (on rank 0; other ranks record nothing)."""
    eng = _state.eng()
    if eng.rank != 0:
        return
    with _lock:
        old = eng.timeline
        eng.timeline = Timeline(file_path, mark_cycles)
    if old is not None:
        old.close()


def stop_timeline():
    """Stops and closes the timeline (a valid JSON file from then on)."""
    eng = _state.eng()
    with _lock:
        old, eng.timeline = eng.timeline, None
    if old is not None:
        old.close()
