"""A summary of many files in batches (issue 32: 10M spans in bounded memory): each batch of
whole files is loaded, its tree and value tables made (`summary_sql.statements`), the values kept
in tables of their own (`y_`) and everything else dropped before the next batch, so the engine
holds one batch's spans at a time plus the values (a few floats per task, step and generation).
The aggregates then run over the kept values, as over one batch's: every key that orders them
(start, then input order) holds across batches, so the figures are those of one table.

A trace must lie in one batch (its figures come from its own spans): a trace met in two batches,
or a batch that needs the rows (summary.prepare's reasons, or tasks the per-span code makes), hands
the input to the per-span path with the reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from agenttrace.columnar import coverage, summary, summary_sql, tree
from agenttrace.columnar.engine import Engine, Outcome
from agenttrace.report.inputs import InputFigures

BATCH_BYTES = 400_000_000  # files are grouped up to about this much (about half a million spans)
KEPT = ("tv", "sr", "gv")  # the value tables the aggregates read
_CREATED = re.compile(r"CREATE TEMPORARY TABLE (\w+)")


def batches(files: list[Path], limit: int) -> list[list[Path]]:
    """Consecutive files grouped while their bytes stay within `limit` (a larger file alone)."""
    out: list[list[Path]] = []
    size = 0
    for f in files:
        n = f.stat().st_size
        if out and size + n <= limit:
            out[-1].append(f)
            size += n
        else:
            out.append([f])
            size = n
    return out


def _made() -> list[str]:
    """Every table a batch makes, the span table last."""
    return [m for sql in (*tree.statements(), *summary_sql.statements()) for m in _CREATED.findall(sql)] + ["spans"]


def summary_in_batches(files: list[Path], sources: list[str], *, threads: int | None, noted: bool) -> Outcome | None:
    """The summary of `files` batch by batch; None when they make one batch (the one-table path
    then reads them, as it does any input)."""
    groups = batches(files, BATCH_BYTES)
    if len(groups) < 2:
        return None
    engine = Engine(threads)
    engine.q("CREATE TEMPORARY TABLE y_traces (h UInt64) ENGINE = Memory")
    inputs: list[InputFigures] = []
    first = 0
    for n, group in enumerate(groups):
        for name in _made():
            engine.q(f"DROP TEMPORARY TABLE IF EXISTS {name}")
        inputs += engine.load_files(group, first)
        first = engine.scalar("SELECT max(i) + 1 FROM spans") or first
        split = engine.scalar("SELECT count() FROM spans WHERE cityHash64(trace_id) IN (SELECT h FROM y_traces)")
        if split:
            return Outcome(None, "traces whose spans lie in files of two batches (the summary reads a batch at a time)")
        engine.q("INSERT INTO y_traces SELECT DISTINCT cityHash64(trace_id) FROM spans")
        reason = engine.tree()
        if reason is None and engine.scalar(f"SELECT count() FROM ({coverage.per_span_tasks()})"):
            reason = "tasks whose figures the per-span code makes (the summary reads a batch at a time)"
        reason = reason or summary.prepare(engine)
        if reason:
            return Outcome(None, reason)
        for t in KEPT:
            engine.q(f"CREATE TEMPORARY TABLE y_{t} ENGINE = Memory AS SELECT * FROM x_{t}" if n == 0 else
                     f"INSERT INTO y_{t} SELECT * FROM x_{t}")
    for name in _made():  # only the values stay for the aggregates
        engine.q(f"DROP TEMPORARY TABLE IF EXISTS {name}")
    return engine.summary(sources, inputs, [], noted=noted, p="y_")
