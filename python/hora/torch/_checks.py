"""Checks of the arguments of hora.torch's collectives (tensors, reduction ops, scale factors),
made before a request is built."""
import warnings

import torch

from hora.torch import _engine as E
from hora.torch._engine import (ADASUM as Adasum, AVERAGE as Average, MAX as Max, MIN as Min,
                                PRODUCT as Product, SUM as Sum)


# ---- argument checks ----------------------------------------------------------------------------

class _BadOp:
    """An op argument error, raised once the operation has its name, so that it is announced to
    the peers (whose matching operation then fails instead of waiting)."""

    def __init__(self, exc):
        self.exc = exc


def _resolve_op(op, average):
    if op is not None and average is not None:
        return _BadOp(ValueError("The op parameter supersedes average. Please provide only one "
                                 "of them."))
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return Average if op is None else op


def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s takes a torch.Tensor, not %s" % (what, type(tensor).__name__))
    if not (tensor.is_cpu or tensor.is_cuda):  # (cheaper than tensor.device)
        raise TypeError("%s: hora.torch handles CPU and CUDA tensors, this one is on %s"
                        % (what, tensor.device))
    if tensor.layout != torch.strided:
        raise TypeError("%s: sparse tensors are not supported (layout %s)"
                        % (what, tensor.layout))


def _check_reduce(tensor, op, prescale, postscale, what):
    if isinstance(op, _BadOp):
        raise op.exc
    _check_tensor(tensor, what)
    if op == Adasum and not tensor.is_floating_point():
        raise TypeError("%s: Adasum reduces floating tensors (float16, bfloat16, float32, "
                        "float64), not %s" % (what, tensor.dtype))
    if op not in E.OP_NAMES:
        raise ValueError("%s: unknown reduction op %r" % (what, op))
    for f in (prescale, postscale):
        if isinstance(f, bool) or not isinstance(f, (int, float)):
            raise TypeError("%s: scale factors are numbers, not %r" % (what, f))
    if E.reduce_code(tensor.dtype) is None:
        raise TypeError("%s: dtype %s cannot be reduced (supported: uint8, int8, int32, int64, "
                        "float16, bfloat16, float32, float64, and bool with Min, Max or Product)"
                        % (what, tensor.dtype))
    if tensor.dtype == torch.bool and (op not in (Min, Max, Product)
                                       or prescale != 1.0 or postscale != 1.0):
        raise TypeError("%s: bool tensors reduce with Min, Max or Product only, unscaled" % what)


def _check_move(tensor, what):
    _check_tensor(tensor, what)
    if not E.movable(tensor.dtype):
        raise TypeError("%s: dtype %s is not supported" % (what, tensor.dtype))
