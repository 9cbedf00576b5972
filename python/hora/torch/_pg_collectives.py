"""The collectives of the torch.distributed backend "hora": the methods of ProcessGroupHora
(hora.torch.distributed) that check their arguments and queue a job (issue, finish) to the
group's worker thread through self._submit.
"""
import torch
from torch._C import _distributed_c10d as _c10d

from hora import _core
from hora.torch._pg_tensors import (
    _addr2, _addr3, _check_op_dtype, _check_tensor, _consecutive, _exchange, _flat_view,
    _local_reduce, _op_code, _splits, _Contiguous, _wire,
)


class Collectives:
    """The collectives of ProcessGroupHora, a mixin: it relies on the group's _submit, _peer,
    _rank, _size, _has_alltoall and _has_barrier."""

    # -- collectives --------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if not tensors:
            raise ValueError("allreduce: no tensors")
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        if any(isinstance(t, torch.Tensor) and t.is_sparse for t in tensors):
            return self._sparse_allreduce(tensors, op)
        for t in tensors:
            _check_tensor(t)
            if t.dtype != tensors[0].dtype or t.shape != tensors[0].shape:
                raise ValueError("allreduce: the tensors of the list differ in dtype or shape")
        _check_op_dtype(op, tensors[0].dtype)
        if len(tensors) == 1:
            dense = [_Contiguous(tensors[0])]
            buf = dense[0].buf
        else:
            dense = None
            buf = None

        def issue(comm):
            nonlocal buf
            if buf is None:  # several local tensors: combine them first, then across ranks
                buf = _local_reduce([t.contiguous() for t in tensors], op)
                comm.allreduce(*_addr2(buf), _core.SUM if op == _core.AVG else op)
                if op == _core.AVG:
                    buf.div_(self._size * len(tensors))
            else:
                comm.allreduce(*_addr2(buf), op)

        def finish():
            if dense is not None:
                dense[0].back()
            else:
                for t in tensors:
                    t.copy_(buf)
            return list(tensors)

        return self._submit(issue, finish, title="all_reduce", inputs=tensors,
                            tensors=tensors, pure=len(tensors) == 1)

    def _sparse_allreduce(self, tensors, op):
        """The sum of sparse COO tensors: every rank gathers the others' indices and values
        (their counts first, then both padded to the largest count) and coalesces the union,
        which adds the values of equal indices; the result replaces the tensor in place."""
        if len(tensors) != 1:
            raise ValueError("allreduce: the hora backend takes one sparse tensor")
        t = tensors[0]
        if not t.is_sparse or t.layout != torch.sparse_coo:
            raise ValueError("allreduce: sparse tensors must be sparse COO tensors")
        if t.device.type != "cpu":
            raise ValueError("the hora backend works on CPU tensors; the tensor is on %s" % t.device)
        if op != _core.SUM:
            raise ValueError("allreduce: the hora backend reduces sparse tensors with SUM only")
        n = self._size
        result = [None]

        def gather(comm, x):
            """Every rank's x (same shape on every rank), stacked along a new first dim."""
            x = x.contiguous()
            out = torch.empty((n,) + tuple(x.shape), dtype=x.dtype)
            if x.numel():
                addr, cnt, dt = _wire(x)
                comm.allgather(addr, _wire(out)[0], cnt, dt)
            return out

        def issue(comm):
            local = t.coalesce()
            indices, values = local._indices(), local._values()
            _check_tensor(values, "the sparse tensor's values")
            nnz = gather(comm, torch.tensor([indices.shape[1]], dtype=torch.int64)).view(-1)
            most = int(nnz.max())
            pad_i = torch.zeros((indices.shape[0], most), dtype=torch.int64)
            pad_i[:, :indices.shape[1]] = indices
            pad_v = torch.zeros((most,) + tuple(values.shape[1:]), dtype=values.dtype)
            pad_v[:values.shape[0]] = values
            all_i, all_v = gather(comm, pad_i), gather(comm, pad_v)
            idx = torch.cat([all_i[r, :, :int(nnz[r])] for r in range(n)], dim=1)
            val = torch.cat([all_v[r, :int(nnz[r])] for r in range(n)], dim=0)
            result[0] = torch.sparse_coo_tensor(idx, val, t.shape).coalesce()

        def finish():
            t.copy_(result[0])
            return [t]

        return self._submit(issue, finish, title="all_reduce", inputs=tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        if not tensors:
            raise ValueError("allreduce_coalesced: no tensors")
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        for t in tensors:
            _check_tensor(t)
            _check_op_dtype(op, t.dtype)
        by_dtype = {}
        for t in tensors:
            by_dtype.setdefault(t.dtype, []).append(t)

        flats = {}

        def issue(comm):
            for dtype, ts in by_dtype.items():
                flat = torch.cat([t.reshape(-1) for t in ts])
                flats[dtype] = flat
            with _core.group():
                for flat in flats.values():
                    comm.allreduce(*_addr2(flat), op)

        def finish():
            for dtype, ts in by_dtype.items():
                off = 0
                flat = flats[dtype]
                for t in ts:
                    n = t.numel()
                    t.copy_(flat[off:off + n].view_as(t))
                    off += n
            return list(tensors)

        return self._submit(issue, finish, title="all_reduce", inputs=tensors,
                            tensors=tensors)

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if not tensors:
            raise ValueError("broadcast: no tensors")
        root = opts.rootRank if opts is not None else 0
        root_tensor = opts.rootTensor if opts is not None else 0
        self._peer(root, "broadcast root")
        if not 0 <= root_tensor < len(tensors):
            raise ValueError("broadcast: rootTensor %d is not an index of the %d tensors"
                             % (root_tensor, len(tensors)))
        for t in tensors:
            _check_tensor(t)
        src = tensors[root_tensor]
        dense = _Contiguous(src, copy_in=(self._rank == root))
        buf = dense.buf

        def issue(comm):
            comm.broadcast(*_addr3(buf, buf), root)

        def finish():
            dense.back()
            for i, t in enumerate(tensors):
                if i != root_tensor:
                    t.copy_(src)
            return list(tensors)

        return self._submit(issue, finish, title="broadcast", inputs=tensors,
                            tensors=tensors, pure=len(tensors) == 1)

    def reduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if len(tensors) != 1:
            raise ValueError("reduce: the hora backend takes exactly one tensor")
        t = tensors[0]
        _check_tensor(t)
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        _check_op_dtype(op, t.dtype)
        root = self._peer(opts.rootRank if opts is not None else 0, "reduce root")
        dense = _Contiguous(t)
        buf = dense.buf

        def issue(comm):
            addr, n, dt = _wire(buf)
            comm.reduce(addr, addr, n, dt, op, root)

        def finish():
            if self._rank == root:
                dense.back()
            return [t]

        return self._submit(issue, finish, title="reduce", inputs=tensors,
                            tensors=[t], pure=True)

    def allgather(self, output_lists, input_tensors, opts=None):
        if isinstance(input_tensors, torch.Tensor):
            input_tensors = [input_tensors]
        if len(input_tensors) != 1 or len(output_lists) != 1:
            raise ValueError("allgather: the hora backend takes one input tensor and one output list")
        inp, outs = input_tensors[0], list(output_lists[0])
        _check_tensor(inp, "input")
        if len(outs) != self._size:
            raise ValueError("allgather: the output list has %d tensors for a group of %d"
                             % (len(outs), self._size))
        for o in outs:
            _check_tensor(o, "output")
            if o.dtype != inp.dtype or o.numel() != inp.numel():
                raise ValueError("allgather: every output must match the input's dtype and size")
        src = inp.contiguous()
        flat = _flat_view(outs) if _consecutive(outs) else None
        dst = flat if flat is not None else torch.empty((self._size * inp.numel(),), dtype=inp.dtype,
                                                         device=inp.device)

        def issue(comm):
            addr, n, dt = _wire(src)
            comm.allgather(addr, _wire(dst)[0], n, dt)

        def finish():
            if flat is None:
                chunks = dst.view(self._size, -1)
                for i, o in enumerate(outs):
                    o.copy_(chunks[i].view_as(o))
            return [outs]

        return self._submit(issue, finish, title="all_gather", inputs=input_tensors,
                            tensors=[inp] + outs)

    def _allgather_base(self, output, input, opts=None):
        _check_tensor(input, "input")
        _check_tensor(output, "output")
        if output.dtype != input.dtype or output.numel() != self._size * input.numel():
            raise ValueError("_allgather_base: the output must hold size x input elements of its dtype")
        src = input.contiguous()
        dense = _Contiguous(output, copy_in=False)

        def issue(comm):
            addr, n, dt = _wire(src)
            comm.allgather(addr, _wire(dense.buf)[0], n, dt)

        def finish():
            dense.back()
            return [output]

        return self._submit(issue, finish, title="_allgather_base", inputs=[input],
                            tensors=[input, output], pure=True)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        # torch's convention: output_lists[r][i] receives input_tensors[i] of rank r
        if not input_tensors:
            raise ValueError("allgather_coalesced: no tensors")
        if len(output_lists) != self._size:
            raise ValueError("allgather_coalesced: %d output lists for a group of %d (one list per "
                             "rank)" % (len(output_lists), self._size))
        dtype = input_tensors[0].dtype
        for t in input_tensors:
            _check_tensor(t, "input")
            if t.dtype != dtype:
                raise ValueError("allgather_coalesced: the inputs must share one dtype")
        for outs in output_lists:
            if len(outs) != len(input_tensors) or any(
                    o.numel() != t.numel() or o.dtype != dtype for o, t in zip(outs, input_tensors)):
                raise ValueError("allgather_coalesced: each rank's output list needs one tensor per "
                                 "input, shaped like it")
            for o in outs:
                _check_tensor(o, "output")
        sizes = [t.numel() for t in input_tensors]
        total = sum(sizes)
        dst = torch.empty((self._size * total,), dtype=dtype, device=input_tensors[0].device)
        src = [None]

        def issue(comm):
            src[0] = torch.cat([t.reshape(-1) for t in input_tensors])
            addr, n, dt = _wire(src[0])
            comm.allgather(addr, _wire(dst)[0], n, dt)

        def finish():
            per_rank = dst.view(self._size, total)
            for r in range(self._size):
                off = 0
                for i, n in enumerate(sizes):
                    out = output_lists[r][i]
                    out.copy_(per_rank[r, off:off + n].view_as(out))
                    off += n
            return [o for outs in output_lists for o in outs]

        return self._submit(issue, finish, title="all_gather", inputs=input_tensors,
                            tensors=list(input_tensors))

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        if isinstance(output_tensors, torch.Tensor):
            output_tensors = [output_tensors]
        if len(output_tensors) != 1 or len(input_lists) != 1:
            raise ValueError("reduce_scatter: the hora backend takes one output tensor and one input list")
        out, ins = output_tensors[0], list(input_lists[0])
        _check_tensor(out, "output")
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        _check_op_dtype(op, out.dtype)
        if len(ins) != self._size:
            raise ValueError("reduce_scatter: the input list has %d tensors for a group of %d"
                             % (len(ins), self._size))
        for t in ins:
            _check_tensor(t, "input")
            if t.dtype != out.dtype or t.numel() != out.numel():
                raise ValueError("reduce_scatter: every input must match the output's dtype and size")
        flat = _flat_view(ins) if _consecutive(ins) else None
        dense = _Contiguous(out, copy_in=False)
        src = [flat]

        def issue(comm):
            if src[0] is None:
                src[0] = torch.cat([t.reshape(-1) for t in ins])
            addr, n, dt = _wire(dense.buf)
            comm.reduce_scatter(_wire(src[0])[0], addr, n, dt, op)

        def finish():
            dense.back()
            return [out]

        return self._submit(issue, finish, title="reduce_scatter", inputs=ins,
                            tensors=[out] + ins)

    def _reduce_scatter_base(self, output, input, opts=None):
        _check_tensor(output, "output")
        _check_tensor(input, "input")
        op = _op_code(opts.reduceOp if opts is not None else _c10d.ReduceOp.SUM)
        _check_op_dtype(op, output.dtype)
        if input.dtype != output.dtype or input.numel() != self._size * output.numel():
            raise ValueError("_reduce_scatter_base: the input must hold size x output elements of its dtype")
        src = input.contiguous()
        dense = _Contiguous(output, copy_in=False)

        def issue(comm):
            addr, n, dt = _wire(dense.buf)
            comm.reduce_scatter(_wire(src)[0], addr, n, dt, op)

        def finish():
            dense.back()
            return [output]

        return self._submit(issue, finish, title="_reduce_scatter_base", inputs=[input],
                            tensors=[output, input], pure=True)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        _check_tensor(output, "output")
        _check_tensor(input, "input")
        if output.dtype != input.dtype:
            raise ValueError("alltoall_base: input and output differ in dtype")
        n = self._size
        in_splits = _splits(input, input_split_sizes, n, "input")
        out_splits = _splits(output, output_split_sizes, n, "output")
        src = input.contiguous()
        dense = _Contiguous(output, copy_in=False)
        even = not input_split_sizes and not output_split_sizes
        use_native = even and self._has_alltoall
        rank = self._rank

        def issue(comm):
            if use_native:
                addr, cnt, dt = _wire(src)
                comm.alltoall(addr, _wire(dense.buf)[0], cnt // n, dt)
            else:
                _exchange(comm, rank, src, in_splits, dense.buf, out_splits)

        def finish():
            dense.back()
            return [output]

        return self._submit(issue, finish, title="all_to_all", inputs=[input],
                            tensors=[output, input], pure=use_native)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        n = self._size
        if len(output_tensors) != n or len(input_tensors) != n:
            raise ValueError("alltoall: one input and one output tensor per rank")
        for t in list(output_tensors) + list(input_tensors):
            _check_tensor(t)
            if t.dtype != input_tensors[0].dtype:
                raise ValueError("alltoall: the tensors must share one dtype")
        srcs = [t.contiguous() for t in input_tensors]
        dense = [_Contiguous(t, copy_in=False) for t in output_tensors]
        rank = self._rank

        def issue(comm):
            with _core.group():
                for peer in range(n):
                    if peer == rank:
                        dense[peer].buf.copy_(srcs[peer].view_as(dense[peer].buf))
                        continue
                    if srcs[peer].numel():
                        comm.send(*_wire(srcs[peer]), peer)
                    if dense[peer].buf.numel():
                        comm.recv(*_wire(dense[peer].buf), peer)

        def finish():
            for s in dense:
                s.back()
            return list(output_tensors)

        return self._submit(issue, finish, title="all_to_all", inputs=input_tensors,
                            tensors=list(output_tensors) + list(input_tensors))

    def gather(self, output_lists, input_tensors, opts=None):
        if len(input_tensors) != 1:
            raise ValueError("gather: the hora backend takes one input tensor")
        inp = input_tensors[0]
        _check_tensor(inp, "input")
        root = self._peer(opts.rootRank if opts is not None else 0, "gather root")
        rank = self._rank
        if rank == root:
            if len(output_lists) != 1 or len(output_lists[0]) != self._size:
                raise ValueError("gather: the root needs one output list with a tensor per rank")
            outs = list(output_lists[0])
            for o in outs:
                _check_tensor(o, "output")
                if o.dtype != inp.dtype or o.numel() != inp.numel():
                    raise ValueError("gather: every output must match the input's dtype and size")
        else:
            if output_lists and any(len(x) for x in output_lists):
                raise ValueError("gather: only the root passes output tensors")
            outs = []
        src = inp.contiguous()
        dense = [_Contiguous(o, copy_in=False) for o in outs]

        def issue(comm):
            if rank != root:
                comm.send(*_wire(src), root)
                return
            with _core.group():
                for peer in range(self._size):
                    if peer == rank:
                        dense[peer].buf.copy_(src.view_as(dense[peer].buf))
                    else:
                        comm.recv(*_wire(dense[peer].buf), peer)

        def finish():
            for s in dense:
                s.back()
            return outs if outs else [inp]

        return self._submit(issue, finish, title="gather", inputs=input_tensors,
                            tensors=[inp] + outs)

    def scatter(self, output_tensors, input_lists, opts=None):
        if len(output_tensors) != 1:
            raise ValueError("scatter: the hora backend takes one output tensor")
        out = output_tensors[0]
        _check_tensor(out, "output")
        root = self._peer(opts.rootRank if opts is not None else 0, "scatter root")
        rank = self._rank
        if rank == root:
            if len(input_lists) != 1 or len(input_lists[0]) != self._size:
                raise ValueError("scatter: the root needs one input list with a tensor per rank")
            ins = [t.contiguous() for t in input_lists[0]]
            for t in ins:
                _check_tensor(t, "input")
                if t.dtype != out.dtype or t.numel() != out.numel():
                    raise ValueError("scatter: every input must match the output's dtype and size")
        else:
            if input_lists and any(len(x) for x in input_lists):
                raise ValueError("scatter: only the root passes input tensors")
            ins = []
        dense = _Contiguous(out, copy_in=False)

        def issue(comm):
            if rank != root:
                comm.recv(*_wire(dense.buf), root)
                return
            with _core.group():
                for peer in range(self._size):
                    if peer == rank:
                        dense.buf.copy_(ins[peer].view_as(dense.buf))
                    else:
                        comm.send(*_wire(ins[peer]), peer)

        def finish():
            dense.back()
            return [out]

        return self._submit(issue, finish, title="scatter", inputs=ins,
                            tensors=[out] + ins)

    def barrier(self, opts=None):
        token = torch.zeros(1, dtype=torch.int32)
        native = self._has_barrier

        def issue(comm):
            if native:
                comm.barrier()
            else:
                comm.allreduce(*_addr2(token), _core.SUM)

        def finish():
            return [token]

        return self._submit(issue, finish, title="barrier", inputs=())

    def send(self, tensors, dst, tag=0):
        tensors, t = self._one_tensor(tensors, "send")
        peer = self._peer(dst, "send destination")
        if peer == self._rank:
            raise ValueError("send: a rank cannot send to itself")
        src = t.contiguous()

        def issue(comm):
            self._announce(peer)
            comm.send(*_wire(src), peer)

        def finish():
            return [t]

        return self._submit(issue, finish, p2p=True, title="send", inputs=tensors,
                            tensors=[t], pure=True)

    @staticmethod
    def _one_tensor(tensors, what):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        if len(tensors) != 1:
            raise ValueError("%s: the hora backend takes exactly one tensor" % what)
        _check_tensor(tensors[0])
        return tensors, tensors[0]

    def recv(self, tensors, src, tag=0):
        tensors, t = self._one_tensor(tensors, "recv")
        peer = self._peer(src, "recv source")
        if peer == self._rank:
            raise ValueError("recv: a rank cannot receive from itself")
        dense = _Contiguous(t, copy_in=False)

        def issue(comm):
            self._taken[peer] += 1
            comm.recv(*_wire(dense.buf), peer)

        def finish():
            dense.back()
            return [t]

        return self._submit(issue, finish, p2p=True, src=peer, title="recv", inputs=tensors,
                            tensors=[t], pure=True)
