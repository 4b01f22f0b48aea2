"""`agenttrace report`: the per-step latency report of recorded traces (no torch on this path)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

FORMATS = ("terminal", "markdown", "json", "html")
ENGINES = ("auto", "python", "columnar")


def register(sub: argparse._SubParsersAction) -> None:
    from agenttrace.commands.input_options import add_input_options, add_store_options

    report = sub.add_parser(
        "report", help="per-step latency report of traces (OTLP/JSON or Jaeger JSON files, Jaeger's query API, "
        "ClickHouse or Phoenix)")
    report.add_argument("paths", nargs="*",
                        help="trace files or folders; or Parquet files of the ClickHouse exporter's columns (a "
                        "`SELECT * FROM otel_traces FORMAT Parquet`), reported as that store is (--since, --until, "
                        "--service apply)")
    report.add_argument("--format", choices=FORMATS, default="terminal")
    report.add_argument("-o", "--output", help="write to this file instead of standard output (html: default report.html)")
    report.add_argument("--summary-only", action="store_true",
                        help="print only the run summary (terminal, markdown); on the columnar engine made there as "
                             "aggregates, as --sample's summary is, with the full report's figures")
    report.add_argument("--sample", type=int, metavar="N",
                        help="a summary, no task rows: on the columnar engine (a store under auto, or files of 20 MB "
                             "and more whose summary fits in memory) made in the engine as aggregates, every figure "
                             "exact, only kilobytes back; on the per-span path, for inputs too large to hold, tasks "
                             "folded into the run figures as they are read, each distribution from a uniform sample "
                             "of at most N values (e.g. 100000; counts, means, extremes and totals exact)")
    report.add_argument("--waterfalls", type=int, default=50,
                        help="html: how many tasks get a waterfall chart to choose from (default 50)")
    report.add_argument("--engine", choices=ENGINES, default="auto",
                        help="columnar runs the figures as SQL: for files on ClickHouse's engine in this process "
                             "(chdb), for --clickhouse in the store itself (only figures come back), where the input is "
                             "one it covers (agenttrace/columnar/coverage.py; else it says why and the per-span path "
                             "reports it); python the per-span path; auto (default) columnar where chdb is installed "
                             "for a ClickHouse store, for a summary of files (--sample, --summary-only) that fits in "
                             "memory, and for a report of files of 100 MB and more holding our own spans that fits in "
                             "memory (where it measured faster), quietly falling back where it does not cover the "
                             "input, and python for other reports of files")
    report.add_argument("--json-schema", action="store_true", help="print the JSON schema of --format json and exit")
    add_input_options(report)
    add_store_options(report)
    report.set_defaults(func=run)


def nothing_usable(loaded, sources: list[str]) -> str | None:
    """The one-line reason when the inputs gave no span at all (exit 2), else None: a file of
    random bytes is an error, not an empty report."""
    if loaded.spans:
        return None
    why = loaded.problems[0] if loaded.problems else "no spans in them"
    more = f" (and {len(loaded.problems) - 1} more problems)" if len(loaded.problems) > 1 else ""
    return f"nothing to report from {', '.join(sources)}: {why}{more}"


def _report_store(args: argparse.Namespace, store, sample: int | None, only: bool):
    """A ClickHouse store's report: its figures computed there (the columnar engine) where it
    covers the input, else read span by span; or the line saying there are no traces."""
    from agenttrace.errors import ClickHouseError, InputError
    from agenttrace.report.build import report_clickhouse

    try:
        report = None
        if _use_columnar(args.engine, store=store):
            from agenttrace.columnar.engine import report_store

            report = _columnar(lambda: report_store(store, sample=sample, summary_only=only),
                               quiet=args.engine == "auto")
        if report is None:
            report = report_clickhouse(store, sample=sample)
    except ClickHouseError as exc:
        raise InputError(str(exc)) from exc
    return report if _spans(report) else f"no traces in {store.describe()}" + _first(report)


def _report_parquet(args: argparse.Namespace, files: list[str], sample: int | None, only: bool):
    """Parquet files of the exporter's columns, reported as the store they were dumped from
    (read where they lie: traces/parquet_input.py), --since, --until and --service applied as to
    a store."""
    from agenttrace.commands.input_options import clickhouse_query
    from agenttrace.errors import InputError
    from agenttrace.traces.parquet_input import problem

    for f in files:
        why = problem(f) if Path(f).is_file() else f"{f}: no such file"
        if why is not None:
            raise InputError(why)
    try:
        return _report_store(args, clickhouse_query(args, files), sample, only)
    except InputError as exc:  # ClickHouse's words about a value it could not read: said of the files
        said = str(exc).removeprefix("chdb:: ")
        if "Code: " not in said:
            raise
        raise InputError(f"{', '.join(files)}: rows that do not read as the exporter's table ({said[:300]})") from exc


def _report(args: argparse.Namespace):
    """The report of what the options name, or the line saying why there is nothing to report.
    Files stream as whole traces (fast, bounded memory) unless the HTML page wants waterfalls or
    Jaeger's traces join them; Jaeger alone, ClickHouse and Phoenix are read page by page."""
    from agenttrace.commands.input_options import clickhouse_query, jaeger_query, phoenix_query
    from agenttrace.errors import InputError
    from agenttrace.report.build import report_from_load, report_jaeger, report_streamed
    from agenttrace.traces.load import load_inputs

    store = clickhouse_query(args)
    jaeger = jaeger_query(args)
    phoenix = phoenix_query(args)
    sample = args.sample
    only = args.summary_only and args.format in ("terminal", "markdown")  # no task row is shown
    if sample is not None and (sample < 100 or args.format == "html" or (jaeger is not None and args.paths)):
        raise InputError("--sample N needs N >= 100 (p99 needs 100 values), and one source read as a stream: "
                         "files, --jaeger, --clickhouse or --phoenix alone, in a format other than html")
    parquet = [p for p in args.paths if p.lower().endswith(".parquet")]
    if parquet:  # the exporter's columns, not lines of JSON: read where they lie, as a store's table
        if len(parquet) < len(args.paths) or store is not None or jaeger is not None or phoenix is not None:
            raise InputError(f"{parquet[0]} is Parquet (the ClickHouse exporter's columns): report Parquet files on "
                             "their own, not with trace files, --clickhouse, --jaeger or --phoenix")
        return _report_parquet(args, parquet, sample, only)
    if phoenix is not None:
        if args.paths or jaeger is not None or store is not None:
            raise InputError("--phoenix reads one source: leave out the files, --jaeger and --clickhouse")
        return _report_phoenix(phoenix, sample, args.waterfalls if args.format == "html" else 0)
    if store is not None:
        if args.paths or jaeger is not None:
            raise InputError("--clickhouse reads one source: leave out the files and --jaeger")
        return _report_store(args, store, sample, only)
    if jaeger is not None and not args.paths and args.format != "html":
        def progress(traces: int, end_us: int) -> None:
            if traces > args.page_traces:
                print(f"jaeger: {traces} traces read", file=sys.stderr)

        report = report_jaeger(jaeger, page_traces=args.page_traces, progress=progress, sample=sample)
        return report if _spans(report) else f"nothing to report from {jaeger.url}" + _first(report)
    if jaeger is None and args.format != "html":
        if not args.paths:
            raise InputError("name trace files or folders, --jaeger URL --service NAME, or --clickhouse URL")
        missing = [p for p in args.paths if not Path(p).exists()]
        if missing:
            raise InputError(f"no such file or folder: {', '.join(missing)}")
        report = None
        if _use_columnar(args.engine, files=args.paths, summary=bool(sample or only)):
            from agenttrace.columnar.engine import report_files

            report = _columnar(lambda: report_files(args.paths, sample=sample, summary_only=only),
                               quiet=args.engine == "auto")
        if report is None:
            report = report_streamed(args.paths, sample=sample)
        return report if _spans(report) else f"nothing to report from {', '.join(args.paths)}" + _first(report)
    loaded, sources = load_inputs(args.paths, jaeger)
    empty = nothing_usable(loaded, sources)
    if empty is not None:
        return empty
    return report_from_load(loaded, sources, waterfalls=args.waterfalls if args.format == "html" else 0)


# The engine's summary of files (`--sample`), measured in this process (BENCHMARKS.md, issue 32's
# fifth and sixth parts): a batch of files peaks at about 2x its bytes (1M spans, 771 MB: 1.5 GB),
# each further batch's kept values and their share of the aggregates add about 0.5x its bytes (10M
# spans in ten batches: 4.8 GB); below about 20 MB chdb's start costs more than it saves.
SUMMARY_PEAK_PER_BYTE = 2.0
SUMMARY_KEPT_PER_BYTE = 0.5
SUMMARY_MIN_BYTES = 20_000_000


# A full report of files on the engine (BENCHMARKS.md, issue 32's twelfth part): as fast as the
# per-span path at 38 MB, 0.84x its time at 77 MB, 0.6x at 770 MB (1M spans: 28-31 s against 48-51 s);
# its peak is chdb's ~0.45 GB plus 1.5-1.9x the files' bytes (1.6 GB there, the per-span 1.07 GB).
# Traces of other instrumentations go to the per-span code in either engine: a third of the spans
# theirs, the two took the same time, so the engine is chosen where the files hold ours.
REPORT_MIN_BYTES = 100_000_000
REPORT_BASE_BYTES = 450_000_000
REPORT_PEAK_PER_BYTE = 2.0
_HEAD_BYTES = 65_536  # of each file, read for our spans' mark


def _use_columnar(engine: str, *, store=None, files: list[str] | None = None, summary: bool = False) -> bool:
    """Whether the columnar engine runs first: when asked, or (auto, where chdb is installed) for a
    store (a ClickHouseQuery) unless a page or byte budget was set (those bound the per-span read of
    spans, which the columnar engine does not make); for a summary of files (`--sample`, or
    `--summary-only` where no task row is shown) whose peak in the engine fits in half the memory
    available (4.6x faster than the per-span summary at 1M spans: issue 32's fourth and fifth
    parts); and for a full report of files of 100 MB and more that hold our own spans, where its
    peak fits in half the memory available (`_report_fits`). Smaller files stay on the per-span
    path, where chdb's start costs more than the engine saves."""
    if engine != "auto":
        return engine == "columnar"
    import importlib.util

    if importlib.util.find_spec("chdb") is None:
        return False
    if store is None:
        return bool(files) and (_summary_fits(files) if summary else _report_fits(files))
    from agenttrace.traces.bounded_http import ReadLimits

    default, asked = ReadLimits(), store.limits
    return (asked.max_bytes, asked.max_requests, asked.max_answer_bytes) == (
        default.max_bytes, default.max_requests, default.max_answer_bytes)


def _report_fits(files: list[str]) -> bool:
    """Whether a full report of `files` is worth the engine: 100 MB and more, most of the bytes in
    files that begin with our spans (`agenttrace.segment` in their first 64 KB), and its estimated
    peak within half the memory available."""
    from agenttrace.traces.load import iter_trace_files

    found = list(iter_trace_files(files))
    sizes = [f.stat().st_size for f in found]
    total = sum(sizes)
    if total < REPORT_MIN_BYTES or REPORT_BASE_BYTES + REPORT_PEAK_PER_BYTE * total > _available_bytes() / 2:
        return False
    ours = 0
    for path, size in zip(found, sizes, strict=True):
        with open(path, "rb") as f:
            ours += size if b'"agenttrace.segment"' in f.read(_HEAD_BYTES) else 0
    return 2 * ours > total


def _summary_fits(files: list[str]) -> bool:
    """Whether the engine's summary of `files` (batch by batch: columnar/batches.py) is worth
    starting it for, and its estimated peak fits in half the memory available."""
    from agenttrace.columnar.batches import BATCH_BYTES, batches
    from agenttrace.traces.load import iter_trace_files

    sizes = [sum(f.stat().st_size for f in group) for group in batches(list(iter_trace_files(files)), BATCH_BYTES)]
    if not sizes or sum(sizes) < SUMMARY_MIN_BYTES:
        return False
    peak = SUMMARY_PEAK_PER_BYTE * max(sizes) + SUMMARY_KEPT_PER_BYTE * (sum(sizes) - max(sizes))
    return peak <= _available_bytes() / 2


def _available_bytes() -> int:
    """The memory the kernel says is available (0 where it does not say: the per-span path then)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _columnar(make, *, quiet: bool = False):
    """The columnar engine's report (`make`: engine.report_files or report_store, called), or None
    (with a line saying why, unless `quiet`: the engine was chosen, not asked for) when the
    per-span path must make it."""
    from agenttrace.columnar.engine import ColumnarError

    try:
        outcome = make()
    except ColumnarError as exc:
        if not quiet:
            print(f"agenttrace report: the columnar engine could not read the input ({exc}); "
                  "the per-span path reports it", file=sys.stderr)
        return None
    if outcome.report is None and not quiet:
        print(f"agenttrace report: the columnar engine does not cover {outcome.reason} yet; "
              "the per-span path reports it", file=sys.stderr)
    return outcome.report


def _report_phoenix(query, sample: int | None, waterfalls: int):
    from agenttrace.errors import InputError, PhoenixError
    from agenttrace.report.build import report_phoenix

    try:
        report = report_phoenix(query, sample=sample, waterfalls=waterfalls)
    except PhoenixError as exc:
        raise InputError(str(exc)) from exc
    if _spans(report):
        return report
    window = " in the window (--since/--until)" if query.since_ns is not None or query.until_ns is not None else ""
    return f"no traces in {query.describe()}{window}" + _first(report)


def _spans(report) -> int:
    return sum(i.spans for i in report.inputs)


def _first(report) -> str:
    """`: the first problem (and N more problems)`, as `nothing_usable` says it."""
    if not report.problems:
        return ": no spans in them"
    more = f" (and {len(report.problems) - 1} more problems)" if len(report.problems) > 1 else ""
    return f": {report.problems[0]}{more}"


def run(args: argparse.Namespace) -> int:
    import json

    from agenttrace.errors import InputError
    from agenttrace.report.model import Report
    from agenttrace.telemetry.files import write_output

    if args.json_schema:
        print(json.dumps(Report.model_json_schema(), indent=2))
        return 0
    try:
        report = _report(args)
    except InputError as exc:
        print(f"agenttrace report: {exc}", file=sys.stderr)
        return 2
    if isinstance(report, str):  # nothing usable: the one line that says why
        print(f"agenttrace report: {report}", file=sys.stderr)
        return 2
    if args.format == "json":
        return write_output(report.iter_json(indent=2), args.output)  # a task at a time
    elif args.format == "markdown":
        from agenttrace.report.markdown import report_markdown

        return write_output(report_markdown(report, tasks=not args.summary_only), args.output)
    elif args.format == "html":
        from agenttrace.report.html import report_html

        return write_output(report_html(report), args.output or "report.html")
    else:
        from agenttrace.report.terminal import make_console, plain_text, render_report

        if args.output:
            return write_output(plain_text(lambda console: render_report(report, console, tasks=not args.summary_only)),
                                args.output)
        render_report(report, make_console(), tasks=not args.summary_only)
    return 0
