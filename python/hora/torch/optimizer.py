"""DistributedOptimizer: wraps a torch.optim optimizer so that every gradient is averaged (or
summed) over the ranks before the update.

The allreduce of a gradient starts from a hook on the parameter's gradient accumulator, the
moment autograd has produced that gradient, so communication overlaps the rest of the backward
pass; step() (or synchronize()) waits for all of them and then updates the parameters.
"""
import contextlib
import warnings
import weakref

import torch

from hora import _device
from hora.torch.compression import Compression
from hora.torch.mpi_ops import (Adasum, Average, Sum, allgather_async, allreduce_async_,
                                global_process_set, grouped_allreduce_async_, size,
                                synchronize)

__all__ = ["DistributedOptimizer"]


def _set_size(process_set):
    n = process_set.size() if process_set is not global_process_set else size()
    if n is None:
        raise ValueError("%r is not registered; call hvd.add_process_set() on every rank first"
                         % (process_set,))
    return n


def _included(process_set):
    if process_set is global_process_set:
        return True
    inside = process_set.included()
    if inside is None:
        raise ValueError("%r is not registered; call hvd.add_process_set() on every rank first"
                         % (process_set,))
    return inside


class _SparseHandle:
    """The pending allgathers of a sparse gradient's indices and values."""

    def __init__(self, indices_handle, values_handle, shape, scale):
        self.indices_handle = indices_handle
        self.values_handle = values_handle
        self.shape = shape
        self.scale = scale

    def wait(self):
        indices = synchronize(self.indices_handle)
        values = synchronize(self.values_handle)
        _device.settle()
        out = torch.sparse_coo_tensor(indices.t(), values, self.shape).coalesce()
        if self.scale != 1.0:
            out = out * self.scale
        return out


def _make_hook(optimizer_ref, p):
    # The hook holds the optimizer weakly: the accumulator nodes (which the optimizer keeps
    # alive) would otherwise keep it alive in turn, and a discarded DistributedOptimizer would
    # go on reducing, and counting backward passes, for a model now trained by another one.
    def hook(*unused):
        optimizer = optimizer_ref()
        if optimizer is not None:
            optimizer._on_grad_ready(p)
    return hook


class _DistributedOptimizerMixin:
    """Placed before the wrapped optimizer's class in a dynamically created subclass, so that
    isinstance(opt, type(original)) holds and param_groups / state / state_dict behave as the
    original's."""

    def _hora_setup(self, named_parameters, compression, backward_passes_per_step, op,
                    gradient_predivide_factor, groups, sparse_as_dense, process_set):
        all_params = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("DistributedOptimizer.noname.%d" % i, p) for i, p in enumerate(all_params)]
        if any(not isinstance(entry, tuple) or len(entry) != 2 for entry in named_parameters):
            raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                             "usually produced by model.named_parameters().")
        seen, dups = set(), []
        for name, _ in named_parameters:
            if name in seen and name not in dups:
                dups.append(name)
            seen.add(name)
        if dups:
            raise ValueError("Parameter names in named_parameters must be unique. "
                             "Found duplicates: %s" % ", ".join(str(d) for d in dups))
        named_ids = {id(p) for _, p in named_parameters}
        unnamed = [p for p in all_params if id(p) not in named_ids]
        if unnamed:
            raise ValueError("named_parameters was specified, but one or more model parameters "
                             "were not named. Python object ids: %s"
                             % ", ".join(str(id(p)) for p in unnamed))
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be at least 1, got %r"
                             % (backward_passes_per_step,))

        self._compression = compression
        self._parameter_names = {}
        for name, p in named_parameters:
            self._parameter_names.setdefault(p, name)
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._allreduce_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}          # key (a parameter or a group tuple) -> (handle, ctx)
        self._grad_accs = []
        self._requires_update = set()
        self._synchronized = False
        self._should_synchronize = True

        # Groups: a list of tuples of parameters reduced together by one grouped allreduce.
        self._groups = None
        self._p_to_group = {}
        self._group_counts = {}
        if groups is not None:
            if isinstance(groups, bool) or not isinstance(groups, (int, list, tuple)):
                raise ValueError("groups must be a non-negative integer or a list of lists of "
                                 "parameters, got %r" % (groups,))
            if isinstance(groups, int):
                if groups < 0:
                    raise ValueError("groups must be non-negative, got %d" % groups)
                trainable = [p for p in all_params if p.requires_grad]
                if groups > 0 and trainable:
                    n = min(groups, len(trainable))
                    base, extra = divmod(len(trainable), n)
                    parts, start = [], 0
                    for k in range(n):
                        stop = start + base + (1 if k < extra else 0)
                        parts.append(tuple(trainable[start:stop]))
                        start = stop
                    self._groups = parts
            else:
                ids = {id(p) for p in all_params}
                parts, used = [], set()
                for group in groups:
                    group = tuple(group)
                    for p in group:
                        if id(p) not in ids:
                            raise ValueError("groups names a tensor that is not one of the "
                                             "optimizer's parameters")
                        if id(p) in used:
                            raise ValueError("a parameter appears in more than one group")
                        used.add(id(p))
                    # Frozen parameters have no gradient to reduce (and must not get one).
                    group = tuple(p for p in group if p.requires_grad)
                    if group:
                        parts.append(group)
                self._groups = parts
            if self._groups is not None:
                for group in self._groups:
                    for p in group:
                        self._p_to_group[p] = group
                    self._group_counts[group] = 0

        if _included(process_set) and _set_size(process_set) > 1:
            self._register_hooks()

    # --- hooks ---------------------------------------------------------------------------

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    self._requires_update.add(p)
                    # The node that accumulates p's gradient; its post-hook runs once p.grad
                    # holds this backward pass's contribution.
                    acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    acc.register_hook(_make_hook(weakref.ref(self), p))
                    self._grad_accs.append(acc)

    def _on_grad_ready(self, p):
        if self._allreduce_delay[p] <= 0:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times before "
                "call to step(). Increase backward_passes_per_step to accumulate gradients "
                "locally.")
        self._allreduce_delay[p] -= 1
        if self._allreduce_delay[p] > 0:
            self._handles[p] = (None, None)
            return
        group = self._p_to_group.get(p)
        if group is None:
            self._handles[p] = self._allreduce_grad_async(p)
            return
        self._handles[p] = (None, None)
        self._group_counts[group] += 1
        if self._group_counts[group] == len(group):
            for gp in group:
                self._handles.pop(gp, None)
            self._handles[group] = self._grouped_allreduce_grad_async(group)
            self._group_counts[group] = 0

    # --- submission ----------------------------------------------------------------------

    def _scale_factors(self):
        if self.op == Average:
            # The engine divides by the set size after the postscale for Average; splitting
            # the division this way keeps sums of large gradients in range.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _prepare_grad(self, p):
        if p.grad is None:
            # Not produced this step on this rank (an unused parameter), but other ranks may
            # have one: contribute zeros so that every rank submits the same tensors.
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        # sparse_as_dense: a dense copy is reduced, and the optimizer gets a sparse gradient
        # back (_write_grad), as Horovod does: optimizers such as SparseAdam take only those.
        if p.grad.is_sparse and self.sparse_as_dense:
            return p.grad.to_dense()
        return p.grad

    def _allreduce_grad_async(self, p):
        name = self._parameter_names.get(p)
        grad = self._prepare_grad(p)
        if grad.is_sparse:
            return self._sparse_allreduce_grad_async(p, grad, name)
        compressed, ctx = self._compression.compress(grad)
        pre, post = self._scale_factors()
        handle = allreduce_async_(compressed, name=name, op=self.op, prescale_factor=pre,
                                  postscale_factor=post, process_set=self.process_set)
        return handle, (ctx, compressed)

    def _sparse_allreduce_grad_async(self, p, grad, name):
        if self.op not in (Average, Sum):
            raise NotImplementedError("a sparse gradient can only be averaged or summed; pass "
                                      "sparse_as_dense=True for other reductions")
        grad = grad.coalesce()
        indices = grad.indices().t().contiguous()
        values = grad.values().contiguous()
        h_i = allgather_async(indices, name="%s.indices" % name, process_set=self.process_set)
        h_v = allgather_async(values, name="%s.values" % name, process_set=self.process_set)
        scale = 1.0 / _set_size(self.process_set) if self.op == Average else 1.0
        return _SparseHandle(h_i, h_v, grad.shape, scale), None

    def _grouped_allreduce_grad_async(self, group):
        name = self._parameter_names.get(group[0])
        grads = [self._prepare_grad(p) for p in group]
        if any(g.is_sparse for g in grads):
            raise NotImplementedError("grouped allreduce of sparse gradients is not supported; "
                                      "pass sparse_as_dense=True")
        compressed, ctxs = [], []
        for g in grads:
            c, ctx = self._compression.compress(g)
            compressed.append(c)
            ctxs.append((ctx, c))
        pre, post = self._scale_factors()
        handle = grouped_allreduce_async_(compressed, name="group.%s" % name, op=self.op,
                                          prescale_factor=pre, postscale_factor=post,
                                          process_set=self.process_set)
        return handle, ctxs

    def _key_name(self, key):
        p = key[0] if isinstance(key, tuple) else key
        return str(self._parameter_names.get(p, ""))

    # --- public API ----------------------------------------------------------------------

    def set_backward_passes_per_step(self, passes):
        if passes < 1:
            raise ValueError("backward_passes_per_step must be at least 1, got %r" % (passes,))
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def synchronize(self):
        """Wait for every gradient's allreduce and write the results into the .grad tensors.
        Gradients whose hook did not fire this step (unused parameters, or fewer than
        backward_passes_per_step passes) are reduced now, in the order of their names, which is
        the same on every rank."""
        if not _included(self.process_set):
            self._synchronized = True
            return
        if not self._requires_update:
            # A single rank (or nothing trainable): the reduction is the identity.
            self._synchronized = True
            return
        try:
            launched = set()
            for key, (handle, _) in self._handles.items():
                if handle is not None:
                    launched.update(key if isinstance(key, tuple) else (key,))
            pending = [p for p in self._requires_update if p not in launched]
            units, seen_groups = [], set()
            for p in pending:
                group = self._p_to_group.get(p)
                if group is None:
                    units.append(p)
                elif group not in seen_groups:
                    seen_groups.add(group)
                    units.append(group)
            units.sort(key=self._key_name)
            for unit in units:
                if isinstance(unit, tuple):
                    for gp in unit:
                        self._handles.pop(gp, None)
                    self._handles[unit] = self._grouped_allreduce_grad_async(unit)
                    self._group_counts[unit] = 0
                else:
                    self._handles[unit] = self._allreduce_grad_async(unit)

            # Wait for every handle even after a failure, so that no reduction still writes
            # into a gradient once this returns; then raise the first failure. (For device
            # gradients: once the current stream waits for it, where the update runs.)
            first_error = None
            for key, (handle, ctx) in list(self._handles.items()):
                try:
                    if isinstance(handle, _SparseHandle):
                        key.grad = handle.wait()
                        continue
                    output = synchronize(handle)
                    _device.settle()
                    if first_error is not None:
                        continue
                    if isinstance(key, tuple):
                        outputs = output if isinstance(output, (list, tuple)) else [output]
                        for p, out, (c, compressed) in zip(key, outputs, ctx):
                            self._write_grad(p, out, c, compressed)
                    else:
                        c, compressed = ctx
                        self._write_grad(key, output, c, compressed)
                except Exception as e:  # noqa: BLE001 (re-raised below)
                    if first_error is None:
                        first_error = e
            if first_error is not None:
                raise first_error
        finally:
            self._handles.clear()
            for p in self._allreduce_delay:
                self._allreduce_delay[p] = self.backward_passes_per_step
            for group in self._group_counts:
                self._group_counts[group] = 0
        self._synchronized = True

    def _write_grad(self, p, output, ctx, compressed):
        if output is None:
            output = compressed
        result = self._compression.decompress(output, ctx)
        if p.grad.is_sparse:  # reduced dense (sparse_as_dense): handed back sparse
            p.grad = result.to_sparse()
        elif result is not p.grad:
            with torch.no_grad():
                p.grad.copy_(result)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Inside, step() does not synchronize: for use after an explicit synchronize()
        (e.g. to clip the reduced gradients before the update)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super().zero_grad(*args, **kwargs)


class _DistributedAdasumOptimizerMixin:
    """op=Adasum, as Horovod's Adasum optimizer: step() makes this rank's own update from its
    own gradients, then the ranks' updates (the parameters' changes) are combined by Adasum and
    applied from where the parameters started. (Horovod starts each parameter's reduction from
    its gradient hook; here they all start in step(), after the local update.)"""

    def _hora_adasum_setup(self, named_parameters, process_set):
        self._adasum_names = dict((p, n) for n, p in (named_parameters or []))
        self.process_set = process_set

    def synchronize(self):
        """Nothing to wait for: the updates are reduced in step()."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        yield

    def step(self, closure=None):
        # Every trainable parameter, with a gradient here or not (its update is then zero):
        # the ranks must make the same reductions, and a closure may make the gradients.
        params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        starts = [p.detach().clone() for p in params]
        loss = super().step(closure)
        if not _included(self.process_set):
            return loss
        handles = []
        with torch.no_grad():
            for i, (p, start) in enumerate(zip(params, starts)):
                delta = p.detach() - start
                name = self._adasum_names.get(p, "DistributedOptimizer.adasum.%d" % i)
                handles.append((p, start, allreduce_async_(
                    delta, op=Adasum, name="adasum.delta.%s" % name,
                    process_set=self.process_set)))
            first_error = None
            for p, start, h in handles:  # every one waited for, even after a failure
                try:
                    delta = synchronize(h)
                    _device.settle()
                    p.copy_(start + delta)
                except Exception as e:  # noqa: BLE001 (re-raised below)
                    first_error = first_error or e
            if first_error is not None:
                raise first_error
        return loss


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Return an optimizer of the same class as `optimizer` (sharing its param_groups, state and
    defaults) whose step() first reduces every gradient over the ranks of process_set.

    named_parameters: (name, parameter) pairs naming the gradients' allreduces, usually
        model.named_parameters(); names must be unique and cover the optimizer's parameters.
    compression: Compression.none or Compression.fp16, applied to gradients on the wire.
    backward_passes_per_step: number of backward passes accumulated locally before the
        reduction (the gradients of the passes add up).
    op: Average (default), Sum, or Adasum: each rank updates the parameters from its own
        gradients, and the ranks' updates are combined by Adasum (as Horovod's Adasum
        optimizer; compression and gradient_predivide_factor do not apply).
    gradient_predivide_factor: with Average, gradients are scaled by 1/factor before the sum
        and by factor/size after it.
    groups (or the older num_groups): a number of groups to split the parameters into, or a
        list of lists of parameters; the gradients of one group travel in one grouped
        allreduce once all of them are ready.
    sparse_as_dense: turn sparse gradients dense before reducing them (otherwise they are
        allgathered).
    """
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if op not in (Average, Sum, Adasum):
        raise ValueError("DistributedOptimizer supports op=Average, Sum or Adasum, got %r" % (op,))
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups`.", DeprecationWarning)
        if groups is None:
            groups = num_groups
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("DistributedOptimizer wraps a torch.optim.Optimizer, got %s"
                        % type(optimizer).__name__)
    base = type(optimizer)
    if isinstance(optimizer, (_DistributedOptimizerMixin, _DistributedAdasumOptimizerMixin)):
        raise ValueError("the optimizer is already a DistributedOptimizer")
    mixin = _DistributedAdasumOptimizerMixin if op == Adasum else _DistributedOptimizerMixin
    cls = type(base.__name__, (mixin, base),
               {"__module__": base.__module__, "__qualname__": base.__qualname__})
    dist = cls.__new__(cls)
    # Share the wrapped optimizer's param_groups, state, defaults and hooks without calling
    # its __init__ (whose signature varies between optimizers).
    dist.__dict__.update(optimizer.__dict__)
    if op == Adasum:
        dist._hora_adasum_setup(list(named_parameters) if named_parameters is not None else None,
                                process_set)
        return dist
    dist._hora_setup(named_parameters, compression, backward_passes_per_step, op,
                     gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return dist
