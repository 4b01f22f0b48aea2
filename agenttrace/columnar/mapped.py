"""Traces of another instrumentation put back into the span table as ours, for a summary made in
the engine (issue 32): the per-span code reads them (per_trace.py: the foreign conventions'
mapping and the structure rules, which are not said in SQL here) and hands back our span tree,
segments and inferred steps and attempts included; those spans join `spans` and the queries
compute every trace's figures, theirs too, so no task's figures come back to Python.

Each span keeps its input order `i`; a span the reading made (a task around a lone call, a step,
an attempt, a part of a remote call) takes one above every input's (`SYNTHETIC`, then one more
each), as the per-span path appends them after the input's spans. Read in batches of whole traces
(shares.py), a batch's made spans follow the batch before's: those of one kind, and those of one
trace, keep the per-span path's order, and a figure compares no others. Values are written as
the file loader types them (load.py), so a figure reads them as it reads ours.

A span keeps only the attributes the summary's queries read (summary.read_keys). The others are
mostly what other instrumentations record of the content (prompts, messages, tool arguments and
results; ~2 KB a span in the benchmark's framework traces), which no figure reads. Kept, they
cost a summary of 1.31M spans, 308k of them theirs, 11-15 s of 58-63 s and 2 GB of its 4.6 GB
peak (BENCHMARKS.md, issue 32's thirteenth part).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from typing import Any

from agenttrace import semconv as sc
from agenttrace.columnar.per_trace import Traces
from agenttrace.columnar.summary import read_keys
from agenttrace.traces.span_records import SpanRecord

STAGED = "mapped_in"  # the spans as they come from Python, before their hashes are taken
SYNTHETIC = 1 << 63  # the first input order of a span the reading made (above every input's)
_COLUMNS = ("i UInt64, trace_id String, parent_id String, span_id String, name String, kind String, status String, "
            "start_ns Int64, end_ns Int64, run_label String, run_id String, segment String, scope String, "
            "attrs Map(String, String), rounds Array(Tuple(Int64, Int64, Float64, Float64, Int64, Int64))")
MAKE_STAGED = f"CREATE TEMPORARY TABLE {STAGED} ({_COLUMNS}) ENGINE = Memory"
# the columns of `spans` (load.py), in its order
# (`offset`: added to the input order of each span the reading made: a share's are numbered from
# SYNTHETIC, shares.py)
INSERT = """INSERT INTO spans SELECT if(i >= {made}, i + {offset}, i), cityHash64(trace_id, span_id),
  cityHash64(trace_id, parent_id), trace_id, span_id, name, kind, status, start_ns, end_ns, run_label, run_id, segment,
  scope, attrs, rounds, false FROM {staged}"""
_KINDS = {"PRODUCER": "PRODUCER", "CONSUMER": "CONSUMER", "SERVER": "SERVER"}  # load.py's: every other is OTHER
_BATCH = 5_000  # spans per insert


def typed(key: str, value: Any) -> str:
    """A value as load.py's typed text (s text, i integer, d double, b1/b0 boolean, a array and
    its JSON)."""
    if isinstance(value, bool):
        return "b1" if value else "b0"
    if isinstance(value, int):
        return f"i{value}"
    if isinstance(value, float):
        return f"d{value!r}" if math.isfinite(value) else f"d{value}"
    if isinstance(value, str):
        return f"s{value}"
    if isinstance(value, (list, tuple)):  # kept whole, unlike a file's (what was inferred, and why not)
        return "a" + json.dumps(list(value))
    return "a"


def _number(value: Any, integer: bool) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0
    return int(value) if integer else float(value)


def _rounds(span: SpanRecord) -> list[list[int | float]]:
    """The span's speculate.round events as load.py's tuples (a missing value: 0)."""
    keys = (sc.ROUND_DRAFTED, sc.ROUND_ACCEPTED, sc.ROUND_DRAFT_S, sc.ROUND_VERIFY_S, sc.ROUND_K, sc.ROUND_TREE_DEPTH)
    ints = (True, True, False, False, True, True)
    return [[_number(e.get(k), n) for k, n in zip(keys, ints, strict=True)]
            for e in span.events if e.name == sc.EVENT_SPECULATE_ROUND]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def rows(spans: Sequence[SpanRecord], order: dict[tuple[str, str], int], next_synthetic: int) -> tuple[list[bytes], int]:
    """The spans as JSONEachRow lines of STAGED (their attributes the queries read), and the input
    order the next made span takes."""
    out, keys = [], read_keys()
    for s in spans:
        i = order.get((s.trace_id, s.span_id))
        if i is None:
            i, next_synthetic = next_synthetic, next_synthetic + 1
        row = {"i": i, "trace_id": s.trace_id, "parent_id": s.parent_id or "", "span_id": s.span_id, "name": s.name,
               "kind": _KINDS.get(s.kind, "OTHER"), "status": s.status, "start_ns": s.start_ns, "end_ns": s.end_ns,
               "run_label": _text(s.resource.get(sc.RUN_LABEL)), "run_id": _text(s.resource.get(sc.RUN_ID)),
               "segment": s.segment or "", "scope": s.scope,
               "attrs": {k: typed(k, v) for k, v in s.attributes.items() if k in keys}, "rounds": _rounds(s)}
        out.append(json.dumps(row).encode())
    return out, next_synthetic


def batches(lines: list[bytes]) -> Iterator[list[bytes]]:
    for n in range(0, len(lines), _BATCH):
        yield lines[n:n + _BATCH]


BESIDE = "beside traces of another instrumentation (a summary from the rows)"  # why such a summary is not made here


def unsaid(spans: Sequence[SpanRecord]) -> str | None:
    """Why the queries would count a task's missing figures otherwise than the per-span code: the
    reading said one is missing that the task has (steps inferred up to one it could not place),
    where the queries count a figure missing only when it is absent. None: no such task."""
    for s in spans:
        said = s.attributes.get(sc.NOT_INFERRED) if s.segment == sc.Segment.AGENT else None
        if not isinstance(said, (list, tuple)):
            continue
        figures = {str(x).partition(": ")[0] for x in said}
        if ("steps" in figures and s.attributes.get(sc.STEPS)) or ("outcome" in figures and sc.TASK_OUTCOME in s.attributes):
            return f"a task of another instrumentation whose reading left some figures out ({s.name!r})"
    return None


def put_back(engine, traces: Traces) -> None:
    """The routed traces' span tree (their rows, per batch of traces: shares.py) into `engine`'s
    `spans`: the queries compute their figures. The spans a batch's reading made take the input
    orders after the last batch's (engine.next_synthetic), in the batch's order."""
    engine.drop([STAGED])
    engine.q(MAKE_STAGED)
    for lines, made in traces.rows:
        for batch in batches(lines):
            engine.insert_rows(STAGED, batch)
        engine.q(INSERT.format(made=SYNTHETIC, offset=engine.next_synthetic - SYNTHETIC, staged=STAGED))
        engine.q(f"TRUNCATE TABLE {STAGED}")
        engine.next_synthetic += made
    engine.drop([STAGED])
    traces.rows = []
