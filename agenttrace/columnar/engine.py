"""Where the queries run, and the report they make: ClickHouse's engine in this process (chdb) over
trace files. Returns None (with the reason) when the input needs what the queries do not cover
(coverage.py), so the caller reports it the per-span way.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agenttrace.columnar import coverage, load, rows, tree
from agenttrace.columnar.assemble import add_critical_paths, analyses, pivot
from agenttrace.report.batched import SUMMARY_NOTE
from agenttrace.report.inputs import ConventionFigures, InputFigures
from agenttrace.report.model import Report
from agenttrace.report.runs import ReportFold
from agenttrace.traces.load import iter_trace_files


class ColumnarError(Exception):
    """The engine could not read the input (a malformed line, a missing package)."""


@dataclass
class Outcome:
    report: Report | None
    reason: str | None = None  # why the per-span path is needed
    bytes_back: int = 0  # bytes of the rows that came back to Python


def _session(threads: int | None):
    try:
        from chdb import session
    except ImportError as exc:
        raise ColumnarError("the columnar engine needs chdb (pip install 'agenttrace[columnar]')") from exc
    sess = session.Session()
    sess.query(f"SET max_threads = {threads or os.cpu_count() or 1}")
    return sess


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _table(sess, sql: str) -> tuple[dict[str, list], int]:
    t = sess.query(sql, "ArrowTable")
    return t.to_pydict(), t.nbytes


class Engine:
    """One session: load, check coverage, run the figures, assemble the report."""

    def __init__(self, threads: int | None = None) -> None:
        self.sess = _session(threads)

    def q(self, sql: str) -> None:
        try:
            self.sess.query(sql)
        except Exception as exc:  # chdb raises its own types: say what ClickHouse said, first line
            raise ColumnarError(str(exc).splitlines()[0][:500]) from exc

    def scalar(self, sql: str) -> int:
        return int(self.sess.query(sql, "CSV").bytes().decode().strip() or 0)

    def load_files(self, files: list[Path]) -> list[InputFigures]:
        """Each file's spans into `spans`; what each input held, by segment (report.inputs)."""
        self.q(load.TABLE)
        out, first = [], 0
        for f in files:
            self.q(load.file_insert(_sql_string(str(f)), first))
            counts, _ = _table(self.sess, f"SELECT segment, count() AS n FROM spans WHERE i >= {first} "
                                          "GROUP BY segment ORDER BY segment")
            segments = dict(zip(counts["segment"], counts["n"], strict=True))
            n = sum(segments.values())
            out.append(InputFigures(source=str(f), spans=n, conventions=[
                ConventionFigures(name="agenttrace", spans=n, segments=segments)] if n else []))
            first += n
        return out

    def figures(self, sources: list[str], inputs: list[InputFigures], problems: list[str],
                sample: int | None = None) -> Outcome:
        for sql in tree.statements():
            self.q(sql)
        for reason, sql in coverage.checks():
            if self.scalar(sql):
                return Outcome(None, reason)
        tasks, b1 = _table(self.sess, rows.task_rows())
        steps, b2 = _table(self.sess, rows.step_rows())
        attempts, b3 = _table(self.sess, rows.attempt_rows())
        gens, b4 = _table(self.sess, rows.generation_rows())
        segs, b5 = _table(self.sess, rows.segment_rows())
        made = analyses(tasks, steps, attempts, gens, pivot(segs))
        path, b6 = _table(self.sess, rows.path_spans())
        add_critical_paths({t: a.figures for t, a in zip(tasks["task"], made, strict=True)}, path)
        fold = ReportFold(sample, keep_tasks=sample is None)
        for a in made:
            fold.add(a)
        if sample:
            problems = [*problems, SUMMARY_NOTE.format(tasks=fold.run.whole + fold.run.partial, n=sample)]
        report = fold.report(sources, problems)
        report.inputs = inputs
        return Outcome(report, bytes_back=b1 + b2 + b3 + b4 + b5 + b6)


def report_files(paths: Sequence[str | Path], *, threads: int | None = None, sample: int | None = None) -> Outcome:
    files = list(iter_trace_files(paths))
    engine = Engine(threads)
    inputs = engine.load_files(files)
    return engine.figures([str(p) for p in paths], inputs, [], sample)
