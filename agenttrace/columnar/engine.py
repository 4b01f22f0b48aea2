"""Where the queries run, and the report they make: ClickHouse's engine in this process (chdb)
over trace files, or a ClickHouse store where its spans are (a server, or a chdb folder): the same
statements, in the store's session, as temporary tables; only the rows of figures come back.
Traces of another instrumentation are reported one at a time by the per-span code beside them
(per_trace.py), or, for a summary, read by it into our span tree (in shares of whole traces, one
per core: shares.py) and put back into the table (mapped.py). Returns None (with the reason) when
the input needs what the queries do not cover (coverage.py), so the caller reports it the
per-span way.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from agenttrace import semconv as sc
from agenttrace.columnar import (
    batches,
    coverage,
    load,
    mapped,
    per_trace,
    readings,
    records,
    roles,
    rows,
    shares,
    summary,
    tree,
)
from agenttrace.columnar.assemble import per_span_figures
from agenttrace.errors import ClickHouseError
from agenttrace.report.batched import PARTIAL_NOTE, SUMMARY_NOTE
from agenttrace.report.inputs import InputFigures, input_figures
from agenttrace.report.model import Report
from agenttrace.report.runs import ReportFold
from agenttrace.traces import Reading
from agenttrace.traces.clickhouse_params import quoted
from agenttrace.traces.load import iter_trace_files
from agenttrace.traces.stream import no_gc


class ColumnarError(Exception):
    """The engine could not read the input (a malformed line, a missing package, a store's error)."""


@dataclass
class Outcome:
    report: Report | None
    reason: str | None = None  # why the per-span path is needed
    bytes_back: int = 0  # bytes of the rows that came back to Python
    per_span_tasks: int = 0  # tasks whose figures the per-span code made (coverage.per_span_tasks)
    per_trace_spans: int = 0  # spans of the traces the per-span code reported (per_trace.py)
    workers_peak_mb: float = 0.0  # the largest peak of the worker processes that read them (shares.py)


_LAST = (1 << 64) - 1  # the highest input order


@contextmanager
def _said() -> Iterator[None]:
    """A store's error as ColumnarError saying what ClickHouse said (its first line)."""
    try:
        yield
    except ClickHouseError as exc:
        raise ColumnarError(str(exc).splitlines()[0][:500]) from exc
    except UnicodeDecodeError as exc:  # text the engine kept as bytes that are not UTF-8
        raise ColumnarError(f"text that is not UTF-8 ({exc.reason})") from exc


class Engine:
    """One session of a store (default: chdb in memory, for files): load, check coverage, run
    the figures, assemble the report."""

    def __init__(self, threads: int | None = None, store=None) -> None:
        from agenttrace.traces.clickhouse import connect

        try:
            self.store = store or connect("chdb:")
        except ClickHouseError as exc:
            raise ColumnarError("the columnar engine needs chdb (pip install 'agenttrace[columnar]')") from exc
        self.threads = threads or os.cpu_count() or 1  # the engine's, and the processes reading routed traces (shares.py)
        if store is None or threads:  # a server's own setting stands unless asked
            self.q(f"SET max_threads = {self.threads}")
        if store is None:  # files read, not mapped: chdb maps them, and the mapped pages count as
            self.q("SET storage_file_read_method = 'pread'")  # ours (+0.75 GB at 770 MB; as fast)
        self.next_i = 0  # the input order the next file's first span takes (above every loaded one)
        self.files: list[per_trace.FileRange] = []  # where each file's spans were read from
        self.query = None  # or the store's ClickHouseQuery they were
        self._read: tuple[tuple[str, str] | None, str, dict] = (None, "", {})  # a store read in batches: Engine._store's
        self.source = ""  # the store's input, as the report names it
        self.next_synthetic = mapped.SYNTHETIC  # the input order of the next span a foreign trace's reading made

    def q(self, sql: str, params: dict | None = None) -> None:
        with _said():
            self.store.command(sql, params)

    def table(self, sql: str) -> tuple[dict[str, list], int]:
        with _said():
            t = self.store.arrow(sql)
            return t.to_pydict(), t.nbytes

    def scalar(self, sql: str) -> int:
        values = next(iter(self.table(sql)[0].values()))
        return int(values[0] or 0) if values else 0

    def exists(self, sql: str, params: dict) -> bool:
        """Whether `sql` (with query parameters: the store's filters) gives a row; LIMIT 1, so the
        engine stops at the first."""
        with _said():
            return bool(self.store.rows(f"{sql} LIMIT 1", params))

    def _part(self, lo: int, hi: int, keyed: bool = False) -> tuple[readings.Part, int]:
        """What the table holds of the input whose spans' input orders run lo..hi, and the highest
        input order among them (readings.part_of)."""
        return readings.part_of(self, lo, hi, keyed)

    def _tables(self) -> None:  # a new span table, and its roles' (roles.py)
        self.drop([roles.ROLES])
        self.q(load.table())
        self.q(roles.table())

    def load_files(self, files: list[Path]) -> list[InputFigures]:
        """Each file's spans into `spans` (a new table), in input order above every span loaded
        before (`next_i`: a batch's files follow the last batch's), other instrumentations' spans
        mapped where the table maps them (roles.py); what each input held, by segment
        (report.inputs)."""
        self._tables()
        out = []
        for f in files:
            path = quoted(str(f))
            odd = self.scalar(load.line_check(path))
            if odd:
                raise ColumnarError(f"{f}: {odd} line(s) the per-span reader reads otherwise (not OTLP/JSON requests, "
                                    "or values that are not of their JSON type)")
            # the parser leaves a block per line in the table it fills (a LowCardinality dictionary
            # each); copied, they become a few large ones: every query after reads them faster
            # (1M spans: the copy 0.13 s, the queries ~0.6 s less, the peak ~0.1 GB less)
            self.drop([load.STAGED])
            self.q(load.table(load.STAGED))
            self.q(load.file_insert(path, self.next_i, load.STAGED))
            self.q(f"INSERT INTO spans SELECT * FROM {load.STAGED}")
            self.drop([load.STAGED])
            roles.find(self, self.next_i, _LAST)
            part, top = self._part(self.next_i, _LAST)
            seen = input_figures(readings.reading(str(f), part))
            if seen.spans:  # the per-span path lists an input only when it gave spans
                out.append(seen)
            self.files.append(per_trace.FileRange(f, self.next_i, top))
            self.next_i = top + 1
        return out

    def _store(self, query) -> tuple[tuple[str, str] | None, str, dict]:
        """Readies a store's read: the columns naming its rows (load.store_insert's `by_row`, None
        where it has none), and the filters' SQL and parameters. ClickHouseError when the table is not the exporter's (no other path
        can read it either)."""
        from agenttrace.traces.clickhouse import PARQUET_ROW_KEYS, check_source
        from agenttrace.traces.clickhouse_read import filters

        kind = check_source(self.store, query)  # its rows named by part and offset, or file and row
        by_row = load.MERGE_TREE_ROWS if kind.endswith("MergeTree") else PARQUET_ROW_KEYS if kind == "File" else None
        if query.limits.deadline_s:  # each statement's bound on the server (the per-span read's is the whole read's)
            self.q(f"SET max_execution_time = {max(1, math.ceil(query.limits.deadline_s))}")
        self.query, self.source = query, query.input_name(self.store.name)
        where, params = filters(query)
        return by_row, where, params

    def _insert_store(self, by_row: tuple[str, str] | None, where: str, params: dict, batch: int | None = None) -> None:
        """The picked spans (or one batch of them: load.store_insert) into a new `spans`."""
        self._tables()
        table = self.query.table
        if not (by_row and self._placed_by_row(table, where, params, by_row, batch)):  # sorted with every column
            self.q(load.store_insert(table, where, batch=batch), params if batch is None else None)
        roles.find(self, 0, _LAST)

    def store_part(self) -> readings.Part:
        """What the table holds of the store's input, with its first span of ours' key."""
        return self._part(0, _LAST, keyed=True)[0]

    def inputs_of(self, part: readings.Part, theirs: tuple[Reading, readings.Seen] | None = None) -> list[InputFigures]:
        """The store's input as the report lists it, from what the table held of it (and what the
        per-span code read of its foreign traces: `theirs`)."""
        seen = input_figures(readings.reading(self.source, part, *(theirs or ())))
        return [seen] if seen.spans else []  # as the per-span read: no input when no trace was picked

    def load_store(self, query) -> list[InputFigures]:
        """The traces a ClickHouseQuery picks, from the exporter's table into `spans`, in the store.
        ClickHouseError when the table is not the exporter's (no other path can read it either)."""
        self._insert_store(*self._store(query))
        return self.inputs_of(self._part(0, _LAST)[0])

    def store_batches(self, query, spans_per_batch: int) -> list[int]:
        """The batches of the picked traces (load.store_traces, kept for the batches' loads), in
        input order; their spans are loaded a batch at a time (batches.load_store_in_batches).
        One batch, [0], without asking when the table holds no more spans than a batch."""
        self._read = self._store(query)
        _, where, params = self._read
        if self.scalar(f"SELECT count() FROM {query.table}") <= spans_per_batch:  # the table's own count: one batch
            return [0]
        self.q(load.store_traces(query.table, where, spans_per_batch), params)
        return list(self.table(f"SELECT DISTINCT batch FROM {load.STORE_TRACES} ORDER BY batch")[0]["batch"])

    def holds_ours(self) -> bool:
        """Whether a span the store's query picks (store_batches) is ours (agenttrace.segment)."""
        _, where, params = self._read
        ours = f"{' AND' if where else ' WHERE'} SpanAttributes['{sc.SEGMENT}'] != ''"
        return self.exists(f"SELECT 1 FROM {self.query.table}{where}{ours}", params)

    def load_store_batch(self, batch: int) -> None:
        """One batch of the store's picked traces (store_batches) into a new `spans`."""
        self._insert_store(*self._read, batch)

    def _placed_by_row(self, table: str, where: str, params: dict, keys: tuple[str, str], batch: int | None = None) -> bool:
        """The store's spans into `spans` in the order sorted on their keys and rows
        (load.store_insert's `by_row`); False, the table emptied, when a row was not placed (a
        merge moved rows between the statement's reads) or the server has no rows' part and
        offset (older than 22.x)."""
        try:
            self.q(load.store_insert(table, where, by_row=keys, batch=batch), params if batch is None else None)
            if not self.scalar(f"SELECT count() FROM spans WHERE i = {load.UNPLACED}"):
                return True
        except ColumnarError as exc:
            if keys[0] not in str(exc):
                raise
        self.q("TRUNCATE TABLE spans")
        return False

    def make_tree(self, checks: Sequence[tuple[str, str]] | None = None) -> str | None:
        """The tree's tables made; the reason the queries do not cover the spans, if one applies
        (`checks`: those asked first, default coverage.checks())."""
        for reason, sql in coverage.checks() if checks is None else checks:
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

    def insert_rows(self, table: str, lines: list[bytes]) -> None:
        """JSONEachRow `lines` into `table` (a temporary table of this session)."""
        with _said():
            self.store.insert_json_rows(table, lines)

    def inputs(self, traces: per_trace.Traces) -> list[InputFigures]:
        """Each input's reading: the table's spans (after the routed traces left it) and theirs."""
        ranges = ([(str(f.path), f.first, f.last) for f in self.files] if self.query is None else
                  [(self.source, 0, _LAST)])
        out = []
        for source, lo, hi in ranges:
            part, _ = self._part(lo, hi, keyed=True)
            reading = readings.reading(source, part, traces.readings.get(source), traces.seen.get(source))
            if reading.spans:
                out.append(input_figures(reading))
        return out

    # the cyclic collector off (traces/stream.no_gc, as the per-span path): the rows that come
    # back and the records made of them live on, and each collection walks them all again (a
    # 1M-span full report: 23.8 -> 18.4 s, measured); summarise's too
    @no_gc()
    def figures(self, sources: list[str], inputs: list[InputFigures], problems: list[str],
                sample: int | None = None, summary_only: bool = False) -> Outcome:
        summarised = bool(sample or summary_only)
        for reason, sql in coverage.input_checks():
            if self.scalar(sql):
                return Outcome(None, reason)
        # a summary's foreign traces join the table as our span tree (the queries compute their
        # figures); a report's are reported by the per-span code beside the queries
        pending = shares.route(self) if summarised else shares.route_figures(self)
        if isinstance(pending, str):
            return Outcome(None, pending)
        put_back = None
        if isinstance(pending, per_trace.Traces):
            put_back, pending = pending, None
            inputs, problems = self.inputs(put_back), [*problems, *put_back.problems]
            mapped.put_back(self, put_back)
        reason = self.make_tree(checks=())  # asked above (routed traces have left the table)
        if reason:
            return Outcome(None, reason)
        if summarised:  # the tasks the aggregates do not state (the rows' per-span tasks are read below)
            rows_needed = self.scalar(f"SELECT count() FROM ({coverage.per_span_tasks()})")
            why = "tasks whose figures the per-span code makes" if rows_needed else summary.prepare(self)
            if why is None:
                return _counted(self.summary(sources, inputs, problems, noted=bool(sample)), put_back)
            if put_back is not None:  # every task's rows, and the per-span code's reading of theirs, cost more
                return Outcome(None, f"{why}, {mapped.BESIDE}")
            if not rows_needed:
                self._remake_tree()  # the value tables dropped the charge the rows read
        special, b7 = self.table(rows.task_spans(coverage.per_span_tasks()))
        kept = records.keep(self)
        # the rows are kept: the tree's tables go, and the spans unless routed traces' readings will
        # read them (Engine.inputs); their memory goes to the records made next
        self.drop([*tree.created(tree.statements()), *([] if pending is not None else ["spans"])])
        self.store.release_memory()
        given, worded = per_span_figures(special)
        if worded:
            return Outcome(None, f"tasks the per-span code words problems about ({worded[0]})")
        made = records.records(self, kept, given)
        self.drop(kept)
        routed = pending.result() if pending is not None else None
        if isinstance(routed, str):
            return Outcome(None, routed)
        analysed = made.records
        if routed is not None:  # their tasks in the report's order (start, then input order), partial ones last
            keyed = [*zip(made.keys, analysed, strict=True), *routed.tasks]
            analysed = [a for _, a in sorted(keyed, key=lambda x: x[0])] + routed.partial
            problems = [*problems, *routed.problems, *([PARTIAL_NOTE.format(n=len(routed.partial))] if routed.partial else [])]
            inputs = self.inputs(routed)
        fold = ReportFold(sample, keep_tasks=sample is None)
        for a in analysed:
            fold.add(a)
        if sample:
            problems = [*problems, SUMMARY_NOTE.format(tasks=fold.run.whole + fold.run.partial, n=sample)]
        report = fold.report(sources, problems)
        report.inputs = inputs
        return _counted(Outcome(report, bytes_back=made.bytes_back + b7, per_span_tasks=len(given)), routed)

    @no_gc()
    def summarise(self, loaded: batches.Loaded, sources: list[str], *, noted: bool) -> Outcome:
        """The summary of what was loaded in batches (batches.py), or the reason it is not made here."""
        if loaded.reason:
            return Outcome(None, loaded.reason)
        summarised = self.summary(sources, loaded.inputs, loaded.routed.problems, noted=noted, p=batches.PREFIX)
        return _counted(summarised, loaded.routed if loaded.routed.spans else None)

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


def _counted(outcome: Outcome, traces: per_trace.Traces | None) -> Outcome:
    """The outcome counting the spans of the traces the per-span code read, and their bytes."""
    if traces is not None:
        outcome.per_trace_spans, outcome.bytes_back = traces.spans, outcome.bytes_back + traces.bytes_back
        outcome.workers_peak_mb = traces.workers_peak_mb
    return outcome


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
        return engine.summarise(batches.load_in_batches(engine, groups), sources, noted=bool(sample))
    inputs = engine.load_files(files)
    return engine.figures(sources, inputs, [], sample, summary_only)


def report_store(query, *, threads: int | None = None, sample: int | None = None,
                 summary_only: bool = False) -> Outcome:
    """The report of the traces a ClickHouseQuery picks, computed in the store (traces/clickhouse.py's
    connect: a server's URL or chdb:FOLDER). Raises ClickHouseError when the store is unreachable or
    the table not the exporter's, ColumnarError when a statement fails there (an older server)."""
    from agenttrace.traces.clickhouse import connect

    engine = Engine(threads, connect(query.url, timeout_s=query.limits.deadline_s))
    if sample or summary_only:  # a summary of many spans: a batch of traces at a time (batches.py)
        numbers = engine.store_batches(query, batches.BATCH_SPANS)
        if len(numbers) > 1:
            return engine.summarise(batches.load_store_in_batches(engine, numbers), [query.describe()], noted=bool(sample))
        engine.drop([load.STORE_TRACES])
    inputs = engine.load_store(query)
    return engine.figures([query.describe()], inputs, [], sample, summary_only)
