"""The input options `agenttrace report` and `agenttrace compare` share: trace files and folders,
or a running Jaeger's query API (`--jaeger URL --service NAME ...`)."""

from __future__ import annotations

import argparse

from agenttrace.traces.jaeger_input import JaegerQuery, parse_lookback
from agenttrace.traces.load import InputError


def add_input_options(parser: argparse.ArgumentParser) -> None:
    """--jaeger URL --service NAME [--lookback 1h] [--limit 20] [--operation OP]."""
    g = parser.add_argument_group("Jaeger query API (instead of, or as well as, files)")
    g.add_argument("--jaeger", metavar="URL", help="a Jaeger query service, e.g. http://localhost:16686")
    g.add_argument("--service", help="the service whose traces to read (required with --jaeger)")
    g.add_argument("--lookback", default="1h", help="how far back to look, e.g. 30m, 2h, 1d (default 1h)")
    g.add_argument("--limit", type=int, default=20, help="at most this many traces (default 20)")
    g.add_argument("--operation", help="only traces with this root operation")


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
