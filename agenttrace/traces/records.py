"""The records every report reads: a finished span (`SpanRecord`), its events, and what a load
returned (`LoadResult`), whatever format the spans came from. Lean on purpose (slotted, events as
flat tuples): a million-span trace is held as these. No torch import on this path.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agenttrace import semconv as sc

__all__ = ["SPAN_KINDS", "STATUS_CODES", "EventRecord", "LoadResult", "SpanRecord", "short"]

STATUS_CODES = {0: "UNSET", 1: "OK", 2: "ERROR"}
SPAN_KINDS = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_intern = sys.intern


def short(text: str) -> str:
    """Segment names, outcomes, tool names repeat on every span: one shared object per value."""
    return _intern(text) if len(text) <= 48 else text


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

