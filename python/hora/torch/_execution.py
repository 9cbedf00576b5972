"""The execution half of hora.torch's engine: a round's ready operations are checked for
agreement, planned (compatible allreduces packed into fusion buffers of at most
HORA_FUSION_THRESHOLD bytes) and run, in the same order on every rank. Engine
(hora.torch._engine) inherits it; the methods run on the engine's thread.
"""
import time

import torch

from hora import _core as C
from hora.torch._device_exec import DeviceExecution
from hora.torch._issue import allgather_rows, exchange, reduce_scatter_rows, split_offsets
from hora.torch._protocol import (
    _DTYPE_BY_NAME, _HORA_OP, _REDUCE_CODE, ADASUM, ADD_SET, ALLGATHER, ALLREDUCE, ALLTOALL, AVERAGE,
    BARRIER, BROADCAST, D_DTYPE, D_EXTRA, D_KIND, D_OP, D_POST, D_PRE, D_ROOT, D_SHAPE, D_SPLITS,
    ELEMENT_SIZE, JOIN, KIND_NAMES, MAX, MIN, PRODUCT, REDUCESCATTER, REMOVE_SET, SetInfo,
    subcomm, validate,
)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


_NARROW = (torch.float16, torch.bfloat16)


def scale_(t, factor):
    """t *= factor in place, as Horovod's CPU scaling does: integer tensors in float64,
    truncated toward zero; float16 and bfloat16 in float32, rounded once (torch's own
    mul of a half tensor by a Python float rounds the factor to half first)."""
    if factor == 1.0 or t.numel() == 0:
        return
    if t.dtype in _NARROW:
        t.copy_(t.to(torch.float32).mul_(factor))
    elif t.is_floating_point():
        t.mul_(factor)
    else:
        t.copy_(t.to(torch.float64).mul_(factor).trunc_())


def finish_(t, op, postscale, n):
    """The last step of a reduction over n ranks, in place: an Average of floating values
    without a postscale factor divides by n (a true division: the correctly rounded mean, as
    programs written for Horovod compare with; float16 and bfloat16 in float32, rounded once);
    otherwise the result is scaled by postscale (divided by n for an Average first)."""
    if op == AVERAGE and postscale == 1.0 and t.is_floating_point():
        if t.numel() == 0:
            return
        if t.dtype in _NARROW:
            t.copy_(t.to(torch.float32).div_(n))
        else:
            t.div_(n)
        return
    scale_(t, postscale / n if op == AVERAGE else postscale)


def op_identity(dtype, op):
    """The value a joined rank contributes to an allreduce with op: the element that leaves the
    other ranks' result unchanged (0 for Sum and Average, as Horovod; the dtype's largest value
    for Min, its lowest for Max, 1 for Product). Horovod contributes zeros whatever the op, which
    makes a Min over positive values 0."""
    if op in (MIN, MAX):
        if dtype == torch.bool:
            return op == MIN
        if dtype.is_floating_point:
            return float("inf") if op == MIN else float("-inf")
        info = torch.iinfo(dtype)
        return info.max if op == MIN else info.min
    return 1 if op == PRODUCT else 0


def adasum_pair(a, b):
    """Horovod's adaptive sum of two float64 vectors: each scaled down by half its share of
    the other's direction, (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b (a zero vector adds as
    is): orthogonal vectors add, identical ones average."""
    dot = torch.dot(a, b).item()
    na, nb = torch.dot(a, a).item(), torch.dot(b, b).item()
    ca = 1.0 - dot / na * 0.5 if na != 0 else 1.0
    cb = 1.0 - dot / nb * 0.5 if nb != 0 else 1.0
    return a * ca + b * cb


def adasum_tree(vectors):
    """The ranks' vectors combined pairwise, level by level, as Horovod's tree: (0,1), (2,3),
    ... then those pairs' results, and so on (with a number of ranks that is not a power of two,
    an odd one out goes up a level unchanged)."""
    level = list(vectors)
    while len(level) > 1:
        nxt = [adasum_pair(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def scaled_copy(dst, src, factor):
    """dst = src * factor (dst and src of one dtype and shape)."""
    if factor == 1.0:
        dst.copy_(src)
    elif src.dtype in _NARROW:
        dst.copy_(src.to(torch.float32).mul_(factor))
    elif src.is_floating_point():
        torch.mul(src, factor, out=dst)
    else:
        dst.copy_(src.to(torch.float64).mul_(factor).trunc_())


class Execution(DeviceExecution):
    """Planning and running the ready operations of a round: a mixin of Engine, whose state
    (sets, local requests, timeline, statistics) it uses. An entry whose tensor on this rank is
    on a device runs through DeviceExecution's paths (hora.torch._device_exec)."""

    # ---- execution ---------------------------------------------------------------------------

    def _execute(self, ready):
        tl = self.timeline
        now = time.perf_counter()
        plan = []
        removals = []
        open_batches = {}
        for e, err in ready:
            info = self._sets.get(e.key[0])
            if err is None:
                err = validate(e, info, self.size)
            if err is not None:
                self._fail_entry(e, err)
                continue
            d0 = e.descs[min(e.descs)]
            if tl is not None:
                r = self._local.get(e.key)
                if r is not None:
                    tl.complete(e.key[1], "QUEUE", r.t_enqueue, now)
            kind = d0[D_KIND]
            if kind == ALLREDUCE:
                dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
                nbytes = _numel(d0[D_SHAPE]) * ELEMENT_SIZE[dtype]
                if 0 < nbytes <= self.threshold and d0[D_OP] != ADASUM:
                    ck = (e.key[0], d0[D_DTYPE], d0[D_OP], d0[D_PRE], d0[D_POST], e.device)
                    b = open_batches.get(ck)
                    if b is not None and b[1] + nbytes <= self.threshold:
                        b[2].append(e)
                        b[1] += nbytes
                        continue
                    b = ["fuse", nbytes, [e]]
                    open_batches[ck] = b
                    plan.append(b)
                else:
                    plan.append(["fuse", nbytes, [e]])
            elif kind == REMOVE_SET:
                removals.append(["one", 0, [e]])
            else:
                plan.append(["one", 0, [e]])
        # Removals last: an operation on a set that became ready in the same round still runs.
        for step in plan + removals:
            entries = step[2]
            info = self._sets.get(entries[0].key[0])
            kind = entries[0].descs[min(entries[0].descs)][D_KIND]
            if info is None:
                for e in entries:
                    self._fail_entry(e, "process set %d was removed" % e.key[0], ValueError)
                continue
            if kind not in (ADD_SET, REMOVE_SET, JOIN, BARRIER) and info.index < 0:
                continue  # a process set this rank is not in
            if kind == ALLREDUCE:
                self._note_allreduce([e.key for e in entries], [
                    _numel(e.descs[min(e.descs)][D_SHAPE])
                    * ELEMENT_SIZE[_DTYPE_BY_NAME[e.descs[min(e.descs)][D_DTYPE]]]
                    for e in entries])
                self._allreduce(info, entries)
            else:
                self._one(info, entries[0], kind)

    def _fusion_buffer(self, nbytes):
        if self._fusion is None or self._fusion.numel() < nbytes:
            self._fusion = torch.empty(max(nbytes, 4096), dtype=torch.uint8)
        return self._fusion

    def _adasum(self, info, e):
        """An Adasum allreduce (never fused: its coefficients are the whole tensor's): every
        rank's (prescaled) tensor gathered, then combined by adasum_tree in float64 on every
        rank alike, rounded once to the dtype and postscaled. A joined rank contributes zeros
        (which the others' adaptive sum passes unchanged)."""
        d0 = e.descs[min(e.descs)]
        dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
        n = _numel(d0[D_SHAPE])
        r = self._local.get(e.key)
        comm = self._comm_for(info, e)
        mine = torch.zeros(n, dtype=torch.float64)
        if r is not None:
            if r.rt is None:
                mine.copy_(r.tensor.reshape(-1))
            else:
                self._dev_to_host(r, comm, mine)
            mine.mul_(d0[D_PRE])
        size = len(info.ranks)
        every = torch.empty(size * n, dtype=torch.float64)
        t0 = time.perf_counter()
        if n:
            comm.allgather(mine.data_ptr(), every.data_ptr(), n, C.FLOAT64)
            self.stats["allreduce_calls"] += 1
        out = adasum_tree(every.view(size, n).unbind(0)) if n else mine
        out = out * d0[D_POST]
        t1 = time.perf_counter()
        if self.timeline is not None:
            self.timeline.complete(e.key[1], "ALLREDUCE", t0, t1, {"fused": 1, "bytes": n * ELEMENT_SIZE[dtype],
                                                                   "adasum": 1})
        self.stats["allreduce_tensors"] += 1
        if r is not None:
            if r.rt is None:
                r.output.view(-1).copy_(out)
            else:
                self._dev_from_host(r, out)
            self._done(e.key, r, r.output)

    def _allreduce(self, info, entries):
        comm = info.comm
        tl = self.timeline
        d0 = entries[0].descs[min(entries[0].descs)]
        if d0[D_OP] == ADASUM:
            return self._adasum(info, entries[0])
        dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
        code = _REDUCE_CODE[dtype]
        op = d0[D_OP]
        hop = _HORA_OP[op]
        pre = d0[D_PRE]
        n_ranks = len(info.ranks)
        reqs = [self._local.get(e.key) for e in entries]
        self.stats["allreduce_tensors"] += len(entries)
        if entries[0].device:  # (the same for every entry of a batch)
            comm = self._device_comm(info, reqs)
            where = self._device_for(reqs)
            if where is not None:
                return self._dev_allreduce(comm, info, entries, reqs, d0, where)
        if len(entries) == 1:
            r = reqs[0]
            n = _numel(d0[D_SHAPE])
            if r is not None:
                src, dst = r.tensor, r.output
                if pre != 1.0:
                    scaled_copy(dst, src, pre)
                    src = dst
            else:  # a joined rank contributes the op's identity
                src = dst = torch.full(d0[D_SHAPE], op_identity(dtype, op), dtype=dtype)
            t0 = time.perf_counter()
            if n:
                comm.allreduce(src.data_ptr(), dst.data_ptr(), n, code, hop)
                self.stats["allreduce_calls"] += 1
            finish_(dst, op, d0[D_POST], n_ranks)
            t1 = time.perf_counter()
            if tl is not None:
                tl.complete(entries[0].key[1], "ALLREDUCE", t0, t1,
                            {"fused": 1, "bytes": n * ELEMENT_SIZE[dtype]})
            if r is not None:
                self._done(entries[0].key, r, r.output)
            return
        # Fused: pack, one call, unpack.
        counts = [_numel(e.descs[min(e.descs)][D_SHAPE]) for e in entries]
        total = sum(counts)
        esize = ELEMENT_SIZE[dtype]
        buf = self._fusion_buffer(total * esize)[:total * esize].view(dtype)
        marks = []
        joined = []  # slices of tensors this rank has no request for (it called join())
        off = 0
        for r, n in zip(reqs, counts):
            t0 = time.perf_counter()
            if r is not None:
                buf[off:off + n].copy_(r.tensor.reshape(-1))
            else:
                joined.append(buf[off:off + n])
            marks.append((t0, time.perf_counter()))
            off += n
        scale_(buf, pre)
        for part in joined:  # after the scaling: an identity scaled is no identity
            part.fill_(op_identity(dtype, op))
        t0 = time.perf_counter()
        comm.allreduce(buf.data_ptr(), buf.data_ptr(), total, code, hop)
        self.stats["allreduce_calls"] += 1
        self.stats["fused_batches"] += 1
        t1 = time.perf_counter()
        finish_(buf, op, d0[D_POST], n_ranks)
        off = 0
        for e, r, n, mark in zip(entries, reqs, counts, marks):
            u0 = time.perf_counter()
            if r is not None:
                r.output.view(-1).copy_(buf[off:off + n])
            u1 = time.perf_counter()
            off += n
            if tl is not None:
                tl.complete(e.key[1], "FUSE", mark[0], mark[1])
                tl.complete(e.key[1], "ALLREDUCE", t0, t1,
                            {"fused": len(entries), "bytes": total * esize})
                tl.complete(e.key[1], "UNPACK", u0, u1)
            if r is not None:
                self._done(e.key, r, r.output)

    def _done(self, key, r, result):
        if r.rt is not None:
            return self._dev_done(key, r, result)
        if r.target is not None:
            r.target.copy_(r.output)
            result = r.target
        self._take(key)
        r.finish(result)

    def _one(self, info, e, kind):
        tl = self.timeline
        key = e.key
        r = self._local.get(key)
        t0 = time.perf_counter()
        result = None
        if kind == BROADCAST:
            result = self._broadcast(info, e, r)
        elif kind == ALLGATHER:
            result = self._allgather(info, e, r)
        elif kind == ALLTOALL:
            result = self._alltoall(info, e, r)
        elif kind == REDUCESCATTER:
            result = self._reducescatter(info, e, r)
        elif kind == JOIN:
            last = max(e.rounds.items(), key=lambda kv: (kv[1], kv[0]))[0]
            result = last
        elif kind == ADD_SET:
            result = self._add_set(e)
            if isinstance(result, str):
                self._fail_entry(e, result, ValueError)
                return
        elif kind == REMOVE_SET:
            result = self._remove_set(e)
            if isinstance(result, str):
                self._fail_entry(e, result, ValueError)
                return
        if tl is not None and kind not in (JOIN, BARRIER):
            tl.complete(key[1], KIND_NAMES[kind].upper(), t0, time.perf_counter())
        if r is not None:
            self._done(key, r, result)

    def _broadcast(self, info, e, r):
        d0 = e.descs[min(e.descs)]
        root = info.ranks.index(d0[D_ROOT])
        comm = self._comm_for(info, e)
        if r.rt is not None:
            return self._dev_broadcast(comm, info, e, r)
        src, dst = r.tensor, r.output
        nbytes = dst.numel() * dst.element_size()
        if nbytes:
            comm.broadcast(src.data_ptr() if info.index == root else dst.data_ptr(),
                                dst.data_ptr(), nbytes, C.UINT8, root)
        return dst

    def _allgather(self, info, e, r):
        d0 = e.descs[min(e.descs)]
        dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
        trailing = d0[D_SHAPE][1:]
        comm = self._comm_for(info, e)
        if r is not None and r.rt is not None:
            return self._dev_allgather(comm, info, e, r)
        rows = [e.descs[g][D_SHAPE][0] if g in e.descs else 0 for g in info.ranks]
        out = torch.empty([sum(rows)] + trailing, dtype=dtype)
        rowbytes = _numel(trailing) * out.element_size()
        me = info.index
        src = r.tensor if r is not None else out
        allgather_rows(comm, src.data_ptr(), out.data_ptr(), rows, rowbytes, me)
        return out

    def _alltoall(self, info, e, r):
        d0 = e.descs[min(e.descs)]
        dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
        trailing = d0[D_SHAPE][1:]
        comm = self._comm_for(info, e)
        if r.rt is not None:
            return self._dev_alltoall(comm, info, e, r)
        S = [e.descs[g][D_SPLITS] for g in info.ranks]
        n = len(info.ranks)
        me = info.index
        recv = [S[i][me] for i in range(n)]
        out = torch.empty([sum(recv)] + trailing, dtype=dtype)
        rowbytes = _numel(trailing) * out.element_size()
        src = r.tensor
        even = all(x == S[0][0] for row in S for x in row)
        if even and self._has_alltoall:
            if S[0][0] * rowbytes:
                comm.alltoall(src.data_ptr(), out.data_ptr(), S[0][0] * rowbytes, C.UINT8)
        else:
            soff, roff = split_offsets(S, recv, me)
            if recv[me]:
                out[roff[me]:roff[me] + recv[me]].copy_(src[soff[me]:soff[me] + S[me][me]])
            exchange(comm, src.data_ptr(), out.data_ptr(), S, recv, soff, roff, rowbytes, me)
        return out, torch.tensor(recv, dtype=torch.int32)

    def _reducescatter(self, info, e, r):
        d0 = e.descs[min(e.descs)]
        dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
        code = _REDUCE_CODE[dtype]
        shape = d0[D_SHAPE]
        n = len(info.ranks)
        me = info.index
        rows = [shape[0] // n + (1 if i < shape[0] % n else 0) for i in range(n)]
        per_row = _numel(shape[1:])
        op = d0[D_OP]
        pre = d0[D_PRE]
        comm = self._comm_for(info, e)
        if r.rt is not None:
            return self._dev_reducescatter(comm, info, e, r)
        src = r.tensor
        if pre != 1.0:
            tmp = torch.empty_like(src)
            scaled_copy(tmp, src, pre)
            src = tmp
        out = torch.empty([rows[me]] + shape[1:], dtype=dtype)
        reduce_scatter_rows(comm, src.data_ptr(), out.data_ptr(), rows, per_row, out.element_size(),
                            code, _HORA_OP[op], me)
        finish_(out, op, d0[D_POST], n)
        return out

    def _add_set(self, e):
        d0 = e.descs[min(e.descs)]
        ranks = list(d0[D_SHAPE])
        for s in self._sets.values():
            if s.ranks == ranks:
                return ("a process set with ranks %s is already registered (id %d)"
                        % (ranks, s.id))
        comm = self._subcomm(ranks)
        set_id = self._next_set_id
        self._next_set_id += 1
        index = ranks.index(self.rank) if self.rank in ranks else -1
        with self._cv:
            self._sets[set_id] = SetInfo(set_id, ranks, comm, index)
        return set_id

    def _subcomm(self, ranks):
        return subcomm(self.comm, ranks)

    def _remove_set(self, e):
        d0 = e.descs[min(e.descs)]
        set_id = d0[D_EXTRA]
        info = self._sets.get(set_id)
        if info is None:
            return "process set %d is not registered" % set_id
        with self._cv:
            del self._sets[set_id]
        if info.dcomm is not None:
            info.dcomm.destroy()
        if info.comm is not None:
            info.comm.destroy()
        return True
