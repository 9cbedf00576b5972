"""What the ranks of hora.torch's engine exchange and agree on: the reduction ops and request
kinds, the element types and their tables, the Request of one rank and the descriptor that
announces it, the engine's view of one announced operation (_Entry), registered process sets,
and the check that the ranks' descriptors of an operation agree.
"""
import threading
import time

import torch

from hora import _core as C


# Reduction ops, numbered as in Horovod.
AVERAGE, SUM, ADASUM, MIN, MAX, PRODUCT = range(6)
OP_NAMES = {AVERAGE: "Average", SUM: "Sum", ADASUM: "Adasum", MIN: "Min", MAX: "Max",
            PRODUCT: "Product"}
_HORA_OP = {AVERAGE: C.SUM, SUM: C.SUM, MIN: C.MIN, MAX: C.MAX, PRODUCT: C.PROD}

# Request kinds.
(ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN, ADD_SET,
 REMOVE_SET) = range(9)
KIND_NAMES = ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier",
              "join", "add_process_set", "remove_process_set"]

JOIN_NAME = "hora.join"

# Element types the library reduces natively. bool reduces as uint8, which is right for
# Min (and), Max (or) and Product (and) only.
_REDUCE_CODE = {
    torch.uint8: C.UINT8, torch.int8: C.INT8, torch.int32: C.INT32, torch.int64: C.INT64,
    torch.float16: C.FLOAT16, torch.bfloat16: C.BFLOAT16, torch.float32: C.FLOAT32,
    torch.float64: C.FLOAT64, torch.bool: C.UINT8,
}
# Element types that can be moved (broadcast, allgather, alltoall): moved as bytes.
_MOVE_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64,
                torch.complex128]
DTYPE_NAME = {d: str(d).split(".", 1)[1] for d in _MOVE_DTYPES}
_DTYPE_BY_NAME = {v: k for k, v in DTYPE_NAME.items()}
ELEMENT_SIZE = {d: torch.empty((), dtype=d).element_size() for d in _MOVE_DTYPES}


def reduce_code(dtype):
    return _REDUCE_CODE.get(dtype)


def movable(dtype):
    return dtype in DTYPE_NAME


class Request:
    """One tensor operation of one rank, from submit() until the engine completes it."""
    __slots__ = ("kind", "set_id", "name", "tensor", "output", "target", "dtype", "shape", "op",
                 "root", "prescale", "postscale", "splits", "extra", "error", "result", "exc",
                 "event", "t_enqueue", "internal", "rt", "dev", "stream", "ready", "done", "comm")

    def __init__(self, kind, set_id, name, tensor=None, output=None, op=SUM, root=-1,
                 prescale=1.0, postscale=1.0, splits=None, extra=None, error=None):
        self.kind = kind
        self.set_id = set_id
        self.name = name
        self.tensor = tensor      # contiguous input (None for barrier, join, process sets)
        self.output = output      # contiguous output, allocated by the caller when known
        self.target = None        # the caller's non-contiguous tensor of an in-place op
        self.dtype = tensor.dtype if tensor is not None else None
        self.shape = list(tensor.shape) if tensor is not None else []
        self.op = op
        self.root = root
        self.prescale = float(prescale)
        self.postscale = float(postscale)
        self.splits = splits
        self.extra = extra
        self.error = error        # a local argument error announced so that peers fail too
        self.result = None
        self.exc = None
        self.event = threading.Event()
        self.t_enqueue = 0.0
        self.internal = error is not None
        # Device tensors (hora.torch.mpi_ops sets these at enqueue): the runtime of their
        # streams (hora._device), the device, the caller's current stream when it was submitted
        # and the event recorded on it then (ready), and once queued the event after the
        # operation on the engine's stream (done) and the communicator it ran on.
        self.rt = None
        self.dev = None
        self.stream = None
        self.ready = None
        self.done = None
        self.comm = None

    def desc(self):
        return [self.set_id, self.name, self.kind,
                DTYPE_NAME.get(self.dtype, "") if self.dtype is not None else "",
                self.shape, self.op, self.root, self.prescale, self.postscale, self.splits,
                self.extra, self.error, 0 if self.rt is None else 1]

    def finish(self, result):
        self.result = result
        self.event.set()

    def fail(self, exc):
        self.exc = exc
        self.event.set()


# Descriptor fields.
D_SET, D_NAME, D_KIND, D_DTYPE, D_SHAPE, D_OP, D_ROOT, D_PRE, D_POST, D_SPLITS, D_EXTRA, \
    D_ERROR, D_DEVICE = range(13)


class _Entry:
    """The agreed view of one (process set, name): which ranks announced it, when, and how."""
    __slots__ = ("key", "descs", "rounds", "t_first", "warned", "flagged", "device")

    def __init__(self, key):
        self.key = key
        self.descs = {}
        self.rounds = {}
        self.t_first = time.monotonic()
        self.warned = False
        self.flagged = False      # named as stalled by this rank (the cancellation is pending)
        self.device = False       # some rank's tensor is on a device: it runs on the set's dcomm


class SetInfo:
    """A registered process set: its global ranks (sorted), its communicator on members (None
    elsewhere) and this process's index in it (-1 if not a member). dcomm: the communicator
    of its operations on device tensors (made from comm by the first of them), apart from
    comm so that a call without a stream on comm (the engine's rounds, on the global set's)
    never waits for device work still queued behind a stream."""
    __slots__ = ("id", "ranks", "comm", "index", "dcomm")

    def __init__(self, set_id, ranks, comm, index):
        self.id = set_id
        self.ranks = ranks
        self.comm = comm
        self.index = index
        self.dcomm = None


def subcomm(world, ranks):
    """The communicator of the sorted global `ranks` out of `world` (collective over world): None
    on the other ranks."""
    member = world.rank in ranks
    return world.split(0 if member else C.SPLIT_NOCOLOR, world.rank)


# ---- agreement ----------------------------------------------------------------------------------

def validate(e, info, size):
    """None when the descriptors that the ranks announced for entry e agree (and a broadcast's
    root is a member of process set info), else the text of the error; size: the number of
    ranks."""
    ranks = sorted(e.descs)
    ds = [e.descs[r] for r in ranks]
    d0 = ds[0]
    if d0[D_ERROR] is None and d0[D_KIND] != BROADCAST and all(d == d0 for d in ds):
        return None  # identical everywhere (the common case)
    for r, d in zip(ranks, ds):
        if d[D_ERROR]:
            return "%s %r failed on rank %d: %s" % (KIND_NAMES[d[D_KIND]], d[D_NAME], r,
                                                   d[D_ERROR])
    d0 = ds[0]
    name = d0[D_NAME]

    def differ(field, label, show=str):
        for r, d in zip(ranks[1:], ds[1:]):
            if d[field] != d0[field]:
                return ("mismatched %s for %s %r: rank %d has %s, rank %d has %s"
                        % (label, KIND_NAMES[d0[D_KIND]], name, ranks[0], show(d0[field]),
                           r, show(d[field])))
        return None

    err = differ(D_KIND, "operations", lambda k: KIND_NAMES[k])
    if err:
        return err
    kind = d0[D_KIND]
    checks = {
        ALLREDUCE: [(D_DTYPE, "dtypes"), (D_SHAPE, "shapes"), (D_OP, "reduction ops"),
                    (D_PRE, "prescale factors"), (D_POST, "postscale factors")],
        ALLGATHER: [(D_DTYPE, "dtypes")],
        BROADCAST: [(D_DTYPE, "dtypes"), (D_SHAPE, "shapes"), (D_ROOT, "root ranks")],
        ALLTOALL: [(D_DTYPE, "dtypes")],
        REDUCESCATTER: [(D_DTYPE, "dtypes"), (D_SHAPE, "shapes"), (D_OP, "reduction ops"),
                        (D_PRE, "prescale factors"), (D_POST, "postscale factors")],
        ADD_SET: [(D_SHAPE, "process set ranks")],
        REMOVE_SET: [(D_EXTRA, "process sets")],
    }.get(kind, [])
    for field, label in checks:
        err = differ(field, label, (lambda o: OP_NAMES.get(o, o)) if field == D_OP else str)
        if err:
            return err
    if kind in (ALLGATHER, ALLTOALL):
        for r, d in zip(ranks, ds):
            if len(d[D_SHAPE]) != len(d0[D_SHAPE]) or d[D_SHAPE][1:] != d0[D_SHAPE][1:]:
                return ("mismatched shapes for %s %r: all dimensions but the first must "
                        "agree; rank %d has %s, rank %d has %s"
                        % (KIND_NAMES[kind], name, ranks[0], d0[D_SHAPE], r, d[D_SHAPE]))
    if kind == BROADCAST and d0[D_ROOT] not in info.ranks:
        if info.id == 0:
            return ("broadcast %r: root_rank %d is out of range (0 to %d)"
                    % (name, d0[D_ROOT], size - 1))
        return ("broadcast %r: root_rank %d is not a member of process set %d (ranks %s)"
                % (name, d0[D_ROOT], info.id, info.ranks))
    return None
