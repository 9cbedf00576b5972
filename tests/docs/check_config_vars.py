#!/usr/bin/env python3
"""Every HORA_* variable the code reads is in the configuration reference.

Scans the C++ (.cc, .h, .cu, .cpp) and Python (.py, and scripts whose first line names python)
files under src/, transports/, kernels/, tools/, python/hora/ and perf/ for string literals that
are exactly a HORA_* name ("HORA_TIMEOUT_MS" or 'HORA_TIMEOUT_MS'): that covers getenv("HORA_X"),
the config module's env("HORA_X") and source(env, "HORA_X", c), the launcher's rd.get("HORA_X"),
os.environ.get("HORA_X"), os.environ["HORA_X"], "HORA_X" in os.environ and helpers such as
_env_int("HORA_X", ...), and also the names hora-run or the Python package set for the ranks
(which the library reads). The rows of the table itself ({"HORA_X", Topic::...) and the old names of renamed
variables ({"HORA_OLD", "HORA_NEW"},) are not uses. Macros (HORA_WARN, HORA_VERSION_STRING) are never string literals.
Fails naming each such name that docs/configuration.md does not list as a variable (a row
starting with `| `HORA_X` |`); such a name belongs in the table of src/comm/config_table.cc, from
which the page is generated (ninja -C <build> docs-configuration).

usage: check_config_vars.py SOURCE_ROOT
"""
import os
import re
import sys

DIRS = ["src", "transports", "kernels", "tools", "python/hora", "perf"]
CPP = (".cc", ".h", ".cu", ".cpp", ".hpp")
LITERAL = re.compile(r"""(["'])(HORA_[A-Z0-9_]+)\1""")
TABLE_ROW = re.compile(r"\s*,\s*Topic::")
RENAMED_ROW = re.compile(r"""\s*,\s*"HORA_[A-Z0-9_]+"\},""")  # kRenamed's {"HORA_OLD", "HORA_NEW"},
ROW = re.compile(r"^\| `(HORA_[A-Z0-9_]+)` \|", re.M)


def is_code(path):
    if path.endswith(CPP) or path.endswith(".py"):
        return True
    if "." in os.path.basename(path):
        return False
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def names_read(root):
    found = {}
    for d in DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                if not is_code(path):
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        for m in LITERAL.finditer(line):
                            if TABLE_ROW.match(line, m.end()) or RENAMED_ROW.match(line, m.end()):
                                continue  # the tables themselves (src/comm/config_table.cc, config.cc) are not uses
                            found.setdefault(m.group(2), "%s:%d" % (os.path.relpath(path, root), lineno))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    page_path = os.path.join(root, "docs", "configuration.md")
    with open(page_path, encoding="utf-8") as f:
        documented = set(ROW.findall(f.read()))
    found = names_read(root)
    missing = sorted(n for n in found if n not in documented)
    print("%d HORA_* names in the code, %d variables on the page" % (len(found), len(documented)))
    for n in missing:
        print("MISSING: %s (first at %s) is read or set by the code but not in docs/configuration.md: "
              "add it to kVariables in src/comm/config_table.cc and run ninja -C <build> docs-configuration" % (n, found[n]))
    if len(found) < 20:  # the scan itself broke (moved directories, a changed pattern)
        print("FAIL: the scan found too few names; check DIRS")
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
