"""The input options `agenttrace report` and `agenttrace compare` share: trace files and folders,
a running Jaeger's query API (`--jaeger URL --service NAME ...`), and (report) a ClickHouse table
(`--clickhouse URL --table otel_traces ...`) or a Phoenix project (`--phoenix URL --project NAME`),
both windowed by `--since`/`--until`; and the bounds of one read of a remote source (`--deadline`,
`--max-mb`, `--max-requests`, `--max-answer-mb`).

Every number is range-checked here, where it is parsed: one out of range is an InputError (one
line, exit 2), never a traceback further on. Times and lookbacks follow traces/time_window.py:
`--until 2300-01-01` is no upper bound, `--since 2300-01-01` selects nothing, `infh` and `1e300d`
are refused."""

from __future__ import annotations

import argparse

from agenttrace.clock import default_clock
from agenttrace.errors import InputError
from agenttrace.traces.bounded_http import ReadLimits
from agenttrace.traces.jaeger_input import JaegerQuery
from agenttrace.traces.time_window import parse_lookback, time_ns

_DEFAULT = ReadLimits()
_MiB = 1 << 20
_WEEK_S = 7 * 86400


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """--jaeger URL --service NAME [--lookback 1h] [--limit 20] [--operation OP], and the bounds of
    one remote read (add_read_limits)."""
    g = parser.add_argument_group("Jaeger query API (instead of, or as well as, files)")
    g.add_argument("--jaeger", metavar="URL", help="a Jaeger query service, e.g. http://localhost:16686")
    g.add_argument("--service", help="the service whose traces to read (required with --jaeger)")
    g.add_argument("--lookback", default="1h", help="how far back to look, e.g. 30m, 2h, 1d (default 1h; at most "
                   "36500d)")
    g.add_argument("--limit", type=int, default=20, help="at most this many traces (default 20; 0: all in the lookback)")
    g.add_argument("--operation", help="only traces with this root operation")
    g.add_argument("--page-traces", type=int, default=100,
                   help="traces per request when reading more than that: time windows walked back from now, one "
                        "page of spans held at a time (default 100; halved while an answer is over --max-answer-mb)")
    add_read_limits(parser)


def add_read_limits(parser: argparse.ArgumentParser) -> None:
    """--deadline SECONDS --max-mb MB --max-requests N --max-answer-mb MB: the ReadLimits of one
    read of a remote source (read_limits)."""
    g = parser.add_argument_group(
        "Bounds of one read of a remote source (--jaeger, --clickhouse, --phoenix)",
        "The read stops at the first bound it meets; the report covers what was read before and says what was cut "
        "and why. The defaults are far above a real read: raise one when its line says so.")
    g.add_argument("--deadline", type=float, default=_DEFAULT.deadline_s, metavar="SECONDS",
                   help=f"the whole read, first request to last byte (default {_DEFAULT.deadline_s:g})")
    g.add_argument("--max-mb", type=int, default=_DEFAULT.max_bytes // _MiB, metavar="MB",
                   help=f"bytes read in all (default {_DEFAULT.max_bytes // _MiB})")
    g.add_argument("--max-requests", type=int, default=_DEFAULT.max_requests, metavar="N",
                   help=f"requests (pages) in all (default {_DEFAULT.max_requests})")
    g.add_argument("--max-answer-mb", type=int, default=_DEFAULT.max_answer_bytes // _MiB, metavar="MB",
                   help="one answer, held whole while it is parsed: this bounds memory (default "
                        f"{_DEFAULT.max_answer_bytes // _MiB})")


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """--clickhouse URL [--table otel_traces] [--since 2h] [--until ...] [--service NAME]."""
    g = parser.add_argument_group("ClickHouse (the OpenTelemetry Collector exporter's table) instead of files")
    g.add_argument("--clickhouse", metavar="URL",
                   help="http(s)://[user:password@]host[:port][/database] (the official client), or chdb:FOLDER "
                        "(ClickHouse's engine in this process)")
    g.add_argument("--table", default="otel_traces", help="the traces table (default otel_traces)")
    g.add_argument("--since", help="traces with a span from this time on (--phoenix: traces that started from then "
                   "on): a lookback (30m, 2h, 1d; at most 36500d) or an ISO time (UTC unless it names a zone)")
    g.add_argument("--until", help="... and before this time (a lookback or an ISO time; default: now; a time after "
                   "2262-04-11 is no upper bound)")
    g.add_argument("--batch-traces", type=int, default=500,
                   help="traces read and analysed at a time (default 500; at most 100 with --phoenix)")
    p = parser.add_argument_group("Arize Phoenix (its REST API, Phoenix 13.15+) instead of files; also --since/--until")
    p.add_argument("--phoenix", metavar="URL", help="a Phoenix server, e.g. http://localhost:6006")
    p.add_argument("--project", default="default", help="the Phoenix project (default: default)")
    p.add_argument("--phoenix-api-key", metavar="KEY",
                   help="sent as a bearer token when Phoenix has authentication on (default: PHOENIX_API_KEY)")
    p.add_argument("--phoenix-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="the deadline of one request, first byte to last (default 30; the whole read: --deadline)")
    p.add_argument("--phoenix-max-mb", type=int, dest="max_mb", default=argparse.SUPPRESS, metavar="MB",
                   help="the same as --max-mb (kept for older scripts)")


def _in_range(option: str, value: float, low: float, high: float, *, above_low: bool = False) -> None:
    """InputError unless low <= value <= high (low < value with `above_low`); NaN is never in."""
    if not (low < value <= high if above_low else low <= value <= high):
        bound = f"more than {low:g}" if above_low else f"{low:g}"
        raise InputError(f"{option} {value!r}: expected {bound} to {high:g}")


def read_limits(args: argparse.Namespace) -> ReadLimits:
    """The ReadLimits the options ask for (--deadline, --max-mb, --max-requests,
    --max-answer-mb). Raises InputError for a number out of range."""
    _in_range("--deadline", args.deadline, 0, _WEEK_S, above_low=True)
    _in_range("--max-mb", args.max_mb, 1, 1 << 20)  # a TiB
    _in_range("--max-requests", args.max_requests, 1, 10**9)
    _in_range("--max-answer-mb", args.max_answer_mb, 1, 1 << 16)
    return ReadLimits(deadline_s=args.deadline, max_bytes=args.max_mb * _MiB, max_requests=args.max_requests,
                      max_answer_bytes=args.max_answer_mb * _MiB)


def _time_ns(text: str, now_s: float) -> int:
    """A lookback (`2h`) back from now, or an ISO 8601 time (UTC when it names no zone), as epoch
    nanoseconds clamped to what a span can carry (time_window.time_ns). Raises InputError for
    anything else, a lookback of more than a century among them."""
    try:
        return time_ns(text, now_s)
    except ValueError as exc:
        raise InputError(str(exc)) from exc


def clickhouse_query(args: argparse.Namespace, files: list[str] | None = None):
    """The ClickHouseQuery the options ask for (within read_limits), or None without
    --clickhouse. `files`: Parquet files of the exporter's columns read where they lie instead
    (ClickHouse's engine in this process). Raises InputError for a number out of range."""
    if not (files or getattr(args, "clickhouse", None)):
        return None
    from agenttrace.traces.clickhouse import ClickHouseQuery

    if args.batch_traces < 1:
        raise InputError(f"--batch-traces must be at least 1, not {args.batch_traces}")
    now = default_clock().now_ns() / 1e9  # epoch seconds
    return ClickHouseQuery("chdb:" if files else args.clickhouse, args.table,
                           since_ns=_time_ns(args.since, now) if args.since else None,
                           until_ns=_time_ns(args.until, now) if args.until else None, service=args.service,
                           batch_traces=args.batch_traces, limits=read_limits(args), files=tuple(files or ()))


def phoenix_query(args: argparse.Namespace):
    """The PhoenixQuery the options ask for, or None without --phoenix. Raises InputError for a
    bad URL or a number out of range."""
    if not getattr(args, "phoenix", None):
        return None
    import os

    from agenttrace.traces.phoenix import MAX_IDS_PER_REQUEST, PhoenixQuery

    if not args.phoenix.startswith(("http://", "https://")):
        raise InputError(f"--phoenix {args.phoenix!r}: expected Phoenix's http(s):// URL, e.g. http://localhost:6006")
    _in_range("--batch-traces", args.batch_traces, 1, 10**9)
    _in_range("--phoenix-timeout", args.phoenix_timeout, 0, _WEEK_S, above_low=True)
    limits = read_limits(args)
    now = default_clock().now_ns() / 1e9  # epoch seconds
    return PhoenixQuery(args.phoenix, args.project, since_ns=_time_ns(args.since, now) if args.since else None,
                        until_ns=_time_ns(args.until, now) if args.until else None,
                        api_key=args.phoenix_api_key or os.environ.get("PHOENIX_API_KEY") or None,
                        batch_traces=min(args.batch_traces, MAX_IDS_PER_REQUEST), timeout_s=args.phoenix_timeout,
                        limits=limits)


def jaeger_query(args: argparse.Namespace) -> JaegerQuery | None:
    """The JaegerQuery the options ask for, or None without --jaeger. Raises InputError without
    --service, or for a lookback or number out of range."""
    if not args.jaeger:
        return None
    if not args.service:
        raise InputError("--jaeger needs --service NAME (the service.name your agent reports under)")
    try:
        parse_lookback(args.lookback)
    except ValueError as exc:
        raise InputError(str(exc)) from exc
    _in_range("--limit", args.limit, 0, 2**31 - 1)
    _in_range("--page-traces", args.page_traces, 1, 10_000)
    return JaegerQuery(args.jaeger, args.service, lookback=args.lookback, limit=args.limit, operation=args.operation,
                       limits=read_limits(args))
