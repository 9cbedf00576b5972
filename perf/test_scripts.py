"""The meson test of perf's scripts: a tool's -J file, anchors2json's files and compare's
medians all pass the schema (hperf.validate), table lines them up, and plot draws them.

  /usr/bin/python3 perf/test_scripts.py BUILD/perf/allgather_perf

plot is skipped (and said so) where matplotlib is missing; anything else failing fails.
"""
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


def check(cond, what):
    if not cond:
        sys.exit(f"test_scripts: FAILED: {what}")
    print(f"ok: {what}")


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
