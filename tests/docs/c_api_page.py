"""docs/c-api.md from include/hora.h: the header's own words (its opening comment, then every
function with the comment above it, section by section), and the rules every function shares
(results, the last error, threads). Run it to rewrite the page; with --check it only compares and
exits 1 naming what differs, so the page cannot fall behind the header (test `c-api page`).
    /usr/bin/python3 tests/docs/c_api_page.py [--check] [ROOT]
"""
import os
import re
import sys

SHARED = """\
## What every function shares

- **Results.** Every function returns a `horaResult_t`, never throws and never crashes on a bad
  argument. `horaSuccess` (0); `horaInvalidArgument` for a bad argument (a NULL pointer, a count
  or rank out of range, an unknown type or op, a buffer on another device than the
  communicator's); `horaInvalidUsage` for a call that is legal but not now (a communicator still
  in a non-blocking init, one used by two threads at once, a call after an abort);
  `horaRemoteError` when a peer failed (died, closed its links, sent malformed data) or a call
  did not match the other ranks'; `horaTimeout` when a peer stayed silent for `HORA_TIMEOUT_MS`;
  `horaSystemError` for the operating system's refusals (memory, descriptors, addresses);
  `horaUnhandledCudaError` for CUDA's; `horaInProgress` for an operation that goes on in the
  background (non-blocking init, split, shrink, finalize; `horaStreamQuery`). Each code, its
  causes and what to do: [errors](errors.md) and [troubleshooting](troubleshooting.md).
- **The text.** After a failure `horaGetLastError(comm)` (or `horaGetLastError(NULL)` for the
  calling thread's last failure, such as an init's) says what failed, naming the function, the
  argument or the peer (rank, host, pid) and what this rank was waiting for.
- **Failures are sticky.** A failure of a peer or of the wire puts the communicator in its error
  state: every later call on it returns that error at once, as does `horaCommGetAsyncError`,
  until it is aborted or destroyed; `horaCommShrink` makes a working communicator of the
  survivors.
- **Threads.** Different communicators may be used from different threads at the same time. One
  communicator is used by one thread at a time (a second thread's concurrent call is refused with
  `horaInvalidUsage`, never a crash), except `horaCommAbort`, `horaCommGetAsyncError` and
  `horaGetLastError`, which any thread may call at any time: an abort makes the calls blocked in
  other threads return promptly. One thread may drive several communicators (several ranks)
  inside `horaGroupStart`/`horaGroupEnd`. A host stream's work runs on the stream's own thread.
- **Buffers and streams**: see the header's words below and [concepts](concepts.md),
  [CUDA](cuda.md).
"""


def parse(header):
    text = open(header, encoding="utf-8").read()
    top = re.match(r"\s*/\*(.*?)\*/", text, re.S).group(1)
    intro = "\n".join(re.sub(r"^\s*\* ?", "", l) for l in top.strip("\n").split("\n"))
    items = []  # ("section", title) | ("fn", name, comment, prototype)
    comment = None
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^/\* ---- (.*?) -+ \*/$", line)
        if m:
            items.append(("section", m.group(1)))
            comment = None
            i += 1
            continue
        if line.startswith("/*") and not line.startswith("/* ----"):
            buf = [line]
            while "*/" not in buf[-1]:
                i += 1
                buf.append(lines[i])
            body = "\n".join(buf)
            body = re.sub(r"^/\*\s?|\s*\*/$", "", body.strip())
            comment = " ".join(re.sub(r"^\s*\*\s?", "", l).strip() for l in body.split("\n")).strip()
            i += 1
            continue
        m = re.match(r"^(horaResult_t|const char\*|void)\s+(hora\w+)\(", line)
        if m:
            proto = [line]
            while not proto[-1].rstrip().endswith(";"):
                i += 1
                proto.append(lines[i])
            items.append(("fn", m.group(2), comment, "\n".join(proto)))
            comment = None
            i += 1
            continue
        if line.strip() == "" or line.startswith("#") or line.startswith("typedef") or line.startswith("}"):
            if not line.strip() == "":
                comment = None
        i += 1
    return intro, items


def render(root):
    intro, items = parse(os.path.join(root, "include", "hora.h"))
    out = ["# The C API", "",
           "The functions of `include/hora.h`, with the header's own words (this page is made from the",
           "header by `tests/docs/c_api_page.py`; the test `c-api page` fails when it falls behind).",
           "NCCL's names for all of them are in [NCCL's API](nccl.md).", "",
           "## The header's rules", "", "```text", intro, "```", "", SHARED]
    fns = [it[1] for it in items if it[0] == "fn"]
    out += ["## Functions", "", " ".join("`%s`" % f for f in fns), ""]
    for it in items:
        if it[0] == "section":
            out += ["### %s" % it[1][:1].upper() + it[1][1:], ""]
        else:
            _, name, comment, proto = it
            out += ["#### %s" % name, "", "```c", proto, "```", ""]
            if comment:
                out += [comment, ""]
    return "\n".join(out).rstrip("\n") + "\n"


def main():
    args = [a for a in sys.argv[1:] if a != "--check"]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."))
    page = os.path.join(root, "docs", "c-api.md")
    want = render(root)
    if "--check" in sys.argv:
        have = open(page, encoding="utf-8").read() if os.path.exists(page) else ""
        if have != want:
            print("docs/c-api.md differs from include/hora.h: run /usr/bin/python3 tests/docs/c_api_page.py")
            return 1
        print("docs/c-api.md matches include/hora.h (%d functions)" % want.count("\n#### "))
        return 0
    open(page, "w", encoding="utf-8").write(want)
    print("wrote %s" % page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
