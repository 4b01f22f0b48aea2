"""Trace files read back as OpenTelemetry SDK spans, exactly as they were recorded.

`traces.load` reads files into the records the reports need; replaying a file to a collector and
converting it to Jaeger JSON need everything else too: the instrumentation scope, trace state,
link attributes, dropped counts, the remote-parent flag. So this module rebuilds SDK
`ReadableSpan`s (original ids, parent, times, attributes, events, links, status, kind, resource,
scope), which the official OTLP exporters encode as they would a live span: a recorded file
replayed through them gives back the same OTLP, field for field.

Accepts what `traces.load` accepts (one ExportTraceServiceRequest per line or a whole-file request,
numbers or strings for 64-bit integers, upper- or lower-case hex ids, camelCase or snake_case). A
line that cannot be read is reported with its file and line number and skipped whole; the rest of
the file is still read. No torch import on this path.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from agenttrace.errors import JSONError
from agenttrace.telemetry.readable import SpanCopy
from agenttrace.traces.jsontext import parse_json
from agenttrace.traces.load import iter_trace_files
from agenttrace.traces.otlp_json import MAX_DEPTH, decode_attributes
from agenttrace.traces.span_records import MAX_TIME_NS

__all__ = ["RecordedSpan", "RecordedSpans", "iter_spans", "read_spans", "spans_from_request"]

# OTLP Span.flags: bits 0-7 are the W3C trace flags; bit 8 says whether bit 9 (parent is remote)
# is known. The SDK encoders always set bit 8 and derive bit 9 from the parent context.
_FLAGS_TRACE_MASK = 0xFF
_FLAGS_IS_REMOTE = 0x200

# OTLP SpanKind numbers -> SDK SpanKind. UNSPECIFIED (0) has no SDK value; INTERNAL is what the
# SDK itself would have written.
_KINDS = {
    0: SpanKind.INTERNAL,
    1: SpanKind.INTERNAL,
    2: SpanKind.SERVER,
    3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER,
    5: SpanKind.CONSUMER,
}
_KIND_NAMES = {"SPAN_KIND_" + k.name: k for k in SpanKind} | {"SPAN_KIND_UNSPECIFIED": SpanKind.INTERNAL}
_STATUS = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}


# A finished span read from a file, keeping the dropped counts the file recorded.
RecordedSpan = SpanCopy


class _RecordedEvent(Event):
    def __init__(self, name: str, attributes: Mapping[str, Any], timestamp: int, dropped: int) -> None:
        super().__init__(name, attributes, timestamp)
        self._dropped = dropped

    @property
    def dropped_attributes(self) -> int:
        return self._dropped


class _RecordedLink(Link):
    def __init__(self, context: SpanContext, attributes: Mapping[str, Any], dropped: int) -> None:
        super().__init__(context, attributes)
        self._dropped = dropped

    @property
    def dropped_attributes(self) -> int:
        return self._dropped


@dataclass
class RecordedSpans:
    """Spans read from trace files, in file order, with what had to be skipped."""

    spans: list[ReadableSpan] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "file:line: what was wrong; line skipped"
    files: list[Path] = field(default_factory=list)

    @property
    def trace_ids(self) -> list[int]:
        """Distinct trace ids, in order of first appearance."""
        return list(dict.fromkeys(s.context.trace_id for s in self.spans if s.context is not None))


def _get(obj: Mapping[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    return obj.get(camel, obj.get(snake, default))


def _int(value: Any) -> int:
    """A count or flags field: a non-negative integer below 2^63 (ValueError otherwise)."""
    number = 0 if value is None or value == "" else int(value)
    if not 0 <= number <= MAX_TIME_NS:
        raise ValueError(f"{str(value)[:30]} is not a count, time or flags value (0 to 2^63)")
    return number


def _id(value: Any, size: int, what: str) -> int:
    """An id of `size` bytes from OTLP/JSON hex (or the base64 some protobuf-JSON writers use)."""
    text = str(value or "")
    if len(text) == 2 * size:
        try:
            number = int(text, 16)
        except ValueError:
            number = None
        if number is not None:
            return number
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != size:
        raise ValueError(f"{what} {text!r} is not {size} bytes of hex")
    return int.from_bytes(raw, "big")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)


def _kind(value: Any) -> SpanKind:
    if isinstance(value, str):
        if value in _KIND_NAMES:
            return _KIND_NAMES[value]
        value = int(value)
    return _KINDS.get(_int(value), SpanKind.INTERNAL)


def _status(value: Mapping[str, Any] | None) -> Status:
    if not value:
        return Status(StatusCode.UNSET)
    code = value.get("code", 0)
    if isinstance(code, str) and not code.isdigit():
        status_code = StatusCode[code.removeprefix("STATUS_CODE_")]
    else:
        status_code = _STATUS.get(_int(code), StatusCode.UNSET)
    message = value.get("message") or None
    # The SDK keeps a description only with ERROR, as the OTLP spec asks.
    return Status(status_code, message if status_code is StatusCode.ERROR else None)


def _trace_state(value: Any) -> TraceState | None:
    return TraceState.from_header([value]) if value else None


def _span(s: Mapping[str, Any], resource: Resource, scope: InstrumentationScope | None,
          notes: list[str] | None) -> RecordedSpan:
    trace_id = _id(_get(s, "traceId", "trace_id"), 16, "traceId")
    flags = _int(s.get("flags"))
    context = SpanContext(
        trace_id,
        _id(_get(s, "spanId", "span_id"), 8, "spanId"),
        is_remote=False,
        trace_flags=TraceFlags(flags & _FLAGS_TRACE_MASK),
        trace_state=_trace_state(_get(s, "traceState", "trace_state")),
    )
    parent_id = _get(s, "parentSpanId", "parent_span_id")
    parent = (
        SpanContext(trace_id, _id(parent_id, 8, "parentSpanId"), is_remote=bool(flags & _FLAGS_IS_REMOTE))
        if parent_id
        else None
    )
    events = [
        _RecordedEvent(
            _text(e.get("name")),
            decode_attributes(e.get("attributes"), notes),
            _int(_get(e, "timeUnixNano", "time_unix_nano")),
            _int(_get(e, "droppedAttributesCount", "dropped_attributes_count")),
        )
        for e in s.get("events") or ()
    ]
    links = []
    for ln in s.get("links") or ():
        link_flags = _int(ln.get("flags"))
        link_context = SpanContext(
            _id(_get(ln, "traceId", "trace_id"), 16, "link traceId"),
            _id(_get(ln, "spanId", "span_id"), 8, "link spanId"),
            is_remote=bool(link_flags & _FLAGS_IS_REMOTE),
            trace_flags=TraceFlags(link_flags & _FLAGS_TRACE_MASK),
            trace_state=_trace_state(_get(ln, "traceState", "trace_state")),
        )
        links.append(
            _RecordedLink(
                link_context,
                decode_attributes(ln.get("attributes"), notes),
                _int(_get(ln, "droppedAttributesCount", "dropped_attributes_count")),
            )
        )
    return RecordedSpan(
        name=_text(s.get("name")),
        context=context,
        parent=parent,
        resource=resource,
        attributes=decode_attributes(s.get("attributes"), notes),
        events=events,
        links=links,
        kind=_kind(s.get("kind", 0)),
        status=_status(s.get("status")),
        start_time=_int(_get(s, "startTimeUnixNano", "start_time_unix_nano")),
        end_time=_int(_get(s, "endTimeUnixNano", "end_time_unix_nano")),
        instrumentation_scope=scope,
        dropped=(
            _int(_get(s, "droppedAttributesCount", "dropped_attributes_count")),
            _int(_get(s, "droppedEventsCount", "dropped_events_count")),
            _int(_get(s, "droppedLinksCount", "dropped_links_count")),
        ),
    )


def _scope(ss: Mapping[str, Any], notes: list[str] | None) -> InstrumentationScope | None:
    scope = ss.get("scope") or _get(ss, "instrumentationLibrary", "instrumentation_library")
    schema_url = _get(ss, "schemaUrl", "schema_url") or ""
    if not scope and not schema_url:
        return None
    scope = scope or {}
    return InstrumentationScope(
        scope.get("name", ""),
        scope.get("version") or None,
        schema_url or None,
        decode_attributes(scope.get("attributes"), notes) or None,
    )


def spans_from_request(
    request: Mapping[str, Any], resources: dict[str, Resource] | None = None, notes: list[str] | None = None
) -> Iterator[RecordedSpan]:
    """Every span of one ExportTraceServiceRequest (a parsed JSON object), as SDK spans.

    `resources` caches one `Resource` per distinct resource, so spans that shared a resource in
    the file share it again (the encoders group by resource). Raises ValueError (or TypeError,
    KeyError) on malformed data; attribute values cut at MAX_DEPTH are noted in `notes`.
    """
    resources = {} if resources is None else resources
    for rs in _get(request, "resourceSpans", "resource_spans", []) or []:
        attrs = decode_attributes((rs.get("resource") or {}).get("attributes"), notes)
        schema_url = _get(rs, "schemaUrl", "schema_url") or ""
        key = json.dumps([attrs, schema_url], sort_keys=True, default=repr)
        if key not in resources:
            resources[key] = Resource(attrs, schema_url)
        resource = resources[key]
        scope_spans = _get(rs, "scopeSpans", "scope_spans") or _get(
            rs, "instrumentationLibrarySpans", "instrumentation_library_spans", []
        )
        for ss in scope_spans or []:
            scope = _scope(ss, notes)
            for s in ss.get("spans") or []:
                yield _span(s, resource, scope, notes)


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON or the JSONError) for each non-empty line; a file holding one
    pretty-printed request is read whole, as line 1. Parsed as `traces.load` parses (lone
    surrogates replaced), so both readers see the same values."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        whole = parse_json(text)
    except JSONError:
        whole = None
    if isinstance(whole, dict):
        yield 1, whole
        return
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                yield n, parse_json(line)
            except JSONError as exc:
                yield n, exc


def iter_spans(paths: Iterable[str | os.PathLike[str]], problems: list[str],
               files: list[Path] | None = None) -> Iterator[list[RecordedSpan]]:
    """The spans of the given trace files, a line at a time (for exports of large files: one
    line's spans held at a time). Problems as `read_spans` lists them; `files` gets the files read."""
    resources: dict[str, Resource] = {}
    for path in iter_trace_files(paths):
        if not path.is_file():
            problems.append(f"{path}: no such file")
            continue
        if files is not None:
            files.append(path)
        for n, obj in _lines(path):
            where = f"{path}:{n}"
            if isinstance(obj, JSONError):
                problems.append(f"{where}: {obj}; line skipped")
                continue
            if not isinstance(obj, dict):
                problems.append(f"{where}: not an OTLP ExportTraceServiceRequest object; line skipped")
                continue
            notes: list[str] = []
            try:
                spans = list(spans_from_request(obj, resources, notes))  # all of a line, or none
            except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RecursionError) as exc:
                text = str(exc)
                problems.append(f"{where}: malformed OTLP span data ({type(exc).__name__}: "
                                f"{text[:200] + '...' if len(text) > 200 else text}); line skipped")
                continue
            if notes:
                problems.append(f"{where}: {len(notes)} attribute value(s) nested deeper than {MAX_DEPTH} "
                                "levels; cut there")
            yield spans


def read_spans(paths: Iterable[str | os.PathLike[str]]) -> RecordedSpans:
    """All spans of the given trace files (or `*.jsonl`/`*.json` files in given folders).

    A missing file or an unreadable line is listed in `problems` ("file:line: what") and
    skipped; everything else is read.
    """
    out = RecordedSpans()
    for spans in iter_spans(paths, out.problems, out.files):
        out.spans.extend(spans)
    return out
