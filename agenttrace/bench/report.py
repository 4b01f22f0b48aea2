"""`agenttrace bench report`: how long and how much memory loading and analysing a large trace
takes. Generates synthetic traces of realistic shape (`bench/synthetic.py`, written as our
exporter writes them), then loads and analyses each in a fresh process and prints the sizes side
by side.

Each path in a fresh process, side by side (issue 17): `legacy` is today's one pass, `fast` the
stream of whole traces, `clickhouse` the same traces read back from the exporter's table over chdb,
`summary` the stream folded into a summary in bounded memory (`report --sample`). Traces above
FILE_SPANS spans are written as a folder of files of FILE_SPANS spans each.
`columnar` the figures as SQL on chdb (agenttrace/columnar, `report --engine columnar`), and
`clickhouse_columnar` the same statements run inside the exporter's table's store (the pushdown of
`report --clickhouse URL --engine columnar`), only rows of figures coming back. `columnar_summary`
and `clickhouse_columnar_summary`: `report --sample` on those two, the run figures made as
aggregates in the engine (agenttrace/columnar/summary.py), a few kilobytes back.
Targets (issue 32): 1,000,000 spans end to end in <= 5 s and <= 1 GB peak memory.
`--foreign N` and `--own-spans SHARE` add what the columnar queries do not state (bench/mixed.py):
other instrumentations' traces, and a user's own spans around ours; `--client-spans SHARE` HTTP and
database client spans of OpenTelemetry's client instrumentations under ours, `--chat-spans SHARE`
the model client's GenAI spans under our generations (both mapped in the table: columnar/roles.py); `--long-horizon N` our own long-horizon agents' traces (compactions,
sub-agents).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agenttrace.bench.mixed import add_chat_spans, add_client_spans, add_own_spans, append_copies, append_foreign, long_horizon_lines
from agenttrace.bench.synthetic import generate
from agenttrace.clock import default_clock, elapsed_s

TARGET_S_PER_MILLION = 5.0
TARGET_MB = 1024.0
FILE_SPANS = 1_000_000  # spans per file of a larger trace (a folder)
SUMMARY_SAMPLE = 100_000  # the summary path's sample per distribution


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="time and peak memory to load and analyse synthetic traces (default 100k and 1M spans)")
    p.add_argument("--spans", type=int, nargs="+", default=[100_000, 1_000_000], help="trace sizes to measure")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", metavar="DIR", help="keep the generated traces in DIR")
    p.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                   help="comma-separated: legacy (today's one pass), fast (the stream of whole traces), clickhouse (the "
                        "same traces from ClickHouse's exporter table, over chdb), summary (the stream folded into a "
                        f"summary in bounded memory, samples of {SUMMARY_SAMPLE:,}), columnar (the figures as SQL "
                        f"on chdb, report --engine columnar), clickhouse_columnar (those statements inside the "
                        f"exporter's table's store), columnar_summary and clickhouse_columnar_summary (report "
                        f"--sample on those: the run figures as aggregates in the engine), parquet_columnar and "
                        f"parquet_columnar_summary (report FILE.parquet of that store dumped to Parquet, and with "
                        f"--sample) "
                        f"(default: {','.join(DEFAULT_PATHS)})")
    p.add_argument("--json", action="store_true",
                   help='print a list of records {"spans", "path", "load_s", "analyse_s", "peak_mb"} (and '
                        '"workers_peak_mb": the largest peak of the processes that read other instrumentations\' traces)')
    p.add_argument("--foreign", type=int, default=0, metavar="COPIES",
                   help="append the recorded framework traces (traces/frameworks: other instrumentations') this many "
                        "times, fresh trace ids each (bench/mixed.py)")
    p.add_argument("--no-delegations", action="store_true",
                   help="with --foreign: only the framework traces that delegate to no sub-agent")
    p.add_argument("--long-horizon", type=int, default=0, metavar="COPIES",
                   help="append the long-horizon demo's trace (traces/long_horizon: compactions, sub-agents) this "
                        "many times, fresh trace ids each")
    p.add_argument("--own-spans", type=float, default=0.0, metavar="SHARE",
                   help="add a child span of no known convention (a user's own) under this share of the spans")
    p.add_argument("--client-spans", type=float, default=0.0, metavar="SHARE",
                   help="add an HTTP or database client span (OpenTelemetry's client conventions) under this share of "
                        "the generation and tool spans")
    p.add_argument("--chat-spans", type=float, default=0.0, metavar="SHARE",
                   help="add the model client instrumentation's GenAI chat span under this share of the generations")
    p.set_defaults(func=run)


PATHS = ("legacy", "fast", "clickhouse", "summary", "columnar", "clickhouse_columnar", "columnar_summary",
         "clickhouse_columnar_summary", "parquet_columnar", "parquet_columnar_summary")
DEFAULT_PATHS = ("fast", "columnar", "clickhouse", "clickhouse_columnar")


def measure(path: str, mode: str, store: str | None = None) -> dict[str, float]:
    """Load and analyse one trace in this process by one path: seconds of each phase, peak RSS.

    legacy: today's one pass (load every span, then analyse the tree). fast: the stream of whole
    traces (traces/stream.py), its reading timed apart from the analysis of each batch. clickhouse:
    the same traces read back from `store` (a chdb folder the parent filled), SQL and rows timed
    as the load. summary: fast, folded into a summary in bounded memory."""
    from agenttrace.report.batched import ReportBuilder

    clock = default_clock()
    if mode.startswith("parquet"):
        assert store is not None
        return _measure_parquet(store, clock, SUMMARY_SAMPLE if mode.endswith("_summary") else None)
    if mode.startswith(("columnar", "clickhouse_columnar")):
        return _measure_columnar(path, clock, store if mode.startswith("clickhouse") else None,
                                 SUMMARY_SAMPLE if mode.endswith("_summary") else None)
    if mode == "legacy":
        from agenttrace.report.build import build_report
        from agenttrace.traces.load import load_spans

        t0 = clock.now_ns()
        loaded = load_spans([path])
        t1 = clock.now_ns()
        report = build_report(loaded.spans, [path], loaded.problems)
        load_s, analyse_s = (t1 - t0) / 1e9, elapsed_s(clock, t1)
        spans = len(loaded.spans)
    else:
        from agenttrace.traces.stream import no_gc

        problems: list[str] = []
        builder = ReportBuilder(summary=SUMMARY_SAMPLE if mode == "summary" else None)
        if mode in ("fast", "summary"):
            from agenttrace.traces.stream import stream_traces

            batches = (b for b in stream_traces([path], problems))
            add = lambda b: builder.add(b.spans, b.seq)
            sources = [path]
        else:
            from agenttrace.traces.clickhouse import ClickHouseQuery, connect
            from agenttrace.traces.clickhouse_read import read_traces

            assert store is not None
            query = ClickHouseQuery(store, "otel_traces")
            batches = read_traces(connect(store), query, problems)
            add = builder.add
            sources = [query.describe()]
        load_s = analyse_s = 0.0
        with no_gc():
            while True:
                t0 = clock.now_ns()
                batch = next(batches, None)
                t1 = clock.now_ns()
                load_s += (t1 - t0) / 1e9
                if batch is None:
                    break
                add(batch)
                analyse_s += elapsed_s(clock, t1)
            t1 = clock.now_ns()
            report = builder.report(sources, problems)
            analyse_s += elapsed_s(clock, t1)
        spans = builder.spans
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {"spans": spans, "tasks": report.run.tasks + report.run.partial_tasks, "load_s": load_s, "analyse_s": analyse_s, "peak_mb": peak_mb,
            "problems": len(report.problems)}


def _measure_columnar(path: str, clock, store: str | None = None, sample: int | None = None) -> dict[str, float]:
    """The columnar engine (agenttrace/columnar): load is the files (or, with `store`, the
    exporter's table in that chdb folder) into the span table, analyse the SQL, the rows back and
    the report's records (with `sample`, the summary's aggregates); bytes_back the rows' bytes."""
    from agenttrace.columnar.engine import Engine
    from agenttrace.traces.clickhouse import ClickHouseQuery, connect
    from agenttrace.traces.load import iter_trace_files

    t0 = clock.now_ns()
    if sample:
        from agenttrace.columnar.batches import BATCH_BYTES, batches
        from agenttrace.columnar.engine import report_files, report_store

        # several batches of files, or a store (report_store reads it a batch of traces at a
        # time where it holds more than one): loading and analysing interleave, all counted as analyse
        if store or len(batches(list(iter_trace_files([path])), BATCH_BYTES)) > 1:
            return _record(report_store(ClickHouseQuery(store, "otel_traces"), sample=sample) if store
                           else report_files([path], sample=sample), elapsed_s(clock, t0))
    if store:
        engine = Engine(store=connect(store))
        inputs = engine.load_store(ClickHouseQuery(store, "otel_traces"))
    else:
        engine = Engine()
        inputs = engine.load_files(list(iter_trace_files([path])))
    t1 = clock.now_ns()
    outcome = engine.figures([store or path], inputs, [], sample)
    if outcome.report is None:
        raise RuntimeError(f"the columnar engine does not cover {outcome.reason}")
    report = outcome.report
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"spans": sum(i.spans for i in inputs), "tasks": report.run.tasks + report.run.partial_tasks,
            "load_s": (t1 - t0) / 1e9, "analyse_s": elapsed_s(clock, t1), "peak_mb": peak_mb,
            "problems": len(report.problems), "bytes_back": outcome.bytes_back,
            "workers_peak_mb": outcome.workers_peak_mb}


def _measure_parquet(parquet: str, clock, sample: int | None) -> dict[str, float]:
    """`report FILE.parquet`: the file read where it lies (traces/parquet_input.py), analyse the
    whole report (with `sample`, the summary's aggregates)."""
    from agenttrace.columnar.engine import report_store
    from agenttrace.traces.clickhouse import ClickHouseQuery

    t0 = clock.now_ns()
    return _record(report_store(ClickHouseQuery("chdb:", files=(parquet,)), sample=sample), elapsed_s(clock, t0))


def _record(outcome, seconds: float) -> dict[str, float]:
    """The record of a report the engine made in one go (loading and analysing interleave: all
    counted as analyse)."""
    if outcome.report is None:
        raise RuntimeError(f"the columnar engine does not cover {outcome.reason}")
    return {"spans": sum(i.spans for i in outcome.report.inputs), "tasks": outcome.report.run.tasks,
            "load_s": 0.0, "analyse_s": seconds, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "problems": len(outcome.report.problems), "bytes_back": outcome.bytes_back,
            "workers_peak_mb": outcome.workers_peak_mb}


def dump_parquet(store: str, out: str) -> int:
    """The exporter's table of a chdb folder dumped to a Parquet file (not measured); its rows."""
    from agenttrace.traces.clickhouse import connect
    from agenttrace.traces.clickhouse_params import quoted

    db = connect(store)
    db.command(f"INSERT INTO FUNCTION file({quoted(out)}, Parquet) SELECT * FROM otel_traces")
    return int(db.rows("SELECT count() FROM otel_traces")[0][0])


def fill_store(path: str, store: str) -> int:
    """Export a trace file into a chdb folder with the exporter's schema (not measured)."""
    from agenttrace.traces.clickhouse import connect
    from agenttrace.traces.clickhouse_export import export_spans
    from agenttrace.traces.otlp_file import iter_spans

    problems: list[str] = []
    return export_spans(connect(store), "otel_traces", (s for line in iter_spans([path], problems) for s in line))


@dataclass
class Row:
    spans: int
    path: str
    file_mb: float
    tasks: int
    load_s: float
    analyse_s: float
    peak_mb: float
    bytes_back: int | None = None  # columnar: the rows' bytes that came back to Python
    workers_peak_mb: float = 0.0  # columnar: the largest peak of the processes that read other instrumentations' traces


def _child(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "agenttrace.bench.report", *args], check=False, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise SystemExit(f"agenttrace bench report: unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="agenttrace-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    # progress on stderr: with --json, stdout carries only the records
    console = Console(width=max(150, Console().width), stderr=args.json)
    clock = default_clock()
    for n in args.spans:
        big = n > FILE_SPANS
        path = folder / (f"synthetic-{n}" if big else f"synthetic-{n}.jsonl")
        t0 = clock.now_ns()
        written = generate(path, n, args.seed, FILE_SPANS if big else None)
        if args.own_spans:
            written += add_own_spans(path, args.own_spans)
        if args.client_spans:
            written += add_client_spans(path, args.client_spans)
        if args.chat_spans:
            written += add_chat_spans(path, args.chat_spans)
        if args.foreign:
            try:
                written += append_foreign(path, args.foreign, delegations=not args.no_delegations)
            except FileNotFoundError as exc:
                console.print(f"[red]agenttrace bench report: --foreign needs {exc}[/]")
                return 2
        if args.long_horizon:
            try:
                written += append_copies(path, long_horizon_lines(), args.long_horizon, name="long_horizon.jsonl")
            except FileNotFoundError as exc:
                console.print(f"[red]agenttrace bench report: --long-horizon needs {exc}[/]")
                return 2
        size_mb = sum(f.stat().st_size for f in (path.iterdir() if big else [path])) / 1e6
        console.print(f"generated {written} spans ({size_mb:.0f} MB) in {elapsed_s(clock, t0):.1f} s")
        store = parquet = None
        if any(p.startswith(("clickhouse", "parquet")) for p in paths):
            store = f"chdb:{folder / f'chdb-{n}'}"
            t0 = clock.now_ns()
            filled = _child("--fill", str(path), store)["rows"]
            console.print(f"exported {filled} spans into {store} (the exporter's table) in {elapsed_s(clock, t0):.1f} s")
        if any(p.startswith("parquet") for p in paths):
            parquet = str(folder / f"spans-{n}.parquet")
            _child("--dump", store, parquet)
            console.print(f"dumped that table into {parquet}")
        for mode in paths:
            where = store if mode.startswith("clickhouse") else parquet if mode.startswith("parquet") else None
            try:
                m = _child(str(path), mode, *([where] if where else []))
            except RuntimeError as exc:
                console.print(f"[red]measuring {path} ({mode}) failed:[/]\n{exc}")
                return 1
            rows.append(Row(int(m["spans"]), mode, size_mb, int(m["tasks"]), m["load_s"], m["analyse_s"],
                            m["peak_mb"], m.get("bytes_back"), m.get("workers_peak_mb") or 0.0))
            workers = f" (+ up to {rows[-1].workers_peak_mb:.0f} MB in each worker process)" if rows[-1].workers_peak_mb else ""
            console.print(f"  {mode}: {m['load_s'] + m['analyse_s']:.1f} s, {m['peak_mb']:.0f} MB peak{workers}")
        if not args.keep:
            if big:
                shutil_rmtree(path)
            else:
                os.remove(path)
            if store:
                import shutil

                shutil.rmtree(store.removeprefix("chdb:"), ignore_errors=True)
            if parquet:
                os.remove(parquet)
    if args.json:
        print(json.dumps([{"spans": r.spans, "path": r.path, "load_s": round(r.load_s, 3), "analyse_s": round(r.analyse_s, 3),
                           "peak_mb": round(r.peak_mb, 1), "file_mb": round(r.file_mb, 1),
                           **({"bytes_back_share": round(r.bytes_back / (r.file_mb * 1e6), 4)} if r.bytes_back else {}),
                           **({"workers_peak_mb": round(r.workers_peak_mb, 1)} if r.workers_peak_mb else {})}
                          for r in rows], indent=2))
    else:
        _table(console, rows, Table)
    if not args.keep:
        shutil_rmtree(folder)
    return 0


def shutil_rmtree(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _table(console, rows: list[Row], table_type) -> None:
    table = table_type(title=f"load and analyse a trace, each path in a fresh process (targets: 1M spans in <= "
                             f"{TARGET_S_PER_MILLION:g} s and <= {TARGET_MB:g} MB)", title_justify="left")
    for col in ("spans", "path", "file MB", "tasks", "load s", "analyse s", "total s", "us/span", "peak MB",
                "vs fast", "time / target", "memory / target"):
        table.add_column(col, justify="right" if col != "path" else "left", no_wrap=True)
    fast = {r.spans: r.load_s + r.analyse_s for r in rows if r.path == "fast"}
    for r in rows:
        total = r.load_s + r.analyse_s
        scale = r.spans / 1e6
        base = fast.get(r.spans)
        table.add_row(f"{r.spans:,}", r.path, f"{r.file_mb:.0f}", f"{r.tasks:,}", f"{r.load_s:.1f}", f"{r.analyse_s:.1f}",
                      f"{total:.1f}", f"{1e6 * total / r.spans:.1f}", f"{r.peak_mb:.0f}",
                      f"{base / total:.2f}x" if base and r.path != "fast" else "-",
                      f"{total / (TARGET_S_PER_MILLION * scale):.2f}",
                      f"{r.peak_mb / TARGET_MB:.2f}" if r.spans >= 1_000_000 else "-")
    console.print(table)


if __name__ == "__main__":
    if sys.argv[1] == "--fill":
        print(json.dumps({"rows": fill_store(sys.argv[2], sys.argv[3])}))
    elif sys.argv[1] == "--dump":
        print(json.dumps({"rows": dump_parquet(sys.argv[2], sys.argv[3])}))
    else:
        print(json.dumps(measure(sys.argv[1], sys.argv[2], *sys.argv[3:4])))
