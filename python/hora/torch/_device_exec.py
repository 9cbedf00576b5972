"""The execution of hora.torch's operations on device tensors (CUDA tensors under torch, or
memory of the library's emulated device in tests): a mixin of the engine, beside the host
execution of hora.torch._execution, which hands an entry over here when this rank's tensor of
it is on a device.

The model is the one of a collective library on GPU streams. At enqueue (the caller's thread,
hora.torch.mpi_ops) a "ready" event is recorded on the caller's current stream. Here, on the
engine's thread, each device has one engine stream (made once); it waits for every entry's
ready event, and everything of the operation is queued on it: fusion buffers and temporaries on
the tensors' device, packing and unpacking as stream-ordered copies, scaling as torch ops in
the stream's order (_device's run_in_order), the library's call with stream= (it returns once
queued), and a "done" event per request. The request then completes for the engine: the caller's
synchronize() makes its own current stream wait for done, without waiting on the CPU for the
device. What the queued work still uses (inputs, outputs, fusion buffers, temporaries) is kept
in the engine's in-flight list until its done event has completed (pruned each round, drained
at the end).

Device operations run on the process set's dcomm, made from its communicator by the first of
them (whether an operation is one is in every rank's descriptor, so every member makes it at
the same step), so that the engine's rounds and the host operations, calls without a stream,
never wait for device work that waits for a caller's stream.

Adasum on device tensors is bounced through host memory: the tensor is copied to the host in
the engine stream's order, combined by the host algorithm, and copied back on the stream.
"""
import torch

from hora import _core as C
from hora.torch._issue import allgather_rows, exchange, reduce_scatter_rows, split_offsets
from hora.torch._protocol import (
    _DTYPE_BY_NAME, _HORA_OP, _REDUCE_CODE, AVERAGE, D_DTYPE, D_OP, D_POST, D_PRE, D_ROOT,
    D_SHAPE, D_SPLITS, ELEMENT_SIZE,
)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _ready(item):
    try:
        return item[0].query()
    except Exception:  # noqa: BLE001 - a failed stream: its communicator reports the failure
        return True


class DeviceExecution:
    """Device paths of the engine's execution (see the module's doc)."""

    # ---- streams, communicators, liveness ---------------------------------------------------

    def _stream(self, rt, dev):
        key = (rt.name, dev)
        s = self._streams.get(key)
        if s is None:
            s = self._streams[key] = rt.Stream(dev)
        return s

    def _device_comm(self, info, reqs=()):
        """The set's communicator for device work, made (collectively) by its first device
        operation on this rank's GPU: the library binds a communicator to the device that is
        current when it is made, and this thread's is not the caller's (torch.cuda.set_device
        after hvd.init() is the usual order)."""
        c = info.dcomm
        if c is None:
            dev = next((r.dev for r in reqs if r is not None and r.rt is not None
                        and r.rt.name == "torch"), None)
            if dev is not None:
                with torch.cuda.device(dev):
                    c = info.dcomm = info.comm.split(0, info.index)
            else:
                c = info.dcomm = info.comm.split(0, info.index)
        return c

    def _comm_for(self, info, e):
        return self._device_comm(info, (self._local.get(e.key),)) if e.device else info.comm

    def _prune_inflight(self):
        self._inflight = [item for item in self._inflight if not _ready(item)]

    def _drain_inflight(self):
        for ev, _ in self._inflight:
            try:
                ev.synchronize()
            except Exception:  # noqa: BLE001 - reported through the communicator
                pass
        self._inflight = []
        self._dfusion.clear()
        self._streams.clear()

    def _dev_fusion(self, rt, dev, stream, nbytes):
        key = (rt.name, dev)
        b = self._dfusion.get(key)
        if b is None or b.numel() < nbytes:
            if b is not None:
                self._keep.append(b)  # still read by work queued before
            b = self._dfusion[key] = rt.empty([max(nbytes, 4096)], torch.uint8, dev, stream)
        return b

    def _dev_begin(self, r, comm):
        """The engine stream of r's device, made to wait for r's ready event."""
        s = self._stream(r.rt, r.dev)
        s.wait_event(r.ready)
        r.comm = comm
        return s

    def _dev_done(self, key, r, result):
        """Completes a device request once its work is queued: the in-place target written in
        the stream's order, the done event recorded, what the work uses kept in flight."""
        rt = r.rt
        s = self._stream(rt, r.dev)
        if r.target is not None:
            target, output = r.target, r.output
            rt.run_in_order(s, lambda: target.copy_(output))
            result = target
        done = rt.Event()
        done.record(s)
        keep, self._keep = self._keep, []
        keep.extend((r.tensor, r.output, r.target, result))
        self._inflight.append((done, keep))
        r.done = done
        self._take(key)
        r.finish(result)

    # ---- allreduce ------------------------------------------------------------------------

    def _device_for(self, reqs):
        """(runtime, device) of an allreduce that some rank runs on device memory: where this
        rank's tensors of it are, else where its last device operation was (a joined rank, or
        one whose tensors are on the host), else torch's current CUDA device or the emulated
        one; None without any. Every rank's buffers of such an allreduce must be device memory:
        the library takes the path of device buffers (the GPUs' shared stage) or the other by
        what each rank passes, and the ranks must agree."""
        for r in reqs:
            if r is not None and r.rt is not None:
                self._last_device = (r.rt, r.dev)
                return self._last_device
        if self._last_device is None:
            from hora import _device
            if torch.cuda.is_available():
                self._last_device = (_device.torch_runtime(), torch.cuda.current_device())
            elif _device.EMULATED:
                self._last_device = (_device.RUNTIME, 0)
        return self._last_device

    def _dev_allreduce(self, comm, info, entries, reqs, d0, where):
        """An allreduce (fused or not) on device memory at `where` (see _device_for); host
        tensors of this rank go through the device fusion buffer, a joined rank's identity
        too."""
        dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
        code = _REDUCE_CODE[dtype]
        op = d0[D_OP]
        hop = _HORA_OP[op]
        pre, post = d0[D_PRE], d0[D_POST]
        n_ranks = len(info.ranks)
        finish = op == AVERAGE or post != 1.0
        from hora.torch._execution import finish_, op_identity, scale_, scaled_copy
        rt, dev = where
        s = self._stream(rt, dev)
        for r in reqs:
            if r is not None and r.rt is not None:
                s.wait_event(r.ready)  # (one stream for the batch: its tensors' device's)
                r.comm = comm
        h = s.cuda_stream
        counts = [_numel(e.descs[min(e.descs)][D_SHAPE]) for e in entries]
        if len(entries) == 1 and reqs[0] is not None and reqs[0].rt is not None:
            r, n = reqs[0], counts[0]
            src, dst = r.tensor, r.output
            if pre != 1.0:
                rt.run_in_order(s, lambda: scaled_copy(dst, src, pre))
                src = dst
            if n:
                comm.allreduce(src.data_ptr(), dst.data_ptr(), n, code, hop, stream=h)
                self.stats["allreduce_calls"] += 1
            if finish:
                rt.run_in_order(s, lambda: finish_(dst, op, post, n_ranks))
            self._done(entries[0].key, r, r.output)
            return
        total = sum(counts)
        esize = ELEMENT_SIZE[dtype]
        buf = self._dev_fusion(rt, dev, s, total * esize)[:total * esize].view(dtype)
        self._keep.append(buf)
        joined, host = [], False
        off = 0
        for r, n in zip(reqs, counts):
            part = buf[off:off + n]
            if r is None:
                joined.append(part)
            elif r.rt is None:  # a host tensor fused with device ones: copied in stream order
                host = True
                rt.run_in_order(s, lambda p=part, t=r.tensor: p.copy_(t.reshape(-1)))
            else:
                rt.copy_(part, r.tensor.view(-1), s)
            off += n

        def prepare():
            scale_(buf, pre)
            for part in joined:  # after the scaling: an identity scaled is no identity
                part.fill_(op_identity(dtype, op))
        if pre != 1.0 or joined:
            rt.run_in_order(s, prepare)
        if total:
            comm.allreduce(buf.data_ptr(), buf.data_ptr(), total, code, hop, stream=h)
            self.stats["allreduce_calls"] += 1
        self.stats["fused_batches"] += len(entries) > 1
        if finish:
            rt.run_in_order(s, lambda: finish_(buf, op, post, n_ranks))
        off = 0
        for r, n in zip(reqs, counts):
            if r is not None:
                part = buf[off:off + n]
                if r.rt is None:
                    rt.run_in_order(s, lambda p=part, o=r.output: o.view(-1).copy_(p))
                else:
                    rt.copy_(r.output.view(-1), part, s)
            off += n
        if host:
            s.synchronize()  # a host request completes with its result in place
        for e, r in zip(entries, reqs):
            if r is not None:
                if r.rt is not None and (r.rt is not rt or r.dev != dev):
                    # (a tensor of another device of this process: its done event after this)
                    self._stream(r.rt, r.dev).wait_stream(s)
                self._done(e.key, r, r.output)

    # ---- the others -------------------------------------------------------------------------

    def _dev_broadcast(self, comm, info, e, r):
        d0 = e.descs[min(e.descs)]
        root = info.ranks.index(d0[D_ROOT])
        s = self._dev_begin(r, comm)
        src, dst = r.tensor, r.output
        nbytes = dst.numel() * dst.element_size()
        if nbytes:
            comm.broadcast(src.data_ptr() if info.index == root else dst.data_ptr(),
                           dst.data_ptr(), nbytes, C.UINT8, root, stream=s.cuda_stream)
        return dst

    def _dev_allgather(self, comm, info, e, r):
        d0 = e.descs[min(e.descs)]
        dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
        trailing = d0[D_SHAPE][1:]
        rows = [e.descs[g][D_SHAPE][0] if g in e.descs else 0 for g in info.ranks]
        s = self._dev_begin(r, comm)
        h = s.cuda_stream
        # The output's memory belongs to the caller's stream, where it is used and freed.
        out = r.rt.empty([sum(rows)] + trailing, dtype, r.dev, r.stream)
        rowbytes = _numel(trailing) * out.element_size()
        me = info.index
        allgather_rows(comm, r.tensor.data_ptr(), out.data_ptr(), rows, rowbytes, me, stream=h)
        return out

    def _dev_alltoall(self, comm, info, e, r):
        d0 = e.descs[min(e.descs)]
        dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
        trailing = d0[D_SHAPE][1:]
        S = [e.descs[g][D_SPLITS] for g in info.ranks]
        n = len(info.ranks)
        me = info.index
        recv = [S[i][me] for i in range(n)]
        s = self._dev_begin(r, comm)
        h = s.cuda_stream
        out = r.rt.empty([sum(recv)] + trailing, dtype, r.dev, r.stream)
        rowbytes = _numel(trailing) * out.element_size()
        src = r.tensor
        even = all(x == S[0][0] for row in S for x in row)
        if even and self._has_alltoall:
            if S[0][0] * rowbytes:
                comm.alltoall(src.data_ptr(), out.data_ptr(), S[0][0] * rowbytes, C.UINT8,
                              stream=h)
        else:
            soff, roff = split_offsets(S, recv, me)
            if recv[me] and rowbytes:
                r.rt.copy_(out[roff[me]:roff[me] + recv[me]], src[soff[me]:soff[me] + S[me][me]],
                           s)
            exchange(comm, src.data_ptr(), out.data_ptr(), S, recv, soff, roff, rowbytes, me,
                     stream=h)
        # The received splits are metadata, on the host (as the splits given).
        return out, torch.tensor(recv, dtype=torch.int32)

    def _dev_reducescatter(self, comm, info, e, r):
        from hora.torch._execution import finish_, scaled_copy
        d0 = e.descs[min(e.descs)]
        dtype = _DTYPE_BY_NAME[d0[D_DTYPE]]
        code = _REDUCE_CODE[dtype]
        shape = d0[D_SHAPE]
        n = len(info.ranks)
        me = info.index
        rows = [shape[0] // n + (1 if i < shape[0] % n else 0) for i in range(n)]
        per_row = _numel(shape[1:])
        op = d0[D_OP]
        pre, post = d0[D_PRE], d0[D_POST]
        rt = r.rt
        s = self._dev_begin(r, comm)
        h = s.cuda_stream
        src = r.tensor
        if pre != 1.0:
            tmp = rt.empty(list(src.shape), dtype, r.dev, s)
            rt.run_in_order(s, lambda: scaled_copy(tmp, src, pre))
            self._keep.append(tmp)
            src = tmp
        out = rt.empty([rows[me]] + shape[1:], dtype, r.dev, r.stream)
        reduce_scatter_rows(comm, src.data_ptr(), out.data_ptr(), rows, per_row, out.element_size(),
                            code, _HORA_OP[op], me, stream=h)
        if op == AVERAGE or post != 1.0:
            rt.run_in_order(s, lambda: finish_(out, op, post, n))
        return out

    # ---- Adasum: bounced through host memory ----------------------------------------------

    def _dev_to_host(self, r, comm, dst):
        """dst (host) = r's tensor, read in the engine stream's order after r's producer."""
        s = self._dev_begin(r, comm)
        src = r.tensor
        r.rt.run_in_order(s, lambda: dst.copy_(src.reshape(-1)))

    def _dev_from_host(self, r, src):
        """r's output = src (host), written in the engine stream's order."""
        s = self._stream(r.rt, r.dev)
        out = r.output
        r.rt.run_in_order(s, lambda: out.view(-1).copy_(src))
        self._keep.append(src)
