"""Where the queries run, and the report they make: ClickHouse's engine in this process (chdb)
over trace files, or a ClickHouse store where its spans are (a server, or a chdb folder): the same
statements, in the store's session, as temporary tables; only the rows of figures come back.
Returns None (with the reason) when the input needs what the queries do not cover
(coverage.py), so the caller reports it the per-span way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agenttrace.columnar import batches, coverage, load, rows, summary, tree
from agenttrace.columnar.assemble import add_critical_paths, analyses, per_span_figures, pivot
from agenttrace.errors import ClickHouseError
from agenttrace.report.batched import SUMMARY_NOTE
from agenttrace.report.inputs import ConventionFigures, InputFigures
from agenttrace.report.model import Report
from agenttrace.report.runs import ReportFold
from agenttrace.traces.load import iter_trace_files


class ColumnarError(Exception):
    """The engine could not read the input (a malformed line, a missing package, a store's error)."""


@dataclass
class Outcome:
    report: Report | None
    reason: str | None = None  # why the per-span path is needed
    bytes_back: int = 0  # bytes of the rows that came back to Python
    per_span_tasks: int = 0  # tasks whose figures the per-span code made (coverage.per_span_tasks)


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


class Engine:
    """One session of a store (default: chdb in memory, for files): load, check coverage, run
    the figures, assemble the report."""

    def __init__(self, threads: int | None = None, store=None) -> None:
        from agenttrace.traces.clickhouse import connect

        try:
            self.store = store or connect("chdb:")
        except ClickHouseError as exc:
            raise ColumnarError("the columnar engine needs chdb (pip install 'agenttrace[columnar]')") from exc
        if store is None or threads:  # a server's own setting stands unless asked
            self.q(f"SET max_threads = {threads or os.cpu_count() or 1}")
        if store is None:  # files read, not mapped: chdb maps them, and the mapped pages count as
            self.q("SET storage_file_read_method = 'pread'")  # ours (+0.75 GB at 770 MB; as fast)
        self.next_i = 0  # the input order the next file's first span takes (above every loaded one)

    def q(self, sql: str, params: dict | None = None) -> None:
        try:
            self.store.command(sql, params)
        except ClickHouseError as exc:  # what ClickHouse said, first line
            raise ColumnarError(str(exc).splitlines()[0][:500]) from exc

    def table(self, sql: str) -> tuple[dict[str, list], int]:
        try:
            t = self.store.arrow(sql)
            return t.to_pydict(), t.nbytes
        except ClickHouseError as exc:
            raise ColumnarError(str(exc).splitlines()[0][:500]) from exc
        except UnicodeDecodeError as exc:  # text the engine kept as bytes that are not UTF-8
            raise ColumnarError(f"text that is not UTF-8 ({exc.reason})") from exc

    def scalar(self, sql: str) -> int:
        values = next(iter(self.table(sql)[0].values()))
        return int(values[0] or 0) if values else 0

    def _counts(self, first: int, source: str) -> tuple[InputFigures, int]:
        """What one input held, by segment (report.inputs), from its spans in the table; and the
        highest input order among them (`first` - 1 when none)."""
        counts, _ = self.table(f"SELECT segment, count() AS n, max(i) AS top FROM spans WHERE i >= {first} "
                               "GROUP BY segment ORDER BY segment")
        segments = dict(zip(counts["segment"], counts["n"], strict=True))
        n = sum(segments.values())
        return InputFigures(source=source, spans=n, conventions=[
            ConventionFigures(name="agenttrace", spans=n, segments=segments)] if n else []), max(
            counts["top"], default=first - 1)

    def load_files(self, files: list[Path]) -> list[InputFigures]:
        """Each file's spans into `spans` (a new table), in input order above every span loaded
        before (`next_i`: a batch's files follow the last batch's); what each input held, by
        segment (report.inputs)."""
        self.q(load.TABLE)
        out = []
        for f in files:
            path = _sql_string(str(f))
            odd = self.scalar(load.line_check(path))
            if odd:
                raise ColumnarError(f"{f}: {odd} line(s) the per-span reader reads otherwise (not OTLP/JSON requests, "
                                    "or values that are not of their JSON type)")
            self.q(load.file_insert(path, self.next_i))
            seen, top = self._counts(self.next_i, str(f))
            if seen.spans:  # the per-span path lists an input only when it gave spans
                out.append(seen)
            self.next_i = top + 1
        return out

    def load_store(self, query) -> list[InputFigures]:
        """The traces a ClickHouseQuery picks, from the exporter's table into `spans`, in the store.
        ClickHouseError when the table is not the exporter's (no other path can read it either)."""
        from agenttrace.traces.clickhouse import check_table
        from agenttrace.traces.clickhouse_read import filters

        check_table(self.store, query.table)
        if query.limits.deadline_s:  # each statement's bound on the server (the per-span read's is the whole read's)
            self.q(f"SET max_execution_time = {max(1, math.ceil(query.limits.deadline_s))}")
        self.q(load.TABLE)
        where, params = filters(query)
        self.q(load.store_insert(query.table, where), params)
        seen, _ = self._counts(0, f"{self.store.name} {query.table}")  # the store's name: no password
        return [seen] if seen.spans else []  # as the per-span read: no input when no trace was picked

    def make_tree(self) -> str | None:
        """The tree's tables made; the reason the queries do not cover the spans, if one applies."""
        for reason, sql in coverage.checks():
            if self.scalar(sql):
                return reason
        for sql in tree.statements():
            self.q(sql)
        return next((reason for reason, sql in coverage.tree_checks() if self.scalar(sql)), None)

    def drop(self, names: Sequence[str]) -> None:
        for name in names:
            self.q(f"DROP TEMPORARY TABLE IF EXISTS {name}")

    def _remake_tree(self) -> None:
        self.drop(summary.made())
        self.make_tree()

    def figures(self, sources: list[str], inputs: list[InputFigures], problems: list[str],
                sample: int | None = None, summary_only: bool = False) -> Outcome:
        reason = self.make_tree()
        if reason:
            return Outcome(None, reason)
        special, b7 = self.table(rows.task_spans(coverage.per_span_tasks()))
        if (sample or summary_only) and not special["task"]:
            if summary.prepare(self) is None:
                return self.summary(sources, inputs, problems, noted=bool(sample))
            self._remake_tree()  # the value tables dropped the charge the rows read
        tasks, b1 = self.table(rows.task_rows())
        steps, b2 = self.table(rows.step_rows())
        attempts, b3 = self.table(rows.attempt_rows())
        gens, b4 = self.table(rows.generation_rows())
        segs, b5 = self.table(rows.segment_rows())
        given, worded = per_span_figures(special)
        if worded:
            return Outcome(None, f"tasks the per-span code words problems about ({worded[0]})")
        made = analyses(tasks, steps, attempts, gens, pivot(segs), given)
        path, b6 = self.table(rows.path_spans())
        add_critical_paths({t: a.figures for t, a in zip(tasks["task"], made, strict=True) if t not in given}, path)
        fold = ReportFold(sample, keep_tasks=sample is None)
        for a in made:
            fold.add(a)
        if sample:
            problems = [*problems, SUMMARY_NOTE.format(tasks=fold.run.whole + fold.run.partial, n=sample)]
        report = fold.report(sources, problems)
        report.inputs = inputs
        return Outcome(report, bytes_back=b1 + b2 + b3 + b4 + b5 + b6 + b7, per_span_tasks=len(given))

    def summary(self, sources: list[str], inputs: list[InputFigures], problems: list[str], *, noted: bool,
                p: str = "x_") -> Outcome:
        """The summary as aggregates in the engine (summary.py): no row per task comes back.
        `noted`: a problem line says so (a --sample summary; --summary-only shows no task row
        either way, and its figures are the full report's)."""
        # the aggregates read the value tables alone: the spans and the tree go first, their
        # memory to the aggregates' sorting (a batch's are gone already)
        self.drop([*tree.created(tree.statements()), "spans"])
        labels, whole, folds, back = summary.run_folds(self, p)
        whatif, back_whatif = summary.whatif(self, p)
        roofline, back_roofline = summary.roofline(self, p)
        run = whole.figures(labels[0] if len(labels) == 1 else None)
        by_label = [folds[label].figures(label) for label in labels] if len(labels) > 1 else [run]
        notes = [summary.NOTE.format(tasks=whole.whole + whole.partial)] if noted else []
        report = Report(sources=sources, problems=[*problems, *notes], run=run, tasks=[], by_label=by_label,
                        whatif=whatif.figures(),
                        roofline=roofline.figures(labels if len(labels) > 1 else [None]))
        report.inputs = inputs
        return Outcome(report, bytes_back=back + back_whatif + back_roofline)


def report_files(paths: Sequence[str | Path], *, threads: int | None = None, sample: int | None = None,
                 summary_only: bool = False) -> Outcome:
    """The report of trace files; with `sample` or `summary_only` the summary made in the engine
    where its aggregates cover the input (else: with `sample` the rows folded into a sampled
    summary, with `summary_only` the whole report)."""
    files = list(iter_trace_files(paths))
    sources = [str(p) for p in paths]
    groups = batches.batches(files, batches.BATCH_BYTES) if sample or summary_only else [files]
    engine = Engine(threads)
    if len(groups) > 1:  # a summary of many files: a batch at a time (batches.py)
        inputs, reason = batches.load_in_batches(engine, groups)
        if reason:
            return Outcome(None, reason)
        return engine.summary(sources, inputs, [], noted=bool(sample), p=batches.PREFIX)
    inputs = engine.load_files(files)
    return engine.figures(sources, inputs, [], sample, summary_only)


def report_store(query, *, threads: int | None = None, sample: int | None = None,
                 summary_only: bool = False) -> Outcome:
    """The report of the traces a ClickHouseQuery picks, computed in the store (traces/clickhouse.py's
    connect: a server's URL or chdb:FOLDER). Raises ClickHouseError when the store is unreachable or
    the table not the exporter's, ColumnarError when a statement fails there (an older server)."""
    from agenttrace.traces.clickhouse import connect

    engine = Engine(threads, connect(query.url, timeout_s=query.limits.deadline_s))
    inputs = engine.load_store(query)
    return engine.figures([query.describe()], inputs, [], sample, summary_only)
