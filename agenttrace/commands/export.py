"""`agenttrace export`: replay trace files to an OTLP collector or Jaeger, write Jaeger JSON, or
insert them into the OpenTelemetry Collector ClickHouse exporter's table.

Exit status: 0 when what could be read was delivered (lines that could not be read are listed
on stderr, as `report` does); 1 when the endpoint was unreachable or refused a batch, or the
--jaeger-json file could not be written (a full or read-only disk: one line, nothing written); 2 for a
usage error or inputs with no span at all. No torch on this path.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan


def register(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser(
        "export",
        help="replay trace files to an OTLP collector / Jaeger, or convert them to Jaeger JSON",
        description="Replay recorded traces (OTLP/JSON lines) to an OTLP endpoint with their original ids "
        "and times, and/or write them in Jaeger's JSON model to open in Jaeger UI (Search > JSON File).",
    )
    export.add_argument("paths", nargs="+", metavar="FILE",
                        help="trace files (traces/*.jsonl) or folders; with --clickhouse also Parquet files of the "
                        "exporter's columns (a `SELECT * FROM otel_traces FORMAT Parquet`), inserted as they are")
    export.add_argument(
        "--otlp", nargs="?", const="", default=None, metavar="URL",
        help="send the spans over OTLP (bare flag: OTEL_EXPORTER_OTLP_ENDPOINT, else Jaeger on "
        "http://localhost:4318, or :4317 with --otlp-protocol grpc)",
    )
    export.add_argument(
        "--otlp-protocol", choices=("http/protobuf", "grpc"), default=None,
        help="OTLP transport (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)",
    )
    export.add_argument("--batch-size", type=int, default=512, help="spans per OTLP request (default 512)")
    export.add_argument(
        "--timeout", type=float, default=10.0, metavar="SECONDS",
        help="give up on a batch after this long, retries with backoff included (default 10)",
    )
    export.add_argument("--jaeger-json", metavar="OUT", help="write Jaeger's JSON model to OUT ('-': stdout)")
    export.add_argument(
        "--clickhouse", metavar="URL",
        help="insert the spans into the OpenTelemetry Collector ClickHouse exporter's table (created if absent): "
        "http(s)://[user:password@]host[:port][/database], or chdb:FOLDER",
    )
    export.add_argument("--table", default="otel_traces", help="with --clickhouse: the table (default otel_traces)")
    export.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agenttrace.errors import ReplayError
    from agenttrace.telemetry.exporters import resolve_otlp_endpoint
    from agenttrace.traces.otlp_file import read_spans
    from agenttrace.traces.replay import replay_spans

    if args.otlp is None and args.jaeger_json is None and args.clickhouse is None:
        print("agenttrace export: say where to: --otlp [URL], --jaeger-json OUT and/or --clickhouse URL", file=sys.stderr)
        return 2
    if args.batch_size < 1:
        print(f"agenttrace export: --batch-size must be at least 1, not {args.batch_size}", file=sys.stderr)
        return 2
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        print(f"agenttrace export: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    parquet = [p for p in args.paths if Path(p).suffix == ".parquet"]
    paths = [p for p in args.paths if Path(p).suffix != ".parquet"]
    if parquet:
        if args.clickhouse is None or args.otlp is not None or args.jaeger_json is not None:
            print("agenttrace export: Parquet files (the ClickHouse exporter's columns) go to --clickhouse only",
                  file=sys.stderr)
            return 2
        status = _insert_parquet(parquet, args.clickhouse, args.table)
        if status or not paths:
            return status
    endpoint = None
    if args.otlp is not None:
        try:
            endpoint = resolve_otlp_endpoint(args.otlp, args.otlp_protocol)
        except ValueError as exc:
            print(f"agenttrace export: {exc}", file=sys.stderr)
            return 2

    recorded = read_spans(paths)
    for problem in recorded.problems:
        print(f"agenttrace export: skipped {problem}", file=sys.stderr)
    if not recorded.spans:
        print(f"agenttrace export: no spans in {', '.join(paths)}; nothing to export", file=sys.stderr)
        return 2
    status = 0  # partial inputs: what was read goes out, the rest is listed above
    # stdout carries the JSON when OUT is '-': the summaries go to stderr then
    say = sys.stderr if args.jaeger_json == "-" else sys.stdout
    what = f"{len(recorded.spans)} spans ({len(recorded.trace_ids)} traces) from {len(recorded.files)} file(s)"

    if args.jaeger_json is not None and not _write_jaeger_json(recorded.spans, args.jaeger_json, what, say):
        status = 1  # the file failed; --clickhouse and --otlp below still get the spans
    if args.clickhouse is not None:
        from agenttrace.errors import ClickHouseError
        from agenttrace.traces.clickhouse import connect
        from agenttrace.traces.clickhouse_export import export_spans

        try:
            rows = export_spans(connect(args.clickhouse), args.table, recorded.spans)
        except ClickHouseError as exc:
            print(f"agenttrace export: {exc}", file=sys.stderr)
            return 1
        print(f"inserted {rows} spans ({len(recorded.trace_ids)} traces) into {args.clickhouse} {args.table}", file=say)
    if endpoint is not None:
        url, protocol = endpoint
        try:
            result = replay_spans(
                recorded.spans, url, protocol, batch_size=args.batch_size, timeout_s=args.timeout
            )
        except ReplayError as exc:
            print(f"agenttrace export: {exc}", file=sys.stderr)
            return 1
        print(
            f"sent {result.spans_sent} spans ({len(recorded.trace_ids)} traces) to {url} over {protocol} "
            f"in {result.batches} batch(es), {result.seconds:.2f} s",
            file=say,
        )
    return status


def _insert_parquet(files: list[str], url: str, table: str) -> int:
    """Each Parquet file's rows into the exporter's `table` (created if absent), as they are: a
    store dumped to Parquet goes back into one (`agenttrace report --clickhouse` then reads it,
    its figures computed there). Refused, before anything is inserted, when a file lacks the
    columns the report reads (read with pyarrow where it is installed)."""
    from agenttrace.errors import ClickHouseError
    from agenttrace.traces.clickhouse import connect
    from agenttrace.traces.clickhouse_export import export_parquet
    from agenttrace.traces.parquet_input import problem

    for f in files:
        why = problem(f)
        if why is not None:
            print(f"agenttrace export: {why}; nothing inserted", file=sys.stderr)
            return 2
    try:
        store = connect(url)
        for f in files:
            rows = export_parquet(store, table, str(Path(f).resolve()))
            print(f"inserted {rows} spans from {f} into {url} {table}")
    except ClickHouseError as exc:
        print(f"agenttrace export: {exc}", file=sys.stderr)
        return 1
    return 0


def _write_jaeger_json(spans: Sequence[ReadableSpan], out: str, what: str, say: TextIO) -> bool:
    """Write Jaeger's JSON model of `spans` to `out` (a path, written whole, or '-' for stdout).
    False, with one line on stderr, when the file could not be written (a full or read-only disk):
    then nothing was written, and the other destinations still get the spans."""
    from agenttrace.telemetry.files import unwritten, write_whole
    from agenttrace.traces.jaeger_json import to_jaeger

    text = to_jaeger(spans).model_dump_json()
    if out == "-":
        sys.stdout.write(text + "\n")
        where = "stdout"
    else:
        path = Path(out)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_whole(path, text + "\n")
        except OSError as exc:
            print(f"agenttrace export: {unwritten(path, exc)}", file=sys.stderr)
            return False
        where = str(path)
    print(f"wrote {what} to {where} (Jaeger JSON: open it in Jaeger UI > Search > JSON File)", file=say)
    return True
