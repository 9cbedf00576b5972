"""The timeline: a Chrome trace (the JSON array-of-events format that chrome://tracing and
Perfetto open) of what the engine did with each tensor.

Rank 0 writes it, when HORA_TIMELINE=FILE is set at hvd.init() or between
hvd.start_timeline(FILE) and hvd.stop_timeline(). Each tensor name gets its own row (a "thread"
of the trace); its events are QUEUE (from the call until every rank had asked for it), then for
an allreduce fused with others FUSE (the copy into the fusion buffer), ALLREDUCE (the library
call, shared by the whole fused batch) and UNPACK (the copy out), or for any other operation one
event named after it (ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER). With
mark_cycles (or HORA_TIMELINE_MARK_CYCLES=1) every engine round that started work leaves an
instant event CYCLE_START. The file is valid JSON once the timeline is stopped (stop_timeline,
shutdown, or process exit through hvd.shutdown).
"""
import json
import os
import threading
import time

__all__ = ["Timeline"]


class Timeline:
    """Writes trace events to one file, one complete ("X") event per phase."""

    def __init__(self, path, mark_cycles=False, pid=0):
        self.path = os.fspath(path)
        self.mark_cycles = bool(mark_cycles)
        self._pid = pid
        self._lock = threading.Lock()
        self._f = open(self.path, "w", encoding="utf-8")
        self._f.write("[\n")
        self._first = True
        self._t0 = time.perf_counter()
        self._rows = {}
        self._emit({"name": "process_name", "ph": "M", "pid": pid,
                    "args": {"name": "hora.torch rank %d" % pid}})

    def _us(self, t):
        return round((t - self._t0) * 1e6, 3)

    def _emit(self, event):
        text = json.dumps(event, separators=(",", ":"))
        if self._first:
            self._f.write(text)
            self._first = False
        else:
            self._f.write(",\n" + text)

    def _row(self, name):
        tid = self._rows.get(name)
        if tid is None:
            tid = self._rows[name] = len(self._rows) + 1
            self._emit({"name": "thread_name", "ph": "M", "pid": self._pid, "tid": tid,
                        "args": {"name": name}})
            self._emit({"name": "thread_sort_index", "ph": "M", "pid": self._pid, "tid": tid,
                        "args": {"sort_index": tid}})
        return tid

    def complete(self, tensor_name, phase, t_start, t_end, args=None):
        """One phase of one tensor, between two time.perf_counter() readings."""
        with self._lock:
            if self._f is None:
                return
            ev = {"name": phase, "ph": "X", "pid": self._pid, "tid": self._row(tensor_name),
                  "ts": self._us(t_start), "dur": max(0.0, round((t_end - t_start) * 1e6, 3))}
            if args:
                ev["args"] = args
            self._emit(ev)

    def instant(self, label):
        with self._lock:
            if self._f is None:
                return
            self._emit({"name": label, "ph": "i", "s": "g", "pid": self._pid, "tid": 0,
                        "ts": self._us(time.perf_counter())})

    def close(self):
        with self._lock:
            if self._f is None:
                return
            f, self._f = self._f, None
            f.write("\n]\n")
            f.close()

    @property
    def closed(self):
        return self._f is None
