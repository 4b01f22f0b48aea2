"""Where a report's spans come from: trace files and folders (OTLP/JSON or Jaeger JSON), and a
running Jaeger's query API. Shared by `agenttrace report` and `agenttrace compare`."""

from __future__ import annotations

import argparse
from pathlib import Path

from agenttrace.jaeger_input import JaegerQuery, parse_lookback, query_jaeger
from agenttrace.tracedata import LoadResult, load_spans


class InputError(Exception):
    """The inputs cannot be read at all (a named path does not exist, a bad option); the message
    says which and what to do."""


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


def load_inputs(paths: list[str], query: JaegerQuery | None = None) -> tuple[LoadResult, list[str]]:
    """The spans of all inputs, their problems, and the list of sources. Raises InputError when a
    named path does not exist or nothing at all was named."""
    if not paths and query is None:
        raise InputError("name trace files or folders, or --jaeger URL --service NAME")
    missing = [p for p in paths if not Path(p).exists()]
    if missing:
        raise InputError(f"no such file or folder: {', '.join(missing)}")
    loaded = load_spans(paths)
    sources = list(paths)
    if query is not None:
        remote = query_jaeger(query)
        loaded.spans.extend(remote.spans)
        loaded.problems.extend(remote.problems)
        sources.append(query.request_url())
    return loaded, sources
