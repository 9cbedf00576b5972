#!/usr/bin/env python3
"""PyTorch's ProcessGroupNCCL on whichever libnccl.so.2 the process loaded (run by
tests/gpu/run-nccl-clients.sh --prebuilt on the GPU machine, with LD_PRELOAD=Hora's libnccl.so.2).

    nccl_torch_check.py [--expect-lib PATH [--expect-version CODE]] [--world 1,2] [--skip-ddp]
    nccl_torch_check.py --backend gloo --device cpu [--world 1,2]   (a check of this script itself,
                                                                     where there is no GPU)
    nccl_torch_check.py --symbols LIBNCCL [--symbols-out FILE]

First form, each check printing PASS or FAIL (the exit status is 1 if any failed):
  (a) which NCCL torch runs on: the libnccl files mapped into the process (/proc/self/maps), the
      file that defines the ncclAllReduce the process resolves (dladdr), torch.cuda.nccl.version()
      (torch's own call of ncclGetVersion); with --expect-lib, that file must be mapped and be the
      one the process resolves ncclAllReduce to, and torch's ncclGetVersion must return
      --expect-version (that library's, e.g. 22803). Another libnccl mapped beside it (torch may
      load its own by path) is reported: with the expected one preloaded, every symbol the
      expected one defines binds to it;
  (b) for each world size W of --world, W processes (torch.multiprocessing.spawn, a file:// store),
      backend "nccl", every rank on cuda:0 (two ranks on one GPU: Hora allows it; NVIDIA's NCCL
      refuses it before 2.30 and from 2.30 on wants NCCL_MULTI_RANK_GPU_ENABLE=1): all_reduce (sum,
      avg, max, min, product, a premultiplied sum), broadcast from the first and the last rank,
      reduce, all_gather_into_tensor, all_gather, reduce_scatter_tensor, all_to_all_single with even
      and uneven splits, gather, scatter, send/recv and batch_isend_irecv in a ring, barrier; on
      float32 and int64 tensors of 7 and 262147 elements holding integers, so that every expected
      value is exact and compared with torch.equal; and at W = 1 torch.cuda.nccl's own calls
      (ncclCommInitAll over the one device);
  (c) a DDP training loop (an MLP 16-32-4, seed 0, rank r's parameters perturbed before DDP wraps
      them so that DDP's broadcast of rank 0's state matters, SGD with momentum, 6 steps on random
      data of a seed per rank) on cuda:0 with NCCL, and the same loop on the CPU with gloo in the
      same processes (a gloo group beside the NCCL one). Checked: every rank ends with bitwise
      equal parameters (torch.equal, exact), and the NCCL run's parameters equal gloo's within the
      difference between GPU and CPU arithmetic (cuBLAS and the CPU BLAS sum in other orders):
      in float64, allclose(rtol=0, atol=1e-10) (a wrong reduction is off by far more); in float32,
      allclose(rtol=0, atol=1e-4); TF32 is off.

Second form: the nccl* and pnccl* symbols that torch's libraries (torch/lib/*.so, libtorch_cuda.so
first) import, and whether LIBNCCL exports each (nm -D); exit status 1 if one is missing.
"""
import argparse
import ctypes
import datetime
import glob
import json
import os
import subprocess
import sys
import tempfile
import traceback

SIZES = (7, 262147)


# ----------------------------------------------------------------------------------------------
# (a) which library


def mapped_libs(pattern):
    found = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and pattern in os.path.basename(parts[5]):
                path = parts[5]
                if path not in found:
                    found.append(path)
    return found


class DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def defining_file(symbol):
    """The file that defines `symbol` as the process's global scope resolves it, or None."""
    try:
        everything = ctypes.CDLL(None)
        fn = getattr(everything, symbol)
        info = DlInfo()
        dladdr = everything.dladdr
        dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
        if dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) and info.dli_fname:
            return info.dli_fname.decode()
    except (AttributeError, OSError):
        pass
    return None


def which_nccl(expect_lib, expect_version=None):
    """Returns [(check, ok, detail)] about the NCCL this process runs on."""
    import torch

    out = []
    ncclfiles = mapped_libs("libnccl")
    horafiles = mapped_libs("libhora")
    owner = defining_file("ncclAllReduce")
    code = None
    try:
        ver = torch.cuda.nccl.version()
        code = ver[0] * 10000 + ver[1] * 100 + ver[2] if isinstance(ver, tuple) else int(ver)
    except Exception as e:  # noqa: BLE001
        ver = f"error: {e}"
    detail = f"mapped libnccl: {ncclfiles}; libhora: {horafiles}; ncclAllReduce from: {owner}; " \
             f"torch.cuda.nccl.version(): {ver}"
    if expect_lib:
        want = os.path.realpath(expect_lib)
        real = [os.path.realpath(p) for p in ncclfiles]
        ok = want in real and owner is not None and os.path.realpath(owner) == want
        if expect_version:
            ok = ok and code == int(expect_version)
            detail += f"; expected version {expect_version}"
        others = [p for p in real if p != want]
        if others:
            detail += f"; ALSO MAPPED: {others}"
        out.append(("torch runs on the expected libnccl", ok, detail + f"; expected {want}"))
    else:
        out.append(("torch's libnccl (no expectation given)", bool(ncclfiles), detail))
    return out


# ----------------------------------------------------------------------------------------------
# (b) collectives


def values(rank, n, dtype, scale=1000):
    import torch

    return (torch.arange(n, dtype=torch.int64) % 997 + rank * scale).to(dtype)


def collective_checks(rank, world, dev, record):
    import torch
    import torch.distributed as dist

    def check(name, got, want):
        got = got.cpu()
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        detail = ""
        if not ok:
            detail = f"dtype {got.dtype}/{want.dtype} shape {tuple(got.shape)}/{tuple(want.shape)}"
            if got.shape == want.shape:
                bad = (got != want).nonzero()
                detail += f"; {bad.shape[0]} elements differ, first at {bad[0].tolist() if len(bad) else '-'}"
                if len(bad):
                    i = tuple(bad[0].tolist())
                    detail += f": got {got[i].item()} want {want[i].item()}"
        record(name, ok, detail)

    def guarded(name, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            record(name, False, f"exception: {type(e).__name__}: {e}".replace("\n", " ")[:500])

    R = list(range(world))
    for dtype in (torch.float32, torch.int64):
        dn = str(dtype).replace("torch.", "")
        for n in SIZES:
            tag = f"{dn} n={n} W={world}"

            def allreduce_sum():
                t = values(rank, n, dtype).to(dev)
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
                check(f"all_reduce sum {tag}", t, sum(values(r, n, dtype) for r in R))

            def allreduce_minmaxprod():
                for opname, op, fold in (("max", dist.ReduceOp.MAX, torch.maximum),
                                         ("min", dist.ReduceOp.MIN, torch.minimum),
                                         ("product", dist.ReduceOp.PRODUCT, torch.mul)):
                    mk = (lambda r: (torch.arange(n) % 5 + 1 + r).to(dtype)) if opname == "product" \
                        else (lambda r: values(r, n, dtype) * (1 if r % 2 else -1))
                    t = mk(rank).to(dev)
                    dist.all_reduce(t, op=op)
                    want = mk(0)
                    for r in R[1:]:
                        want = fold(want, mk(r))
                    check(f"all_reduce {opname} {tag}", t, want)

            def allreduce_avg():
                t = values(rank, n, dtype).to(dev)
                dist.all_reduce(t, op=dist.ReduceOp.AVG)
                check(f"all_reduce avg {tag}", t, sum(values(r, n, dtype) for r in R) / world)

            def allreduce_premul():
                if not hasattr(dist, "_make_nccl_premul_sum"):
                    record(f"all_reduce premul_sum {tag}", True, "skipped: no dist._make_nccl_premul_sum")
                    return
                t = values(rank, n, dtype).to(dev)
                dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
                check(f"all_reduce premul_sum(2.0) {tag}", t, 2 * sum(values(r, n, dtype) for r in R))

            def broadcast():
                for root in sorted({0, world - 1}):
                    t = values(rank, n, dtype).to(dev)
                    dist.broadcast(t, src=root)
                    check(f"broadcast root={root} {tag}", t, values(root, n, dtype))

            def reduce():
                t = values(rank, n, dtype).to(dev)
                dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
                if rank == 0:
                    check(f"reduce dst=0 {tag}", t, sum(values(r, n, dtype) for r in R))

            def allgather_into():
                t = values(rank, n, dtype).to(dev)
                o = torch.full((world * n,), -1, dtype=dtype, device=dev)
                dist.all_gather_into_tensor(o, t)
                check(f"all_gather_into_tensor {tag}", o, torch.cat([values(r, n, dtype) for r in R]))

            def allgather_list():
                t = values(rank, n, dtype).to(dev)
                outs = [torch.full((n,), -1, dtype=dtype, device=dev) for _ in R]
                dist.all_gather(outs, t)
                check(f"all_gather (list) {tag}", torch.cat(outs), torch.cat([values(r, n, dtype) for r in R]))

            def reduce_scatter():
                inp = torch.cat([values(rank, n, dtype) + j for j in R]).to(dev)
                o = torch.full((n,), -1, dtype=dtype, device=dev)
                dist.reduce_scatter_tensor(o, inp, op=dist.ReduceOp.SUM)
                check(f"reduce_scatter_tensor {tag}", o, sum(values(q, n, dtype) + rank for q in R))

            def alltoall_even():
                inp = torch.cat([values(rank, n, dtype, 100) + 10000 * j for j in R]).to(dev)
                o = torch.full((world * n,), -1, dtype=dtype, device=dev)
                dist.all_to_all_single(o, inp)
                check(f"all_to_all_single even {tag}", o,
                      torch.cat([values(j, n, dtype, 100) + 10000 * rank for j in R]))

            def alltoall_uneven():
                # rank r sends r + j + 1 (+ n % 3) elements to rank j
                k = n % 3
                send = [r_plus_j + 1 + k for r_plus_j in (rank + j for j in R)]
                recv = [j + rank + 1 + k for j in R]
                inp = torch.cat([values(rank, send[j], dtype, 100) + 10000 * j for j in R]).to(dev)
                o = torch.full((sum(recv),), -1, dtype=dtype, device=dev)
                dist.all_to_all_single(o, inp, output_split_sizes=recv, input_split_sizes=send)
                check(f"all_to_all_single uneven {tag}", o,
                      torch.cat([values(j, recv[j], dtype, 100) + 10000 * rank for j in R]))

            def gather_scatter():
                t = values(rank, n, dtype).to(dev)
                gl = [torch.full((n,), -1, dtype=dtype, device=dev) for _ in R] if rank == 0 else None
                dist.gather(t, gather_list=gl, dst=0)
                if rank == 0:
                    check(f"gather dst=0 {tag}", torch.cat(gl), torch.cat([values(r, n, dtype) for r in R]))
                sl = [values(r, n, dtype).to(dev) + 7 for r in R] if rank == world - 1 else None
                o = torch.full((n,), -1, dtype=dtype, device=dev)
                dist.scatter(o, scatter_list=sl, src=world - 1)
                check(f"scatter src={world - 1} {tag}", o, values(rank, n, dtype) + 7)

            def sendrecv():
                if world < 2:
                    return
                nxt, prv = (rank + 1) % world, (rank - 1) % world
                t = values(rank, n, dtype).to(dev)
                o = torch.full((n,), -1, dtype=dtype, device=dev)
                ops = [dist.P2POp(dist.isend, t, nxt), dist.P2POp(dist.irecv, o, prv)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                check(f"batch_isend_irecv ring {tag}", o, values(prv, n, dtype))
                # blocking send/recv between ranks 0 and 1: 0 sends first, 1 receives first
                if rank in (0, 1):
                    peer = 1 - rank
                    t = values(rank, n, dtype).to(dev) + 3
                    o = torch.full((n,), -1, dtype=dtype, device=dev)
                    if rank == 0:
                        dist.send(t, dst=peer)
                        dist.recv(o, src=peer)
                    else:
                        dist.recv(o, src=peer)
                        dist.send(t, dst=peer)
                    check(f"send/recv 0<->1 {tag}", o, values(peer, n, dtype) + 3)

            for name, fn in (("all_reduce sum", allreduce_sum), ("all_reduce max/min/prod", allreduce_minmaxprod),
                             ("broadcast", broadcast), ("reduce", reduce),
                             ("all_gather_into_tensor", allgather_into), ("all_gather", allgather_list),
                             ("reduce_scatter_tensor", reduce_scatter), ("all_to_all_single even", alltoall_even),
                             ("all_to_all_single uneven", alltoall_uneven), ("gather/scatter", gather_scatter),
                             ("send/recv", sendrecv)):
                guarded(f"{name} {tag}", fn)
            if dtype.is_floating_point:
                guarded(f"all_reduce avg {tag}", allreduce_avg)
                guarded(f"all_reduce premul_sum {tag}", allreduce_premul)
    guarded(f"barrier W={world}", lambda: (dist.barrier(device_ids=[dev.index]) if dev.type == "cuda" else dist.barrier(),
                                           record(f"barrier W={world}", True, "")))


# ----------------------------------------------------------------------------------------------
# (c) DDP against gloo


def train(rank, device, pg, dtype, steps=6):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to(dtype)
    with torch.no_grad():  # ranks other than 0 start elsewhere: DDP must broadcast rank 0's state
        for p in model.parameters():
            p.add_(0.5 * rank)
    model = model.to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, process_group=pg)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1234 + rank)
    for _ in range(steps):
        x = torch.randn(8, 16, generator=gen, dtype=dtype).to(device)
        y = torch.randn(8, 4, generator=gen, dtype=dtype).to(device)
        loss = ((ddp(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return [p.detach().cpu().clone() for p in model.parameters()]


# ----------------------------------------------------------------------------------------------
# the worker and the driver


def worker(rank, world, init_file, result_dir, expect_lib, skip_ddp, backend="nccl", device="cuda"):
    import torch
    import torch.distributed as dist

    log = open(os.path.join(result_dir, f"rank{rank}.jsonl"), "a", buffering=1)

    def record(name, ok, detail=""):
        log.write(json.dumps({"rank": rank, "check": name, "ok": bool(ok), "detail": detail}) + "\n")

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
    try:
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group(backend, init_method="file://" + init_file, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
        collective_checks(rank, world, dev, record)
        if dev.type == "cuda":
            for name, ok, detail in which_nccl(expect_lib, os.environ.get("NCCL_CHECK_EXPECT_VERSION")):
                record(f"{name} (rank process, after the collectives)", ok, detail)
        if not skip_ddp:
            gloo = dist.new_group(backend="gloo")
            for dtype in (torch.float64, torch.float32):
                dn = str(dtype).replace("torch.", "")
                try:
                    p_nccl = train(rank, dev, None, dtype)
                    p_gloo = train(rank, torch.device("cpu"), gloo, dtype)
                    torch.save({"nccl": p_nccl, "gloo": p_gloo}, os.path.join(result_dir, f"ddp-{dn}-rank{rank}.pt"))
                    record(f"DDP {dn} W={world} ran ({backend} on {dev}, gloo on cpu)", True, "")
                except Exception as e:  # noqa: BLE001
                    record(f"DDP {dn} W={world} ran ({backend} on {dev}, gloo on cpu)", False,
                           f"exception: {type(e).__name__}: {e}".replace("\n", " ")[:500])
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        record(f"rank {rank} W={world} set-up or teardown", False,
               f"exception: {type(e).__name__}: {e}".replace("\n", " ")[:800] + " | " +
               traceback.format_exc().replace("\n", " | ")[-800:])
    log.close()


def compare_ddp(world, result_dir, what="NCCL (cuda:0)"):
    """[(check, ok, detail)] over the parameters the ranks saved."""
    import torch

    out = []
    for dn, atol in (("float64", 1e-10), ("float32", 1e-4)):
        files = [os.path.join(result_dir, f"ddp-{dn}-rank{r}.pt") for r in range(world)]
        if not all(os.path.exists(f) for f in files):
            out.append((f"DDP {dn} W={world}: parameters of every rank saved", False,
                        f"missing: {[f for f in files if not os.path.exists(f)]}"))
            continue
        res = [torch.load(f) for f in files]
        for kind in ("nccl", "gloo"):
            same = all(all(torch.equal(a, b) for a, b in zip(res[0][kind], res[r][kind])) for r in range(1, world))
            out.append((f"DDP {dn} W={world} {kind}: every rank has bitwise equal parameters", same, ""))
        diffs = [(a - b).abs().max().item() for a, b in zip(res[0]["nccl"], res[0]["gloo"])]
        close = all(torch.allclose(a, b, rtol=0, atol=atol) for a, b in zip(res[0]["nccl"], res[0]["gloo"]))
        moved = max((a - b).abs().max().item() for a, b in zip(res[0]["nccl"], train_init(dn)))
        out.append((f"DDP {dn} W={world}: {what} parameters == gloo (cpu) parameters, rtol=0 atol={atol:g}",
                    close and moved > 1e-3,
                    f"max |nccl - gloo| per tensor: {['%.3g' % d for d in diffs]}; max change from the initial "
                    f"parameters {moved:.3g}"))
    return out


def train_init(dn):
    import torch

    torch.manual_seed(0)
    dtype = getattr(torch, dn)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).to(dtype)
    return [p.detach().clone() for p in model.parameters()]


def torch_nccl_module_checks():
    """torch.cuda.nccl's own calls (torch/csrc/cuda/nccl.cpp: ncclCommInitAll and friends), one GPU."""
    import torch
    import torch.cuda.nccl as tn

    out = []
    dev = torch.device("cuda", 0)
    n = 1031
    for name, fn in (
        ("torch.cuda.nccl.all_reduce", lambda: (lambda t: (tn.all_reduce([t]), t)[1])(values(0, n, torch.float32).to(dev))),
        ("torch.cuda.nccl.broadcast", lambda: (lambda t: (tn.broadcast([t]), t)[1])(values(0, n, torch.float32).to(dev))),
        ("torch.cuda.nccl.reduce", lambda: (lambda t: (tn.reduce([t], root=0), t)[1])(values(0, n, torch.float32).to(dev))),
        ("torch.cuda.nccl.all_gather", lambda: (lambda t, o: (tn.all_gather([t], [o]), o)[1])(
            values(0, n, torch.float32).to(dev), torch.full((n,), -1.0, device=dev))),
        ("torch.cuda.nccl.reduce_scatter", lambda: (lambda t, o: (tn.reduce_scatter([t], [o]), o)[1])(
            values(0, n, torch.float32).to(dev), torch.full((n,), -1.0, device=dev))),
    ):
        try:
            got = fn()
            torch.cuda.synchronize()
            ok = torch.equal(got.cpu(), values(0, n, torch.float32))
            out.append((f"{name} (ncclCommInitAll, one device)", ok, ""))
        except Exception as e:  # noqa: BLE001
            out.append((f"{name} (ncclCommInitAll, one device)", False, f"exception: {type(e).__name__}: {e}"[:400]))
    return out


def run_world(world, expect_lib, skip_ddp, backend="nccl", device="cuda"):
    import torch.multiprocessing as mp

    out = []
    with tempfile.TemporaryDirectory(prefix=f"nccl-torch-W{world}-") as tmp:
        init_file = os.path.join(tmp, "store")
        try:
            mp.spawn(worker, args=(world, init_file, tmp, expect_lib, skip_ddp, backend, device), nprocs=world,
                     join=True)
        except Exception as e:  # noqa: BLE001
            out.append((f"W={world}: every rank process exited normally", False,
                        f"{type(e).__name__}: {e}".replace("\n", " ")[:600]))
        by_check = {}
        for r in range(world):
            path = os.path.join(tmp, f"rank{r}.jsonl")
            if not os.path.exists(path):
                out.append((f"W={world}: rank {r} reported", False, "no results"))
                continue
            with open(path) as f:
                for line in f:
                    d = json.loads(line)
                    ok, details = by_check.get(d["check"], (True, []))
                    if not d["ok"]:
                        details.append(f"rank {d['rank']}: {d['detail']}")
                    elif d["detail"] and not details:
                        details.append(d["detail"])
                    by_check[d["check"]] = (ok and d["ok"], details)
        for name, (ok, details) in by_check.items():
            out.append((name, ok, "; ".join(details)[:1500]))
        if not skip_ddp:
            out.extend(compare_ddp(world, tmp, f"{backend} ({device})"))
    return out


def elf_dynsyms(path):
    """(defined, undefined) names of an ELF64 little-endian file's dynamic symbols, read directly
    (for a machine without nm)."""
    import struct

    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return set(), set()
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    defined, undefined = set(), set()
    for sec in secs:
        if sec[1] != 11:  # SHT_DYNSYM
            continue
        stroff = secs[sec[6]][4]
        for i in range(1, sec[5] // 24):
            st_name, st_info, _other, st_shndx, _value, _size = struct.unpack_from("<IBBHQQ", data, sec[4] + i * 24)
            end = data.index(b"\0", stroff + st_name)
            name = data[stroff + st_name:end].decode(errors="replace")
            if not name:
                continue
            if st_shndx == 0:
                undefined.add(name)
            elif st_info >> 4 in (1, 2):  # STB_GLOBAL, STB_WEAK
                defined.add(name)
    return defined, undefined


def symbols(libnccl, out_file):
    import shutil

    import torch

    libdir = os.path.join(os.path.dirname(torch.__file__), "lib")
    libs = sorted(glob.glob(os.path.join(libdir, "*.so*")), key=lambda p: (not p.endswith("libtorch_cuda.so"), p))

    def nm(args, path):
        if shutil.which("nm") is None:
            defined, undefined = elf_dynsyms(path)
            return sorted(defined if "--defined-only" in args else undefined)
        r = subprocess.run(["nm", "-D"] + args + [path], capture_output=True, text=True)
        return [ln.split()[-1].split("@")[0] for ln in r.stdout.splitlines() if ln.strip()]

    exported = set(s for s in nm(["--defined-only"], libnccl) if s.startswith(("nccl", "pnccl")))
    lines = [f"torch {torch.__version__} (CUDA {torch.version.cuda}) in {libdir}",
             f"libnccl checked: {libnccl} ({os.path.realpath(libnccl)}), exports {len(exported)} nccl*/pnccl* symbols", ""]
    missing_all = set()
    any_import = False
    for lib in libs:
        imported = sorted(set(s for s in nm(["--undefined-only"], lib) if s.startswith(("nccl", "pnccl"))))
        if not imported:
            continue
        any_import = True
        missing = [s for s in imported if s not in exported]
        missing_all.update(missing)
        needed = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout \
            if shutil.which("readelf") else ""
        flags = [ln.split(")", 1)[1].strip() for ln in needed.splitlines() if "(FLAGS" in ln or "(RUNPATH)" in ln or "(RPATH)" in ln]
        lines.append(f"{os.path.basename(lib)}: imports {len(imported)}: {' '.join(imported)}")
        lines.append(f"  dynamic flags / runpath: {flags}")
        lines.append(f"  not exported by the libnccl checked: {' '.join(missing) if missing else 'none'}")
    lines.append("")
    lines.append(f"MISSING ({len(missing_all)}): {' '.join(sorted(missing_all)) if missing_all else 'none'}")
    if not any_import:
        lines.append("FAIL: no torch library imports an nccl symbol: torch has NCCL linked in statically "
                     "(or has none), and no libnccl.so.2 can take its place")
    text = "\n".join(lines)
    print(text)
    if out_file:
        with open(out_file, "w") as f:
            f.write(text + "\n")
    return 1 if missing_all or not any_import else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--expect-lib", help="the libnccl.so.2 torch must run on")
    ap.add_argument("--expect-version", type=int, help="the ncclGetVersion() code of --expect-lib")
    ap.add_argument("--world", default="1,2", help="world sizes, comma-separated (default 1,2)")
    ap.add_argument("--skip-ddp", action="store_true")
    ap.add_argument("--backend", default="nccl", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help=argparse.SUPPRESS)
    ap.add_argument("--symbols", metavar="LIBNCCL", help="only check torch's nccl imports against LIBNCCL's exports")
    ap.add_argument("--symbols-out", metavar="FILE")
    a = ap.parse_args()
    if a.symbols:
        return symbols(a.symbols, a.symbols_out)

    import torch

    cuda = a.device == "cuda"
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"device {torch.cuda.get_device_name(0) if cuda else 'cpu'}, "
          f"torch.cuda.nccl.version() {torch.cuda.nccl.version() if cuda else '-'}; backend {a.backend}", flush=True)
    print(f"LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}", flush=True)
    if a.expect_version:
        os.environ["NCCL_CHECK_EXPECT_VERSION"] = str(a.expect_version)  # for the rank processes
    results = which_nccl(a.expect_lib, a.expect_version) if cuda else []
    worlds = [int(w) for w in a.world.split(",") if w]
    if 1 in worlds and cuda:
        results += torch_nccl_module_checks()
    for w in worlds:
        t0 = datetime.datetime.now()
        res = run_world(w, a.expect_lib, a.skip_ddp, a.backend, a.device)
        results += res
        print(f"-- W={w}: {sum(1 for r in res if r[1])}/{len(res)} passed in "
              f"{(datetime.datetime.now() - t0).total_seconds():.1f} s", flush=True)
    failed = 0
    for name, ok, detail in results:
        print(f"{'PASS' if ok else 'FAIL'}  {name}" + (f"  [{detail}]" if detail and (not ok or 'skipped' in detail
                                                                                     or 'libnccl' in name or 'DDP' in name) else ""))
        failed += not ok
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
