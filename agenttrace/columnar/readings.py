"""What each input held (report.inputs: conventions, spans per segment, what was left out), from
the span table, summed with what the per-span code read of the traces it reported (per_trace.py).

The table's part is ours (spans with agenttrace.segment, counted by segment) and spans of no known
convention (coverage.recognisable false: left out, listed by their first few distinct names).
Where both parts exist, the lists keep the order the per-span path first meets each entry in,
trace by trace (its reader hands on whole traces in the order they first appear): every entry
is keyed (its trace's first input order, its own) and the two parts' entries sorted by key.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from agenttrace.traces import Reading
from agenttrace.traces.conventions import AGENTTRACE, SpanRole
from agenttrace.traces.normalise import MAX_NAMES, NO_CONVENTION, ConventionSeen, LeftOut, input_of
from agenttrace.traces.span_records import SpanRecord

Key = tuple[int, int]  # (the trace's first input order, the span's)
UNKNOWN = (None, NO_CONVENTION)  # the left-out entry of spans no convention recognises


@dataclass
class Part:
    """The table's share of one input: ours by segment (the first at `first`), and spans of no
    known convention (`unknown`; their first distinct names with their keys)."""

    segments: dict[str, int] = field(default_factory=dict)
    first: Key | None = None
    unknown: int = 0
    names: list[tuple[str, Key]] = field(default_factory=list)


@dataclass
class Seen:
    """Of the per-span code's part of one input: each convention's first key, each left-out
    entry's, and the first distinct names of spans of no known convention with their keys."""

    conventions: dict[str, Key] = field(default_factory=dict)
    left_out: dict[tuple[str | None, str], Key] = field(default_factory=dict)
    names: list[tuple[str, Key]] = field(default_factory=list)


def merged(parts: list[Part]) -> Part:
    """The parts of one input read in batches (a store's: columnar/batches.py) as one: counts
    added, the first key and the first distinct names by key (keys hold across batches)."""
    out = Part()
    for part in parts:
        for segment, n in part.segments.items():
            out.segments[segment] = out.segments.get(segment, 0) + n
        out.unknown += part.unknown
    firsts = [p.first for p in parts if p.first is not None]
    out.first = min(firsts) if firsts else None
    first_of: dict[str, tuple[str, Key]] = {}
    for name, key in sorted((x for p in parts for x in p.names), key=lambda x: x[1]):
        first_of.setdefault(name, (name, key))
    out.names = list(first_of.values())[:MAX_NAMES]  # each batch's first few hold the input's
    return out


def merged_theirs(a: tuple[Reading, Seen] | None, b: tuple[Reading, Seen]) -> tuple[Reading, Seen]:
    """The per-span code's readings of one input's foreign traces in two batches (`a` the earlier:
    batches follow the input order) as one: counts added, each entry and name where it was first
    met (a's before b's), as one reading of both batches' traces would list them."""
    if a is None:
        return b
    (ra, sa), (rb, sb) = a, b
    conventions = {k: ConventionSeen(k, v.spans, Counter(v.segments), set(v.variants)) for k, v in ra.conventions.items()}
    for k, v in rb.conventions.items():
        c = conventions.setdefault(k, ConventionSeen(k))
        c.spans, c.segments, c.variants = c.spans + v.spans, c.segments + v.segments, c.variants | v.variants
    left_out = {k: LeftOut(v.convention, v.reason, v.count, list(v.names)) for k, v in ra.left_out.items()}
    for k, v in rb.left_out.items():
        e = left_out.setdefault(k, LeftOut(v.convention, v.reason))
        e.count += v.count
        e.names += [n for n in v.names if n not in e.names][:MAX_NAMES - len(e.names)]
    reading = Reading(ra.source, ra.spans + rb.spans, conventions, left_out, ra.inferred | rb.inferred)
    names = sa.names + [(n, k) for n, k in sb.names if n not in {x for x, _ in sa.names}]
    seen = Seen({**sb.conventions, **sa.conventions}, {**sb.left_out, **sa.left_out}, names[:MAX_NAMES])
    return reading, seen


def counts_sql(lo: int, hi: int) -> str:
    """SQL: (segment, n, top) over the table's spans of input orders lo..hi."""
    return (f"SELECT segment, count() AS n, max(i) AS top FROM spans WHERE i BETWEEN {lo} AND {hi} "
            "GROUP BY segment ORDER BY segment")


def _starts(lo: int, hi: int, where: str) -> str:
    return (f"(SELECT trace_id, min(i) AS t0 FROM spans WHERE i BETWEEN {lo} AND {hi} AND trace_id IN "
            f"(SELECT trace_id FROM spans WHERE i BETWEEN {lo} AND {hi} AND {where}) GROUP BY trace_id)")


def first_sql(lo: int, hi: int) -> str:
    """SQL: (k0, k1), the key of the first span of ours."""
    ours = "segment != ''"
    return (f"SELECT k.1 AS k0, k.2 AS k1 FROM (SELECT min((t.t0, s.i)) AS k FROM spans AS s JOIN {_starts(lo, hi, ours)} "
            f"AS t ON t.trace_id = s.trace_id WHERE s.i BETWEEN {lo} AND {hi} AND s.{ours})")


def names_sql(lo: int, hi: int) -> str:
    """SQL: (name, k0, k1), the first distinct names of spans of no known convention (every span
    with no segment left in the table is one), with their keys."""
    unknown = "segment = ''"
    return (f"SELECT name, k.1 AS k0, k.2 AS k1 FROM (SELECT s.name AS name, min((t.t0, s.i)) AS k FROM spans AS s "
            f"JOIN {_starts(lo, hi, unknown)} AS t ON t.trace_id = s.trace_id WHERE s.i BETWEEN {lo} AND {hi} AND "
            f"s.{unknown} GROUP BY s.name) ORDER BY k LIMIT {MAX_NAMES}")


def trace_starts(order: dict[tuple[str, str], int]) -> dict[str, int]:
    """Each trace's first input order, from (trace, span) -> input order."""
    starts: dict[str, int] = {}
    for (t, _), i in order.items():
        starts[t] = min(i, starts.get(t, i))
    return starts


class FirstSeen:
    """Per input (`seen`), where the per-span code first meets each convention and left-out entry,
    told each span in the order it reads them and the role normalise's mapping gave it
    (normalise's `observe`: the spans are classified once)."""

    def __init__(self, order: dict[tuple[str, str], int], starts: dict[str, int] | None = None) -> None:
        self.order, self.starts = order, trace_starts(order) if starts is None else starts
        self.seen: dict[str, Seen] = {}

    def __call__(self, s: SpanRecord, role: SpanRole | None) -> None:
        seen = self.seen.setdefault(input_of(s), Seen())
        i = self.order.get((s.trace_id, s.span_id), 0)
        key = (self.starts.get(s.trace_id, i), i)
        if s.segment is not None:
            seen.conventions.setdefault(AGENTTRACE, key)
            return
        if role is not None:
            seen.conventions.setdefault(role.convention, key)
        if role is None or role.segment is None:
            seen.left_out.setdefault(UNKNOWN if role is None else (role.convention, role.reason), key)
        if role is None and len(seen.names) < MAX_NAMES and s.name not in {n for n, _ in seen.names}:
            seen.names.append((s.name, key))


def _ours(source: str, part: Part) -> Reading:
    n = sum(part.segments.values())
    reading = Reading(source, n + part.unknown)
    if n:
        reading.conventions[AGENTTRACE] = ConventionSeen(AGENTTRACE, n, Counter(part.segments))
    if part.unknown:
        reading.left_out[UNKNOWN] = LeftOut(None, NO_CONVENTION, part.unknown, [name for name, _ in part.names])
    return reading


def reading(source: str, part: Part, theirs: Reading | None = None, seen: Seen | None = None) -> Reading:
    """One input's reading: the table's `part`, and the per-span code's (`theirs`, met as `seen`)."""
    ours = _ours(source, part)
    if theirs is None or not ours.spans:
        return theirs or ours
    seen = seen or Seen()
    conventions = dict(theirs.conventions)
    firsts = dict(seen.conventions)
    if AGENTTRACE in ours.conventions:
        had = conventions.get(AGENTTRACE)
        mine = ours.conventions[AGENTTRACE]
        conventions[AGENTTRACE] = ConventionSeen(AGENTTRACE, mine.spans + (had.spans if had else 0),
                                                 mine.segments + (had.segments if had else Counter()))
        firsts[AGENTTRACE] = min(k for k in (part.first, firsts.get(AGENTTRACE)) if k is not None)
    left_out = dict(theirs.left_out)
    lefts = dict(seen.left_out)
    if UNKNOWN in ours.left_out:
        had_lo = left_out.get(UNKNOWN)
        names = sorted([*part.names, *(seen.names if had_lo else [])], key=lambda x: x[1])
        left_out[UNKNOWN] = LeftOut(None, NO_CONVENTION, part.unknown + (had_lo.count if had_lo else 0),
                                    list(dict.fromkeys(n for n, _ in names))[:MAX_NAMES])
        lefts[UNKNOWN] = min(k for k in (part.names[0][1] if part.names else None, lefts.get(UNKNOWN)) if k is not None)
    return Reading(source, ours.spans + theirs.spans,
                   {k: conventions[k] for k in sorted(conventions, key=lambda c: firsts.get(c, (0, 0)))},
                   {k: left_out[k] for k in sorted(left_out, key=lambda x: lefts.get(x, (0, 0)))}, set(theirs.inferred))
