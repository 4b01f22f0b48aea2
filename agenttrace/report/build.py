"""The report's entry point: spans (loaded from files, Jaeger, or given) -> foreign conventions
mapped (`traces.normalise`) -> span tree -> per-task figures (`figures.py`) -> run figures and the
what-if (`runs.py`) -> one `Report`.
"""

from __future__ import annotations

from agenttrace.report.batched import PARTIAL_NOTE, ReportBuilder
from agenttrace.report.figures import analyse
from agenttrace.report.inputs import input_figures
from agenttrace.report.model import Report
from agenttrace.report.runs import assemble_report
from agenttrace.report.span_tree import SpanTree
from agenttrace.traces import normalise
from agenttrace.traces.load import load_spans
from agenttrace.traces.span_records import LoadResult, SpanRecord

__all__ = ["build_report", "report_clickhouse", "report_from_files", "report_from_load", "report_jaeger",
           "report_phoenix", "report_streamed"]


def build_report(spans: list[SpanRecord], sources: list[str], problems: list[str], *, waterfalls: int = 0) -> Report:
    """Figures for every task found among `spans`: per task and step, per run label, the run as a
    whole, and the speculation what-if. `waterfalls`: how many tasks keep their spans for charts."""
    normalised = normalise(spans)
    tree = SpanTree(normalised.spans)
    tasks = analyse(tree, waterfalls=waterfalls)
    partial = sum(t.figures.partial for t in tasks)
    notes = [*normalised.problems, *tree.problems]
    if partial:
        notes.append(PARTIAL_NOTE.format(n=partial))
    report = assemble_report(tasks, sources, [*problems, *notes])
    report.inputs = [input_figures(r) for r in normalised.readings]
    return report


def report_from_files(paths: list[str], *, waterfalls: int = 0) -> Report:
    """Load trace files or folders (OTLP/JSON or Jaeger JSON) and compute their report."""
    loaded = load_spans(paths)
    return build_report(loaded.spans, [str(p) for p in paths], loaded.problems, waterfalls=waterfalls)


def report_streamed(paths: list[str], *, lag: int | None = None, sample: int | None = None) -> Report:
    """The report of trace files or folders read as a stream of whole traces (traces/stream.py:
    msgspec, bounded memory, the collector paused) and analysed batch by batch: the same figures
    as `report_from_files`, much sooner on large inputs. Waterfalls need one pass: use
    `report_from_files` for them. With `sample` a summary in bounded memory (batched.ReportBuilder)."""
    from agenttrace.traces.stream import LAG_LINES, no_gc, stream_traces

    problems: list[str] = []
    builder = ReportBuilder(summary=sample)
    with no_gc():
        for batch in stream_traces(paths, problems, lag=LAG_LINES if lag is None else lag):
            builder.add(batch.spans, batch.seq)
        return builder.report([str(p) for p in paths], problems)


def report_clickhouse(query, *, sample: int | None = None) -> Report:
    """The report of the traces a ClickHouse table holds (traces/clickhouse.py: the OpenTelemetry
    exporter's schema, filters in SQL, whole traces `query.batch_traces` at a time). Raises
    ClickHouseError when the store is unreachable or the table not the exporter's."""
    from agenttrace.traces.clickhouse import connect
    from agenttrace.traces.clickhouse_read import read_traces
    from agenttrace.traces.stream import no_gc

    store = connect(query.url, timeout_s=query.limits.deadline_s)
    problems: list[str] = []
    builder = ReportBuilder(summary=sample)
    with no_gc():
        for spans in read_traces(store, query, problems):
            builder.add(spans)
        return builder.report([query.describe()], problems)


def report_phoenix(query, *, sample: int | None = None, waterfalls: int = 0) -> Report:
    """The report of a Phoenix project's traces (traces/phoenix.py: its REST API, whole traces
    `query.batch_traces` at a time; `waterfalls` from the first batch). Raises PhoenixError when
    nothing could be read."""
    from agenttrace.traces.phoenix import read_traces
    from agenttrace.traces.stream import no_gc

    problems: list[str] = []
    builder = ReportBuilder(waterfalls=waterfalls, summary=sample)
    with no_gc():
        for spans in read_traces(query, problems):
            builder.add(spans)
        return builder.report([query.describe()], problems)


def report_jaeger(query, *, page_traces: int = 100, progress=None, sample: int | None = None) -> Report:
    """The report of a Jaeger query read page by page (traces/jaeger_input.jaeger_pages): one
    page of spans held at a time."""
    from agenttrace.traces.jaeger_input import jaeger_pages
    from agenttrace.traces.span_records import break_cycles, checked

    problems: list[str] = []
    builder = ReportBuilder(summary=sample)
    for spans in jaeger_pages(query, problems, page_traces=page_traces, progress=progress):
        spans = checked(spans, problems)
        break_cycles(spans, problems)
        builder.add(spans)
    return builder.report([query.request_url()], problems)


def report_from_load(loaded: LoadResult, sources: list[str], *, waterfalls: int = 0) -> Report:
    """The report of spans already loaded (from files, or from Jaeger's query API)."""
    return build_report(loaded.spans, sources, loaded.problems, waterfalls=waterfalls)
