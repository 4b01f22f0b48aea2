"""Trace files and folders into `SpanRecord`s, whatever their format: each JSON document is
sniffed (an OTLP request, OTLP metrics or logs to skip, or Jaeger JSON: a trace, a list of traces,
or a query-API response `{"data": [...]}`) and handed to its reader; a running Jaeger's query API
is the other source.

Files are streamed line by line, so a million-span trace is never held as text. A line that
cannot be read is reported with its file and line number and skipped; the rest of the file is
still loaded. No torch import on this path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from agenttrace.errors import InputError, JSONError
from agenttrace.traces.jaeger_input import JaegerQuery, is_jaeger_document, query_jaeger, spans_from_jaeger
from agenttrace.traces.jsontext import parse_json
from agenttrace.traces.otlp_json import OTHER_SIGNALS, is_otlp_request, spans_from_request
from agenttrace.traces.span_records import LoadResult, SpanRecord, break_cycles, checked

__all__ = ["iter_trace_files", "load_inputs", "load_spans", "spans_from_document"]

# Problems kept per file before the rest are only counted (a broken 1 GB file must not produce a
# 1 GB report).
MAX_PROBLEMS_PER_FILE = 20
# A file whose first line is not JSON on its own may be one pretty-printed document; up to this
# size we try reading it whole.
MAX_WHOLE_FILE_BYTES = 256 * 1024 * 1024


def spans_from_document(doc: Any, source: str, problems: list[str]) -> list[SpanRecord]:
    """The spans of one parsed JSON document: an OTLP request, or Jaeger JSON (a trace, a list of
    traces, or a query-API response). Raises ValueError for anything else."""
    if is_otlp_request(doc):
        return list(spans_from_request(doc, source, problems))  # all of a line, or none
    if isinstance(doc, dict) and any(k in doc for k in OTHER_SIGNALS):
        return []  # OTLP metrics or logs (e.g. the GenAI metrics written beside a trace): no spans
    if is_jaeger_document(doc):
        return spans_from_jaeger(doc, source, problems)
    raise ValueError("neither an OTLP ExportTraceServiceRequest nor Jaeger JSON")


def _documents(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line number, parsed JSON or None, problem) for each non-empty line; a file holding one
    pretty-printed document (like the OTLP and Jaeger examples) is read whole, as line 1."""
    with path.open(encoding="utf-8", errors="replace") as f:
        first = True
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = parse_json(line)
            except JSONError as exc:
                if first and path.stat().st_size <= MAX_WHOLE_FILE_BYTES:
                    whole = _whole(path)
                    if whole is not None:
                        yield 1, whole, None
                        return
                first = False
                yield n, None, f"{exc}; line skipped"
                continue
            first = False
            yield n, obj, None


def _whole(path: Path) -> Any:
    try:
        doc = parse_json(path.read_text(encoding="utf-8", errors="replace"))
    except JSONError:
        return None
    return doc if isinstance(doc, (dict, list)) else None


def iter_trace_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """Files named, and `*.jsonl` / `*.json` files inside folders named, in a stable order."""
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(f for f in p.rglob("*") if f.suffix in (".jsonl", ".json") and f.is_file())
        else:
            yield p


def load_file(path: Path, spans: list[SpanRecord], problems: list[str]) -> None:
    """Append the spans of one trace file to `spans` and what went wrong to `problems`."""
    if not path.is_file():
        problems.append(f"{path}: no such file")
        return
    kept = len(problems)
    read: list[SpanRecord] = []
    for n, doc, problem in _documents(path):
        where = f"{path}:{n}"
        if problem is not None:  # (a line that is JSON `null` is a document: refused below, saying why)
            problems.append(f"{where}: {problem}")
            continue
        try:
            read.extend(spans_from_document(doc, where, problems))
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
            problems.append(f"{where}: malformed span data ({type(exc).__name__}: {_short(exc)}); line skipped")
    read = checked(read, problems)
    break_cycles(read, problems)
    spans.extend(read)
    if len(problems) - kept > MAX_PROBLEMS_PER_FILE:
        extra = len(problems) - kept - MAX_PROBLEMS_PER_FILE
        del problems[kept + MAX_PROBLEMS_PER_FILE :]
        problems.append(f"{path}: {extra} more problems like those above (not listed)")


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."


def load_spans(paths: Iterable[str | os.PathLike[str]]) -> LoadResult:
    """All spans in the given trace files or folders (OTLP/JSON or Jaeger JSON), with a list of
    what had to be skipped, each naming its file and line."""
    spans: list[SpanRecord] = []
    problems: list[str] = []
    for path in iter_trace_files(paths):
        load_file(path, spans, problems)
    return LoadResult(spans, problems)


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
        spans = checked(remote.spans, remote.problems)
        break_cycles(spans, remote.problems)
        loaded.spans.extend(spans)
        loaded.problems.extend(remote.problems)
        sources.append(query.request_url())
    return loaded, sources
