"""SyncBatchNorm: batch normalization whose training statistics cover the global batch (the
union of every rank's local batch), for inputs of shape (N, C), (N, C, L), (N, C, H, W) or
(N, C, D, H, W). Ranks may hold different local batch sizes, including zero."""
import torch
import torch.nn.functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from hora.torch.mpi_ops import Sum, allreduce_, global_process_set, size

__all__ = ["SyncBatchNorm"]


def _set_size(process_set):
    n = process_set.size() if process_set is not global_process_set else size()
    if n is None:
        raise ValueError("%r is not registered; call hvd.add_process_set() on every rank first"
                         % (process_set,))
    return n


def _channel_shape(x):
    return (1, x.shape[1]) + (1,) * (x.dim() - 2)


def _reduce_dims(x):
    return [0] + list(range(2, x.dim()))


class _SyncBatchNormFunction(torch.autograd.Function):

    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, process_set,
                name):
        x = x.contiguous()
        c = x.shape[1]
        dims = _reduce_dims(x)
        # One allreduce carries [sum, sum of squares, count], accumulated in float64 so that
        # the variance keeps its precision when computed as E[x^2] - E[x]^2.
        # (On x's device: for a CUDA input the statistics are reduced there, in stream order.)
        stats = torch.empty(2 * c + 1, dtype=torch.float64, device=x.device)
        if x.numel() > 0:
            xd = x.to(torch.float64)   # a copy unless x is float64 already
            stats[:c] = xd.sum(dims)
            sq = xd.square_() if xd is not x else xd.square()
            stats[c:2 * c] = sq.sum(dims)
        else:
            stats[:2 * c] = 0
        stats[2 * c] = x.numel() // c if c else 0
        allreduce_(stats, op=Sum, name=name + ".stats", process_set=process_set)
        count = int(round(stats[2 * c].item()))
        if count <= 1:
            raise ValueError("Expected more than 1 value per channel when training, got a "
                             "global batch of %d value(s) per channel" % count)
        mean = stats[:c] / count
        var = (stats[c:2 * c] / count - mean * mean).clamp_(min=0.0)
        invstd = (var + eps).rsqrt()

        if running_mean is not None:
            with torch.no_grad():
                running_mean.mul_(1.0 - momentum).add_(mean.to(running_mean.dtype),
                                                       alpha=momentum)
        if running_var is not None:
            with torch.no_grad():
                unbiased = var * (count / (count - 1))
                running_var.mul_(1.0 - momentum).add_(unbiased.to(running_var.dtype),
                                                      alpha=momentum)

        shape = _channel_shape(x)
        mean_x = mean.to(x.dtype).view(shape)
        invstd_x = invstd.to(x.dtype).view(shape)
        xhat = (x - mean_x) * invstd_x
        if weight is not None:
            y = xhat * weight.view(shape) + bias.view(shape)
        else:
            y = xhat
        ctx.save_for_backward(x, weight, mean_x, invstd_x)
        ctx.count = count
        ctx.process_set = process_set
        ctx.name = name
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, mean_x, invstd_x = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        c = x.shape[1]
        dims = _reduce_dims(x)
        shape = _channel_shape(x)
        xhat = (x - mean_x) * invstd_x
        # Local reductions: the weight and bias gradients of this rank's share of the loss.
        if x.numel() > 0:
            sum_dy = grad_out.to(torch.float64).sum(dims)
            sum_dy_xhat = (grad_out * xhat).to(torch.float64).sum(dims)
        else:
            sum_dy = torch.zeros(c, dtype=torch.float64, device=x.device)
            sum_dy_xhat = torch.zeros(c, dtype=torch.float64, device=x.device)
        grad_weight = grad_bias = grad_input = None
        if weight is not None and ctx.needs_input_grad[1]:
            grad_weight = sum_dy_xhat.to(weight.dtype)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = sum_dy.to(weight.dtype if weight is not None else x.dtype)
        if ctx.needs_input_grad[0]:
            # The input gradient needs the same two reductions over the global batch.
            both = torch.cat([sum_dy, sum_dy_xhat])
            allreduce_(both, op=Sum, name=ctx.name + ".grad", process_set=ctx.process_set)
            mean_dy = (both[:c] / ctx.count).to(x.dtype).view(shape)
            mean_dy_xhat = (both[c:] / ctx.count).to(x.dtype).view(shape)
            scale = invstd_x if weight is None else invstd_x * weight.view(shape)
            grad_input = (grad_out - mean_dy - xhat * mean_dy_xhat) * scale
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Drop-in replacement for torch.nn.BatchNorm1d/2d/3d. In training mode the mean and
    variance are those of the global batch over every rank of process_set (one allreduce in
    forward, one in backward); running_mean / running_var follow torch's update rule with the
    global unbiased variance, so they stay identical on every rank. In eval mode (with running
    statistics) it normalizes with the running statistics, without communication."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None,
                 process_set=global_process_set):
        kwargs = {}
        if device is not None:
            kwargs["device"] = device
        if dtype is not None:
            kwargs["dtype"] = dtype
        super().__init__(num_features, eps, momentum, affine, track_running_stats, **kwargs)
        self.process_set = process_set
        # The same name on every rank whatever else each rank built: the allreduces are
        # synchronous, so layers never have two of them in flight at once.
        self._sync_name = "sync_batch_norm.%d" % num_features

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got %dD input)" % input.dim())

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            raise ValueError("expected %d channels, got input of shape %s"
                             % (self.num_features, tuple(input.shape)))
        factor = 0.0
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
            else:
                factor = self.momentum
        use_batch_stats = self.training or not self.track_running_stats
        if not use_batch_stats:
            return F.batch_norm(input, self.running_mean, self.running_var, self.weight,
                                self.bias, False, 0.0, self.eps)
        if _set_size(self.process_set) == 1:
            return F.batch_norm(input, self.running_mean if self.training else None,
                                self.running_var if self.training else None, self.weight,
                                self.bias, True, factor, self.eps)
        track = self.training and self.track_running_stats
        return _SyncBatchNormFunction.apply(
            input, self.weight, self.bias,
            self.running_mean if track else None, self.running_var if track else None,
            self.eps, factor, self.process_set, self._sync_name)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_set=global_process_set):
        """Return module with every torch.nn.BatchNorm*d replaced by a SyncBatchNorm holding
        the same parameters and running statistics."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, process_set=process_set)
            if module.affine:
                with torch.no_grad():
                    out.weight = module.weight
                    out.bias = module.bias
            out.running_mean = module.running_mean
            out.running_var = module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_set))
        return out
