"""The collectives of hora.torch, with Horovod's names, signatures and semantics, on CPU and
CUDA tensors.

Every operation hands a request to the background engine (hora.torch._engine) and returns a
handle (the *_async variants) or waits for it. Tensors travel without a copy: the library reads
the input's memory and writes the output's directly (a non-contiguous input is first made
contiguous). Operations are matched across ranks by name; without a name each gets an automatic
one by call order, so every rank must issue its unnamed operations in the same order.

Device tensors (CUDA; in tests, the library's emulated device) follow their streams: the
operation runs after the work queued on the caller's current stream when it was submitted, on
the engine's stream of that device (hora.torch._device_exec); synchronize() waits only until it
is queued there and makes the caller's current stream wait for it, so the caller's later work
on that stream sees the result while the CPU goes on.
"""
import torch

from hora import _device
from hora.torch import _engine as E
from hora.torch._checks import _check_move, _check_reduce, _resolve_op
from hora.torch._handles import (  # noqa: F401
    _contiguous, _empty_like, _enqueue, _first, _handles, poll, synchronize,
)
from hora.torch._state import eng as _eng  # noqa: F401
from hora.torch.basics import (  # noqa: F401
    _stats, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
    gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
    start_timeline, stop_timeline,
)
from hora.torch.compression import Compression
from hora.torch.process_sets import (  # noqa: F401
    ProcessSet, _set_id, add_process_set, global_process_set, remove_process_set,
)

HorovodInternalError = E.HorovodInternalError
HostsUpdatedInterrupt = E.HostsUpdatedInterrupt

Average = E.AVERAGE
Sum = E.SUM
Adasum = E.ADASUM
Min = E.MIN
Max = E.MAX
Product = E.PRODUCT

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "is_homogeneous", "mpi_threads_supported", "mpi_enabled",
    "mpi_built", "gloo_enabled", "gloo_built", "nccl_built", "ddl_built", "ccl_built",
    "cuda_built", "rocm_built", "start_timeline", "stop_timeline",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "HorovodInternalError", "HostsUpdatedInterrupt", "Compression",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "barrier", "join", "poll",
    "synchronize", "sparse_allreduce_async", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set",
]

# ---- allreduce ----------------------------------------------------------------------------------

def _allreduce_build(tensors, inplace, op, prescale, postscale, what):
    def build(set_id, names):
        reqs = []
        for t, n in zip(tensors, names):
            _check_reduce(t, op, prescale, postscale, what)
            c = _contiguous(t)
            out = c if inplace else _empty_like(c)
            r = E.Request(E.ALLREDUCE, set_id, n, c, out, op=op, prescale=prescale,
                          postscale=postscale)
            if inplace and c is not t:
                r.target = t
            reqs.append(r)
        return reqs, None
    return build


def _allreduce_async(tensor, inplace, name, op, prescale, postscale, process_set):
    build = _allreduce_build([tensor], inplace, op, prescale, postscale,
                             "allreduce_" if inplace else "allreduce")

    def b(set_id, names):
        reqs, _ = build(set_id, names)
        return reqs, _first
    return _enqueue(E.ALLREDUCE, "allreduce", name, process_set, b)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts a reduction (op: Average by default, Sum, Min, Max, Product) of tensor over the
    ranks of process_set into a new tensor; returns a handle for poll()/synchronize().
    prescale_factor multiplies each input, postscale_factor the result."""
    op = _resolve_op(op, average)
    return _allreduce_async(tensor, False, name, op, prescale_factor, postscale_factor,
                            process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """As allreduce_async, in place: the result replaces tensor's contents."""
    op = _resolve_op(op, average)
    return _allreduce_async(tensor, True, name, op, prescale_factor, postscale_factor,
                            process_set)


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.saved = (op, prescale, postscale, process_set)
        h = _allreduce_async(tensor, False, name, op, prescale, postscale, process_set)
        return synchronize(h)

    @staticmethod
    def backward(ctx, grad):
        op, prescale, postscale, process_set = ctx.saved
        g = synchronize(_allreduce_async(grad, False, None, op, prescale, postscale,
                                         process_set))
        return g, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reduction of tensor over the ranks of process_set (a new tensor; differentiable).
    compression (Compression.fp16, ...) shrinks what travels."""
    op = _resolve_op(op, average)
    c, cctx = compression.compress(tensor)
    out = _AllreduceFn.apply(c, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, cctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """In-place allreduce: waits and returns tensor, which holds the result."""
    op = _resolve_op(op, average)
    return synchronize(_allreduce_async(tensor, True, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _grouped_allreduce_async(tensors, inplace, name, op, prescale, postscale, process_set):
    tensors = list(tensors)
    build = _allreduce_build(tensors, inplace, op, prescale, postscale,
                             "grouped_allreduce_" if inplace else "grouped_allreduce")

    def b(set_id, names):
        reqs, _ = build(set_id, names)
        return reqs, list
    return _enqueue(E.ALLREDUCE, "grouped_allreduce", name, process_set, b, count=len(tensors))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts the allreduce of a list of tensors as one group (negotiated and fused together);
    synchronize returns the list of results."""
    op = _resolve_op(op, average)
    return _grouped_allreduce_async(tensors, False, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped_allreduce_async."""
    op = _resolve_op(op, average)
    return _grouped_allreduce_async(tensors, True, name, op, prescale_factor,
                                    postscale_factor, process_set)


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale, postscale, process_set, *tensors):
        ctx.saved = (op, prescale, postscale, process_set)
        return tuple(synchronize(_grouped_allreduce_async(tensors, False, name, op, prescale,
                                                          postscale, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        op, prescale, postscale, process_set = ctx.saved
        gs = synchronize(_grouped_allreduce_async(grads, False, None, op, prescale, postscale,
                                                  process_set))
        return (None, None, None, None, None) + tuple(gs)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """The allreduce of each tensor of a list, as one group; returns the list of results."""
    op = _resolve_op(op, average)
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                     *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """In-place grouped allreduce: waits and returns the list of tensors."""
    op = _resolve_op(op, average)
    return synchronize(_grouped_allreduce_async(tensors, True, name, op, prescale_factor,
                                                postscale_factor, process_set))


# ---- allgather ----------------------------------------------------------------------------------

def _allgather_build(tensors, what):
    def build(set_id, names):
        reqs = []
        for t, n in zip(tensors, names):
            _check_move(t, what)
            if t.dim() == 0:
                raise ValueError("%s: a 0-dimensional tensor has no first dimension to "
                                 "concatenate on; reshape it to [1]" % what)
            reqs.append(E.Request(E.ALLGATHER, set_id, n, _contiguous(t)))
        return reqs, None
    return build


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts the concatenation, along dimension 0 and in rank order, of tensor from every rank
    of process_set (the first dimension may differ between ranks, the others may not)."""
    build = _allgather_build([tensor], "allgather")

    def b(set_id, names):
        reqs, _ = build(set_id, names)
        return reqs, _first
    return _enqueue(E.ALLGATHER, "allgather", name, process_set, b)


def _set_rank_and_size(process_set):
    set_id = _set_id(process_set)
    info = _eng().set_info(set_id)
    return info.index, len(info.ranks)


def _gather_rows(dim0, process_set):
    """Every rank's first dimension, in rank order of the set."""
    h = allgather_async(torch.tensor([dim0], dtype=torch.int64), process_set=process_set)
    return synchronize(h).tolist()


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim0 = tensor.shape[0] if tensor.dim() else 0
        ctx.process_set = process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        # Horovod's convention: the gradient averaged over the ranks (each rank's loss is one
        # rank's share of the job's), then this rank's rows.
        ps = ctx.process_set
        g = synchronize(_allreduce_async(grad, False, None, Average, 1.0, 1.0, ps))
        rows = _gather_rows(ctx.dim0, ps)
        me, _ = _set_rank_and_size(ps)
        return g.narrow(0, sum(rows[:me]), ctx.dim0), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """The concatenation along dimension 0, in rank order, of tensor from every rank of
    process_set (differentiable)."""
    return _AllgatherFn.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts the allgather of each tensor of a list; synchronize returns the list."""
    tensors = list(tensors)
    build = _allgather_build(tensors, "grouped_allgather")

    def b(set_id, names):
        reqs, _ = build(set_id, names)
        return reqs, list
    return _enqueue(E.ALLGATHER, "grouped_allgather", name, process_set, b,
                    count=len(tensors))


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims = [t.shape[0] if t.dim() else 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(grouped_allgather_async(tensors, name, process_set)))

    @staticmethod
    def backward(ctx, *grads):
        ps = ctx.process_set
        gs = synchronize(_grouped_allreduce_async(grads, False, None, Average, 1.0, 1.0, ps))
        me, _ = _set_rank_and_size(ps)
        out = []
        for g, d in zip(gs, ctx.dims):
            rows = _gather_rows(d, ps)
            out.append(g.narrow(0, sum(rows[:me]), d))
        return (None, None) + tuple(out)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """The allgather of each tensor of a list; returns the list of results."""
    return list(_GroupedAllgatherFn.apply(name, process_set, *tensors))


# ---- sparse allreduce ---------------------------------------------------------------------------

def sparse_allreduce_async(tensor, name=None, op=Average, process_set=global_process_set):
    """Starts the reduction (Average or Sum) of a sparse COO tensor over process_set as Horovod
    does it: one allgather of its indices and one of its values (on the device for a CUDA
    tensor). Returns a function that waits
    and returns the result, a sparse tensor of the same shape whose index list is every rank's
    in turn (an index several ranks hold appears once per rank; coalesce() sums them)."""
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.sparse_coo:
        raise TypeError("sparse_allreduce_async takes a sparse COO tensor, not %s"
                        % (tensor.layout if isinstance(tensor, torch.Tensor) else type(tensor)))
    if op not in (Average, Sum):
        raise ValueError("sparse_allreduce_async: op must be Average or Sum, not %s"
                         % E.OP_NAMES.get(op, op))
    t = tensor.coalesce()
    hi = allgather_async(_contiguous(t.indices().t()),
                         name=None if name is None else "%s.indices" % name, process_set=process_set)
    hv = allgather_async(_contiguous(t.values()),
                         name=None if name is None else "%s.values" % name, process_set=process_set)
    n = _set_rank_and_size(process_set)[1]
    shape = t.shape

    def handle():
        values = synchronize(hv)
        indices = synchronize(hi)
        _device.settle()
        if op == Average:
            values = values / n
        return torch.sparse_coo_tensor(indices.t(), values, shape)
    return handle


# ---- broadcast ----------------------------------------------------------------------------------

def _broadcast_async(tensor, inplace, root_rank, name, process_set):
    what = "broadcast_" if inplace else "broadcast"

    def b(set_id, names):
        _check_move(tensor, what)
        if isinstance(root_rank, bool) or not isinstance(root_rank, int):
            raise TypeError("%s: root_rank must be an int, not %r" % (what, root_rank))
        c = _contiguous(tensor)
        out = c if inplace else _empty_like(c)
        r = E.Request(E.BROADCAST, set_id, names[0], c, out, root=root_rank)
        if inplace and c is not tensor:
            r.target = tensor
        return [r], _first
    return _enqueue(E.BROADCAST, "broadcast", name, process_set, b)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts copying root_rank's tensor (a global rank, member of process_set) into a new
    tensor on every rank of process_set."""
    return _broadcast_async(tensor, False, root_rank, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """As broadcast_async, in place: tensor receives root_rank's contents."""
    return _broadcast_async(tensor, True, root_rank, name, process_set)


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return synchronize(_broadcast_async(tensor, False, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        # As Horovod: the averaged gradient on the root, zeros elsewhere.
        g = synchronize(_allreduce_async(grad, False, None, Average, 1.0, 1.0, ctx.process_set))
        if rank() != ctx.root_rank:
            g = g * 0
        return g, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor, on every rank of process_set (a new tensor; differentiable)."""
    return _BroadcastFn.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast: waits and returns tensor, which holds root_rank's contents."""
    return synchronize(_broadcast_async(tensor, True, root_rank, name, process_set))


# ---- alltoall -----------------------------------------------------------------------------------

def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall: rows splits[j] of tensor (consecutive along dimension 0) go to rank j
    of process_set; without splits, dimension 0 is divided equally. synchronize returns
    (output, received_splits): the rows received, in rank order, and how many came from each
    rank (an int32 tensor)."""

    def b(set_id, names):
        _check_move(tensor, "alltoall")
        if tensor.dim() == 0:
            raise ValueError("alltoall: a 0-dimensional tensor has no first dimension to split")
        n = len(_eng().set_info(set_id).ranks)
        dim0 = tensor.shape[0]
        if splits is None:
            if dim0 % n:
                raise ValueError("alltoall: the first dimension (%d) does not divide evenly "
                                 "among %d ranks; pass splits" % (dim0, n))
            sp = [dim0 // n] * n
        else:
            if isinstance(splits, torch.Tensor):
                if splits.dtype.is_floating_point or splits.dtype.is_complex:
                    raise ValueError("alltoall: splits must hold integers, not %s"
                                     % splits.dtype)
                sp = [int(x) for x in splits.reshape(-1).tolist()]
            else:
                try:
                    sp = [int(x) for x in splits]
                except (TypeError, ValueError):
                    raise TypeError("alltoall: splits must be a sequence or tensor of "
                                    "integers, not %r" % (splits,)) from None
            if len(sp) != n:
                raise ValueError("alltoall: splits has %d entries for %d ranks" % (len(sp), n))
            if any(x < 0 for x in sp):
                raise ValueError("alltoall: splits must not be negative: %s" % sp)
            if sum(sp) != dim0:
                raise ValueError("alltoall: splits add up to %d but the first dimension is %d"
                                 % (sum(sp), dim0))
        r = E.Request(E.ALLTOALL, set_id, names[0], _contiguous(tensor), splits=sp)
        return [r], _first
    return _enqueue(E.ALLTOALL, "alltoall", name, process_set, b)


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received = received
        ctx.process_set = process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *unused):
        g, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received, None,
                                          ctx.process_set))
        return g, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """An alltoall (see alltoall_async; differentiable). Returns the output tensor, or
    (output, received_splits) when splits is given."""
    return _AlltoallFn.apply(tensor, splits, name, process_set)


# ---- reducescatter ------------------------------------------------------------------------------

def _reducescatter_build(tensors, op, prescale, postscale, what):
    def build(set_id, names):
        if op not in (Average, Sum):
            if op == Adasum:
                raise NotImplementedError("%s: the Adasum reduction is not supported" % what)
            raise ValueError("%s: op must be Average or Sum, not %s"
                             % (what, E.OP_NAMES.get(op, op)))
        reqs = []
        for t, n in zip(tensors, names):
            _check_reduce(t, op, prescale, postscale, what)
            if t.dim() == 0:
                raise ValueError("%s: a 0-dimensional tensor has no first dimension to scatter"
                                 % what)
            reqs.append(E.Request(E.REDUCESCATTER, set_id, n, _contiguous(t), op=op,
                                  prescale=prescale, postscale=postscale))
        return reqs, None
    return build


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reduce-scatter: the reduction (Average or Sum) of tensor over process_set, of
    which rank i keeps block i along dimension 0 (when that dimension does not divide evenly,
    the first ranks get one row more)."""
    build = _reducescatter_build([tensor], op, prescale_factor, postscale_factor,
                                 "reducescatter")

    def b(set_id, names):
        reqs, _ = build(set_id, names)
        return reqs, _first
    return _enqueue(E.REDUCESCATTER, "reducescatter", name, process_set, b)


def _reducescatter_grad_factor(op, process_set, prescale, postscale):
    """The factor of a reduce-scatter's gradient (the allgather of the output's), as Horovod has
    it: the set's size for Sum, 1 for Average (under its convention that the job's loss is the
    ranks' average, the Average's 1/size and the averaging cancel), times the scale factors."""
    f = prescale * postscale
    if op == Sum:
        f *= _set_rank_and_size(process_set)[1]
    return f


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale, postscale):
        ctx.saved = (op, process_set, prescale, postscale)
        return synchronize(reducescatter_async(tensor, name, op, process_set, prescale,
                                               postscale))

    @staticmethod
    def backward(ctx, grad):
        op, ps, prescale, postscale = ctx.saved
        g = synchronize(allgather_async(grad.contiguous(), None, ps))
        f = _reducescatter_grad_factor(op, ps, prescale, postscale)
        if f != 1.0:
            g = g * f
        return g, None, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """A reduce-scatter (see reducescatter_async; differentiable)."""
    c, cctx = compression.compress(tensor)
    out = _ReducescatterFn.apply(c, name, op, process_set, prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts the reduce-scatter of each tensor of a list; synchronize returns the list."""
    tensors = list(tensors)
    build = _reducescatter_build(tensors, op, prescale_factor, postscale_factor,
                                 "grouped_reducescatter")

    def b(set_id, names):
        reqs, _ = build(set_id, names)
        return reqs, list
    return _enqueue(E.REDUCESCATTER, "grouped_reducescatter", name, process_set, b,
                    count=len(tensors))


class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale, postscale, *tensors):
        ctx.saved = (op, process_set, prescale, postscale)
        return tuple(synchronize(grouped_reducescatter_async(tensors, name, op, process_set,
                                                             prescale, postscale)))

    @staticmethod
    def backward(ctx, *grads):
        op, ps, prescale, postscale = ctx.saved
        gs = synchronize(grouped_allgather_async([g.contiguous() for g in grads], None, ps))
        f = _reducescatter_grad_factor(op, ps, prescale, postscale)
        return (None,) * 5 + tuple(g * f if f != 1.0 else g for g in gs)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """The reduce-scatter of each tensor of a list; returns the list of results."""
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatterFn.apply(name, op, process_set, prescale_factor,
                                         postscale_factor, *[p[0] for p in pairs])
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


# ---- barrier and join ---------------------------------------------------------------------------

def barrier(process_set=global_process_set):
    """Returns once every rank of process_set has called barrier()."""
    def b(set_id, names):
        return [E.Request(E.BARRIER, set_id, names[0])], _first
    synchronize(_enqueue(E.BARRIER, "barrier", None, process_set, b))


def join(device=-1):
    """Declares that this rank has no more data: until every rank has joined, it takes part in
    the other ranks' allreduces with zeros (and in their allgathers with no rows). Returns,
    on every rank, the rank that joined last. device is accepted for compatibility: a joined rank's
    contributions come from host memory, whatever the device of the others' tensors."""
    eng = _eng()
    req = E.Request(E.JOIN, 0, E.JOIN_NAME)
    eng.submit([req])
    return eng.wait(req)
