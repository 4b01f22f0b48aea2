"""Traces the queries do not state, reported one trace at a time by the per-span code, beside the
queries' figures for every other trace of the same input.

A trace with spans of another instrumentation that its structure rules read (roles.py: an
agent, a model call, a tool execution, or a role the SQL does not state exactly) needs SPANS.md's
structure rules (traces/normalise.py: tasks, steps and attempts inferred from the members' time
order, remote generations split, a foreign agent inside our step made a delegation). Those rules
walk a trace's spans in order and rewrite its tree; they are not said in SQL here. (A trace whose
foreign spans are all leaves, mapped by their roles in the table, stays with the queries.) Such traces are read again where the table was
loaded from (the file lines that hold them, or the store's rows of those trace ids), so each span
keeps everything it had and its source line, and go through the per-span report's own code
(normalise, SpanTree, task_figures), in shares of whole traces (shares.py: one per core); the
engine drops them from its table and computes the rest.
Their tasks join the queries' in the report's order (start, then input order); each input's
reading (conventions, spans per segment, what was left out) is the two parts' sum (readings.py).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from agenttrace.columnar import coverage, roles
from agenttrace.columnar.coverage import FOREIGN
from agenttrace.columnar.load import LINE_STRIDE
from agenttrace.columnar.readings import Seen, trace_starts
from agenttrace.errors import JSONError
from agenttrace.report.figures import TaskAnalysis, agent_roots, orphan_steps, partial_task, task_figures
from agenttrace.report.span_tree import SpanTree
from agenttrace.traces import Reading
from agenttrace.traces.span_records import SpanRecord, break_cycles, checked

ROUTED = "routed"  # the temporary table of the routed traces' ids
MAKE_ROUTED = f"CREATE TEMPORARY TABLE {ROUTED} ENGINE = Memory AS SELECT DISTINCT trace_id FROM spans WHERE {FOREIGN}"
ORDER = f"SELECT trace_id, span_id, i FROM spans WHERE trace_id IN (SELECT trace_id FROM {ROUTED})"
REST = f"SELECT count() FROM spans WHERE trace_id NOT IN (SELECT trace_id FROM {ROUTED})"
DELETE = f"ALTER TABLE spans DELETE WHERE trace_id IN (SELECT trace_id FROM {ROUTED}) SETTINGS mutations_sync = 2"

Order = dict[tuple[str, str], int]  # (trace, span) -> input order `i` (load.py)
Routed = tuple[Order, "list[SpanRecord] | None", list[str], int]  # what `take` found: see there


@dataclass
class FileRange:
    """One loaded file: its spans' input orders run from `first` to `last`."""

    path: Path
    first: int
    last: int


@dataclass
class Traces:
    """The routed traces' figures: whole tasks with their order key, partial tasks, each input's
    reading, and the problems the per-span code words about them (each naming its source line)."""

    tasks: list[tuple[tuple[int, int], TaskAnalysis]] = field(default_factory=list)
    partial: list[TaskAnalysis] = field(default_factory=list)
    readings: dict[str, Reading] = field(default_factory=dict)
    seen: dict[str, Seen] = field(default_factory=dict)  # per input: where each convention and left-out kind came first
    problems: list[str] = field(default_factory=list)
    spans: int = 0
    bytes_back: int = 0  # the engine's rows that named them (their spans come from the files or the store)
    # for a summary: our span tree of them as the table's rows, per batch of traces (shares.py): the
    # rows, and how many spans the reading made (numbered from mapped.SYNTHETIC in each batch)
    rows: list[tuple[list[bytes], int]] = field(default_factory=list)
    workers_peak_mb: float = 0.0  # the largest peak of the processes that read them (shares.py)


def order_of(rows: dict[str, list]) -> Order:
    return {(t, s): i for t, s, i in zip(rows["trace_id"], rows["span_id"], rows["i"], strict=True)}


def file_traces(files: list[FileRange], order: Order, problems: list[str], spans_per_batch: int) -> Iterator[list[SpanRecord]]:
    """The routed traces' spans, read again by the per-span reader from the lines that hold them
    (a line's number in the table is its place among the file's non-blank lines, as the reader
    counts them), in batches of whole traces of about `spans_per_batch` spans: trace by trace in
    the order each trace first appears (as the per-span path's reader hands whole traces on,
    traces/stream.py), each trace's spans in input order. A trace is handed on once all the spans
    the table counted of it are read, so only the traces not yet whole are held. Stops at the
    first problem (the table read these lines otherwise)."""
    from agenttrace.traces.stream import file_lines, line_spans

    sizes = Counter(t for t, _ in order)
    starts = trace_starts(order)
    ranked = sorted(starts, key=starts.__getitem__)
    firsts = [f.first for f in files]  # ascending: each file's spans follow the last one's
    lines: dict[int, set[int]] = {}
    for i in order.values():
        n = bisect_right(firsts, i) - 1
        lines.setdefault(n, set()).add((i - files[n].first) // LINE_STRIDE)
    held: dict[str, list[SpanRecord]] = {}
    up, batch = 0, []  # ranked[up]: the next trace to hand on
    for n, f in enumerate(files):
        wanted = lines.get(n)
        if not wanted:
            continue
        for k, (line_no, line) in enumerate(file_lines(f.path)):
            if k not in wanted:
                continue
            where = f"{f.path}:{line_no}"
            try:
                read = checked(line_spans(line, where, problems), problems)
            except (JSONError, TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
                problems.append(f"{where}: {type(exc).__name__}: {str(exc)[:200]}")  # (the table read it)
            if problems:
                return
            for s in read:
                if s.trace_id not in sizes:
                    continue
                # a span the table did not count, or of a trace handed on already: read otherwise
                if (s.trace_id, s.span_id) not in order or up == len(ranked) or starts[s.trace_id] < starts[ranked[up]]:
                    problems.append(f"{where}: a span of trace {s.trace_id} the table did not count")
                    return
                held.setdefault(s.trace_id, []).append(s)
            while up < len(ranked) and len(held.get(ranked[up], ())) >= sizes[ranked[up]]:
                batch += held.pop(ranked[up])
                up += 1
            if len(batch) >= spans_per_batch:
                break_cycles(batch, problems)
                yield batch
                batch = []
    for t in ranked[up:]:  # (none: every trace's spans were counted)
        batch += held.pop(t, [])
    if batch:
        break_cycles(batch, problems)
        yield batch


def store_spans(store, query, order: Order, problems: list[str]) -> list[SpanRecord]:
    """The routed traces' spans, read again from the store by their ids (traces/clickhouse_read)."""
    from agenttrace.traces.clickhouse_read import read_traces

    starts = trace_starts(order)
    ids = sorted(starts, key=starts.__getitem__)
    return [s for batch in read_traces(store, query, problems, ids=ids) for s in batch]


def task_figures_of(spans: list[SpanRecord], order: Order) -> tuple[Traces, list[str]]:
    """The per-span code's figures of routed traces already mapped (normalise's spans; report/
    build.py's steps), each task keyed for the report's order, and the problems the span tree words."""
    out = Traces()
    tree = SpanTree(spans)
    for root in agent_roots(tree):
        # a task inferred around a lone call is that call's (normalise: "{span}.task")
        i = order.get((root.trace_id, root.span_id), order.get((root.trace_id, root.span_id.split(".")[0]), 0))
        out.tasks.append(((root.start_ns, i), task_figures(tree, root)))
    out.partial = [partial_task(tree, steps) for steps in orphan_steps(tree)]
    return out, tree.problems


def take(engine, batch: bool = False) -> Routed | str | None:
    """The traces the queries do not state (coverage.trace_checks), dropped from the table: their
    input orders, their spans when a store's (read here: its session serves one statement at a
    time; files' are read again by shares.py), the problems met reading them, and the bytes
    that named them. None when there are none; the reason the whole input goes to the
    per-span path when every trace is one (unless the table holds a `batch` of the input)."""
    if not engine.scalar(f"SELECT count() FROM spans WHERE {FOREIGN}"):
        return None
    engine.q(MAKE_ROUTED)
    try:
        if not batch and not engine.scalar(REST):
            return next(reason for reason, sql in coverage.trace_checks() if engine.scalar(sql))
        rows_, back = engine.table(ORDER)
        order = order_of(rows_)
        problems: list[str] = []
        spans = store_spans(engine.store, engine.query, order, problems) if engine.query is not None else None
        engine.q(DELETE)
        engine.q(roles.DROP_ROUTED.format(routed=ROUTED))
    finally:
        engine.drop([ROUTED])
    return order, spans, problems, back


AGAIN = "traces of another instrumentation read again with problems ({problem})"
