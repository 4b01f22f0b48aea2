"""Long attribute values, cut to a length with a visible marker.

The SDK's own limit (`SpanLimits.max_attribute_length`, OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT) cuts
strings silently, so a reader of a prompt or a stack trace in Jaeger cannot tell it is partial.
We switch the SDK's cut off and cut here instead, just before export, ending the value with
`...[truncated from N chars]` within the same limit. Every exporter of a run (the trace file
included) gets the same cut spans, so a replayed file shows what the live export showed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Link

from agenttrace.telemetry.readable import SpanCopy

__all__ = ["DEFAULT_MAX_VALUE_LENGTH", "TruncatingExporter", "max_value_length", "truncate_value"]

# Long enough for every value agenttrace writes itself (ids, names, error messages); short enough
# that a recorded prompt does not turn a Jaeger span page into a wall of text.
DEFAULT_MAX_VALUE_LENGTH = 4096
_ENV_VARS = ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT")


def max_value_length(explicit: int | None = None) -> int | None:
    """The limit to apply: `explicit`, else the standard OTEL_*_ATTRIBUTE_VALUE_LENGTH_LIMIT
    variables, else DEFAULT_MAX_VALUE_LENGTH. 0 or a negative number means no limit."""
    if explicit is None:
        for var in _ENV_VARS:
            text = os.environ.get(var, "").strip()
            if text:
                try:
                    explicit = int(text)
                except ValueError:
                    raise ValueError(f"{var}={text!r} is not a whole number of characters") from None
                break
        else:
            explicit = DEFAULT_MAX_VALUE_LENGTH
    return explicit if explicit > 0 else None


def _marker(total: int) -> str:
    return f"...[truncated from {total} chars]"


def truncate_value(value: Any, limit: int) -> Any:
    """`value` with every string longer than `limit` (alone or inside an array) cut to `limit`
    characters, its end replaced by the marker. Anything unchanged is returned as the same object."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        marker = _marker(len(value))
        # a limit too small for the marker still holds: the value is cut without one
        return value[: limit - len(marker)] + marker if limit > len(marker) else value[:limit]
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        if any(isinstance(v, str) and len(v) > limit for v in value):
            return tuple(truncate_value(v, limit) for v in value)
    return value


def _too_long(attributes: Mapping[str, Any] | None, limit: int) -> bool:
    return any(truncate_value(v, limit) is not v for v in (attributes or {}).values())


def _cut(attributes: Mapping[str, Any] | None, limit: int) -> dict[str, Any]:
    return {k: truncate_value(v, limit) for k, v in (attributes or {}).items()}


def truncate_span(span: ReadableSpan, limit: int) -> ReadableSpan:
    """The span itself when nothing is too long (the common case, no copy); else a copy whose
    span, event and link attributes are cut."""
    long_events = any(_too_long(e.attributes, limit) for e in span.events)
    long_links = any(_too_long(ln.attributes, limit) for ln in span.links)
    if not (_too_long(span.attributes, limit) or long_events or long_links):
        return span
    events = span.events
    if long_events:
        events = [Event(e.name, _cut(e.attributes, limit), e.timestamp) for e in span.events]
    links = [Link(ln.context, _cut(ln.attributes, limit)) for ln in span.links] if long_links else span.links
    return SpanCopy(
        dropped=(span.dropped_attributes, span.dropped_events, span.dropped_links),
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_cut(span.attributes, limit),
        events=events,
        links=links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class TruncatingExporter(SpanExporter):
    """Passes spans to `inner` with long attribute values cut (see the module docstring)."""

    def __init__(self, inner: SpanExporter, limit: int | None) -> None:
        self.inner = inner
        self.limit = limit

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.limit is not None:
            spans = [truncate_span(s, self.limit) for s in spans]
        return self.inner.export(spans)

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)

    def shutdown(self) -> None:
        self.inner.shutdown()
