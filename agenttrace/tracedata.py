"""Reading traces back: trace files into `SpanRecord`s.

Reads OTLP/JSON `ExportTraceServiceRequest`s (ours, one per line, and what other OTLP tools
write: timestamps as numbers or strings, ids in upper- or lower-case hex or base64, camelCase or
snake_case keys, a whole file holding one pretty-printed request) and Jaeger's JSON model (a
trace, a list of traces, or a query-API response `{"data": [...]}`; see `agenttrace.jaeger_input`).

Files are streamed line by line, so a million-span trace is never held as text; records are lean
(slotted dataclasses, interned attribute keys and short string values, one resource dict per
request). A line that cannot be read is reported with its file and line number and skipped; the
rest of the file is still loaded. No torch import on this path.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agenttrace import semconv as sc

__all__ = ["EventRecord", "LoadResult", "SpanRecord", "iter_trace_files", "load_spans", "spans_from_document"]

STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}
SPAN_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}

# Problems kept per file before the rest are only counted (a broken 1 GB file must not produce a
# 1 GB report).
MAX_PROBLEMS_PER_FILE = 20
# A file whose first line is not JSON on its own may be one pretty-printed document; up to this
# size we try reading it whole.
MAX_WHOLE_FILE_BYTES = 256 * 1024 * 1024
_intern = sys.intern
# OTLP/JSON documents of the other signals, skipped without complaint when met among trace files.
_OTHER_SIGNALS = ("resourceMetrics", "resource_metrics", "resourceLogs", "resource_logs")


class EventRecord:
    """A span event. Its attributes are kept as one flat tuple (key, value, key, value, ...): a
    speculative generation carries one `speculate.round` event per round, and a dict per event
    would double the memory of a large trace. `attributes` gives them as a dict; `get` reads one."""

    __slots__ = ("_flat", "name", "time_ns")

    def __init__(self, name: str, time_ns: int, attributes: dict[str, Any]) -> None:
        self.name = name
        self.time_ns = time_ns
        flat: list[Any] = []
        for kv in attributes.items():
            flat += kv
        self._flat = tuple(flat)

    @property
    def attributes(self) -> dict[str, Any]:
        flat = self._flat
        return dict(zip(flat[::2], flat[1::2], strict=True))

    def get(self, key: str, default: Any = None) -> Any:
        flat = self._flat
        for i in range(0, len(flat), 2):
            if flat[i] == key:
                return flat[i + 1]
        return default

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EventRecord) and (self.name, self.time_ns, self._flat) == (other.name, other.time_ns, other._flat)

    def __repr__(self) -> str:
        return f"EventRecord({self.name!r}, {self.time_ns}, {self.attributes!r})"


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
    events: Sequence[EventRecord] = field(default_factory=list)
    status: str = "UNSET"  # UNSET, OK, ERROR
    status_message: str = ""
    resource: dict[str, Any] = field(default_factory=dict)  # shared by the spans of one request
    links: Sequence[tuple[str, str]] = field(default_factory=list)  # (trace_id, span_id)
    source: str = ""  # "file:line" it came from, for messages
    scope: str = ""  # the instrumentation scope's name (which library wrote it), "" if unknown

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
    value = obj.get(camel)
    return obj.get(snake, default) if value is None else value


def _int(value: Any) -> int:
    if value is None or value == "":
        return 0
    return int(value)


def _hex_id(value: Any) -> str | None:
    """An id as lower-case hex. OTLP/JSON ids are hex (16 or 32 digits), taken as they are (an id
    is only ever compared); protobuf-JSON writers sometimes emit base64 (12 or 24 characters)."""
    if not value:
        return None
    text = str(value)
    if len(text) in (16, 32):
        return text.lower()
    return base64.b64decode(text, validate=True).hex()


def _short(text: str) -> str:
    # Segment names, outcomes, tool names repeat on every span: share one object per value.
    return _intern(text) if len(text) <= 48 else text


_DECODERS: dict[str, Callable[[Any], Any]] = {}


def decode_any_value(value: dict[str, Any] | None) -> Any:
    """An OTLP AnyValue as a plain Python value."""
    if not value:
        return None
    for key, v in value.items():
        decode = _DECODERS.get(key)
        if decode is not None:
            return decode(v)
    return None


def _array(items: dict[str, Any] | None) -> list[Any]:
    return [decode_any_value(v) for v in (items or {}).get("values", ())]


def _kvlist(items: dict[str, Any] | None) -> dict[str, Any]:
    return decode_attributes((items or {}).get("values", ()))


for _keys, _fn in (
    (("stringValue", "string_value"), lambda v: _short(v) if isinstance(v, str) else str(v)),
    (("boolValue", "bool_value"), bool),
    (("intValue", "int_value"), int),
    (("doubleValue", "double_value"), float),
    (("arrayValue", "array_value"), _array),
    (("kvlistValue", "kvlist_value"), _kvlist),
    (("bytesValue", "bytes_value"), base64.b64decode),
):
    for _k in _keys:
        _DECODERS[_k] = _fn


def decode_attributes(items: Iterable[dict[str, Any]] | None) -> dict[str, Any]:
    """OTLP key-value pairs as a dict. The common value types are decoded inline: this runs for
    every attribute of every span."""
    out: dict[str, Any] = {}
    for kv in items or ():
        key = kv.get("key")
        if key is None:
            continue
        v = kv.get("value")
        if v:
            if (x := v.get("stringValue")) is not None:
                out[_intern(key)] = _intern(x) if len(x) <= 48 else x
                continue
            if (x := v.get("intValue")) is not None:
                out[_intern(key)] = int(x)
                continue
            if (x := v.get("doubleValue")) is not None:
                out[_intern(key)] = float(x)
                continue
            if (x := v.get("boolValue")) is not None:
                out[_intern(key)] = bool(x)
                continue
        out[_intern(key)] = decode_any_value(v)
    return out


def _kind(value: Any) -> str:
    if value.__class__ is int:
        return SPAN_KINDS.get(value, "UNSPECIFIED")
    if isinstance(value, str):
        return value.removeprefix("SPAN_KIND_")
    return SPAN_KINDS.get(_int(value), "UNSPECIFIED")


def _status(value: dict[str, Any] | None) -> tuple[str, str]:
    if not value:
        return "UNSET", ""
    code = value.get("code", 0)
    name = code.removeprefix("STATUS_CODE_") if isinstance(code, str) else STATUS_CODES.get(_int(code), "UNSET")
    return name, value.get("message", "") or ""


def _events(items: list[dict[str, Any]] | None) -> Sequence[EventRecord]:
    if not items:
        return ()
    return [
        EventRecord(_short(e.get("name", "")), _int(_get(e, "timeUnixNano", "time_unix_nano")), decode_attributes(e.get("attributes")))
        for e in items
    ]


def spans_from_request(request: dict[str, Any], source: str) -> Iterator[SpanRecord]:
    """Every span of one ExportTraceServiceRequest (as a parsed JSON object). The hot loop of
    every load: fields are read directly, camelCase first (what OTLP/JSON writers emit)."""
    trace_ids: dict[str, str] = {}
    for rs in _get(request, "resourceSpans", "resource_spans", []) or []:
        resource = decode_attributes((rs.get("resource") or {}).get("attributes"))
        for ss in _get(rs, "scopeSpans", "scope_spans", []) or []:
            scope = ss.get("scope") or ss.get("instrumentationLibrary") or {}
            scope_name = _short(str(scope.get("name") or "")) if isinstance(scope, dict) else ""
            for s in ss.get("spans", []) or []:
                st = s.get("status")
                status, message = _status(st) if st else ("UNSET", "")
                trace_id = _hex_id(s.get("traceId") or s.get("trace_id")) or ""
                links = s.get("links")
                events = s.get("events")
                start = s.get("startTimeUnixNano")
                end = s.get("endTimeUnixNano")
                yield SpanRecord(
                    trace_ids.setdefault(trace_id, trace_id),
                    _hex_id(s.get("spanId") or s.get("span_id")) or "",
                    _hex_id(s.get("parentSpanId") or s.get("parent_span_id")),
                    _short(s.get("name", "")),
                    _kind(s.get("kind", 0)),
                    int(start) if start is not None else _int(s.get("start_time_unix_nano")),
                    int(end) if end is not None else _int(s.get("end_time_unix_nano")),
                    decode_attributes(s.get("attributes")),
                    _events(events) if events else (),
                    status,
                    message,
                    resource,
                    [
                        (_hex_id(_get(ln, "traceId", "trace_id")) or "", _hex_id(_get(ln, "spanId", "span_id")) or "")
                        for ln in links
                    ]
                    if links
                    else (),
                    source,
                    scope_name,
                )


def spans_from_document(doc: Any, source: str, problems: list[str]) -> list[SpanRecord]:
    """The spans of one parsed JSON document: an OTLP request, or Jaeger JSON (a trace, a list of
    traces, or a query-API response). Raises ValueError for anything else."""
    if isinstance(doc, dict) and ("resourceSpans" in doc or "resource_spans" in doc):
        return list(spans_from_request(doc, source))  # all of a line, or none
    if isinstance(doc, dict) and any(k in doc for k in _OTHER_SIGNALS):
        return []  # OTLP metrics or logs (e.g. the GenAI metrics written beside a trace): no spans
    from agenttrace.jaeger_input import is_jaeger_document, spans_from_jaeger

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
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                if first and path.stat().st_size <= MAX_WHOLE_FILE_BYTES:
                    whole = _whole(path)
                    if whole is not None:
                        yield 1, whole, None
                        return
                first = False
                yield n, None, f"not valid JSON ({exc.msg} at column {exc.colno}); line skipped"
                continue
            first = False
            yield n, obj, None


def _whole(path: Path) -> Any:
    try:
        doc = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except json.JSONDecodeError:
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
    for n, doc, problem in _documents(path):
        where = f"{path}:{n}"
        if doc is None:
            problems.append(f"{where}: {problem}")
            continue
        try:
            spans.extend(spans_from_document(doc, where, problems))
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            problems.append(f"{where}: malformed span data ({type(exc).__name__}: {exc}); line skipped")
    if len(problems) - kept > MAX_PROBLEMS_PER_FILE:
        extra = len(problems) - kept - MAX_PROBLEMS_PER_FILE
        del problems[kept + MAX_PROBLEMS_PER_FILE :]
        problems.append(f"{path}: {extra} more problems like those above (not listed)")


def load_spans(paths: Iterable[str | os.PathLike[str]]) -> LoadResult:
    """All spans in the given trace files or folders (OTLP/JSON or Jaeger JSON), with a list of
    what had to be skipped, each naming its file and line."""
    spans: list[SpanRecord] = []
    problems: list[str] = []
    for path in iter_trace_files(paths):
        load_file(path, spans, problems)
    return LoadResult(spans, problems)
