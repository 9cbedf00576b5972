"""hora-info's checks: test_hora_info.py HORA_INFO CASE, one case per test.

text:    the human text names the version and every transport of the build
json:    --json is one JSON object with the fields its help text documents
forced:  HORA_TRANSPORTS=tcp reports shm not usable, the reason naming the variable
nccl:    NCCL_SHM_DISABLE=1 reports shm not usable, the reason naming that variable
check:   --check --json reports shm and tcp ok on this machine
checkfail: a job whose allreduce cannot run (HORA_ALGO=hier on one host) fails its check with
         the library's error, and hora-info exits 1; HORA_SOCKET_IFNAME naming no interface
         makes every transport unusable, with that reason; HORA_COMM_BLOCKING=0 changes nothing
cuda:    HORA_CUDA=emulate: CUDA usable with one emulated GPU, cuda_ipc usable; HORA_CUDA_IPC=0
         and NCCL_P2P_DISABLE=1 turn cuda_ipc off, naming the variable; other HORA_* variables
help:    --help documents the JSON fields; an unknown argument is refused (status 2)
"""
import json
import os
import subprocess
import sys

HORA_INFO, CASE = sys.argv[1], sys.argv[2]
FIELDS = ["version", "version_code", "build_type", "build", "cuda", "kernels", "transports", "topology",
          "rdma_ports", "settings"]


def run(args, env=None, status=0):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HORA_", "NCCL_"))}
    e.update(env or {})
    p = subprocess.run([HORA_INFO] + args, env=e, capture_output=True, text=True, timeout=120)
    assert p.returncode == status, f"{args} exited {p.returncode}, not {status}:\n{p.stdout}\n{p.stderr}"
    # Nothing on stderr where the environment has nothing to warn about.
    assert env or status != 0 or p.stderr == "", f"{args}: {p.stderr}"
    return p.stdout


def info(args=(), env=None, status=0):
    return json.loads(run(["--json"] + list(args), env, status))


def transport(doc, name):
    found = [t for t in doc["transports"] if t["name"] == name]
    assert len(found) == 1, f"{name} in {doc['transports']}"
    return found[0]


def setting(doc, name):
    found = [s for s in doc["settings"] if s["name"] == name]
    assert len(found) == 1, f"{name} in {doc['settings']}"
    return found[0]


if CASE == "text":
    out = run([])
    doc = info()
    assert out.startswith("Hora " + doc["version"]), out
    assert "transports:" in out, out
    for t in doc["transports"]:
        assert f"  {t['name']} " in out, (t["name"], out)
    assert "settings:" in out and "HORA_TRANSPORTS" in out, out
elif CASE == "json":
    doc = info()
    for f in FIELDS:
        assert f in doc, f"{f} missing: {sorted(doc)}"
    assert doc["version"].count(".") == 2 and doc["version_code"] > 0, doc["version"]
    assert all(isinstance(doc["build"][k], bool) for k in ("cuda", "ib", "mpi")), doc["build"]
    assert doc["cuda"]["usable"] or doc["cuda"]["why"], doc["cuda"]
    k = doc["kernels"]
    assert k["active"] == k["auto"] and k["auto"] in k["supported"] and "scalar" in k["supported"], k
    for name in ("shm", "tcp"):
        t = transport(doc, name)
        assert t["built"] and t["enabled"] and t["usable"] and t["why"] == "", t
    ib = transport(doc, "ib")
    assert ib["built"] == doc["build"]["ib"], ib
    assert ib["usable"] or ib["why"], ib
    host = doc["topology"]["hosts"][0]
    assert host["pus"] >= host["cores"] >= 1 and host["packages"] >= 1, host
    for s in doc["settings"]:
        assert set(s) == {"name", "value", "source", "from"}, s
    assert setting(doc, "HORA_TRANSPORTS")["source"] == "default", setting(doc, "HORA_TRANSPORTS")
    assert setting(doc, "HORA_CHUNK_BYTES")["value"] == "524288"
    assert "check" not in doc
    doc = info(env={"HORA_CHUNK_BYTES": "64K", "HORA_KERNEL_ISA": "scalar"})
    s = setting(doc, "HORA_CHUNK_BYTES")
    assert s == {"name": "HORA_CHUNK_BYTES", "value": "65536", "source": "environment", "from": "HORA_CHUNK_BYTES"}, s
    assert doc["kernels"]["active"] == "scalar", doc["kernels"]
elif CASE == "forced":
    doc = info(env={"HORA_TRANSPORTS": "tcp"})
    shm = transport(doc, "shm")
    assert not shm["usable"] and not shm["enabled"] and "HORA_TRANSPORTS='tcp'" in shm["why"], shm
    assert transport(doc, "tcp")["usable"]
    s = setting(doc, "HORA_TRANSPORTS")
    assert s["value"] == "tcp" and s["source"] == "environment", s
    out = run([], {"HORA_TRANSPORTS": "^shm"})
    assert "not usable: left out by HORA_TRANSPORTS='^shm'" in out, out
elif CASE == "nccl":
    doc = info(env={"NCCL_SHM_DISABLE": "1"})
    shm = transport(doc, "shm")
    assert not shm["usable"] and "NCCL_SHM_DISABLE" in shm["why"], shm
    s = setting(doc, "HORA_TRANSPORTS")
    assert s["source"] == "environment" and "NCCL_SHM_DISABLE" in s["from"], s
elif CASE == "check":
    doc = info(["--check"])
    got = {c["transport"]: c for c in doc["check"]}
    for name in ("shm", "tcp"):
        assert got[name]["ok"] and got[name]["why"] == "", got
    assert "loopback" not in got, got
    # A transport left out is not checked.
    doc = info(["--check"], {"HORA_TRANSPORTS": "tcp"})
    assert [c["transport"] for c in doc["check"] if c["transport"] in ("shm", "tcp")] == ["tcp"], doc["check"]
    out = run(["--check"])
    assert "shm       ok" in out and "tcp       ok" in out, out
elif CASE == "checkfail":
    doc = info(["--check"], {"HORA_ALGO": "hier"}, status=1)
    got = {c["transport"]: c for c in doc["check"]}
    assert set(got) >= {"shm", "tcp"}, got
    for c in got.values():
        assert not c["ok"] and "HORA_ALGO forces hier" in c["why"], c
    out = run(["--check"], {"HORA_ALGO": "hier"}, status=1)
    assert "tcp       FAILED: " in out, out
    doc = info(["--check"], {"HORA_SOCKET_IFNAME": "no_such_interface"})
    for t in doc["transports"]:
        if t["name"] in ("shm", "tcp"):
            assert not t["usable"] and "HORA_SOCKET_IFNAME='no_such_interface'" in t["why"], t
    assert [c for c in doc["check"] if c["transport"] in ("shm", "tcp")] == [], doc["check"]
    doc = info(["--check"], {"HORA_COMM_BLOCKING": "0"})
    assert all(c["ok"] for c in doc["check"]), doc["check"]
elif CASE == "cuda":
    doc = info(env={"HORA_CUDA": "emulate"})
    assert doc["cuda"]["usable"] and doc["cuda"]["why"] == "" and doc["cuda"]["mode"] == "emulate", doc["cuda"]
    assert len(doc["cuda"]["gpus"]) == 1 and "emulated" in doc["cuda"]["gpus"][0]["name"], doc["cuda"]
    assert transport(doc, "cuda_ipc")["usable"], transport(doc, "cuda_ipc")
    for var in ("HORA_CUDA_IPC=0", "NCCL_P2P_DISABLE=1"):
        name, value = var.split("=")
        ipc = transport(info(env={"HORA_CUDA": "emulate", name: value}), "cuda_ipc")
        assert not ipc["usable"] and f"{name}='{value}'" in ipc["why"], ipc
    doc = info(env={"HORA_CUDA": "off"})
    assert not doc["cuda"]["usable"] and doc["cuda"]["why"] and doc["cuda"]["gpus"] == [], doc["cuda"]
    assert not transport(doc, "cuda_ipc")["usable"] and transport(doc, "cuda_ipc")["why"]
    doc = info(env={"HORA_RANK": "0", "HORA_NO_SUCH_SETTING": "1", "HORA_SECRET": "ab" * 32})
    assert setting(doc, "HORA_RANK")["source"] == "environment", setting(doc, "HORA_RANK")
    assert "not a Hora variable" in setting(doc, "HORA_NO_SUCH_SETTING")["source"]
    assert setting(doc, "HORA_SECRET")["value"] == "(set)", setting(doc, "HORA_SECRET")
elif CASE == "help":
    out = run(["--help"])
    for f in FIELDS + ["check"]:
        assert f in out, f
    run(["--bogus"], status=2)
    # An invalid setting is hora-info's own failure.
    p = subprocess.run([HORA_INFO], env=dict(os.environ, HORA_CHUNK_BYTES="7"), capture_output=True, text=True)
    assert p.returncode == 1 and "HORA_CHUNK_BYTES" in p.stderr, (p.returncode, p.stderr)
else:
    sys.exit(f"unknown case {CASE}")
print(f"hora-info {CASE}: ok")
