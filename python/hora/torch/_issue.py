"""The library calls of hora.torch's allgather, alltoall and reducescatter on buffers already in
place, the same for host and device tensors (hora.torch._execution, _device_exec): a device
operation passes its engine stream, a host one none (the call completes before it returns)."""
from hora import _core as C


def allgather_rows(comm, src, out, rows, rowbytes, me, stream=None):
    """Rank i's rows[i] rows (rowbytes each) from src into out, in rank order: one allgather when
    every rank has as many, else a broadcast per rank in one group."""
    if all(x == rows[0] for x in rows):
        if rows[0] * rowbytes:
            comm.allgather(src, out, rows[0] * rowbytes, C.UINT8, stream=stream)
        return
    off = 0
    with C.group():
        for i, k in enumerate(rows):
            if k * rowbytes:
                dst = out + off * rowbytes
                comm.broadcast(src if i == me else dst, dst, k * rowbytes, C.UINT8, i, stream=stream)
            off += k


def split_offsets(S, recv, me):
    """Row offsets of this rank's sends (S[me]) in its input and of its receives in its output."""
    n = len(S)
    soff, roff = [0] * n, [0] * n
    for j in range(1, n):
        soff[j] = soff[j - 1] + S[me][j - 1]
        roff[j] = roff[j - 1] + recv[j - 1]
    return soff, roff


def exchange(comm, sb, rb, S, recv, soff, roff, rowbytes, me, stream=None):
    """The rows this rank sends every other rank and receives from it, as one group (the rows
    to itself are the caller's copy)."""
    with C.group():
        for j in range(len(S)):
            if j == me:
                continue
            if S[me][j] * rowbytes:
                comm.send(sb + soff[j] * rowbytes, S[me][j] * rowbytes, C.UINT8, j, stream=stream)
            if recv[j] * rowbytes:
                comm.recv(rb + roff[j] * rowbytes, recv[j] * rowbytes, C.UINT8, j, stream=stream)


def reduce_scatter_rows(comm, src, out, rows, per_row, esize, code, op, me, stream=None):
    """Rank i gets the reduction of every rank's rows[i] rows (per_row elements of esize bytes):
    one reduce_scatter when the rows split evenly, else a reduce to each rank in one group."""
    if all(x == rows[0] for x in rows):
        if rows[0] * per_row:
            comm.reduce_scatter(src, out, rows[0] * per_row, code, op, stream=stream)
        return
    off = 0
    with C.group():
        for i, k in enumerate(rows):
            if k * per_row:
                comm.reduce(src + off * per_row * esize, out if i == me else None, k * per_row,
                            code, op, i, stream=stream)
            off += k
