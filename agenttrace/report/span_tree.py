"""Span trees, intervals and the critical path: the arithmetic every report figure is built from.

A span's self time is its duration less the union of its children's intervals (clipped to the
span). The critical path is computed exactly as Jaeger's UI computes it (jaeger-ui,
`TracePage/CriticalPath`), so a user who opens the same trace in Jaeger sees the same path:

1. Only blocking children count: a CONSUMER child of a PRODUCER span is dropped with its
   subtree (the parent did not wait for it).
2. Children that overflow their parent are sanitised top-down, against the parent's already
   sanitised interval: one that starts at or after the parent's end, or ends at or before the
   parent's start, is dropped with its subtree; otherwise it is clipped to the parent.
3. From the root: take the last-finishing child (the latest end; on a tie the earliest-starting,
   children being ordered by start time); the parent's part after that child's end is on the path.
   Descend into that child. When a span has no such child, its part from its start is on the
   path; go back up to its parent with "returning time" = that span's start, and take the parent's
   child that ended *strictly before* the returning time (so of two back-to-back children, the
   earlier is not on the path: the parent is, for that stretch). Stop when back at the root.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from agenttrace.traces.span_records import SpanRecord

MAX_PROBLEMS_PER_KIND = 10


class SpanTree:
    """Spans of one or more traces, indexed by id and by parent; children in start order (stable,
    so equal starts keep file order, as in Jaeger's UI).

    Duplicate span ids within a trace are renamed `{id}_{n}` for the later spans (Jaeger's UI does
    the same); children name the first. `problems` lists what was odd: duplicates, spans naming a
    parent not in the input (analysed as roots), children outside their parent's interval.
    """

    def __init__(self, spans: Iterable[SpanRecord]) -> None:
        self.by_id: dict[tuple[str, str], SpanRecord] = {}
        self.children: dict[tuple[str, str], list[SpanRecord]] = defaultdict(list)
        self.roots: list[SpanRecord] = []
        self.orphans: list[SpanRecord] = []  # roots that name a parent which is not in the input
        self.problems: list[str] = []
        counts: dict[str, int] = defaultdict(int)
        dupes: list[str] = []
        renamed: dict[tuple[str, str], int] = {}  # the last suffix given per id: renaming stays linear
        for s in spans:
            key = (s.trace_id, s.span_id)
            if key in self.by_id:
                n = self._next_free(s, renamed.get(key, 0) + 1)
                renamed[key] = n
                dupes.append(f"{s.source}: span id {s.span_id} appears twice in trace {s.trace_id}; "
                             f"this one ({s.name!r}) is analysed as {s.span_id}_{n}")
                s.span_id = f"{s.span_id}_{n}"
                key = (s.trace_id, s.span_id)
            self.by_id[key] = s
        for s in self.by_id.values():
            parent = self.by_id.get((s.trace_id, s.parent_id)) if s.parent_id else None
            if parent is not None and parent is not s:  # a self-parent would hide its subtree
                self.children[(s.trace_id, s.parent_id)].append(s)  # type: ignore[index]
            else:
                self.roots.append(s)
                if s.parent_id:
                    self.orphans.append(s)
                    counts[s.trace_id] += 1
        for kids in self.children.values():
            kids.sort(key=_start)
        self.roots.sort(key=_start)
        self._report(dupes, counts)

    def _next_free(self, s: SpanRecord, n: int) -> int:
        while (s.trace_id, f"{s.span_id}_{n}") in self.by_id:
            n += 1
        return n

    def _report(self, dupes: list[str], orphan_counts: dict[str, int]) -> None:
        self.problems += _capped(dupes, "duplicate span ids")
        orphan_lines = []
        for trace_id, n in orphan_counts.items():
            first = next(o for o in self.orphans if o.trace_id == trace_id)
            orphan_lines.append(
                f"{first.source}: trace {trace_id}: {n} span(s) name a parent that is not in the input "
                f"(first: {first.name!r}, parent {first.parent_id}); analysed as roots"
            )
        self.problems += _capped(orphan_lines, "traces with missing parents")
        outside = []
        for (trace_id, parent_id), kids in self.children.items():
            parent = self.by_id[(trace_id, parent_id)]
            for c in kids:
                if not is_blocking(c, parent):  # a run the parent handed off runs past it by design
                    continue
                early, late = parent.start_ns - c.start_ns, c.end_ns - parent.end_ns
                if early > 0 or late > 0:
                    how = ", ".join(
                        f"{what} by {ns / 1e6:.3f} ms" for what, ns in (("starts early", early), ("ends late", late)) if ns > 0
                    )
                    outside.append(f"{c.source}: span {c.name!r} ({c.span_id}) runs outside its parent {parent.name!r} "
                                   f"({how}); only its part inside the parent counts, as in Jaeger's UI")
        self.problems += _capped(outside, "children outside their parent")

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


def _start(s: SpanRecord) -> int:
    return s.start_ns


def _capped(lines: list[str], what: str) -> list[str]:
    if len(lines) <= MAX_PROBLEMS_PER_KIND:
        return lines
    return [*lines[:MAX_PROBLEMS_PER_KIND], f"... and {len(lines) - MAX_PROBLEMS_PER_KIND} more {what} (not listed)"]


def union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by the intervals."""
    total, cur_start, cur_end = 0, 0, None
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def clipped(child: SpanRecord, parent: SpanRecord) -> tuple[int, int]:
    """The part of the child's interval inside the parent's (clock skew or bad data can put a
    child outside its parent; only the overlap counts towards the parent)."""
    return max(child.start_ns, parent.start_ns), min(child.end_ns, parent.end_ns)


def self_time_ns(span: SpanRecord, children: list[SpanRecord]) -> int:
    return max(0, span.duration_ns - union_ns(clipped(c, span) for c in children))


def is_blocking(child: SpanRecord, parent: SpanRecord) -> bool:
    """Whether the parent waited for the child: all children do except a CONSUMER under a
    PRODUCER (OpenTelemetry has no other marker of an un-awaited child; Jaeger's UI uses this one)."""
    return not (parent.kind == "PRODUCER" and child.kind == "CONSUMER")


def sanitized_kids(
    tree: SpanTree, span: SpanRecord, lo: int, hi: int
) -> tuple[list[tuple[SpanRecord, int, int]], list[tuple[SpanRecord, int, int]]]:
    """The span's children as (child, start, end) sanitised against the span's interval [lo, hi]
    (rule 2 above), and the non-blocking children (rule 1), which are kept whole; blocking children
    entirely outside the span are dropped."""
    blocking, other = [], []
    for c in tree.kids(span):
        s, e = c.start_ns, c.end_ns
        if not is_blocking(c, span):
            other.append((c, s, max(s, e)))  # not waited for: kept whole, whenever it ran
            continue
        if s >= lo:
            if s >= hi:
                continue
        elif e <= lo:
            continue
        else:
            s = lo
        blocking.append((c, s, min(e, hi)))
    return blocking, other


def last_finishing(kids: list[tuple[SpanRecord, int, int]], before: int | None, *, adjacent: bool = False) -> int | None:
    """Index of the child that finished last, or last before `before` (strictly, as Jaeger's UI;
    with `adjacent=True` a child ending exactly at `before` counts too). First wins on ties."""
    best, best_end = None, -1
    for i, (_, _, end) in enumerate(kids):
        if before is not None and (end > before if adjacent else end >= before):
            continue
        if end > best_end:
            best, best_end = i, end
    return best


@dataclass(frozen=True, slots=True)
class PathSection:
    """A stretch of the critical path: `span` itself (not a child of it) was what the root waited
    for from `start_ns` to `end_ns`."""

    span: SpanRecord
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


def critical_path(tree: SpanTree, root: SpanRecord) -> list[PathSection]:
    """The critical path of `root`'s subtree as Jaeger's UI computes it (module docstring), latest
    section first. Empty sections are left out; the sections tile [root start, root end]."""
    interval: dict[int, tuple[int, int]] = {id(root): (root.start_ns, root.end_ns)}
    kids_of: dict[int, list[tuple[SpanRecord, int, int]]] = {}
    parent_of: dict[int, SpanRecord] = {}
    stack = [root]
    while stack:  # sanitise top-down: each child against its parent's sanitised interval
        span = stack.pop()
        lo, hi = interval[id(span)]
        kids, _ = sanitized_kids(tree, span, lo, hi)
        kids_of[id(span)] = kids
        for c, s, e in kids:
            interval[id(c)] = (s, e)
            parent_of[id(c)] = span
            stack.append(c)
    sections: list[PathSection] = []
    span, returning = root, None
    while True:
        start, end = interval[id(span)]
        until = end if returning is None else returning
        kids = kids_of[id(span)]
        i = last_finishing(kids, returning)
        if i is not None:
            child, _, child_end = kids[i]
            if child_end != until:
                sections.append(PathSection(span, child_end, until))
            span, returning = child, None
            continue
        if start != until:
            sections.append(PathSection(span, start, until))
        if span is root:
            return sections
        span, returning = parent_of[id(span)], start
