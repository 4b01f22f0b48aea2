"""OTLP/JSON `ExportTraceServiceRequest`s into `SpanRecord`s: ours, one per line, and what other
OTLP tools write (timestamps as numbers or strings, ids in upper- or lower-case hex or base64,
camelCase or snake_case keys). The hot loop of every load. No torch import on this path.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from agenttrace.traces.span_records import SPAN_KINDS, STATUS_CODES, EventRecord, SpanRecord, short

__all__ = ["MAX_DEPTH", "OTHER_SIGNALS", "TRUNCATED", "decode_any_value", "decode_attributes", "is_otlp_request",
           "spans_from_request"]

_intern = sys.intern
# OTLP/JSON documents of the other signals, skipped without complaint when met among trace files.
OTHER_SIGNALS = ("resourceMetrics", "resource_metrics", "resourceLogs", "resource_logs")
# Array and key-value-list values nested deeper than this are cut there (a value that deep is
# damage, not data; decoding it would exhaust the stack), with a note for the problems.
MAX_DEPTH = 32
TRUNCATED = f"<nested deeper than {MAX_DEPTH} levels: truncated>"
_MIN_INT, _MAX_INT = -(2**63), 2**64  # OTLP intValue is int64 (uint64 for some writers)
_NESTED = {"arrayValue": False, "array_value": False, "kvlistValue": True, "kvlist_value": True}


def is_otlp_request(doc: Any) -> bool:
    return isinstance(doc, dict) and ("resourceSpans" in doc or "resource_spans" in doc)


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


_DECODERS: dict[str, Callable[[Any], Any]] = {}


def decode_any_value(value: dict[str, Any] | None, notes: list[str] | None = None, _depth: int = 0) -> Any:
    """An OTLP AnyValue as a plain Python value. Arrays and lists nested deeper than MAX_DEPTH
    become TRUNCATED there (noted in `notes`); an integer outside int64 raises ValueError."""
    if not value:
        return None
    for key, v in value.items():
        nested = _NESTED.get(key)
        if nested is not None:
            if _depth >= MAX_DEPTH:
                if notes is not None:
                    notes.append(TRUNCATED)
                return TRUNCATED
            items = (v or {}).get("values", ())
            if nested:
                return decode_attributes(items, notes, _depth + 1)
            return [decode_any_value(x, notes, _depth + 1) for x in items]
        decode = _DECODERS.get(key)
        if decode is not None:
            return decode(v)
    return None


def _int_value(value: Any) -> int:
    number = int(value)
    if not _MIN_INT <= number < _MAX_INT:
        raise ValueError(f"intValue {str(value)[:30]} is outside int64")
    return number


for _keys, _fn in (
    (("stringValue", "string_value"), lambda v: short(v) if isinstance(v, str) else str(v)),
    (("boolValue", "bool_value"), bool),
    (("intValue", "int_value"), _int_value),
    (("doubleValue", "double_value"), float),
    (("bytesValue", "bytes_value"), base64.b64decode),
):
    for _k in _keys:
        _DECODERS[_k] = _fn


def decode_attributes(items: Iterable[dict[str, Any]] | None, notes: list[str] | None = None,
                      _depth: int = 0) -> dict[str, Any]:
    """OTLP key-value pairs as a dict (nested values cut at MAX_DEPTH, see decode_any_value). The
    common value types are decoded inline: this runs for every attribute of every span."""
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
                x = int(x)
                if _MIN_INT <= x < _MAX_INT:
                    out[_intern(key)] = x
                    continue
                raise ValueError(f"attribute {key}: intValue {str(x)[:30]} is outside int64")
            if (x := v.get("doubleValue")) is not None:
                out[_intern(key)] = float(x)
                continue
            if (x := v.get("boolValue")) is not None:
                out[_intern(key)] = bool(x)
                continue
        out[_intern(key)] = decode_any_value(v, notes, _depth)
    return out


def _kind(value: Any) -> str:
    if value.__class__ is int:
        return SPAN_KINDS.get(value, "UNSPECIFIED")
    if isinstance(value, str):
        name = value.removeprefix("SPAN_KIND_")
        return name if name in _KIND_NAMES else "UNSPECIFIED"
    return SPAN_KINDS.get(value, "UNSPECIFIED") if value.__class__ is float else "UNSPECIFIED"


_KIND_NAMES = frozenset(SPAN_KINDS.values())
_STATUS_NAMES = frozenset(STATUS_CODES.values())


def _status(value: dict[str, Any] | None) -> tuple[str, str]:
    if not value or not isinstance(value, dict):
        return "UNSET", ""
    code = value.get("code", 0)
    if isinstance(code, str):
        name = code.removeprefix("STATUS_CODE_")
        name = name if name in _STATUS_NAMES else STATUS_CODES.get(int(name) if name.isdigit() else -1, "UNSET")
    else:
        name = STATUS_CODES.get(code, "UNSET") if code.__class__ in (int, float) else "UNSET"
    message = value.get("message", "") or ""
    return name, message if isinstance(message, str) else str(message)


def _name(value: Any) -> str:
    return short(value) if value.__class__ is str else "" if value is None else str(value)


def _events(items: list[dict[str, Any]] | None, notes: list[str]) -> Sequence[EventRecord]:
    if not items:
        return ()
    return [
        EventRecord(_name(e.get("name", "")), _int(_get(e, "timeUnixNano", "time_unix_nano")),
                    decode_attributes(e.get("attributes"), notes))
        for e in items
    ]


def spans_from_request(request: dict[str, Any], source: str, problems: list[str] | None = None) -> Iterator[SpanRecord]:
    """Every span of one ExportTraceServiceRequest (as a parsed JSON object). The hot loop of
    every load: fields are read directly, camelCase first (what OTLP/JSON writers emit). Values
    cut at MAX_DEPTH are listed in `problems`. Raises ValueError (TypeError, OverflowError, ...)
    on values that cannot be read at all."""
    trace_ids: dict[str, str] = {}
    notes: list[str] = []
    for rs in _get(request, "resourceSpans", "resource_spans", []) or []:
        resource = decode_attributes((rs.get("resource") or {}).get("attributes"), notes)
        for ss in _get(rs, "scopeSpans", "scope_spans", []) or []:
            scope = ss.get("scope") or ss.get("instrumentationLibrary") or {}
            scope_name = short(str(scope.get("name") or "")) if isinstance(scope, dict) else ""
            for s in ss.get("spans", []) or []:
                st = s.get("status")
                status, message = _status(st) if st else ("UNSET", "")
                trace_id = _hex_id(s.get("traceId") or s.get("trace_id")) or ""
                links = s.get("links")
                events = s.get("events")
                start = s.get("startTimeUnixNano")
                end = s.get("endTimeUnixNano")
                name = s.get("name", "")
                span = SpanRecord(
                    trace_ids.setdefault(trace_id, trace_id),
                    _hex_id(s.get("spanId") or s.get("span_id")) or "",
                    _hex_id(s.get("parentSpanId") or s.get("parent_span_id")),
                    short(name) if name.__class__ is str else _name(name),
                    _kind(s.get("kind", 0)),
                    int(start) if start is not None else _int(s.get("start_time_unix_nano")),
                    int(end) if end is not None else _int(s.get("end_time_unix_nano")),
                    decode_attributes(s.get("attributes"), notes),
                    _events(events, notes) if events else (),
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
                if notes:
                    if problems is not None:
                        problems.append(f"{source}: span {span.span_id}: {len(notes)} attribute value(s) nested deeper "
                                        f"than {MAX_DEPTH} levels; cut there")
                    notes.clear()
                yield span
