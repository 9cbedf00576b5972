"""How the torch.distributed backend "hora" (hora.torch.distributed) hands tensors to the
library: dtype and reduction codes, argument checks, addresses and element counts, contiguous
stand-ins for other tensors, and the local steps of some collectives.
"""
import torch
from torch._C import _distributed_c10d as _c10d

from hora import _core


_DTYPES = {
    torch.float32: _core.FLOAT32, torch.float64: _core.FLOAT64, torch.float16: _core.FLOAT16,
    torch.bfloat16: _core.BFLOAT16, torch.int32: _core.INT32, torch.int64: _core.INT64,
    torch.int8: _core.INT8, torch.uint8: _core.UINT8,
}
_COMPLEX = {torch.complex64: torch.float32, torch.complex128: torch.float64}

_RedOpType = _c10d.ReduceOp.RedOpType
_OPS = {
    _RedOpType.SUM: _core.SUM, _RedOpType.PRODUCT: _core.PROD, _RedOpType.MIN: _core.MIN,
    _RedOpType.MAX: _core.MAX, _RedOpType.AVG: _core.AVG,
}


def _op_code(reduce_op):
    kind = getattr(reduce_op, "op", reduce_op)
    try:
        return _OPS[kind]
    except (KeyError, TypeError):
        raise ValueError("the hora backend does not support the reduction %s (it supports SUM, "
                         "PRODUCT, MIN, MAX and AVG)" % (getattr(kind, "name", kind),)) from None


def _check_tensor(t, what="tensor"):
    if not isinstance(t, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, not %s" % (what, type(t).__name__))
    if t.device.type not in ("cpu", "cuda"):
        raise ValueError("the hora backend works on CPU and CUDA tensors; %s is on %s" % (what, t.device))
    if t.is_sparse:
        raise ValueError("the hora backend does not support sparse tensors (%s)" % what)
    if t.dtype not in _DTYPES and t.dtype not in _COMPLEX:
        raise TypeError("the hora backend does not support %s (%s)" % (t.dtype, what))


def _wire(t):
    """(address, element count, dtype code) of a contiguous tensor, complex as pairs of reals."""
    if t.dtype in _COMPLEX:
        t = torch.view_as_real(t)
    return t.data_ptr(), t.numel(), _DTYPES[t.dtype]


def _elems(t):
    return t.numel() * (2 if t.dtype in _COMPLEX else 1)


def _check_op_dtype(op, dtype):
    if dtype in _COMPLEX and op not in (_core.SUM, _core.AVG):
        raise ValueError("the hora backend reduces complex tensors with SUM and AVG only")


class _Contiguous:
    """A contiguous stand-in for a tensor; copied back after the operation when it is a copy."""

    def __init__(self, t, copy_in=True):
        self.target = t
        if t.is_contiguous():
            self.buf = t
        else:
            self.buf = t.contiguous() if copy_in else torch.empty_like(t, memory_format=torch.contiguous_format)

    def back(self):
        if self.buf is not self.target:
            self.target.copy_(self.buf)


def _consecutive(tensors):
    """True when equal-sized contiguous tensors lie back to back in one block of memory."""
    if not tensors or not all(t.is_contiguous() for t in tensors):
        return False
    nbytes = tensors[0].numel() * tensors[0].element_size()
    base = tensors[0].data_ptr()
    return all(t.dtype == tensors[0].dtype and t.numel() == tensors[0].numel()
               and t.data_ptr() == base + i * nbytes for i, t in enumerate(tensors))


def _flat_view(tensors):
    """One 1-D tensor over the memory of consecutive tensors (see _consecutive)."""
    first = tensors[0]
    try:
        return first.as_strided((first.numel() * len(tensors),), (1,), first.storage_offset())
    except RuntimeError:  # beyond the storage: not one block after all
        return None


def _addr2(t):
    addr, n, dt = _wire(t)
    return addr, addr, n, dt


def _addr3(a, b):
    addr, n, dt = _wire(a)
    return addr, _wire(b)[0], n, dt


def _local_reduce(ts, op):
    acc = ts[0].clone()
    for t in ts[1:]:
        if op in (_core.SUM, _core.AVG):
            acc.add_(t)
        elif op == _core.PROD:
            acc.mul_(t)
        elif op == _core.MIN:
            torch.minimum(acc, t, out=acc)
        else:
            torch.maximum(acc, t, out=acc)
    return acc


def _splits(t, sizes, n, what):
    """Element offsets and counts of the n row blocks of t (dim 0)."""
    rows = t.shape[0] if t.dim() else 1
    per_row = _elems(t) // rows if rows else 0
    if not sizes:
        if rows % n:
            raise ValueError("alltoall_base: the %s's %d rows do not split evenly in %d" % (what, rows, n))
        sizes = [rows // n] * n
    sizes = list(sizes)
    if len(sizes) != n or any(s < 0 for s in sizes) or sum(sizes) != rows:
        raise ValueError("alltoall_base: the %s split sizes %s do not cover its %d rows in %d parts"
                         % (what, sizes, rows, n))
    out, off = [], 0
    for s in sizes:
        out.append((off * per_row, s * per_row))
        off += s
    return out


def _real_flat(t):
    return (torch.view_as_real(t) if t.dtype in _COMPLEX else t).reshape(-1)


def _exchange(comm, rank, src, in_splits, dst, out_splits):
    s_addr, _, dt = _wire(src)
    d_addr, _, _ = _wire(dst)
    es = _core.dtype_size(dt)
    with _core.group():
        for peer, ((so, sn), (do, dn)) in enumerate(zip(in_splits, out_splits)):
            if peer == rank:
                if sn != dn:
                    raise ValueError("alltoall_base: this rank sends itself %d elements but expects %d"
                                     % (sn, dn))
                if sn:  # (a copy of the tensors: the memory may be a GPU's)
                    _real_flat(dst)[do:do + dn].copy_(_real_flat(src)[so:so + sn])
                continue
            if sn:
                comm.send(s_addr + so * es, sn, dt, peer)
            if dn:
                comm.recv(d_addr + do * es, dn, dt, peer)
