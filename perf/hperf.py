"""Shared helpers of perf/anchors2json, perf/plot and perf/compare: the JSON schema that
the benchmark tools write with -J (described in perf/common.h), the parser of the peers'
text tables (../shared/bench/anchors.sh) and the median of several runs.

Standard library only: these scripts run under Debian's /usr/bin/python3 with nothing
installed (perf/plot alone needs python3-matplotlib).
"""
import json
import math
import statistics

SCHEMA = "hora-perf/1"

# The measurements of a row: medians are taken of these. "wrong" fields are not among
# them: over several runs the worst one is kept, so that one bad run is never hidden.
MEASURES = ("time_us", "algbw", "busbw", "inplace_time_us", "inplace_algbw", "inplace_busbw")
WRONGS = ("wrong", "inplace_wrong")
TOP_FIELDS = ("schema", "tool", "collective", "library", "nranks", "mode", "dtype", "op", "root", "rows")

# nccl-tests' bus-bandwidth factors, as the tools and ../shared/bench/common.h use them.
BUS_FACTORS = {
    "allreduce": lambda n: 2.0 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
}


# Collectives whose call takes one rank's block of an n-block vector (the size is the vector's).
BLOCK_COLLECTIVES = ("allgather", "reducescatter", "gather", "scatter")


def bus_factor(collective, nranks):
    return BUS_FACTORS.get(collective, lambda n: 1.0)(nranks)


def finite(v):
    """v as a float, or None where it is missing or not a finite number."""
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def human_size(nbytes):
    """8 -> "8B", 1024 -> "1K", 3 << 19 -> "1.5M": the plot's and the table's labels."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if nbytes >= 1 << shift:
            v = nbytes / (1 << shift)
            return f"{v:g}{unit}" if v == int(v) else f"{v:.1f}{unit}"
    return f"{nbytes}B"


def validate(doc, where="JSON"):
    """Raises ValueError where doc is not a document of the schema."""
    missing = [f for f in TOP_FIELDS if f not in doc]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}")
    if doc["schema"] != SCHEMA:
        raise ValueError(f"{where}: schema {doc['schema']!r}, expected {SCHEMA!r}")
    if doc["mode"] not in ("threads", "processes"):
        raise ValueError(f"{where}: mode {doc['mode']!r}")
    for i, row in enumerate(doc["rows"]):
        for f in ("size", "count", "time_us", "algbw", "busbw", "wrong"):
            if f not in row:
                raise ValueError(f"{where}: row {i} has no {f}")


def load(path):
    with open(path) as f:
        doc = json.load(f)
    validate(doc, path)
    return doc


def write(doc, path):
    """As the tools write it: one line per top-level field, one line per row."""
    validate(doc, path)

    def short(v):  # 10 significant digits, as the tools print them
        return float(f"{v:.10g}") if isinstance(v, float) and math.isfinite(v) else v

    lines = [f"  {json.dumps(k)}: {json.dumps(short(v))}" for k, v in doc.items() if k != "rows"]
    rows = ",\n".join(f"    {json.dumps({k: short(v) for k, v in r.items()})}" for r in doc["rows"])
    lines.append(f'  "rows": [\n{rows}\n  ]')
    with open(path, "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")


def summarise(doc):
    """Sets wrong_total and avg_busbw from the rows, as the tools' summary lines."""
    wrongs = [r[w] for r in doc["rows"] for w in WRONGS if r.get(w) is not None]
    bws = [r[b] for r in doc["rows"] for b in ("busbw", "inplace_busbw") if finite(r.get(b)) is not None]
    doc["wrong_total"] = sum(wrongs) if wrongs else None
    doc["avg_busbw"] = statistics.mean(bws) if bws else None
    return doc


def median_doc(docs):
    """One document from several runs of the same test: per size, the median of each
    measurement and the worst "wrong". Sizes missing from some runs keep the others'."""
    out = {k: v for k, v in docs[0].items() if k != "rows"}
    by_key = {}
    for doc in docs:
        for row in doc["rows"]:
            key = (row["size"], row.get("dtype"), row.get("op"), row.get("root"))
            by_key.setdefault(key, []).append(row)
    rows = []
    for key, group in by_key.items():
        row = dict(group[0])
        for f in MEASURES:
            vals = [finite(r.get(f)) for r in group]
            vals = [v for v in vals if v is not None]
            if f in row:
                row[f] = statistics.median(vals) if vals else None
        for f in WRONGS:
            vals = [r.get(f) for r in group if r.get(f) is not None]
            if f in row:
                row[f] = max(vals) if vals else None
        rows.append(row)
    out["rows"] = sorted(rows, key=lambda r: (r["size"], str(r.get("dtype")), str(r.get("op")), r.get("root") or 0))
    out["rounds"] = len(docs)
    return summarise(out)


# ---- the peers' text (../shared/bench: anchors.sh, mpi_bench, gloo_bench) -------------

def _peer_doc(library, header):
    """The document of one peer table, from its "## <peer>" and "# peer: ..." lines."""
    # "# peer: mpi-allreduce  nranks: 2" or "# peer: gloo-allreduce-ring  nranks: 4"
    fields = header.split()
    name, nranks = fields[2], int(fields[4])
    tool, collective = name.split("-")[:2]
    return {
        "schema": SCHEMA,
        "tool": f"{tool}_bench",
        "collective": collective,
        "library": library,
        "version": None,
        "nranks": nranks,
        "mode": "processes",
        "dtype": "float",
        "op": "sum" if collective in ("allreduce", "reduce", "reducescatter") else "none",
        # the peers' rooted collectives are from (or to) rank 0
        "root": 0 if collective in ("broadcast", "reduce", "gather", "scatter") else -1,
        "params": {},
        "rows": [],
    }


def parse_anchors(text):
    """The tables of anchors.sh's output, one document each, in order. Lines that are
    not part of a table (the machine's floors, mpirun's notices) are passed over."""
    docs, library, doc = [], None, None
    for line in text.splitlines():
        if line.startswith("## "):
            library, doc = line[3:].strip(), None
        elif line.startswith("# peer:") and library:
            doc = _peer_doc(library, line)
            docs.append(doc)
        elif doc is not None:
            f = line.split()
            # size count type redop time_us algbw busbw #wrong
            if len(f) == 8 and f[0].isdigit() and f[1].isdigit():
                size, count, time_us = int(f[0]), int(f[1]), finite(f[4])
                if doc["collective"] in BLOCK_COLLECTIVES:
                    count //= doc["nranks"]  # the peers print the whole vector; the call takes a block
                # Bandwidths again from size and time: the text rounds them to 1 MB/s.
                algbw = size / time_us / 1e3 if time_us else finite(f[5])
                busbw = algbw * bus_factor(doc["collective"], doc["nranks"]) if algbw is not None else None
                doc["rows"].append({
                    "size": size, "count": count, "dtype": f[2], "op": f[3], "root": doc["root"],
                    "time_us": time_us, "algbw": algbw, "busbw": busbw, "wrong": int(f[7]),
                })
    return [summarise(d) for d in docs]
