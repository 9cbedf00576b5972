"""Whole-model helpers over the collectives: broadcast of parameters, optimizer state and
arbitrary Python objects, allgather of Python objects."""
import collections
import pickle

import torch

from hora.torch.mpi_ops import (allgather, allreduce, broadcast_, broadcast_async_,
                                global_process_set, rank, synchronize, Sum)

__all__ = ["broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
           "allgather_object"]


def _is_root(root_rank):
    # root_rank is a global rank, also for a process set (as the collectives take it).
    return rank() == root_rank


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrite, in place, every tensor of params with root_rank's value.

    params is a state_dict (a mapping name -> tensor, e.g. model.state_dict()) or a sequence of
    (name, tensor) pairs (e.g. model.named_parameters()). Entries that are not tensors (None)
    are skipped. Every rank must pass the same names in the same structure.
    """
    if isinstance(params, collections.abc.Mapping):
        items = sorted(params.items(), key=lambda kv: str(kv[0]))
    elif isinstance(params, (list, tuple)) or hasattr(params, "__iter__"):
        items = []
        for entry in params:
            if not (isinstance(entry, tuple) and len(entry) == 2):
                raise ValueError("broadcast_parameters: params must be a state_dict or a sequence "
                                 "of (name, tensor) pairs, got an element of type %s"
                                 % type(entry).__name__)
            items.append(entry)
    else:
        raise ValueError("broadcast_parameters: invalid params of type %s" % type(params).__name__)

    handles = []
    for name, p in items:
        if p is None:
            continue
        if not isinstance(p, torch.Tensor):
            raise ValueError("broadcast_parameters: %r is a %s, not a tensor"
                             % (name, type(p).__name__))
        # .data: an in-place write into a leaf that requires grad must bypass autograd.
        handles.append(broadcast_async_(p.data, root_rank, name="broadcast_parameters.%s" % name,
                                        process_set=process_set))
    for h in handles:
        synchronize(h)


def _pickle(obj):
    """(payload bytes, None) or (None, the exception pickle raised)."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), None
    except Exception as e:  # noqa: BLE001 (any pickling failure; re-raised by the callers)
        return None, e


_object_calls = collections.Counter()


def _object_names(what, name, process_set):
    """The names of the two operations of a broadcast_object or allgather_object: from name, or
    without one from the count of such unnamed calls on the process set. Their own count, not
    the one every unnamed operation shares: a rank that made an operation its peers did not (an
    allgather while a peer had joined, as Horovod's programs do) shifts the shared count, and
    Horovod, which names these calls after the object's type, still meets its peers here."""
    if name is None:
        key = (what, process_set.process_set_id)
        _object_calls[key] += 1
        name = "%s.%d" % (what, _object_calls[key])
    return name + ".sz", name + ".t"


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Serialize obj with pickle on root_rank and return root_rank's object on every rank.

    The byte length is broadcast first, then the bytes (a uint8 tensor). If the root cannot
    pickle obj it sends the length -1 instead, and every rank raises. Without a name the two
    broadcasts are named by the count of unnamed broadcast_object calls on the set (_object_name;
    a name derived from obj would differ between the root and the others, whose obj is usually
    None)."""
    sz_name, t_name = _object_names("broadcast_object", name, process_set)
    if _is_root(root_rank):
        payload, error = _pickle(obj)
        length = torch.tensor([-1 if error else len(payload)], dtype=torch.int64)
        broadcast_(length, root_rank, name=sz_name, process_set=process_set)
        if error is not None:
            raise ValueError("broadcast_object: the object cannot be pickled: %s" % error) \
                from error
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        broadcast_(data, root_rank, name=t_name, process_set=process_set)
        return obj
    length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name=sz_name, process_set=process_set)
    n = int(length.item())
    if n <= 0:
        raise ValueError("broadcast_object: root rank %d could not pickle its object" % root_rank)
    data = torch.empty(n, dtype=torch.uint8)
    broadcast_(data, root_rank, name=t_name, process_set=process_set)
    return pickle.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Return the list of every rank's obj (pickled), in rank order of process_set. A rank that
    cannot pickle its obj announces the length -1, and every rank raises. Without a name the
    two allgathers are named by the count of unnamed allgather_object calls on the set, as in
    broadcast_object."""
    sz_name, t_name = _object_names("allgather_object", name, process_set)
    payload, error = _pickle(obj)
    sizes = allgather(torch.tensor([-1 if error else len(payload)], dtype=torch.int64),
                      name=sz_name, process_set=process_set).tolist()
    if error is not None:
        raise ValueError("allgather_object: the object cannot be pickled: %s" % error) \
            from error
    if any(n < 0 for n in sizes):
        raise ValueError("allgather_object: rank(s) %s of the process set could not pickle "
                         "their object" % [i for i, n in enumerate(sizes) if n < 0])
    data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    gathered = allgather(data, name=t_name, process_set=process_set).numpy()
    if len(gathered) != sum(sizes):
        raise RuntimeError("allgather_object: gathered %d bytes, expected %d"
                           % (len(gathered), sum(sizes)))
    out, start = [], 0
    for n in sizes:
        out.append(pickle.loads(gathered[start:start + n].tobytes()))
        start += n
    return out


# --- optimizer state -----------------------------------------------------------------------

def _describe_state(optimizer):
    """A picklable description of optimizer's hyperparameters and state, indexed by the
    position of each parameter in param_groups. Tensors of one or more dimensions are described
    by (shape, dtype) and travel separately; zero-dimensional tensors and other values travel
    in the description itself."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    groups = []
    for g in optimizer.param_groups:
        groups.append({"nparams": len(g["params"]),
                       "options": {k: v for k, v in g.items() if k != "params"}})
    state = {}
    for i, p in enumerate(params):
        s = optimizer.state.get(p)
        if not s:
            continue
        entry = {}
        for key, value in s.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                entry[key] = ("tensor", tuple(value.shape), value.dtype)
            elif isinstance(value, torch.Tensor):
                entry[key] = ("value", value.detach().clone())
            else:
                entry[key] = ("value", value)
        state[i] = entry
    return {"groups": groups, "state": state}


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Make every rank's optimizer hyperparameters (lr, momentum, betas, ...) and per-parameter
    state (momentum buffers, Adam moments, step counts, ...) equal to root_rank's.

    Works when the state is still empty on some ranks (or on the root): a rank whose state
    lacks an entry the root has creates it, and entries the root lacks are removed, so after
    the call every rank holds exactly the root's state. Every rank's optimizer must have the
    same parameter groups with the same numbers of parameters (checked: a mismatch raises
    ValueError on every rank). On a fresh optimizer, the parameters that require a gradient and
    have none get zeros, as after the step with zero gradients that Horovod takes there."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("broadcast_optimizer_state: torch.optim.LBFGS keeps state that is not "
                         "per parameter and cannot be broadcast")
    if not optimizer.state:
        # A fresh optimizer: Horovod takes a step with zero gradients to make its state, and
        # programs written for it find those gradients there afterwards (zeros, sparse for
        # SparseAdam). The state itself needs no step here (entries are made as the root's).
        for g in optimizer.param_groups:
            for p in g["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
                    if isinstance(optimizer, torch.optim.SparseAdam):
                        p.grad = p.grad.to_sparse()
    is_root = _is_root(root_rank)
    desc = _describe_state(optimizer) if is_root else None
    desc = broadcast_object(desc, root_rank, name="broadcast_optimizer_state.desc",
                            process_set=process_set)

    local_counts = [len(g["params"]) for g in optimizer.param_groups]
    root_counts = [g["nparams"] for g in desc["groups"]]
    mismatch = torch.tensor([0 if local_counts == root_counts else 1], dtype=torch.int32)
    mismatch = allreduce(mismatch, op=Sum, name="broadcast_optimizer_state.check",
                         process_set=process_set)
    if int(mismatch.item()) != 0:
        raise ValueError("broadcast_optimizer_state: the optimizers' parameter groups differ "
                         "between ranks (this rank: %s parameters per group, root rank %d: %s)"
                         % (local_counts, root_rank, root_counts))

    if not is_root:
        for g, rg in zip(optimizer.param_groups, desc["groups"]):
            for k, v in rg["options"].items():
                g[k] = v

    params = [p for g in optimizer.param_groups for p in g["params"]]
    handles = []
    for i, p in enumerate(params):
        entry = desc["state"].get(i)
        if entry is None:
            if not is_root:
                optimizer.state.pop(p, None)
            continue
        s = optimizer.state[p]
        if not is_root:
            for key in [k for k in s if k not in entry]:
                del s[key]
        for key in sorted(entry, key=str):
            kind = entry[key][0]
            if kind == "value":
                if not is_root:
                    value = entry[key][1]
                    s[key] = value.clone() if isinstance(value, torch.Tensor) else value
                continue
            shape, dtype = entry[key][1], entry[key][2]
            t = s.get(key)
            if not (isinstance(t, torch.Tensor) and tuple(t.shape) == shape and t.dtype == dtype):
                t = torch.zeros(shape, dtype=dtype, device=p.device)
                s[key] = t
            handles.append(broadcast_async_(t.data if t.requires_grad else t, root_rank,
                                            name="broadcast_optimizer_state.%d.%s" % (i, key),
                                            process_set=process_set))
    for h in handles:
        synchronize(h)
