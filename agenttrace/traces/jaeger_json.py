"""OTLP spans -> Jaeger's JSON model, by the rules Jaeger itself applies to OTLP.

The output is what Jaeger's query API returns for `/api/traces/{id}` and what its UI opens from
its "JSON File" tab (read in the browser, no Jaeger backend needed): `{"data": [trace, ...]}`, one
entry per trace id. The mapping follows Jaeger's OTLP translator (opentelemetry-collector-contrib
`pkg/translator/jaeger`, used by Jaeger v2's query service) and its UI model converter:

- ids: trace id as 32 hex digits (16 when its high half is zero), span id as 16; times in
  microseconds since the epoch, the duration truncated from the nanosecond difference
- one process per distinct resource (`p1`, `p2`, ... in order of first use): `service.name` is
  the process's `serviceName` (`OTLPResourceNoServiceName` when absent), every other resource
  attribute a process tag
- span tags, in Jaeger's order: `otel.scope.name` / `otel.scope.version`, the attributes, then
  `span.kind` (lower case; the SDK reads OTLP's UNSPECIFIED as INTERNAL), `otel.status_code` (`OK` / `ERROR`, none for
  UNSET), `error=true` for ERROR, `otel.status_description` when the status has a message,
  `w3c.tracestate` when the context carries one
- tag types: string, bool, int64 (as a string beyond JavaScript's 2^53 - 1), float64, binary
  (base64); arrays and maps become their compact JSON text, typed string
- events -> logs: an `event` field with the event name (unless an attribute is named `event`),
  then the event's attributes
- references: the parent as CHILD_OF first, then each link as FOLLOWS_FROM (CHILD_OF when the
  link says `opentracing.ref_type=child_of`; a link to the parent itself retypes that reference)
- `flags` 1 when the span's W3C sampled bit was recorded, omitted otherwise
- text: a lone UTF-16 surrogate (valid in OTLP/JSON, `"\\ud800"`, but not UTF-8) becomes U+FFFD, as
  Go's encoding/json writes invalid UTF-8; a span name that is not a string (null, a number in a
  hand-written file) becomes its text, null the empty name protobuf would give
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode
from pydantic import BaseModel, model_serializer

from agenttrace import semconv as sc
from agenttrace.traces.jsontext import no_surrogates

__all__ = [
    "JaegerKeyValue",
    "JaegerLog",
    "JaegerProcess",
    "JaegerReference",
    "JaegerResponse",
    "JaegerSpan",
    "JaegerTrace",
    "to_jaeger",
]

_JS_MAX_SAFE_INTEGER = 2**53 - 1

ValueType = Literal["string", "bool", "int64", "float64", "binary"]


class JaegerKeyValue(BaseModel):
    key: str
    type: ValueType
    value: Any


class JaegerReference(BaseModel):
    refType: Literal["CHILD_OF", "FOLLOWS_FROM"]
    traceID: str
    spanID: str


class JaegerLog(BaseModel):
    timestamp: int  # microseconds since the epoch
    fields: list[JaegerKeyValue]


class JaegerSpan(BaseModel):
    traceID: str
    spanID: str
    flags: int = 0  # omitted from the JSON when 0, as Jaeger does
    operationName: str
    references: list[JaegerReference]
    startTime: int  # microseconds since the epoch
    duration: int  # microseconds
    tags: list[JaegerKeyValue]
    logs: list[JaegerLog]
    processID: str
    warnings: list[str] | None = None

    @model_serializer(mode="wrap")
    def _omit_zero_flags(self, handler: Any) -> dict[str, Any]:
        data = handler(self)
        if not data.get("flags"):
            data.pop("flags", None)
        return data


class JaegerProcess(BaseModel):
    serviceName: str
    tags: list[JaegerKeyValue]


class JaegerTrace(BaseModel):
    traceID: str
    spans: list[JaegerSpan]
    processes: dict[str, JaegerProcess]
    warnings: list[str] | None = None


class JaegerResponse(BaseModel):
    """The envelope of Jaeger's query API; its UI uploads exactly this."""

    data: list[JaegerTrace]
    total: int = 0
    limit: int = 0
    offset: int = 0
    errors: list[Any] | None = None


def _text(value: Any) -> str:
    """`value` as text that encodes to UTF-8 (None: empty)."""
    return "" if value is None else no_surrogates(value)


def trace_id_hex(trace_id: int) -> str:
    return f"{trace_id:016x}" if trace_id >> 64 == 0 else f"{trace_id:032x}"


def span_id_hex(span_id: int) -> str:
    return f"{span_id:016x}"


def _go_float(x: float) -> str:
    """A float as Go's encoding/json writes it (inside the JSON text of an array tag)."""
    if not math.isfinite(x):
        return json.dumps(str(x))  # Go refuses these; a string keeps the value readable
    if x == 0 or 1e-6 <= abs(x) < 1e21:
        text = format(Decimal(repr(x)), "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    return re.sub(r"e([+-])0(\d)$", r"e\1\2", repr(x))


def _go_json(value: Any) -> str:
    """Compact JSON as Go's encoding/json (which the translator uses) writes it: sorted map keys,
    bytes as base64, HTML-significant characters escaped."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, (bytes, bytearray)):
        return json.dumps(base64.b64encode(value).decode())
    if isinstance(value, str):
        text = json.dumps(_text(value), ensure_ascii=False)
        for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                             ("\u2029", "\\u2029")):
            text = text.replace(char, escape)
        return text
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_go_json(str(k))}:{_go_json(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(_go_json(v) for v in value) + "]"
    return _go_json(str(value))


def tag(key: str, value: Any) -> JaegerKeyValue:
    """One attribute as a Jaeger tag, typed as the translator types it."""
    key = _text(key)
    if isinstance(value, bool):
        return JaegerKeyValue(key=key, type="bool", value=value)
    if isinstance(value, int):
        safe = -_JS_MAX_SAFE_INTEGER <= value <= _JS_MAX_SAFE_INTEGER
        return JaegerKeyValue(key=key, type="int64", value=value if safe else str(value))
    if isinstance(value, float):
        return JaegerKeyValue(key=key, type="float64", value=value if math.isfinite(value) else str(value))
    if isinstance(value, (bytes, bytearray)):
        return JaegerKeyValue(key=key, type="binary", value=base64.b64encode(value).decode())
    if isinstance(value, str):
        return JaegerKeyValue(key=key, type="string", value=_text(value))
    if value is None:  # an empty OTLP value
        return JaegerKeyValue(key=key, type="string", value="")
    return JaegerKeyValue(key=key, type="string", value=_go_json(value))


def _span_tags(span: ReadableSpan) -> list[JaegerKeyValue]:
    tags: list[JaegerKeyValue] = []
    scope = span.instrumentation_scope
    if scope is not None and scope.name:
        tags.append(tag(sc.JAEGER_SCOPE_NAME, scope.name))
    if scope is not None and scope.version:
        tags.append(tag(sc.JAEGER_SCOPE_VERSION, scope.version))
    tags.extend(tag(k, v) for k, v in (span.attributes or {}).items())
    tags.append(tag(sc.JAEGER_SPAN_KIND, span.kind.name.lower()))
    status = span.status
    if status.status_code is not StatusCode.UNSET:
        tags.append(tag(sc.JAEGER_STATUS_CODE, status.status_code.name))
    if status.status_code is StatusCode.ERROR:
        tags.append(tag(sc.JAEGER_ERROR, True))
    if status.description:
        tags.append(tag(sc.JAEGER_STATUS_DESCRIPTION, status.description))
    trace_state = span.context.trace_state if span.context is not None else None
    if trace_state:
        tags.append(tag(sc.JAEGER_TRACE_STATE, ",".join(f"{k}={v}" for k, v in trace_state.items())))
    return tags


def _logs(span: ReadableSpan) -> list[JaegerLog]:
    logs = []
    for event in span.events:
        attrs = event.attributes or {}
        fields = [tag(sc.JAEGER_LOG_EVENT, event.name)] if event.name and sc.JAEGER_LOG_EVENT not in attrs else []
        fields.extend(tag(k, v) for k, v in attrs.items())
        logs.append(JaegerLog(timestamp=event.timestamp // 1000, fields=fields))
    return logs


def _references(span: ReadableSpan, trace_id: str) -> list[JaegerReference]:
    refs: list[JaegerReference] = []
    parent = span.parent
    if parent is not None and parent.span_id:
        refs.append(JaegerReference(refType="CHILD_OF", traceID=trace_id, spanID=span_id_hex(parent.span_id)))
    for link in span.links:
        child_of = (link.attributes or {}).get(sc.LINK_REF_TYPE) == sc.LINK_REF_TYPE_CHILD_OF
        ref_type = "CHILD_OF" if child_of else "FOLLOWS_FROM"
        link_trace, link_span = trace_id_hex(link.context.trace_id), span_id_hex(link.context.span_id)
        if refs and refs[0].refType == "CHILD_OF" and (link_trace, link_span) == (trace_id, refs[0].spanID):
            refs[0].refType = ref_type  # the link names the parent: it decides the type
            continue
        refs.append(JaegerReference(refType=ref_type, traceID=link_trace, spanID=link_span))
    return refs


def _process(resource_attributes: Mapping[str, Any]) -> JaegerProcess:
    service = resource_attributes.get(sc.SERVICE_NAME)
    tags = [tag(k, v) for k, v in resource_attributes.items() if k != sc.SERVICE_NAME]
    return JaegerProcess(serviceName=_text(service) if service is not None else sc.JAEGER_NO_SERVICE_NAME, tags=tags)


def _span(span: ReadableSpan, process_id: str) -> JaegerSpan:
    context = span.context
    assert context is not None, "a finished span always has a context"
    trace_id = trace_id_hex(context.trace_id)
    start, end = span.start_time or 0, span.end_time or 0
    return JaegerSpan(
        traceID=trace_id,
        spanID=span_id_hex(context.span_id),
        flags=1 if context.trace_flags.sampled else 0,
        operationName=_text(span.name),
        references=_references(span, trace_id),
        startTime=start // 1000,
        duration=max(0, end - start) // 1000,
        tags=_span_tags(span),
        logs=_logs(span),
        processID=process_id,
    )


def to_jaeger(spans: Iterable[ReadableSpan]) -> JaegerResponse:
    """Jaeger's JSON model of `spans`: one trace per trace id in order of first appearance,
    spans in the order given, processes numbered per trace as Jaeger numbers them."""
    traces: dict[int, tuple[list[JaegerSpan], dict[str, tuple[str, JaegerProcess]]]] = {}
    for span in spans:
        if span.context is None:
            continue
        trace_spans, processes = traces.setdefault(span.context.trace_id, ([], {}))
        process = _process(dict(span.resource.attributes))
        key = process.model_dump_json()  # Jaeger dedups processes by content
        if key not in processes:
            processes[key] = (f"p{len(processes) + 1}", process)
        trace_spans.append(_span(span, processes[key][0]))
    return JaegerResponse(
        data=[
            JaegerTrace(
                traceID=trace_id_hex(trace_id),
                spans=trace_spans,
                processes={pid: process for pid, process in processes.values()},
            )
            for trace_id, (trace_spans, processes) in traces.items()
        ]
    )
