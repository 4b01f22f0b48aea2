"""The input options `agenttrace report` and `agenttrace compare` share: trace files and folders,
a running Jaeger's query API (`--jaeger URL --service NAME ...`), and (report) a ClickHouse table
(`--clickhouse URL --table otel_traces ...`) or a Phoenix project (`--phoenix URL --project NAME`),
both windowed by `--since`/`--until`."""

from __future__ import annotations

import argparse

from agenttrace.clock import default_clock
from agenttrace.errors import InputError
from agenttrace.traces.jaeger_input import JaegerQuery, parse_lookback


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """--jaeger URL --service NAME [--lookback 1h] [--limit 20] [--operation OP]."""
    g = parser.add_argument_group("Jaeger query API (instead of, or as well as, files)")
    g.add_argument("--jaeger", metavar="URL", help="a Jaeger query service, e.g. http://localhost:16686")
    g.add_argument("--service", help="the service whose traces to read (required with --jaeger)")
    g.add_argument("--lookback", default="1h", help="how far back to look, e.g. 30m, 2h, 1d (default 1h)")
    g.add_argument("--limit", type=int, default=20, help="at most this many traces (default 20; 0: all in the lookback)")
    g.add_argument("--operation", help="only traces with this root operation")
    g.add_argument("--page-traces", type=int, default=100,
                   help="traces per request when reading more than that: time windows walked back from now, one "
                        "page of spans held at a time (default 100)")


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """--clickhouse URL [--table otel_traces] [--since 2h] [--until ...] [--service NAME]."""
    g = parser.add_argument_group("ClickHouse (the OpenTelemetry Collector exporter's table) instead of files")
    g.add_argument("--clickhouse", metavar="URL",
                   help="http(s)://[user:password@]host[:port][/database] (the official client), or chdb:FOLDER "
                        "(ClickHouse's engine in this process)")
    g.add_argument("--table", default="otel_traces", help="the traces table (default otel_traces)")
    g.add_argument("--since", help="traces with a span from this time on (--phoenix: traces that started from then "
                   "on): a lookback (30m, 2h, 1d) or an ISO time")
    g.add_argument("--until", help="... and before this time (a lookback or an ISO time; default: now)")
    g.add_argument("--batch-traces", type=int, default=500,
                   help="traces read and analysed at a time (default 500; at most 100 with --phoenix)")
    p = parser.add_argument_group("Arize Phoenix (its REST API, Phoenix 13.15+) instead of files; also --since/--until")
    p.add_argument("--phoenix", metavar="URL", help="a Phoenix server, e.g. http://localhost:6006")
    p.add_argument("--project", default="default", help="the Phoenix project (default: default)")
    p.add_argument("--phoenix-api-key", metavar="KEY",
                   help="sent as a bearer token when Phoenix has authentication on (default: PHOENIX_API_KEY)")
    p.add_argument("--phoenix-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="the deadline of one request, first byte to last (default 30)")
    p.add_argument("--phoenix-max-mb", type=int, default=4096,
                   help="stop after reading this much from Phoenix, and say so (default 4096)")


def _time_ns(text: str, now_s: float) -> int:
    """A lookback (`2h`) back from now, or an ISO 8601 time (UTC when it names no zone)."""
    from datetime import datetime, timezone

    try:
        return int((now_s - parse_lookback(text)) * 1e9)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InputError(f"{text!r}: expected a lookback (30m, 2h, 1d) or an ISO time (2026-12-02T10:00)") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1e9)


def clickhouse_query(args: argparse.Namespace):
    """The ClickHouseQuery the options ask for, or None without --clickhouse."""
    if not getattr(args, "clickhouse", None):
        return None
    from agenttrace.traces.clickhouse import ClickHouseQuery

    if args.batch_traces < 1:
        raise InputError(f"--batch-traces must be at least 1, not {args.batch_traces}")
    now = default_clock().now_ns() / 1e9  # epoch seconds
    return ClickHouseQuery(args.clickhouse, args.table, since_ns=_time_ns(args.since, now) if args.since else None,
                           until_ns=_time_ns(args.until, now) if args.until else None, service=args.service,
                           batch_traces=args.batch_traces)


def phoenix_query(args: argparse.Namespace):
    """The PhoenixQuery the options ask for, or None without --phoenix."""
    if not getattr(args, "phoenix", None):
        return None
    import os

    from agenttrace.traces.phoenix import MAX_IDS_PER_REQUEST, PhoenixQuery

    if not args.phoenix.startswith(("http://", "https://")):
        raise InputError(f"--phoenix {args.phoenix!r}: expected Phoenix's http(s):// URL, e.g. http://localhost:6006")
    if args.batch_traces < 1 or args.phoenix_timeout <= 0 or args.phoenix_max_mb < 1:
        raise InputError("--batch-traces, --phoenix-timeout and --phoenix-max-mb must be positive")
    now = default_clock().now_ns() / 1e9  # epoch seconds
    return PhoenixQuery(args.phoenix, args.project, since_ns=_time_ns(args.since, now) if args.since else None,
                        until_ns=_time_ns(args.until, now) if args.until else None,
                        api_key=args.phoenix_api_key or os.environ.get("PHOENIX_API_KEY") or None,
                        batch_traces=min(args.batch_traces, MAX_IDS_PER_REQUEST), timeout_s=args.phoenix_timeout,
                        max_total_bytes=args.phoenix_max_mb << 20)


def jaeger_query(args: argparse.Namespace) -> JaegerQuery | None:
    if not args.jaeger:
        return None
    if not args.service:
        raise InputError("--jaeger needs --service NAME (the service.name your agent reports under)")
    try:
        parse_lookback(args.lookback)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    return JaegerQuery(args.jaeger, args.service, lookback=args.lookback, limit=args.limit, operation=args.operation)
