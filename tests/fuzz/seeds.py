#!/usr/bin/python3
"""Writes the seed corpora of tests/fuzz/corpus/<harness>/: a few valid inputs each, built from
the wire formats the harnesses document. Run from anywhere; reproducers that campaigns found are
checked in beside these under their own names and are left alone."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


# transports/frame.h: magic "HRFR", type, call, seq, length, tag; then the expectation.
def frame_header(ftype, seq, length, tag, call=0):
    return b"HRFR" + struct.pack("<HHQQQ", ftype, call, seq, length, tag)


TAG = (1 << 56) | (7 << 52) | 1024  # an AllReduce of 1024 floats
put("frame", "data-match", frame_header(1, 3, 4096, TAG) + u64(3) + u64(4096) + u64(TAG))
put("frame", "data-other-count", frame_header(1, 3, 4096, TAG) + u64(3) + u64(8192) + u64(TAG + 1))
put("frame", "abort", frame_header(2, 9, 12, 0) + u64(0) + u64(0) + u64(0))

# fuzz_handshake.cc: end and kinds, peer mode, then per message: flips, piece, cut.
put("handshake", "server-plain", bytes([0, 0]) + bytes(6))
put("handshake", "client-plain", bytes([1, 0]) + bytes(6))
put("handshake", "server-pieces", bytes([2, 0, 0, 3, 0, 0, 1, 0]))
put("handshake", "client-flip-accept", bytes([1, 0, 0, 0, 0, 1, 4, 1, 0, 0]))
put("handshake", "server-cut-response", bytes([4, 0, 0, 0, 0, 0, 0, 0x90]))
put("handshake", "server-raw", bytes([0, 1]) + b"HRHS" + struct.pack("<HH", 1, 1) + bytes(32))


# src/comm/bootstrap_wire.h: frames {u32 type, u32 length, payload}; 1 Gather, 2 Result, 3 Error, 4 Bye.
def bframe(t, payload):
    return u32(t) + u32(len(payload)) + payload


def result(blobs):
    return bframe(2, b"".join(u32(len(b)) + b for b in blobs))


put("bootstrap_client", "one-round", bytes([1, 0, 0]) + result([b"rank 0 round 0", b"rank 1 round 0"]))
put("bootstrap_client", "two-rounds", bytes([2, 2, 2]) + result([b"a", b"", b"ccc"]) + result([b"", b"", b""]))
put("bootstrap_client", "error-report", bytes([1, 1, 0]) + bframe(3, b"rank 1 failed during init: no memory"))
put("bootstrap_client", "await-report", bytes([1, 0, 1]) + bframe(3, b"rank 0 left the rendezvous"))


# fuzz_bootstrap_root.cc: nranks, then ops (rank | action << 2, length, bytes).
def op(rank, action, data=b""):
    return bytes([rank | action << 2, len(data)]) + data


put("bootstrap_root", "two-ranks-bye", bytes([1]) + op(0, 0, b"r0") + op(1, 0, b"r1") + op(0, 2) + op(1, 2))
put("bootstrap_root", "three-ranks-two-rounds",
    bytes([2]) + b"".join(op(r, 0, b"x" * r) for r in range(3)) + b"".join(op(r, 0) for r in range(3)) +
    b"".join(op(r, 2) for r in range(3)))
put("bootstrap_root", "rank-fails", bytes([1]) + op(0, 0, b"r0") + op(1, 3, b"out of memory"))
put("bootstrap_root", "rank-closes", bytes([1]) + op(0, 0, b"r0") + op(1, 4))


# src/base/record.h: "PREC", u16 version, u16 fields; per field u8 name length, name, u32 length, bytes.
def record(fields):
    out = u32(0x43455250) + struct.pack("<HH", 1, len(fields))
    for name, value in fields:
        out += bytes([len(name)]) + name + u32(len(value)) + value
    return out


def fstr(s):
    return u32(len(s)) + s


core = u32(0x45524F43) + u32(1) + u32(4242) + u64(524288) + u32(1) + fstr(b"node7") + fstr(b"h" * 16) + fstr(b"m" * 32)


# src/topo/format.cc, version 1.
def tstr(s):
    return bytes([len(s)]) + s


def i32(v):
    return struct.pack("<i", v)


topo = (bytes([1]) + tstr(b"node7") + i32(2) + i32(2) + i32(16) + i32(32) + bytes([2]) + u64(32768) + u64(1 << 20) +
        bytes([1]) + tstr(b"eth0") + tstr(b"ethernet") + tstr(b"0000:3b:00.0") + i32(0) + i32(0) +
        bytes([1]) + tstr(b"gpu0") + tstr(b"0000:af:00.0") + i32(1) + i32(1) + i32(0) + i32(0) + i32(3))
tcp = u32(1) + bytes([4, 0]) + struct.pack(">H", 40000) + bytes([127, 0, 0, 1]) + bytes(12)
put("record", "peer", record([(b"core", core), (b"topo", topo), (b"tcp", tcp)]))
put("record", "empty", record([]))
put("record", "core", core)
put("record", "topo", topo)

put("config", "settings", "HORA_DEBUG=INFO\nHORA_DEBUG_SUBSYS=INIT,^NET\nHORA_CHUNK_BYTES=64K\n"
    "HORA_TRANSPORTS=^shm\nHORA_ALGO=allreduce:ring,broadcast:tree\nHORA_NSOCKS_PERPEER=4\n")
put("config", "more", "HORA_TIMEOUT_MS= 5000 \nHORA_SOCKET_IFNAME==eth0,^docker\nHORA_KERNEL_ISA=AVX2\n"
    "HORA_HIER_STAGE=0\nHORA_TOPO_FILE=/tmp/x.xml\nHORA_DEBGU=INFO\n")
put("config", "tune-file", "# Hora cost model\nstage 0.3 36\nmemory 40\noversubscribed 4.2\n"
    "link tcp 4.7 3.1\nbase ring 2.5\nbytes ring 1.1\n")

SECRET = "0123456789abcdef" * 4
put("launch", "torchrun", "TORCHELASTIC_RUN_ID=job\nRANK=1\nWORLD_SIZE=4\nMASTER_ADDR=node1\nMASTER_PORT=29500\n"
    "HORA_SECRET=" + SECRET + "\n")
put("launch", "srun", "SLURM_STEP_ID=0\nSLURM_JOB_ID=77\nSLURM_PROCID=2\nSLURM_STEP_NUM_TASKS=4\n"
    "SLURM_STEP_NODELIST=node[07-09,12],gpu1\nHORA_SECRET=" + SECRET.upper() + "\n")
put("launch", "mpirun-in-srun", "OMPI_COMM_WORLD_RANK=0\nOMPI_COMM_WORLD_SIZE=2\nSLURM_JOB_ID=5\n"
    "HORA_ROOT=[::1]:9000\nHORA_SECRET=" + SECRET + "\n")
put("launch", "hora-run", "HORA_RANK=0\nHORA_SIZE=1\nHORA_ID=" + "00" * 128 + "\n")


# src/comm/bootstrap.cc: "HRID", u16 version, 2 bytes, the packed address (20), the secret (32).
def uid(family, port, addr):
    packed = bytes([family, 0]) + struct.pack(">H", port) + addr
    packed += bytes(20 - len(packed))
    raw = b"HRID" + struct.pack("<H", 1) + bytes(2) + packed + bytes(range(32))
    return raw + bytes(128 - len(raw))


put("uniqueid", "ipv4", uid(4, 40000, bytes([10, 0, 0, 7])))
put("uniqueid", "ipv6", uid(6, 1, bytes(15) + b"\1"))
put("uniqueid", "ipv4-hex", uid(4, 40000, bytes([10, 0, 0, 7])).hex())
