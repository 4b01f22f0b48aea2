"""Build OTLP/JSON trace files by hand, with exact times, for report tests."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

BASE_NS = 1_700_000_000_000_000_000
_ids = itertools.count(1)


def any_value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    return {"stringValue": str(v)}


@dataclass
class S:
    """A span: name, segment, start and end in seconds from BASE_NS, attributes, children.
    `segment` None writes no `agenttrace.segment` (another instrumentation's span); `kind` is the
    OTLP span kind number (1 internal, 2 server, 3 client)."""

    name: str
    segment: str | None
    start: float
    end: float
    attrs: dict[str, Any] = field(default_factory=dict)
    children: list[S] = field(default_factory=list)
    events: list[tuple[str, float, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    kind: int = 1


def to_otlp(root: S, trace_id: str = "ab" * 16, resource: dict[str, Any] | None = None) -> dict[str, Any]:
    spans = []

    def walk(s: S, parent: str | None) -> None:
        span_id = f"{next(_ids):016x}"
        attrs = {"agenttrace.segment": s.segment, **s.attrs} if s.segment is not None else dict(s.attrs)
        out = {
            "traceId": trace_id,
            "spanId": span_id,
            "name": s.name,
            "kind": s.kind,
            "startTimeUnixNano": str(BASE_NS + round(s.start * 1e9)),
            "endTimeUnixNano": str(BASE_NS + round(s.end * 1e9)),
            "attributes": [{"key": k, "value": any_value(v)} for k, v in attrs.items()],
            "events": [
                {"name": n, "timeUnixNano": str(BASE_NS + round(t * 1e9)),
                 "attributes": [{"key": k, "value": any_value(v)} for k, v in a.items()]}
                for n, t, a in s.events
            ],
            "status": {"code": 2, "message": s.error} if s.error else {},
        }
        if parent:
            out["parentSpanId"] = parent
        spans.append(out)
        for c in s.children:
            walk(c, span_id)

    walk(root, None)
    res = [{"key": k, "value": any_value(v)} for k, v in (resource or {"service.name": "test"}).items()]
    return {"resourceSpans": [{"resource": {"attributes": res}, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]}


def foreign(name: str, start: float, end: float, attrs: dict[str, Any] | None = None, children: list[S] | None = None,
            *, error: str | None = None, kind: int = 1) -> S:
    """A span of another instrumentation (no agenttrace.segment)."""
    return S(name, None, start, end, attrs or {}, children or [], error=error, kind=kind)


def write_trace(path, *roots: S, **kwargs: Any) -> None:
    with open(path, "w") as f:
        for i, r in enumerate(roots):
            f.write(json.dumps(to_otlp(r, trace_id=f"{i + 1:032x}", **kwargs)) + "\n")
