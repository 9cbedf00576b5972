#!/usr/bin/env python3
"""Summarizes the nccl-tests runs of tests/gpu/run-nccl-clients.sh --prebuilt.

    nccl_tests_summary.py STEPS_TSV LOG_DIR

STEPS_TSV has one line per step: name, outcome (an exit status, or 'skip'), seconds, and for the
nccl-tests steps, named nt-<library>-<collective>-t<threads>, the log LOG_DIR/<name>.log holds
what the binary printed. Each log is parsed as nccl-tests prints it: data rows

    size  count  type  redop  root  time algbw busbw #wrong  time algbw busbw #wrong
                                    (out of place)           (in place)

then '# Out of bounds values : N OK|FAILED'. A run fails when its exit status is not 0, when it
printed no data row, when any row's #wrong is not 0 (or not a number: -c 1 was asked for), or when
its out-of-bounds count is not 0. Prints one row per run and, where both libraries ran the same
collective and setting, Hora beside NVIDIA; exits 1 when a run failed, 0 otherwise.
"""
import os
import sys


def parse(path):
    """Returns a dict with rows [(size, oop(time, algbw, busbw, wrong), ip(...))], oob, library."""
    res = {"rows": [], "oob": None, "library": None, "bad_wrong": 0, "errors": []}
    try:
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        res["errors"].append(str(e))
        return res
    for line in lines:
        s = line.strip()
        if s.startswith("# nccl-tests version") and "nccl-library=" in s:
            res["library"] = s.split("nccl-library=")[1].split()[0]
        if s.startswith("# Out of bounds values"):
            try:
                res["oob"] = int(s.split(":")[1].split()[0])
            except (IndexError, ValueError):
                res["oob"] = -1
        if not s or s.startswith("#"):
            continue
        tok = s.split()
        if len(tok) < 9 or not tok[0].isdigit() or not tok[1].isdigit():
            if "NCCL" in s and ("error" in s.lower() or "failure" in s.lower()):
                res["errors"].append(s[:200])
            continue
        size = int(tok[0])
        halves = []
        rest = tok[5:]
        while len(rest) >= 4:
            t, a, b, w = rest[:4]
            rest = rest[4:]
            try:
                t, a, b = float(t), float(a), float(b)
            except ValueError:
                continue
            try:
                w = int(float(w))
            except ValueError:
                w = None  # N/A: no check
                res["bad_wrong"] += 1
            halves.append((t, a, b, w))
        if halves:
            res["rows"].append((size, halves))
    return res


def human(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def summarize(res):
    rows = res["rows"]
    if not rows:
        return None
    wrong = 0
    best_bus = (-1.0, 0)
    best_alg = (-1.0, 0)
    for size, halves in rows:
        for t, a, b, w in halves:
            wrong += w or 0
            if b > best_bus[0]:
                best_bus = (b, size)
            if a > best_alg[0]:
                best_alg = (a, size)
    small_size, small = rows[0][0], rows[0][1][0][0]
    big_size, big = rows[-1][0], rows[-1][1][0][0]
    return {
        "busbw": best_bus[0], "busbw_at": best_bus[1], "algbw": best_alg[0], "algbw_at": best_alg[1],
        "small_size": small_size, "small_us": small, "big_size": big_size, "big_us": big,
        "wrong": wrong, "rows": len(rows),
    }


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    tsv, logdir = sys.argv[1], sys.argv[2]
    runs = []
    with open(tsv) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or not parts[0].startswith("nt-"):
                continue
            name, outcome, secs = parts[0], parts[1], parts[2]
            _, lib, rest = name.split("-", 2)
            coll, setting = rest.rsplit("-", 1)
            runs.append((name, lib, coll, setting, outcome, secs))

    out = []
    out.append("nccl-tests (NVIDIA's, unchanged) against Hora's libnccl.so.2 and NVIDIA's NCCL, ranks as "
               "threads on one GPU (-t N -g 1)")
    out.append("busbw/algbw: the largest over all sizes, out of place and in place (GB/s; busbw is 0 at one "
               "rank by nccl-tests' definition); t(small)/t(large): out-of-place time (us) at the smallest "
               "and largest size; wrong: the sum of #wrong; oob: 'Out of bounds values'")
    out.append("")
    hdr = (f"{'collective':<15} {'set':<4} {'library':<7} {'lib.ver':>7} {'rc':>4} {'rows':>4} "
           f"{'busbw':>7} {'@size':>6} {'algbw':>7} {'@size':>6} {'t(small)':>9} {'t(large)':>10} "
           f"{'wrong':>6} {'oob':>4} {'s':>4}  verdict")
    out.append(hdr)
    out.append("-" * len(hdr))
    failed = 0
    table = {}
    for name, lib, coll, setting, outcome, secs in runs:
        if outcome == "skip":
            out.append(f"{coll:<15} {setting:<4} {lib:<7} {'':>7} {'-':>4} {'':>4}  skipped (out of time)")
            continue
        res = parse(os.path.join(logdir, name + ".log"))
        s = summarize(res)
        reasons = []
        if outcome != "0":
            reasons.append("rc " + outcome + (" (timeout)" if outcome in ("124", "137") else ""))
        if s is None:
            reasons.append("no result rows")
        else:
            if s["wrong"]:
                reasons.append(f"#wrong {s['wrong']}")
            if res["bad_wrong"]:
                reasons.append("#wrong N/A (not checked)")
        if res["oob"] not in (0, None):
            reasons.append(f"out of bounds {res['oob']}")
        if s is not None and res["oob"] is None and outcome == "0":
            reasons.append("no 'Out of bounds values' line")
        verdict = "PASS" if not reasons else "FAIL: " + ", ".join(reasons)
        if reasons:
            failed += 1
        ver = res["library"] or "?"
        if s is None:
            out.append(f"{coll:<15} {setting:<4} {lib:<7} {ver:>7} {outcome:>4} {0:>4} {'':>58} {secs:>4}  {verdict}")
            for e in res["errors"][:3]:
                out.append(f"{'':<20}{e}")
            continue
        table[(coll, setting, lib)] = s
        out.append(
            f"{coll:<15} {setting:<4} {lib:<7} {ver:>7} {outcome:>4} {s['rows']:>4} "
            f"{s['busbw']:>7.2f} {human(s['busbw_at']):>6} {s['algbw']:>7.2f} {human(s['algbw_at']):>6} "
            f"{s['small_us']:>9.2f} {s['big_us']:>10.1f} {s['wrong']:>6} {res['oob'] if res['oob'] is not None else '?':>4} "
            f"{secs:>4}  {verdict}")

    pairs = sorted({(c, st) for (c, st, lib) in table if (c, st, "hora") in table and (c, st, "nvidia") in table})
    if pairs:
        out.append("")
        out.append("Hora beside NVIDIA's NCCL (same binaries, same GPU, same setting)")
        hdr2 = (f"{'collective':<15} {'set':<4} {'busbw hora':>10} {'nvidia':>8} {'ratio':>6} "
                f"{'algbw hora':>10} {'nvidia':>8} {'ratio':>6} {'t(small) hora':>13} {'nvidia':>8}")
        out.append(hdr2)
        out.append("-" * len(hdr2))
        for c, st in pairs:
            h, n = table[(c, st, "hora")], table[(c, st, "nvidia")]
            rb = f"{h['busbw'] / n['busbw']:.2f}" if n["busbw"] > 0 else "-"
            ra = f"{h['algbw'] / n['algbw']:.2f}" if n["algbw"] > 0 else "-"
            out.append(f"{c:<15} {st:<4} {h['busbw']:>10.2f} {n['busbw']:>8.2f} {rb:>6} "
                       f"{h['algbw']:>10.2f} {n['algbw']:>8.2f} {ra:>6} {h['small_us']:>13.2f} {n['small_us']:>8.2f}")
    out.append("")
    out.append(f"nccl-tests runs: {len(runs)}, failed: {failed}")
    print("\n".join(out))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
