"""HTTP, database and RPC client spans (the OpenTelemetry client conventions, old and new HTTP
names): waiting on the network, segment `network` (SPANS.md)."""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.traces.conventions import SpanRole
from agenttrace.traces.span_records import SpanRecord

NAME = "OpenTelemetry HTTP/DB client"


def role(span: SpanRecord) -> SpanRole | None:
    if span.kind != "CLIENT" or not any(k in span.attributes for k in sc.CLIENT_CALL_KEYS):
        return None
    return SpanRole(NAME, sc.Segment.NETWORK)
