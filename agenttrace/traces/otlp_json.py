"""OTLP/JSON `ExportTraceServiceRequest`s into `SpanRecord`s: ours, one per line, and what other
OTLP tools write (timestamps as numbers or strings, ids in upper- or lower-case hex or base64,
camelCase or snake_case keys). The hot loop of every load. No torch import on this path.
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from agenttrace.traces.records import (
    SPAN_KINDS,
    STATUS_CODES,
    EventRecord,
    SpanRecord,
    short,
)

__all__ = ["OTHER_SIGNALS", "decode_any_value", "decode_attributes", "is_otlp_request", "spans_from_request"]

_intern = sys.intern
# OTLP/JSON documents of the other signals, skipped without complaint when met among trace files.
OTHER_SIGNALS = ("resourceMetrics", "resource_metrics", "resourceLogs", "resource_logs")


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
    (("stringValue", "string_value"), lambda v: short(v) if isinstance(v, str) else str(v)),
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
        EventRecord(short(e.get("name", "")), _int(_get(e, "timeUnixNano", "time_unix_nano")), decode_attributes(e.get("attributes")))
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
            scope_name = short(str(scope.get("name") or "")) if isinstance(scope, dict) else ""
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
                    short(s.get("name", "")),
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
