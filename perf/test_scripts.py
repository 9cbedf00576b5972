"""The meson test of perf's scripts: a tool's -J file, anchors2json's files and compare's
medians all pass the schema (hperf.validate), table lines them up, and plot draws them;
compare's --hosts and --algos are read and turned into commands as they should be (without
making namespaces), and netns-agent takes its arguments as ssh does.

  /usr/bin/python3 perf/test_scripts.py BUILD/perf/allgather_perf

plot is skipped (and said so) where matplotlib is missing; anything else failing fails.
"""
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, HERE)
import hperf  # noqa: E402

# anchors.sh's output as it comes: the machine's floors, a notice of mpirun, two tables.
ANCHORS_TEXT = """memcpy 64MiB, 1 thread : 11.20 GB/s
## ompi-vader
# peer: mpi-allgather  nranks: 3
#       size        count   type  redop      time_us    algbw    busbw #wrong
          12            3  float   none         1.92    0.006    0.004      0
         504          126  float   none         2.00    0.252    0.168      0
--------------------------------------------------------------------------
A notice of mpirun, 1 2 3 4 5 6 7
## gloo-ring
# peer: gloo-allgather  nranks: 3
#       size        count   type  redop      time_us    algbw    busbw #wrong
          12            3  float   none        81.30    0.000    0.000      0
         504          126  float   none        41.83    0.012    0.008      1
"""

# perf/mpi_coll's output (Open MPI's side of the collectives the anchors do not time).
MPI_COLL_TEXT = """## ompi-vader
# peer: mpi-reducescatter  nranks: 3
#       size        count   type  redop      time_us    algbw    busbw #wrong
         252           63  float    sum        13.56    0.019    0.012      0
## ompi-vader
# peer: mpi-reduce  nranks: 3
#       size        count   type  redop      time_us    algbw    busbw #wrong
         256           64  float    sum         1.36    0.188    0.188      0
"""


def check_mpi_coll():
    rs, red = hperf.parse_anchors(MPI_COLL_TEXT)
    check(rs["collective"] == "reducescatter" and rs["op"] == "sum" and rs["root"] == -1 and
          rs["rows"][0]["count"] == 21 and rs["rows"][0]["size"] == 252, "mpi_coll: a ReduceScatter's block")
    check(red["collective"] == "reduce" and red["op"] == "sum" and red["root"] == 0 and red["rows"][0]["count"] == 64,
          "mpi_coll: a Reduce's buffer")
    compare = load_compare()
    for coll in ("reduce", "reducescatter", "gather", "scatter"):
        check(not refused(compare, ["-c", coll, "-p", "ompi-vader ompi-tcp"]), f"compare: {coll} beside Open MPI")
        check(not refused(compare, ["--hosts", "2x1", "-c", coll]), f"compare --hosts: {coll} beside Open MPI")


def check(cond, what):
    if not cond:
        sys.exit(f"test_scripts: FAILED: {what}")
    print(f"ok: {what}")


def load_compare():
    """perf/compare as a module (its name has no .py)."""
    loader = importlib.machinery.SourceFileLoader("compare", os.path.join(HERE, "compare"))
    spec = importlib.util.spec_from_loader("compare", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def refused(compare, argv):
    """Whether compare's parse_args refuses argv (argparse exits with status 2)."""
    stderr, sys.stderr = sys.stderr, open(os.devnull, "w")
    try:
        compare.parse_args(argv)
        return False
    except SystemExit as e:
        return e.code == 2
    finally:
        sys.stderr.close()
        sys.stderr = stderr


def check_hosts(tmp):
    compare = load_compare()
    check(compare.parse_hosts("4x2") == (4, 2) and compare.parse_hosts(" 2X8 ") == (2, 8) and
          compare.parse_hosts("4") is None and compare.parse_hosts("0x2") is None, "compare: HxR")
    a = compare.parse_args(["--hosts", "4x2", "-c", "allreduce", "-o", tmp])
    check(a.hosts_rpr == (4, 2) and a.ns == [8] and a.peers == ["ompi"] and a.prefix == "hcmp" and
          a.hora_libs == [("hora", None)], "compare --hosts: 8 ranks, Open MPI across the hosts, a cluster made")
    a = compare.parse_args(["--hosts", "2x1", "--cluster", "pq", "-p", "", "--algos", "auto ring allreduce:rd"])
    check(a.prefix == "pq" and a.peers == [] and
          a.hora_libs == [("hora-auto", "auto"), ("hora-ring", "ring"), ("hora-allreduce-rd", "allreduce:rd")],
          "compare --cluster, -p '' and --algos")
    a = compare.parse_args(["-p", "none", "--env", "HORA_CALL_CHECK=1 HORA_CALL_CHECK=0,HORA_NSOCKS_PERPEER=1"])
    check(a.peers == [] and a.hora_libs == [("hora-call-check-1", None), ("hora-call-check-0-nsocks-perpeer-1", None)] and
          a.hora_env == {"hora-call-check-1": {"HORA_CALL_CHECK": "1"},
                         "hora-call-check-0-nsocks-perpeer-1": {"HORA_CALL_CHECK": "0", "HORA_NSOCKS_PERPEER": "1"}},
          "compare -p none and --env: a library per setting")
    check(compare.tool_extra("") == ["-a", "3"] and compare.tool_extra("-n 50") == ["-a", "3", "-n", "50"] and
          compare.tool_extra("-a 1 -n 5") == ["-a", "1", "-n", "5"],
          "compare times Hora's slowest rank, as the peers report theirs, unless -x sets -a")
    envcmds = compare.hora_rank_cmds("pq", 1, 2, "10.1.2.1:29601", "ab" * 32, None, ["/b/perf/reduce_perf"],
                                     {"HORA_CALL_CHECK": "0"})
    check(all("HORA_CALL_CHECK=0" in c and not any(w.startswith("HORA_ALGO=") for w in c) for c in envcmds),
          "compare --hosts --env: each rank's command sets the library's settings")
    check(refused(compare, ["--env", "HORA_CALL_CHECK"]) and refused(compare, ["--env", "A=1", "--algos", "ring"]),
          "compare refuses a setting without a value, and --env with --algos")
    check(refused(compare, ["--hosts", "4"]) and refused(compare, ["--hosts", "4x2", "-p", "gloo-ring"]) and
          refused(compare, ["--cluster", "pq"]) and refused(compare, ["--hosts", "2x2", "--prefix", "a b"]) and
          refused(compare, ["-p", "ompi"]), "compare refuses a bad --hosts, a peer that cannot cross hosts, "
          "--cluster alone, a bad prefix, and ompi on one host")

    tool = ["/b/perf/allreduce_perf", "-b", "8"]
    cmds = compare.hora_rank_cmds("pq", 2, 3, "10.1.2.1:29601", "ab" * 32, "ring", tool)
    env = [dict(w.split("=", 1) for w in c if "=" in w) for c in cmds]
    check(len(cmds) == 6 and [c[2] for c in cmds] == ["0", "0", "0", "1", "1", "1"] and
          all(c[0] == compare.NETNS and c[1] == "exec" and c[3:6] == ["-p", "pq", "env"] and c[-3:] == tool
              for c in cmds), "compare: each rank in its host, a host's ranks consecutive")
    check([e["HORA_RANK"] for e in env] == [str(r) for r in range(6)] and
          [e["HORA_LOCAL_RANK"] for e in env] == ["0", "1", "2"] * 2 and
          all(e["HORA_SIZE"] == "6" and e["HORA_LOCAL_SIZE"] == "3" and e["HORA_ROOT"] == "10.1.2.1:29601" and
              e["HORA_SECRET"] == "ab" * 32 and e["HORA_ALGO"] == "ring" for e in env),
          "compare: the ranks' rendezvous, ranks and algorithm")
    check(not any("HORA_ALGO" in w for c in compare.hora_rank_cmds("pq", 1, 2, "a:1", "00", None, tool) for w in c),
          "compare: no HORA_ALGO without --algos")
    check(compare.hostfile_text("pq", 3, 2) == "pq0 slots=2\npq1 slots=2\npq2 slots=2\n", "compare: hostfile")
    cmd = compare.ompi_hosts_cmd("pq", "10.1.2", 6, "/h", ["/a/mpi_bench", "-c", "allreduce"], True)
    mca = {cmd[i + 1]: cmd[i + 2] for i, w in enumerate(cmd) if w == "--mca"}
    check(cmd[:5] == [compare.NETNS, "exec", "0", "-p", "pq"] and cmd[5] == "mpirun" and
          cmd[cmd.index("-np") + 1] == "6" and cmd[cmd.index("--hostfile") + 1] == "/h" and
          cmd[-3:] == ["/a/mpi_bench", "-c", "allreduce"], "compare: mpirun in host 0 over the hostfile")
    check(mca.get("plm_rsh_agent") == compare.AGENT and mca.get("btl") == "self,vader,tcp" and
          mca.get("btl_tcp_if_include") == "10.1.2.0/24" and mca.get("oob_tcp_if_include") == "10.1.2.0/24" and
          mca.get("mpi_yield_when_idle") == "1", "compare: Open MPI's launcher, BTLs and networks")
    check("mpi_yield_when_idle" not in compare.ompi_hosts_cmd("pq", "10.1.2", 2, "/h", [], False),
          "compare: no yielding where the cores suffice")

    def doc(lib, times):
        return {"library": lib, "rows": [{"size": s, "time_us": t} for s, t in times.items()]}
    libs = [("hora-auto", "auto"), ("hora-ring", "ring"), ("hora-rd", "rd")]
    med = {"hora-auto": doc("hora-auto", {8: 10.0, 1024: 30.0}), "hora-ring": doc("hora-ring", {8: 20.0, 1024: 20.0}),
           "hora-rd": doc("hora-rd", {8: 9.5, 1024: 40.0})}
    rows = compare.auto_vs_forced(med, libs)
    check([(r[0], r[2]) for r in rows] == [(8, "hora-rd"), (1024, "hora-ring")] and
          abs(rows[0][4] - 10 / 9.5) < 1e-9 and abs(rows[1][4] - 1.5) < 1e-9, "compare: auto beside the fastest forced")
    check(compare.auto_vs_forced(med, libs[:1]) == [], "compare: no auto table without a forced algorithm")

    if shutil.which("ip"):
        r = subprocess.run([compare.AGENT, "-x", "-o", "BatchMode=yes", "-p", "22", "no-such-ns", "true"],
                           stderr=subprocess.PIPE, text=True)
        check(r.returncode == 255 and "no namespace 'no-such-ns'" in r.stderr,
              "netns-agent: ssh's options passed over, the host is a namespace")


def check_init_compare():
    """init-compare reads every rank's line and keeps the slowest rank's value of each column;
    a missing rank is no result; its arguments are checked."""
    loader = importlib.machinery.SourceFileLoader("init_compare", os.path.join(HERE, "init-compare"))
    spec = importlib.util.spec_from_loader("init_compare", loader)
    ic = importlib.util.module_from_spec(spec)
    loader.exec_module(ic)
    lines = ["[1] init rank 1 of 2: main 14 us, init 175 us, first allreduce 72.5 us, from launch 189 us",
             "init rank 0 of 2: main 28 us, init 160 us, first allreduce 2734.2 us, from launch 191 us"]
    got = ic.parse_ranks(["noise\n" + lines[0], lines[1] + "\n"], 2)
    check(got == {"main": 28, "init": 175, "first": 2734.2, "launch": 191}, "init-compare: the slowest rank's times")
    check(ic.parse_ranks([lines[1]], 2) is None, "init-compare: a rank without its line")
    check(ic.THREADS.search("init 64 ranks as threads: horaCommInitRank 601 us at the slowest, 574 us the median")
          is not None, "init-compare: init_perf -N's summary")
    a = ic.parse_args(["--hosts", "4x2", "-r", "2", "-o", "/nonexistent"])
    check(a.hosts_rpr == (4, 2) and a.ns == [8] and a.r == 2, "init-compare: --hosts")
    check(refused(ic, ["--hosts", "4"]) and refused(ic, ["--cluster", "x"]) and refused(ic, ["-r", "0"]),
          "init-compare: bad arguments refused")


def main():
    tool = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        js = os.path.join(tmp, "hora.json")
        subprocess.run([tool, "-N", "3", "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "-J", js],
                       check=True, stdout=subprocess.DEVNULL)
        hora = hperf.load(js)
        check(hora["library"] == "hora" and hora["mode"] == "threads" and hora["nranks"] == 3, "tool's JSON header")
        check([r["size"] for r in hora["rows"]] == [0, 60, 504, 4092], "tool's sizes (allgather of 3 ranks)")
        check(all(r["wrong"] == 0 and r["inplace_wrong"] == 0 for r in hora["rows"]), "tool's rows checked")

        out = subprocess.run([os.path.join(HERE, "anchors2json"), "-o", tmp], input=ANCHORS_TEXT, text=True,
                             check=True, stdout=subprocess.PIPE).stdout.split()
        check([os.path.basename(p) for p in out] == ["allgather-n3-ompi-vader.json", "allgather-n3-gloo-ring.json"],
              "anchors2json's files")
        gloo = hperf.load(out[1])
        row = gloo["rows"][1]
        check(row["count"] == 42 and abs(row["algbw"] / (504 / 41.83e3) - 1) < 1e-9, "peer's count and bandwidth")
        check(gloo["wrong_total"] == 1, "peer's #wrong")

        slow = dict(hora, rows=[dict(r, time_us=2 * r["time_us"], wrong=1) for r in hora["rows"]])
        med = hperf.median_doc([hora, slow, hora])
        check(med["rounds"] == 3 and [r["time_us"] for r in med["rows"]] == [r["time_us"] for r in hora["rows"]],
              "median of rounds")
        check(med["wrong_total"] == len(hora["rows"]), "the worst #wrong of the rounds")

        # table: Hora's row at 504 bytes beside both peers, x = their time over Hora's.
        shutil.copy(js, os.path.join(tmp, "allgather-n3-hora.json"))
        lines = subprocess.run([os.path.join(HERE, "table"), "-c", "allgather", "-s", "504 4092",
                                "-p", "ompi-vader gloo", tmp], check=True, text=True,
                               stdout=subprocess.PIPE).stdout.splitlines()
        mine = next(r for r in hora["rows"] if r["size"] == 504)
        cells = [c.strip() for c in lines[2].split("|")[1:-1]]
        check(len(lines) == 4 and cells[:2] == ["3", "504 B"], "table's rows")
        check(abs(float(cells[5]) - 2.00 / mine["time_us"]) < 0.01 * 2.00 / mine["time_us"] + 0.01 and
              abs(float(cells[7]) - 41.83 / mine["time_us"]) < 0.01 * 41.83 / mine["time_us"] + 0.01,
              "table's ratios")
        check(lines[3].split("|")[5].strip() == "-", "table: a size a peer lacks")

        check_hosts(tmp)
        check_init_compare()
        check_mpi_coll()

        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("skipped: plot (no matplotlib; Debian: python3-matplotlib)")
            return
        png = os.path.join(tmp, "plot.png")
        subprocess.run([os.path.join(HERE, "plot"), png, js] + out, check=True, stdout=subprocess.DEVNULL)
        with open(png, "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", "plot's PNG")


if __name__ == "__main__":
    main()
