#!/usr/bin/python3
"""Says why the tests of a meson build directory failed, briefly, for the end of a CI log.

    scripts/ci-failures.py BUILD_DIR...

A failing test's own output is long (every rank's WARN lines), and a CI log is often read from
its end: this prints, for each test whose last run failed, its name and time, and then the
assertions Catch2 reported as failed with the lines around them (or, for a script, the end of
its output). Reads BUILD_DIR/meson-logs/testlog.json; prints nothing when every test passed.
"""
import json
import os
import re
import sys

MOST_LINES = 60  # of one test's output
FAILED = re.compile(r"FAILED:|hung: killed|Sanitizer|runtime error:|Traceback|^FAIL")


def excerpt(stdout, stderr):
    lines = stdout.splitlines()
    hits = [i for i, line in enumerate(lines) if FAILED.search(line)]
    if not hits:
        lines = stderr.splitlines()
        hits = [i for i, line in enumerate(lines) if FAILED.search(line)]
    if not hits:
        return (stdout + "\n" + stderr).splitlines()[-20:]
    keep = set()
    for i in hits:
        keep.update(range(max(0, i - 8), min(len(lines), i + 14)))
    out, last = [], -2
    for i in sorted(keep):
        if i != last + 1:
            out.append("  ...")
        out.append(lines[i])
        last = i
    return out[:MOST_LINES] + (["  ... (more in the test log)"] if len(out) > MOST_LINES else [])


def main(dirs):
    for d in dirs:
        path = os.path.join(d, "meson-logs", "testlog.json")
        if not os.path.exists(path):
            continue
        last = {}
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    t = json.loads(line)
                except ValueError:
                    continue
                last[t.get("name", "?")] = t
        for name, t in last.items():
            if t.get("result") in ("OK", "SKIP", "EXPECTEDFAIL"):
                continue
            print(f"==== {d}: {name}: {t.get('result')} after {t.get('duration', 0):.0f} s "
                  f"(exit {t.get('returncode')})")
            for line in excerpt(t.get("stdout") or "", t.get("stderr") or ""):
                print(line[:400])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
