"""Reading traces back: OTLP/JSON `ExportTraceServiceRequest` lines into `SpanRecord`s.

Accepts what other OTLP tools write too: timestamps as numbers or strings, ids in upper- or
lower-case hex (normalised to lower case), camelCase or snake_case keys, a whole file holding one
request or one request per line. A line that cannot be read is reported with its file and line
number and skipped; the rest of the file is still loaded. No torch import on this path.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenttrace import semconv as sc

__all__ = ["EventRecord", "LoadResult", "SpanRecord", "iter_trace_files", "load_spans"]

STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}
SPAN_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass(slots=True)
class EventRecord:
    name: str
    time_ns: int
    attributes: dict[str, Any]


@dataclass(slots=True)
class SpanRecord:
    """One finished span as read from a trace file."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    kind: str  # INTERNAL, CLIENT, ...
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[EventRecord] = field(default_factory=list)
    status: str = "UNSET"  # UNSET, OK, ERROR
    status_message: str = ""
    resource: dict[str, Any] = field(default_factory=dict)
    links: list[tuple[str, str]] = field(default_factory=list)  # (trace_id, span_id)
    source: str = ""  # "file:line" it came from, for messages

    @property
    def segment(self) -> str | None:
        value = self.attributes.get(sc.SEGMENT)
        return value if isinstance(value, str) else None

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


@dataclass
class LoadResult:
    spans: list[SpanRecord]
    problems: list[str]  # "file:line: what was wrong", one per skipped line or span


def _get(obj: dict[str, Any], camel: str, snake: str, default: Any = None) -> Any:
    return obj.get(camel, obj.get(snake, default))


def _int(value: Any) -> int:
    if value is None or value == "":
        return 0
    return int(value)


def _hex_id(value: Any) -> str | None:
    # OTLP/JSON ids are hex; protobuf-JSON writers sometimes emit base64 instead.
    if not value:
        return None
    text = str(value)
    try:
        int(text, 16)
        return text.lower()
    except ValueError:
        return base64.b64decode(text).hex()


def decode_any_value(value: dict[str, Any] | None) -> Any:
    """An OTLP AnyValue as a plain Python value."""
    if not value:
        return None
    if "stringValue" in value or "string_value" in value:
        return _get(value, "stringValue", "string_value")
    if "boolValue" in value or "bool_value" in value:
        return bool(_get(value, "boolValue", "bool_value"))
    if "intValue" in value or "int_value" in value:
        return int(_get(value, "intValue", "int_value"))
    if "doubleValue" in value or "double_value" in value:
        return float(_get(value, "doubleValue", "double_value"))
    if "arrayValue" in value or "array_value" in value:
        items = _get(value, "arrayValue", "array_value") or {}
        return [decode_any_value(v) for v in items.get("values", [])]
    if "kvlistValue" in value or "kvlist_value" in value:
        items = _get(value, "kvlistValue", "kvlist_value") or {}
        return decode_attributes(items.get("values", []))
    if "bytesValue" in value or "bytes_value" in value:
        return base64.b64decode(_get(value, "bytesValue", "bytes_value"))
    return None


def decode_attributes(items: Iterable[dict[str, Any]] | None) -> dict[str, Any]:
    return {kv["key"]: decode_any_value(kv.get("value")) for kv in items or () if "key" in kv}


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return value.removeprefix("SPAN_KIND_")
    return SPAN_KINDS.get(_int(value), "UNSPECIFIED")


def _status(value: dict[str, Any] | None) -> tuple[str, str]:
    if not value:
        return "UNSET", ""
    code = value.get("code", 0)
    name = code.removeprefix("STATUS_CODE_") if isinstance(code, str) else STATUS_CODES.get(_int(code), "UNSET")
    return name, value.get("message", "") or ""


def spans_from_request(request: dict[str, Any], source: str) -> Iterator[SpanRecord]:
    """Every span of one ExportTraceServiceRequest (as a parsed JSON object)."""
    for rs in _get(request, "resourceSpans", "resource_spans", []) or []:
        resource = decode_attributes((rs.get("resource") or {}).get("attributes"))
        for ss in _get(rs, "scopeSpans", "scope_spans", []) or []:
            for s in ss.get("spans", []) or []:
                status, message = _status(s.get("status"))
                yield SpanRecord(
                    trace_id=_hex_id(_get(s, "traceId", "trace_id")) or "",
                    span_id=_hex_id(_get(s, "spanId", "span_id")) or "",
                    parent_id=_hex_id(_get(s, "parentSpanId", "parent_span_id")),
                    name=s.get("name", ""),
                    kind=_kind(s.get("kind", 0)),
                    start_ns=_int(_get(s, "startTimeUnixNano", "start_time_unix_nano")),
                    end_ns=_int(_get(s, "endTimeUnixNano", "end_time_unix_nano")),
                    attributes=decode_attributes(s.get("attributes")),
                    events=[
                        EventRecord(
                            e.get("name", ""),
                            _int(_get(e, "timeUnixNano", "time_unix_nano")),
                            decode_attributes(e.get("attributes")),
                        )
                        for e in s.get("events", []) or []
                    ],
                    status=status,
                    status_message=message,
                    resource=resource,
                    links=[
                        (_hex_id(_get(ln, "traceId", "trace_id")) or "", _hex_id(_get(ln, "spanId", "span_id")) or "")
                        for ln in s.get("links", []) or []
                    ],
                    source=source,
                )


def _requests(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """(line number, parsed request or None, problem) for each non-empty line; a file holding one
    pretty-printed request (like the OTLP examples) is read whole, as line 1."""
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        whole = json.loads(text)  # a JSON-lines file fails fast, right after its first line
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):
        yield 1, whole, None
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            yield n, None, f"not valid JSON ({exc.msg} at column {exc.colno}); line skipped"
            continue
        if not isinstance(obj, dict):
            yield n, None, "not an OTLP ExportTraceServiceRequest object; line skipped"
            continue
        yield n, obj, None


def iter_trace_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Path]:
    """Files named, and `*.jsonl` / `*.json` files inside folders named, in a stable order."""
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(f for f in p.rglob("*") if f.suffix in (".jsonl", ".json") and f.is_file())
        else:
            yield p


def load_spans(paths: Iterable[str | os.PathLike[str]]) -> LoadResult:
    """All spans in the given trace files or folders, with a list of what had to be skipped."""
    spans: list[SpanRecord] = []
    problems: list[str] = []
    for path in iter_trace_files(paths):
        if not path.is_file():
            problems.append(f"{path}: no such file")
            continue
        for n, request, problem in _requests(path):
            where = f"{path}:{n}"
            if request is None:
                problems.append(f"{where}: {problem}")
                continue
            try:
                spans.extend(list(spans_from_request(request, where)))  # all of a line, or none
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                problems.append(f"{where}: malformed OTLP span data ({type(exc).__name__}: {exc}); line skipped")
    return LoadResult(spans, problems)
