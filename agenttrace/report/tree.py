"""Span trees and self time: the arithmetic every report figure is built from.

A span's self time is its duration less the union of its children's intervals (clipped to the
span), so the self times of a subtree add up to the root's wall time exactly when siblings do
not overlap. Where they do, `critical_path` picks the children on the path that determined the
parent's end, as Jaeger's UI does.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator

from agenttrace.tracedata import SpanRecord


class SpanTree:
    """Spans of one or more traces, indexed by id and by parent."""

    def __init__(self, spans: Iterable[SpanRecord]) -> None:
        self.by_id: dict[tuple[str, str], SpanRecord] = {}
        self.children: dict[tuple[str, str], list[SpanRecord]] = defaultdict(list)
        self.roots: list[SpanRecord] = []
        for s in spans:
            self.by_id[(s.trace_id, s.span_id)] = s
        for s in self.by_id.values():
            if s.parent_id and (s.trace_id, s.parent_id) in self.by_id:
                self.children[(s.trace_id, s.parent_id)].append(s)
            else:
                self.roots.append(s)
        for kids in self.children.values():
            kids.sort(key=lambda c: (c.start_ns, c.end_ns))
        self.roots.sort(key=lambda r: r.start_ns)

    def kids(self, span: SpanRecord) -> list[SpanRecord]:
        return self.children.get((span.trace_id, span.span_id), [])

    def walk(self, span: SpanRecord) -> Iterator[SpanRecord]:
        """The span and all its descendants, depth first, children in start order."""
        stack = [span]
        while stack:
            s = stack.pop()
            yield s
            stack.extend(reversed(self.kids(s)))

    def parent(self, span: SpanRecord) -> SpanRecord | None:
        return self.by_id.get((span.trace_id, span.parent_id)) if span.parent_id else None


def union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by the intervals."""
    total, cur_start, cur_end = 0, None, None
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start  # type: ignore[operator]
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start  # type: ignore[operator]
    return total


def clipped(child: SpanRecord, parent: SpanRecord) -> tuple[int, int]:
    """The part of the child's interval inside the parent's (clock skew or bad data can put a
    child outside its parent; only the overlap counts towards the parent)."""
    return max(child.start_ns, parent.start_ns), min(child.end_ns, parent.end_ns)


def self_time_ns(span: SpanRecord, children: list[SpanRecord]) -> int:
    return max(0, span.duration_ns - union_ns(clipped(c, span) for c in children))


def critical_path(span: SpanRecord, children: list[SpanRecord]) -> list[SpanRecord]:
    """The children on the critical path of `span`, latest first, computed as Jaeger's UI does:
    take the child that finished last, then the last one that finished before that one started,
    and so on back to the parent's start."""
    path: list[SpanRecord] = []
    horizon = span.end_ns
    for child in sorted(children, key=lambda c: c.end_ns, reverse=True):
        if child.end_ns <= horizon and child.end_ns > span.start_ns:
            path.append(child)
            horizon = child.start_ns
    return path
