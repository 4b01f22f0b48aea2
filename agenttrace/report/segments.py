"""Where a span's wall time went, by segment (SPANS.md, "Segment time").

Each span's self time (its duration less its children's intervals) is charged to its segment;
agent, step and attempt self time is "other". At the default detail level draft and verify are
not spans but `agenttrace.spec.draft_s` / `verify_s` totals on the generation span: they are
carved out of the generation's self time (only when it has no draft/verify child spans), so the
breakdown is the same at either detail level.

Where a span's children overlap, the breakdown follows the critical path chain at that level
(`span_tree.py`: the last-finishing child, then the one that finished before that one started, ...),
so segment times still sum to the span's wall time; the children off the path (and un-awaited
CONSUMER children of a PRODUCER) are "overlap", shown apart by segment. One deliberate difference
from Jaeger's strict rule: here a child that ends exactly when the next path child starts is on
the path. Our spans are recorded back to back from one clock, and with the strict rule a
generation that ends the instant its parse starts would be charged to its attempt as "other".
`tree.critical_path` itself keeps Jaeger's rule exactly.

All arithmetic is in integer nanoseconds, so the segments of a span sum to its duration exactly.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import dataclass, field

from agenttrace import semconv as sc
from agenttrace.report.model import SEGMENT_FIELDS, SegmentTimes, lean
from agenttrace.report.span_tree import SpanTree, sanitized_kids
from agenttrace.traces.span_records import SpanRecord

_INDEX = {name: i for i, name in enumerate(SEGMENT_FIELDS)}
_OTHER = _INDEX["other"]
_DRAFT, _VERIFY, _GENERATION = _INDEX["draft"], _INDEX["verify"], _INDEX["generation"]
_CONSTRAIN = _INDEX["constrain"]
_AS_OTHER = {sc.Segment.AGENT.value, sc.Segment.STEP.value, sc.Segment.ATTEMPT.value}
_N = len(SEGMENT_FIELDS)
_VALUES = operator.attrgetter(*SEGMENT_FIELDS)


@dataclass(slots=True)
class Breakdown:
    """A span's wall time by segment (ns, indexed like SEGMENT_FIELDS; sums to its sanitised
    duration) and the time of parallel branches off its critical path, by segment."""

    ns: list[int] = field(default_factory=lambda: [0] * _N)
    overlap_ns: list[int] = field(default_factory=lambda: [0] * _N)

    def add(self, other: Breakdown) -> None:
        self.ns = [a + b for a, b in zip(self.ns, other.ns, strict=True)]
        if any(other.overlap_ns):
            self.overlap_ns = [a + b for a, b in zip(self.overlap_ns, other.overlap_ns, strict=True)]

    def add_as_overlap(self, other: Breakdown) -> None:
        self.overlap_ns = [a + b + c for a, b, c in zip(self.overlap_ns, other.ns, other.overlap_ns, strict=True)]

    def total_ns(self) -> int:
        return sum(self.ns)

    def segments(self) -> SegmentTimes:
        return _seconds(self.ns)

    def overlap_segments(self) -> SegmentTimes | None:
        """None when nothing ran in parallel (the common case; saves a model per step)."""
        return _seconds(self.overlap_ns) if any(self.overlap_ns) else None


# One all-zero SegmentTimes for every breakdown that has no time at all (most steps' retry cost):
# figures are read, never changed, once made, and a report of a million spans holds ~150k of them.
_ZERO = lean(SegmentTimes())


def _seconds(ns: list[int]) -> SegmentTimes:
    # zero fields are left out: they keep the shared default 0.0 object
    if not any(ns):
        return _ZERO
    return lean(SegmentTimes(**{name: ns[i] / 1e9 for i, name in enumerate(SEGMENT_FIELDS) if ns[i]}))


def _overlapping(kids: list[tuple[SpanRecord, int, int]]) -> bool:
    end = None
    for _, s, e in kids:  # in start order
        if end is not None and s < end:
            return True
        end = e if end is None or e > end else end
    return False


def _path_chain(kids: list[tuple[SpanRecord, int, int]]) -> list[int]:
    """Indices of the children on the path, latest first (the chain described in the docstring).
    One pass over the children by end time, latest first (ties: earliest start, as Jaeger): the
    bound only moves back, so a child skipped for ending too late stays skipped."""
    by_end = sorted(range(len(kids)), key=lambda i: (-kids[i][2], i))
    chain: list[int] = []
    bound: int | None = None
    for i in by_end:
        if bound is None or kids[i][2] <= bound:
            chain.append(i)
            bound = kids[i][1]
    return chain


# A span of no segment inside a model call (the layers of a streamed call merged into their
# parent, an HTTP client span under a generation) is that call's time, not "other". Inside a tool
# it stays "other": there it is usually a framework's wrapper around a sub-agent's run.
_INHERITED = frozenset({sc.Segment.GENERATION.value})


def _charge(b: Breakdown, span: SpanRecord, self_ns: int, kids: list[tuple[SpanRecord, int, int]],
            inherited: str | None = None) -> None:
    segment = span.segment or inherited or "other"
    index = _OTHER if segment in _AS_OTHER else _INDEX.get(segment, _OTHER)
    if index == _GENERATION and not any(c.segment in (sc.Segment.DRAFT, sc.Segment.VERIFY) for c, _, _ in kids):
        draft = min(self_ns, round(float(span.attributes.get(sc.SPEC_DRAFT_S) or 0.0) * 1e9))
        verify = min(self_ns - draft, round(float(span.attributes.get(sc.SPEC_VERIFY_S) or 0.0) * 1e9))
        b.ns[_DRAFT] += max(0, draft)
        b.ns[_VERIFY] += max(0, verify)
        self_ns -= max(0, draft) + max(0, verify)
    if index == _GENERATION:
        # grammar masks are computed outside the draft and verify intervals: their own segment
        a = span.attributes
        constrain = min(self_ns, round((float(a.get(sc.CONSTRAIN_MASK_S) or 0.0) + float(a.get(sc.CONSTRAIN_COMPILE_S) or 0.0)) * 1e9))
        b.ns[_CONSTRAIN] += max(0, constrain)
        self_ns -= max(0, constrain)
    b.ns[index] += self_ns


# Segments whose on-path spans `breakdowns` can list (with the nearest such span above each), for
# the report's stage times (stages.py): a compaction's or a sub-agent's subtree counts whole.
MARKED = frozenset({sc.Segment.COMPACTION.value, sc.Segment.DELEGATION.value})


def breakdowns(tree: SpanTree, root: SpanRecord,
               marks: list[tuple[SpanRecord, SpanRecord | None]] | None = None) -> dict[int, Breakdown]:
    """The breakdown of `root` and of every span in its subtree (keyed by `id(span)`), each over
    its interval sanitised against its parent's. Iterative, so deep traces cannot overflow.

    With `marks`, every span of a MARKED segment on the critical path (every span whose time is
    in `root`'s own segment times, not in its overlap) is appended to it, top-down, with the
    nearest MARKED span above it on the path (None: none, `root` itself aside)."""
    order: list[tuple[SpanRecord, int, list[SpanRecord], list[SpanRecord], list[tuple[SpanRecord, int, int]], str | None]] = []
    stack: list[tuple[SpanRecord, int, int, str | None]] = [(root, root.start_ns, max(root.start_ns, root.end_ns), None)]
    # (for marks) span id -> the nearest MARKED span above it on the path, or root; absent: off the path
    above: dict[int, SpanRecord] | None = {id(root): root} if marks is not None else None
    while stack:
        span, lo, hi, inherited = stack.pop()
        kids, detached = sanitized_kids(tree, span, lo, hi)
        if _overlapping(kids):
            chain = set(_path_chain(kids))
            followed = [k for i, k in enumerate(kids) if i in chain]
            off = [k for i, k in enumerate(kids) if i not in chain] + detached
        else:
            followed, off = kids, detached
        self_ns = (hi - lo) - sum(e - s for _, s, e in followed)
        order.append((span, self_ns, [c for c, _, _ in followed], [c for c, _, _ in off], kids, inherited))
        if above is not None and id(span) in above:
            mark = above.pop(id(span))
            if span is not root and span.segment in MARKED:
                marks.append((span, None if mark is root else mark))  # type: ignore[union-attr]
                mark = span
            for c, _, _ in followed:
                above[id(c)] = mark
        passed = inherited if span.segment is None else span.segment if span.segment in _INHERITED else None
        stack.extend((*k, passed) for k in followed)
        stack.extend((*k, passed) for k in off)
    out: dict[int, Breakdown] = {}
    for span, self_ns, followed, off, kids, inherited in reversed(order):  # children before their parents
        b = Breakdown()
        _charge(b, span, self_ns, kids, inherited)
        for c in followed:
            b.add(out[id(c)])
        for c in off:
            b.add_as_overlap(out[id(c)])
        out[id(span)] = b
    return out


def breakdown(tree: SpanTree, root: SpanRecord) -> Breakdown:
    """The breakdown of one span over its own interval."""
    return breakdowns(tree, root)[id(root)]


def add_segments(totals: list[float], st: SegmentTimes | None) -> None:
    """Adds segment times field-wise into `totals` (a float per segment); None counts as zero."""
    if st is None or st is _ZERO:  # adding 0.0 leaves every total as it is
        return
    totals[:] = map(operator.add, totals, _VALUES(st))


def segment_times(totals: list[float]) -> SegmentTimes:
    """The segment times of `totals` (a float per segment, SEGMENT_FIELDS order)."""
    if not any(totals):
        return _ZERO
    return lean(SegmentTimes(**{name: totals[i] for i, name in enumerate(SEGMENT_FIELDS) if totals[i]}))


def sum_segments(items: Iterable[SegmentTimes | None]) -> SegmentTimes:
    """The field-wise sum of segment times (None counts as zero)."""
    totals = [0.0] * _N
    for st in items:
        add_segments(totals, st)
    return segment_times(totals)
