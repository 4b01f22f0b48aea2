"""A summary of many files, or of a large store, in batches (issue 32: 10M spans in bounded
memory): each batch of whole files, or of a store's whole traces in input order, is loaded, its
tree and value tables made (`summary_sql.statements`), the values kept in tables of their own
(`y_`) and everything else dropped before the next batch, so the engine holds one batch's spans
at a time plus the values (a few floats per task, step and generation). The aggregates then run
over the kept values, as over one batch's: every key that orders them (start, then input order)
holds across batches, so the figures are those of one table (engine.report_files and
report_store put them together).

A trace must lie in one batch (its figures come from its own spans): a trace met in two batches
of files, or a batch that needs the rows (summary.prepare's reasons, or tasks the per-span code
makes), hands the input to the per-span path with the reason. A store's batches never split a
trace (load.store_traces). A batch's traces of another instrumentation go back into its table as
our span tree (mapped.py), and the input's reading adds what the per-span code read of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agenttrace.columnar import coverage, load, mapped, per_trace, readings, roles, shares, summary
from agenttrace.report.inputs import InputFigures

BATCH_BYTES = 400_000_000  # files are grouped up to about this much (about half a million spans)
# A store's traces are read in batches of about this many spans. 10M spans in a chdb store, its
# summary: unbatched 66-67 s, peak 8.2-9.2 GB; batches of 1M 66.5 s, 4.8 GB; of 500k 70-72 s,
# 4.5 GB (each batch reads its traces' rows out of the whole table). A store of up to 1M spans
# is one batch, read as before (1M: 7.1 s and 1.4 GB, against 7.9 s and 1.1 GB in two batches).
BATCH_SPANS = 1_000_000
# The value tables the aggregates read, each without the columns only `prepare` read (what made
# the task values, and the checks): keeping them took the 10M-span summary's peak from 5.2 to 5.7 GB.
KEPT = {"tv": "on_ns, off_ns",
        "sr": "task, first, first_correct, marks, moments, on_ns, retry_ns, retry_seg_s",
        "gv": "knows_prefill, ux, uy, r_n, r_accepted, r_drafted, r_rejections, c_no_draft, c_common_k, "
              "c_asked_k, c_asked_n, c_offered, rf_ok, rf_odd"}
PREFIX = "y_"  # the kept tables' prefix


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


def _drop(engine) -> None:
    """Drops every table a batch makes, the span table last."""
    engine.drop([*summary.made(), roles.ROLES, "spans"])


@dataclass
class Loaded:
    """What the batches held: each input's reading, the reason one cannot be summarised this way
    (None: all were), and the foreign traces the per-span code read (`routed`: their spans,
    bytes and the problems it worded about them)."""

    inputs: list[InputFigures] = field(default_factory=list)
    reason: str | None = None
    routed: per_trace.Traces = field(default_factory=per_trace.Traces)


def _route(engine, loaded: Loaded) -> per_trace.Traces | str | None:
    """The batch's traces of another instrumentation read into our span tree (shares.route), after
    the checks that send a whole input to the per-span path; the reason, where one applies."""
    for reason, sql in coverage.input_checks():
        if engine.scalar(sql):
            return reason
    traces = shares.route(engine, batch=True)
    if isinstance(traces, per_trace.Traces):
        routed = loaded.routed
        routed.spans, routed.bytes_back = routed.spans + traces.spans, routed.bytes_back + traces.bytes_back
        routed.problems += traces.problems
        routed.workers_peak_mb = max(routed.workers_peak_mb, traces.workers_peak_mb)
    return traces


def _keep(engine, n: int) -> str | None:
    """Batch `n`'s tree and value tables made from the loaded `spans` (checked, its foreign traces
    put back: `_route`), its values kept in the `y_` tables; the reason it cannot be summarised
    this way (None: it was)."""
    reason = engine.make_tree(checks=())
    if reason is None and engine.scalar(f"SELECT count() FROM ({coverage.per_span_tasks()})"):
        reason = "tasks whose figures the per-span code makes (the summary reads a batch at a time)"
    reason = reason or summary.prepare(engine)
    if reason:
        return reason
    for t, dropped in KEPT.items():
        values = f"SELECT * EXCEPT ({dropped}) FROM x_{t}"
        engine.q(f"CREATE TEMPORARY TABLE {PREFIX}{t} ENGINE = Memory AS {values}" if n == 0 else
                 f"INSERT INTO {PREFIX}{t} {values}")
    return None


def load_in_batches(engine, groups: list[list[Path]]) -> Loaded:
    """Each group of files into `engine` (an Engine) in turn, its values kept in the `y_` tables."""
    engine.q(f"CREATE TEMPORARY TABLE {PREFIX}traces (h UInt64) ENGINE = Memory")
    out = Loaded()
    for n, group in enumerate(groups):
        _drop(engine)
        got = engine.load_files(group)
        if engine.scalar(f"SELECT count() FROM spans WHERE cityHash64(trace_id) IN (SELECT h FROM {PREFIX}traces)"):
            out.reason = "traces whose spans lie in files of two batches (the summary reads a batch at a time)"
            return out
        engine.q(f"INSERT INTO {PREFIX}traces SELECT DISTINCT cityHash64(trace_id) FROM spans")
        traces = _route(engine, out)
        if isinstance(traces, str):
            out.reason = traces
            return out
        if traces is not None:  # the batch's inputs as read with its foreign traces, before they go back
            got = engine.inputs(traces)
            mapped.put_back(engine, traces)
        out.inputs += got
        out.reason = _keep(engine, n)
        if out.reason:
            return out
    _drop(engine)  # only the values stay for the aggregates
    return out


def load_store_in_batches(engine, numbers: list[int]) -> Loaded:
    """A store's picked traces (Engine.store_batches: `numbers`) into `engine` a batch at a time,
    each batch's values kept in the `y_` tables (a trace lies in one batch, and the input order
    holds across them)."""
    out, parts, theirs = Loaded(), [], None
    if not engine.holds_ours():  # the per-span read of every trace costs less than the table and that
        out.reason = coverage.trace_checks()[0][0]
        return out
    for n, number in enumerate(numbers):
        _drop(engine)
        engine.load_store_batch(number)
        traces = _route(engine, out)
        if isinstance(traces, str):
            out.reason = traces
            return out
        parts.append(engine.store_part())  # with the batch's foreign traces out, before they go back
        if traces is not None:
            mine = traces.readings.get(engine.source)
            if mine is not None:
                theirs = readings.merged_theirs(theirs, (mine, traces.seen.get(engine.source) or readings.Seen()))
            mapped.put_back(engine, traces)
        out.reason = _keep(engine, n)
        if out.reason:
            return out
    _drop(engine)
    engine.drop([load.STORE_TRACES])
    out.inputs = engine.inputs_of(readings.merged(parts), theirs)
    return out
