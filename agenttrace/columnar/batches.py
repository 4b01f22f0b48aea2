"""A summary of many files in batches (issue 32: 10M spans in bounded memory): each batch of
whole files is loaded, its tree and value tables made (`summary_sql.statements`), the values kept
in tables of their own (`y_`) and everything else dropped before the next batch, so the engine
holds one batch's spans at a time plus the values (a few floats per task, step and generation).
The aggregates then run over the kept values, as over one batch's: every key that orders them
(start, then input order) holds across batches, so the figures are those of one table
(engine.report_files puts them together).

A trace must lie in one batch (its figures come from its own spans): a trace met in two batches,
or a batch that needs the rows (summary.prepare's reasons, or tasks the per-span code makes), hands
the input to the per-span path with the reason.
"""

from __future__ import annotations

from pathlib import Path

from agenttrace.columnar import coverage, summary
from agenttrace.report.inputs import InputFigures

BATCH_BYTES = 400_000_000  # files are grouped up to about this much (about half a million spans)
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
    engine.drop([*summary.made(), "spans"])


def load_in_batches(engine, groups: list[list[Path]]) -> tuple[list[InputFigures], str | None]:
    """Each group of files into `engine` (an Engine) in turn, its values kept in the `y_` tables;
    what each input held, and the reason a batch cannot be summarised this way (None: all were)."""
    engine.q(f"CREATE TEMPORARY TABLE {PREFIX}traces (h UInt64) ENGINE = Memory")
    inputs: list[InputFigures] = []
    for n, group in enumerate(groups):
        _drop(engine)
        inputs += engine.load_files(group)
        if engine.scalar(f"SELECT count() FROM spans WHERE cityHash64(trace_id) IN (SELECT h FROM {PREFIX}traces)"):
            return inputs, "traces whose spans lie in files of two batches (the summary reads a batch at a time)"
        engine.q(f"INSERT INTO {PREFIX}traces SELECT DISTINCT cityHash64(trace_id) FROM spans")
        reason = engine.make_tree()
        if reason is None and engine.scalar(f"SELECT count() FROM ({coverage.per_span_tasks()})"):
            reason = "tasks whose figures the per-span code makes (the summary reads a batch at a time)"
        reason = reason or summary.prepare(engine)
        if reason:
            return inputs, reason
        for t, dropped in KEPT.items():
            values = f"SELECT * EXCEPT ({dropped}) FROM x_{t}"
            engine.q(f"CREATE TEMPORARY TABLE {PREFIX}{t} ENGINE = Memory AS {values}" if n == 0 else
                     f"INSERT INTO {PREFIX}{t} {values}")
    _drop(engine)  # only the values stay for the aggregates
    return inputs, None
