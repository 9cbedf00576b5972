#!/usr/bin/env python3
"""Every user-facing message in scope is on the troubleshooting page (docs/troubleshooting.md).

Scope (the page says the same at its top):
  C++, src/comm/bootstrap.cc, src/comm/bootstrap_root.cc, src/comm/launch.cc, src/comm/config.cc (init, rendezvous, launcher
    and configuration), src/base/socket.cc (addresses, interfaces, connections), src/base/wait.cc
    (timeouts), src/core/executor.cc and executor_failure.cc (failures while a call waits, mismatched calls),
    src/comm/comm.cc, src/comm/run.cc, src/comm/call_check.cc and src/comm/link_check.cc (a
    communicator's failure, links, threads, the call check): the message
    of every fail(Errc::..., "format", ...), throw Error(Errc::..., ...) and
    HORA_WARN(subsystem, "format", ...);
  C++, tools/hora_run_*.cc: every printError(...) and usageError(...) (hora-run's refusals and
    reports);
  Python, python/hora/torch/distributed.py and python/hora/torch/_pg_*.py (the torch.distributed
    backend) and python/hora/torch/_engine.py and basics.py (hora.torch's engine and init): the
    message of every `raise SomeError(...)`; python/hora/torch/*.py: every
    HorovodInternalError(...) (hora.torch).

A message is the text of its string literals: adjacent literals are joined; anything else in the
argument (a variable, a call, `+ expr +`, a ternary's condition) and every format specifier
(%d, %s, %zu, %03o, Python's %r and f-string fields) is a placeholder. On the page a placeholder
is written <anything> (`rank <r> (<host>, pid <pid>)`). A message is found when, with leading and
trailing placeholders dropped and runs of placeholders and blanks collapsed, it is part of one of
the page's code spans (`...`) or of one line of its fenced code blocks, likewise normalized.
Messages with no word of three letters (e.g. "%s", which passes on a text made elsewhere) are not
messages of their own and are skipped. ALLOWED lists the internal-only ones, each with why.

usage: check_messages.py SOURCE_ROOT
"""
import ast
import glob
import os
import re
import sys

PH = "\x00"  # a placeholder

# Internal-only messages: never shown unless the library or the rendezvous protocol has a bug
# (or a peer that is not Hora speaks to it). Each is the normalized message, with why.
ALLOWED = {
    "a program reads a stage member's memory where the stage cannot": "the planner chooses the single copy only where the stage can read its members (coll/stage.cc): a bug of this library",
    "call #\x00 of the communicator is no longer in this rank's history": "a rank keeps more announcements than it ever leaves uncompared (call_check.cc's static_assert): a bug of this library",
    "bootstrap round of \x00 bytes exceeds \x00": "a rendezvous round larger than the protocol allows: a bug of this library",
    "\x00 is not in the table of variables": "config.cc asked for a row it does not have: a bug of this library",
    "a program uses shared-stage counters it does not have": "a plan the library built is inconsistent: a bug of this library",
    "a program addresses rank \x00, which has no connection": "a plan the library built is inconsistent: a bug of this library",
    "a shared-stage plan did not run at once": "a plan the library built is inconsistent: a bug of this library",
    "a program copies device memory where its job has no copy engine": "the device path gives every job whose program it added copies to an engine (comm/run.cc): a bug of this library",
    "module \x00 has no attribute \x00": "basics.py's module __getattr__: Python's own error for a misspelt name",
}
# (compared as normalized below)

CPP_FILES = ["src/comm/bootstrap.cc", "src/comm/bootstrap_root.cc", "src/comm/launch.cc", "src/comm/config.cc", "src/base/socket.cc",
             "src/base/wait.cc", "src/core/executor.cc", "src/core/executor_failure.cc", "src/comm/comm.cc", "src/comm/run.cc",
             "src/comm/call_check.cc", "src/comm/link_check.cc"]
CPP_TOOLS_GLOB = "tools/hora_run_*.cc"
# (call, index of the message argument)
CPP_CALLS = [("fail(", 1), ("throw Error(", 1), ("HORA_WARN(", 1), ("printError(", 0), ("usageError(", 0)]
PY_RAISE_FILES = ["python/hora/torch/distributed.py", "python/hora/torch/_engine.py", "python/hora/torch/basics.py"]
PY_RAISE_GLOB = "python/hora/torch/_pg_*.py"
PY_CALL_GLOB = "python/hora/torch/*.py"
PY_CALLS = {"HorovodInternalError"}

SPEC = re.compile(r"%(%|[-+ #0']*(\d+|\*)?(\.(\d+|\*))?(hh|h|ll|l|z|j|t|L)?[diouxXeEfFgGcspar])")
ESCAPES = {"n": "\n", "t": "\t", '"': '"', "'": "'", "\\": "\\", "0": "\0"}


def specs(text):
    return SPEC.sub(lambda m: "%" if m.group(1) == "%" else PH, text)


def normalize(text):
    text = re.sub(r"\s+", " ", text)
    text = re.sub("[ %s]*%s[ %s]*" % (PH, PH, PH), lambda m: (" " if m.group(0).startswith(" ") else "") + PH +
                  (" " if m.group(0).endswith(" ") else ""), text)
    return text.strip(" " + PH)


# ---- C++ ----

def cpp_args(src, start):
    """The top-level arguments of the call whose '(' is at src[start-1], as lists of
    ('lit', text) / ('code', text) pieces. A literal inside another call's parentheses
    (count(n, "rank")) is code; one inside grouping parentheses (a ternary's) is text."""
    args, pieces, depth, i = [], [], 0, start
    calls = []  # for each open parenthesis: whether it is a call's
    code = ""
    while i < len(src):
        c = src[i]
        if c == '"':
            j, text = i + 1, ""
            while src[j] != '"':
                if src[j] == "\\":
                    text += ESCAPES.get(src[j + 1], src[j + 1])
                    j += 2
                else:
                    text += src[j]
                    j += 1
            if any(calls):
                code += src[i:j + 1]
            else:
                if code.strip():
                    pieces.append(("code", code))
                code = ""
                pieces.append(("lit", text))
            i = j + 1
            continue
        if c == "'":  # a character literal
            j = src.index("'", i + 2 if src[i + 1] == "\\" else i + 1)
            code += src[i:j + 1]
            i = j + 1
            continue
        if c in "([{":
            depth += 1
            calls.append(c == "(" and bool(re.search(r"[\w>]\s*$", code)))
        elif c in ")]}":
            if depth == 0:
                if code.strip():
                    pieces.append(("code", code))
                args.append(pieces)
                return args
            depth -= 1
            calls.pop()
        elif c == "," and depth == 0:
            if code.strip():
                pieces.append(("code", code))
            args.append(pieces)
            pieces, code = [], ""
            i += 1
            continue
        code += c
        i += 1
    raise ValueError("unbalanced call")


def pieces_texts(pieces, format_specs):
    """The message(s) of an argument: a ternary's ':' between two literals parts alternatives."""
    outs, out = [], ""
    for kind, text in pieces:
        if kind == "code" and text.strip() == ":":
            outs.append(out)
            out = ""
            continue
        out += (specs(text) if format_specs else text) if kind == "lit" else PH
    return outs + [out]


def cpp_messages(root):
    files = [os.path.join(root, f) for f in CPP_FILES] + sorted(glob.glob(os.path.join(root, CPP_TOOLS_GLOB)))
    out = []
    for path in files:
        src = open(path, encoding="utf-8").read()
        # std::string("text") is the text itself.
        src = re.sub(r'std::string\(("(?:[^"\\\\]|\\\\.)*")\)', r"\1", src)
        for call, index in CPP_CALLS:
            for m in re.finditer(r"(?<![\w.>:])" + re.escape(call), src):
                if call == "fail(" and not src.startswith("Errc::", m.end()):
                    continue
                if call in ("printError(", "usageError(") and re.match(r"\s*(void|Options)\s", src[src.rfind("\n", 0, m.start()) + 1:m.start()]):
                    continue  # the definition
                args = cpp_args(src, m.end())
                if len(args) <= index:
                    continue
                line = src.count("\n", 0, m.start()) + 1
                # printError/usageError take a ready text (no format); the others a printf format.
                fmt = call not in ("printError(", "usageError(")
                for text in pieces_texts(args[index], fmt):
                    out.append((normalize(text), "%s:%d" % (os.path.relpath(path, root), line)))
    return out


# ---- Python ----

def py_text(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return specs(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else PH for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return py_text(node.left)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return py_text(node.left) + py_text(node.right)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
            and isinstance(node.func.value, ast.Constant) and isinstance(node.func.value.value, str)):
        return re.sub(r"\{[^{}]*\}", PH, node.func.value.value)
    return PH


def py_messages(root):
    out = []
    raise_files = [os.path.join(root, f) for f in PY_RAISE_FILES] + sorted(glob.glob(os.path.join(root, PY_RAISE_GLOB)))
    for path in sorted(set(raise_files) | set(glob.glob(os.path.join(root, PY_CALL_GLOB)))):
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        for node in ast.walk(tree):
            call = None
            if path in raise_files and isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                call = node.exc
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PY_CALLS):
                call = node
            if call is None or not call.args:
                continue
            out.append((normalize(py_text(call.args[0])), "%s:%d" % (os.path.relpath(path, root), call.lineno)))
    return out


# ---- the page ----

def page_spans(text):
    spans = []
    fenced = re.compile(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```", re.M | re.S)
    for m in fenced.finditer(text):
        spans += m.group(1).split("\n")
    rest = fenced.sub("", text)
    spans += re.findall(r"`([^`\n]+)`", rest)
    return [normalize(re.sub(r"<[^<>\n]+>", PH, s)) for s in spans]


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    page = open(os.path.join(root, "docs", "troubleshooting.md"), encoding="utf-8").read()
    spans = page_spans(page)
    allowed = {normalize(k): why for k, why in ALLOWED.items()}
    messages = cpp_messages(root) + py_messages(root)
    missing, checked = [], 0
    for msg, where in messages:
        if not re.search(r"[A-Za-z]{3}", msg) or msg in allowed:
            continue
        checked += 1
        if not any(msg in s for s in spans):
            missing.append((msg, where))
    # An allowed message the code no longer has is a stale entry.
    stale = sorted(set(allowed) - set(msg for msg, _ in messages))
    for msg in stale:
        print("STALE allow-list entry (no such message in scope any more): %s" % msg.replace(PH, "<...>"))
        missing.append((msg, "ALLOWED"))
    print("%d messages in scope, %d checked (the rest have no text of their own or are internal)" %
          (len(messages), checked))
    for msg, where in missing:
        print("MISSING from docs/troubleshooting.md: %s  (%s)" % (msg.replace(PH, "<...>"), where))
    if checked < 50:  # the extraction itself broke
        print("FAIL: too few messages found; check the scope's files and calls")
        return 1
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
