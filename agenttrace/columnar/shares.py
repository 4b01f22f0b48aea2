"""Traces of another instrumentation read by the per-span code (per_trace.py), in shares of whole
traces, one per core: for a summary made in the engine, into our span tree as the table's rows
(mapped.py puts them back); for a report, into their tasks' figures.

Reading them is Python, one span at a time (the line read again, the conventions' mapping, the
structure rules, then the table's row or the figures): about 130 us a span of the benchmark's
framework traces, 6.5 s for 51k spans on one core. A share is a run of whole traces in the order
they first appear in the input, so the shares' readings, problems, tasks and made spans, one
after another, are what one reading of all of them gives (`merged`). Each share is read by a
Python process of its own, started as `python -m agenttrace.columnar.shares`, which reads its
traces' lines from the files itself and sends back only its rows or figures and its readings
(pickled, in a file of a temporary folder); for a summary, whose queries wait for them, the
first share is read in this process meanwhile. A process that fails (killed, or out of memory)
costs nothing: its share is read here instead; one still running when this process exits (an
interrupted report) is killed.

A store's routed traces are read by its session in this process (per_trace.take), so they are
one share: the workers would have to be sent every span.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from agenttrace.columnar.mapped import SYNTHETIC, rows, unsaid
from agenttrace.columnar.per_trace import AGAIN, FileRange, Order, Routed, Traces, file_traces, take, task_figures_of
from agenttrace.columnar.readings import FirstSeen, Seen, merged_theirs, trace_starts
from agenttrace.traces import Reading, normalise
from agenttrace.traces.span_records import SpanRecord
from agenttrace.traces.stream import no_gc

# A share holds at least this many spans (fewer: fewer shares, one below twice this): a worker's
# start (its imports) costs ~0.75 s, what ~6,000 spans cost to read.
MIN_SPANS = 10_000
# Nor more shares than this: each worker scans the files' lines again and holds a batch of spans.
MAX_PROCESSES = 8
# A share's traces are read this many spans at a time (whole traces): each span of theirs holds
# ~10 KB while it is read (every attribute, content included), their rows ~0.3 KB.
SPANS_PER_BATCH = 20_000


@dataclass
class Share:
    """What reading one share gave: for a summary its rows for the table, a batch of traces at a
    time, each with how many spans the reading made (numbered from SYNTHETIC in each), and why
    the queries would count its tasks otherwise
    (mapped.unsaid); for a report its tasks' figures (per_trace.Traces: keyed tasks, partial ones);
    each input's reading and where each convention was first met; the problems worded (the remote
    calls', the structure's, the span tree's); its spans; or the problems met reading its lines
    again (`again`: then nothing else)."""

    rows: list[tuple[list[bytes], int]] = field(default_factory=list)
    unsaid: str | None = None
    figures: Traces | None = None
    readings: dict[str, Reading] = field(default_factory=dict)
    seen: dict[str, Seen] = field(default_factory=dict)
    remote: list[str] = field(default_factory=list)
    structure: list[str] = field(default_factory=list)
    tree: list[str] = field(default_factory=list)
    spans: int = 0
    again: list[str] = field(default_factory=list)
    peak_mb: float = 0.0  # a worker process's peak resident memory

    def add(self, part: Share) -> None:
        """`part`, the traces after this one's, added: as one reading of both gives them (rows and
        tasks after these, each input's reading and first places merged in order:
        readings.merged_theirs, each kind of problem after this one's)."""
        self.rows += part.rows
        self.unsaid = self.unsaid or part.unsaid
        if part.figures is not None:
            self.figures = self.figures or Traces()
            self.figures.tasks += part.figures.tasks
            self.figures.partial += part.figures.partial
        for source, reading in part.readings.items():
            had = (self.readings[source], self.seen.get(source) or Seen()) if source in self.readings else None
            self.readings[source], self.seen[source] = merged_theirs(had, (reading, part.seen.get(source) or Seen()))
        self.remote += part.remote
        self.structure += part.structure
        self.tree += part.tree
        self.spans += part.spans
        self.peak_mb = max(self.peak_mb, part.peak_mb)


def split(order: Order, n: int) -> list[Order]:
    """`order`'s traces in `n` runs of about equal spans, in the order the traces first appear."""
    starts = trace_starts(order)
    sizes = Counter(t for t, _ in order)
    done = 0
    group: dict[str, int] = {}
    for t in sorted(starts, key=starts.__getitem__):  # a trace goes where its middle span falls
        group[t] = min(n - 1, int((done + sizes[t] / 2) * n / len(order)))
        done += sizes[t]
    out: list[Order] = [{} for _ in range(n)]
    for key, i in order.items():
        out[group[key[0]]][key] = i
    return [o for o in out if o]


@no_gc()
def span_share(spans: list[SpanRecord], order: Order, figures: bool, starts: dict[str, int] | None = None) -> Share:
    """One share read from its spans: mapped (normalise, each convention's first place noted;
    `starts`: each trace's first input order, when known), then its tasks' figures (`figures`)
    or the table's rows."""
    firsts = FirstSeen(order, starts)
    done = normalise(spans, firsts)
    share = Share(readings={r.source: r for r in done.readings}, seen=firsts.seen, remote=done.problems[:done.remote],
                  structure=done.problems[done.remote:], spans=len(spans))
    if figures:
        share.figures, share.tree = task_figures_of(done.spans, order)
    else:
        lines, top = rows(done.spans, order, SYNTHETIC)
        share.rows, share.unsaid = [(lines, top - SYNTHETIC)], unsaid(done.spans)
    return share


@no_gc()
def file_share(files: list[FileRange], order: Order, figures: bool) -> Share:
    """One share read from the lines of `files` that hold its traces, a batch of whole traces at a
    time (per_trace.file_traces): only a batch's spans are held, then its rows or figures."""
    again: list[str] = []
    share, starts = Share(), trace_starts(order)
    for spans in file_traces(files, order, again, SPANS_PER_BATCH):
        share.add(span_share(spans, order, figures, starts))
    return Share(again=again) if again else share


def _command() -> tuple[list[str], dict[str, str]]:
    """A worker's command line, and its environment: this agenttrace importable first."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return [sys.executable, "-m", __name__], {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


# Worker processes running now: killed when this process exits (an interrupted report leaves none).
_RUNNING: set[subprocess.Popen] = set()


@atexit.register
def _stop_workers() -> None:
    for proc in list(_RUNNING):
        proc.kill()


def _start(files: list[FileRange], order: Order, figures: bool, task: Path) -> subprocess.Popen | None:
    """A worker process reading one share (its task pickled to `task`, its Share to `task`.out);
    None when it cannot be started."""
    task.write_bytes(pickle.dumps((files, order, figures), pickle.HIGHEST_PROTOCOL))
    command, env = _command()
    try:
        proc = subprocess.Popen([*command, str(task), f"{task}.out"], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    _RUNNING.add(proc)
    return proc


def _finish(proc: subprocess.Popen | None, task: Path) -> Share | None:
    """The share a worker read; None when it failed (the caller reads the share)."""
    if proc is None:
        return None
    try:
        code = proc.wait()
    finally:
        _RUNNING.discard(proc)
    try:
        share = pickle.loads(Path(f"{task}.out").read_bytes()) if code == 0 else None
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
        return None
    return share if isinstance(share, Share) else None


def _cores() -> int:
    """The cores this process may run on (a container's, where it is bound to some)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def count(processes: int, spans: int) -> int:
    """How many shares `spans` routed spans make with up to `processes` (read_files)."""
    return max(1, min(processes, _cores(), MAX_PROCESSES, spans // max(MIN_SPANS, 1)))


def read_files(files: list[FileRange], order: Order, processes: int, figures: bool) -> list[Share]:
    """The routed traces of `files`, in up to `processes` shares (one, read here, when they are few
    or `processes` is 1; never more than the cores this process may use); for a summary (not
    `figures`) the first share is read here while the workers read theirs. Interrupted, the
    workers are killed."""
    n = count(processes, len(order))
    parts = split(order, n) if n > 1 else [order]
    if len(parts) == 1:
        return [file_share(files, order, figures)]
    here = 0 if figures else 1
    with tempfile.TemporaryDirectory(prefix="agenttrace-shares-") as folder:
        tasks = [Path(folder) / f"share-{k}" for k in range(len(parts) - here)]
        procs = [_start(files, part, figures, task) for part, task in zip(parts[here:], tasks, strict=True)]
        try:
            first = [] if figures else [file_share(files, parts[0], figures)]
            others = [_finish(proc, task) for proc, task in zip(procs, tasks, strict=True)]
        except BaseException:
            for proc in procs:
                if proc is not None:
                    proc.kill()
                    proc.wait()
                    _RUNNING.discard(proc)
            raise
    return [*first, *(s if s is not None else file_share(files, p, figures)
                      for s, p in zip(others, parts[here:], strict=True))]


def merged(shares: list[Share]) -> Traces | str:
    """The shares as one reading of all their traces (Share.add), or the reason the whole input
    goes to the per-span path."""
    again = next((s.again for s in shares if s.again), None)
    if again:
        return AGAIN.format(problem=again[0][:200])
    why = next((s.unsaid for s in shares if s.unsaid), None)
    if why:
        return why
    total = Share()
    for s in shares:
        total.add(s)
    out = total.figures or Traces()
    out.rows, out.readings, out.seen, out.spans = total.rows, total.readings, total.seen, total.spans
    out.problems, out.workers_peak_mb = [*total.remote, *total.structure, *total.tree], total.peak_mb
    return out


def _read(engine, routed: Routed, figures: bool) -> Traces | str:
    """The routed traces `take` found, read in shares and merged; the reason the whole input goes to
    the per-span path when reading them again words a problem."""
    order, spans, problems, back = routed
    if problems:  # the store's rows of them read otherwise than the table's
        return AGAIN.format(problem=problems[0][:200])
    shares = ([span_share(spans, order, figures)] if spans is not None else
              read_files(engine.files, order, engine.threads, figures))
    traces = merged(shares)
    if isinstance(traces, Traces):
        traces.bytes_back = back
    return traces


def route(engine, batch: bool = False) -> Traces | str | None:
    """For a summary: the traces the queries do not state, dropped from `engine`'s table
    (per_trace.take) and read into our span tree as the table's rows, to be put back
    (mapped.put_back) once the table's own readings are read (Engine.inputs); or the reason the
    whole input goes to the per-span path (per_trace.take: `batch`). None when there are none."""
    routed = take(engine, batch)
    if routed is None or isinstance(routed, str):
        return routed
    return _read(engine, routed, False)


def route_figures(engine) -> Future | str | None:
    """For a report: the routed traces (`take`) read into their tasks' figures by a thread of
    their own (its shares by worker processes) while the queries run (the engine lets go of the
    GIL): a Future of their Traces, or of the reason the whole input goes to the per-span path.
    None when there are none; the reason, straight away, when every trace is one."""
    routed = take(engine)
    if routed is None or isinstance(routed, str):
        return routed
    future: Future = Future()

    def read() -> None:
        try:
            future.set_result(_read(engine, routed, True))
        except Exception as exc:  # noqa: BLE001 - the caller's result() raises it
            future.set_exception(exc)

    # a daemon: a report interrupted meanwhile exits without waiting for it (its workers are killed)
    threading.Thread(target=read, name="agenttrace-per-trace", daemon=True).start()
    return future


def _peak_mb() -> float:
    """This process's peak resident memory since it started its program (/proc's VmHWM: the
    rusage figure keeps the parent's from before the exec)."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 0.0


def _main() -> None:
    """A worker: (files, order, figures) pickled in the file its first argument names, its Share
    pickled into the one its second names."""
    files, order, figures = pickle.loads(Path(sys.argv[1]).read_bytes())
    share = file_share(files, order, figures)
    share.peak_mb = _peak_mb()
    Path(sys.argv[2]).write_bytes(pickle.dumps(share, pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":  # run as a script, this module is __main__: its Share pickled under its own name
    from agenttrace.columnar.shares import _main as main

    main()
