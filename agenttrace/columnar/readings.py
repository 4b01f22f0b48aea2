"""What each input held (report.inputs: conventions, spans per segment, what was left out), from
the span table, summed with what the per-span code read of the traces it reported (per_trace.py).

The table's part is ours (spans with agenttrace.segment, counted by segment), spans of no known
convention (left out, listed by their first few distinct names), and the spans of other
instrumentations the table maps itself (roles.py: conventions, segments, variants, what was left
out and why). Where parts meet, the lists keep the order the per-span path first meets each
entry in, trace by trace (its reader hands on whole traces in the order they first appear):
every entry and name is keyed (its trace's first input order, its own) and the parts' entries
sorted by key.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from agenttrace.columnar.roles import ROLES
from agenttrace.traces import Reading
from agenttrace.traces.conventions import AGENTTRACE, SpanRole
from agenttrace.traces.normalise import MAX_NAMES, NO_CONVENTION, ConventionSeen, LeftOut, input_of
from agenttrace.traces.span_records import SpanRecord

Key = tuple[int, int]  # (the trace's first input order, the span's)
UNKNOWN = (None, NO_CONVENTION)  # the left-out entry of spans no convention recognises


Entry = tuple[str | None, str]  # a left-out entry: (convention, reason)


@dataclass
class Seen:
    """Of one part of an input: each convention's first key, each left-out entry's, and each
    left-out entry's first distinct names with their keys."""

    conventions: dict[str, Key] = field(default_factory=dict)
    left_out: dict[Entry, Key] = field(default_factory=dict)
    names: dict[Entry, list[tuple[str, Key]]] = field(default_factory=dict)


@dataclass
class Part:
    """The table's share of one input: ours by segment (the first at `first`), spans of no known
    convention (`unknown`; their first distinct names with their keys), and the spans the table
    mapped by their conventions' roles (`mapped`: their reading, keyed)."""

    segments: dict[str, int] = field(default_factory=dict)
    first: Key | None = None
    unknown: int = 0
    names: list[tuple[str, Key]] = field(default_factory=list)
    mapped: tuple[Reading, Seen] | None = None


def _first_names(names) -> list[tuple[str, Key]]:
    """The first MAX_NAMES distinct names of keyed `names`, by key."""
    first_of: dict[str, tuple[str, Key]] = {}
    for name, key in sorted(names, key=lambda x: x[1]):
        first_of.setdefault(name, (name, key))
    return list(first_of.values())[:MAX_NAMES]


def merged(parts: list[Part]) -> Part:
    """The parts of one input read in batches (a store's: columnar/batches.py) as one: counts
    added, the first key and the first distinct names by key (keys hold across batches)."""
    out = Part()
    for part in parts:
        for segment, n in part.segments.items():
            out.segments[segment] = out.segments.get(segment, 0) + n
        out.unknown += part.unknown
        if part.mapped is not None:
            out.mapped = merged_theirs(out.mapped, part.mapped)
    firsts = [p.first for p in parts if p.first is not None]
    out.first = min(firsts) if firsts else None
    out.names = _first_names(x for p in parts for x in p.names)  # each batch's first few hold the input's
    return out


def merged_theirs(a: tuple[Reading, Seen] | None, b: tuple[Reading, Seen]) -> tuple[Reading, Seen]:
    """The readings of one input's traces in two batches or shares (`a` the earlier: they follow
    the input order, so a's keys come before b's) as one: `_combined`'s, as one reading of both
    would list them."""
    return b if a is None else _combined(a[0].source, [a, b])


_UNMAPPED = f"i NOT IN (SELECT i FROM {ROLES})"  # a span no role of roles.py maps or leaves out


def counts_sql(lo: int, hi: int) -> str:
    """SQL: (segment, mapped, n, top) over the table's spans of input orders lo..hi (`mapped`: a
    role of roles.py says what they are)."""
    return (f"SELECT segment, NOT {_UNMAPPED} AS mapped, count() AS n, max(i) AS top FROM spans WHERE i BETWEEN {lo} "
            f"AND {hi} GROUP BY segment, mapped ORDER BY segment, mapped")


def _starts(lo: int, hi: int, where: str) -> str:
    return (f"(SELECT trace_id, min(i) AS t0 FROM spans WHERE i BETWEEN {lo} AND {hi} AND trace_id IN "
            f"(SELECT trace_id FROM spans WHERE i BETWEEN {lo} AND {hi} AND {where}) GROUP BY trace_id)")


def first_sql(lo: int, hi: int) -> str:
    """SQL: (k0, k1), the key of the first span of ours."""
    ours = f"segment != '' AND {_UNMAPPED}"
    return (f"SELECT k.1 AS k0, k.2 AS k1 FROM (SELECT min((t.t0, s.i)) AS k FROM spans AS s JOIN {_starts(lo, hi, ours)} "
            f"AS t ON t.trace_id = s.trace_id WHERE s.i BETWEEN {lo} AND {hi} AND s.{ours})")


def names_sql(lo: int, hi: int) -> str:
    """SQL: (name, k0, k1), the first distinct names of spans of no known convention (every span
    with no segment left in the table and no role), with their keys."""
    unknown = f"segment = '' AND {_UNMAPPED}"
    return (f"SELECT name, k.1 AS k0, k.2 AS k1 FROM (SELECT s.name AS name, min((t.t0, s.i)) AS k FROM spans AS s "
            f"JOIN {_starts(lo, hi, unknown)} AS t ON t.trace_id = s.trace_id WHERE s.i BETWEEN {lo} AND {hi} AND "
            f"s.{unknown} GROUP BY s.name) ORDER BY k LIMIT {MAX_NAMES}")


def _role_starts(lo: int, hi: int) -> str:
    return (f"(SELECT trace_id, min(i) AS t0 FROM spans WHERE i BETWEEN {lo} AND {hi} AND trace_id IN "
            f"(SELECT trace_id FROM {ROLES} WHERE i BETWEEN {lo} AND {hi}) GROUP BY trace_id)")


def conventions_sql(lo: int, hi: int) -> str:
    """SQL: (convention, segment, n, variants, k0, k1) of the spans of input orders lo..hi the
    table mapped by their roles (roles.py), by convention and segment ('' left out), with the key
    of the first."""
    return (f"SELECT convention, segment, count() AS n, groupUniqArray(variant) AS variants, min(key).1 AS k0, "
            f"min(key).2 AS k1 FROM (SELECT r.convention AS convention, r.segment AS segment, r.variant AS variant, "
            f"(t.t0, r.i) AS key FROM {ROLES} AS r JOIN {_role_starts(lo, hi)} AS t ON t.trace_id = r.trace_id "
            f"WHERE r.i BETWEEN {lo} AND {hi}) GROUP BY convention, segment ORDER BY convention, segment")


def left_out_sql(lo: int, hi: int) -> str:
    """SQL: (convention, reason, n, names) of the spans of input orders lo..hi the table left out by
    their roles: each entry's count, and its first distinct names with their keys, by key."""
    return (f"SELECT convention, reason, sum(n) AS n, arraySlice(arraySort(x -> x.2, groupArray((name, k))), 1, {MAX_NAMES}) "
            f"AS names FROM (SELECT r.convention AS convention, r.reason AS reason, r.name AS name, count() AS n, "
            f"min((t.t0, r.i)) AS k FROM {ROLES} AS r JOIN {_role_starts(lo, hi)} AS t ON t.trace_id = r.trace_id "
            f"WHERE r.i BETWEEN {lo} AND {hi} AND r.segment = '' GROUP BY convention, reason, name) "
            "GROUP BY convention, reason ORDER BY convention, reason")


def mapped_reading(conventions: dict[str, list], left_out: dict[str, list]) -> tuple[Reading, Seen]:
    """The reading of the spans the table mapped (their rows of conventions_sql and left_out_sql),
    with where each entry and name came first (its source is the reading's it joins)."""
    reading, seen = Reading(""), Seen()
    for name, segment, n, variants, k0, k1 in zip(*conventions.values(), strict=True):
        c = reading.conventions.setdefault(name, ConventionSeen(name))
        c.spans += n
        reading.spans += n
        if segment:
            c.segments[segment] += n
        c.variants.update(v for v in variants if v)
        seen.conventions[name] = min((k0, k1), seen.conventions.get(name, (k0, k1)))
    for name, reason, n, names in zip(*left_out.values(), strict=True):
        keyed = [(x, _pair(k)) for x, k in (_pair(v) for v in names)]
        reading.left_out[(name, reason)] = LeftOut(name, reason, n, [x for x, _ in keyed])
        seen.left_out[(name, reason)], seen.names[(name, reason)] = keyed[0][1], keyed
    reading.conventions = dict(sorted(reading.conventions.items(), key=lambda kv: seen.conventions[kv[0]]))
    reading.left_out = dict(sorted(reading.left_out.items(), key=lambda kv: seen.left_out[kv[0]]))
    return reading, seen


def _pair(value) -> tuple:
    """A tuple back from Arrow (a dict of its fields in order) as a tuple."""
    return tuple(value.values()) if isinstance(value, dict) else tuple(value)


def part_of(engine, lo: int, hi: int, keyed: bool = False) -> tuple[Part, int]:
    """What the table of `engine` (an Engine) holds of the input whose spans' input orders run
    lo..hi (`keyed`: with its first span of ours' key); and the highest input order among them
    (lo - 1 when none)."""
    counts, _ = engine.table(counts_sql(lo, hi))
    part, top, mapped = Part(), lo - 1, False
    for segment, by_role, n, t in zip(counts["segment"], counts["mapped"], counts["n"], counts["top"], strict=True):
        top = max(top, t)
        if by_role:
            mapped = True
        elif segment:
            part.segments[segment] = n
        else:
            part.unknown = n
    if part.unknown:
        names, _ = engine.table(names_sql(lo, hi))
        part.names = [(n, (a, b)) for n, a, b in zip(names["name"], names["k0"], names["k1"], strict=True)]
    if mapped:  # keyed: where each entry came first decides where it is listed among the rest
        part.mapped = mapped_reading(engine.table(conventions_sql(lo, hi))[0], engine.table(left_out_sql(lo, hi))[0])
    if (keyed or mapped) and part.segments:
        first, _ = engine.table(first_sql(lo, hi))
        part.first = (first["k0"][0], first["k1"][0])
    return part, top


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
            entry = UNKNOWN if role is None else (role.convention, role.reason)
            seen.left_out.setdefault(entry, key)
            names = seen.names.setdefault(entry, [])
            if len(names) < MAX_NAMES and s.name not in {n for n, _ in names}:
                names.append((s.name, key))


def _ours(source: str, part: Part) -> tuple[Reading, Seen]:
    """The table's own part (ours, and spans of no known convention) as a keyed reading."""
    n = sum(part.segments.values())
    reading, seen = Reading(source, n + part.unknown), Seen()
    if n:
        reading.conventions[AGENTTRACE] = ConventionSeen(AGENTTRACE, n, Counter(part.segments))
        if part.first is not None:
            seen.conventions[AGENTTRACE] = part.first
    if part.unknown:
        reading.left_out[UNKNOWN] = LeftOut(None, NO_CONVENTION, part.unknown, [name for name, _ in part.names])
        seen.names[UNKNOWN] = list(part.names)
        if part.names:
            seen.left_out[UNKNOWN] = part.names[0][1]
    return reading, seen


def _combined(source: str, parts: list[tuple[Reading, Seen]]) -> tuple[Reading, Seen]:
    """Keyed readings of one input's parts as one: counts added, variants joined, each entry where
    it came first and each left-out entry's first distinct names, by key."""
    out, seen_out = Reading(source), Seen()
    twice: set[Entry] = set()
    for reading_, seen in parts:
        out.spans += reading_.spans
        out.inferred |= reading_.inferred
        for k, c in reading_.conventions.items():
            have = out.conventions.setdefault(k, ConventionSeen(k))
            have.spans, have.segments, have.variants = have.spans + c.spans, have.segments + c.segments, have.variants | c.variants
            if k in seen.conventions:
                seen_out.conventions[k] = min(seen.conventions[k], seen_out.conventions.get(k, seen.conventions[k]))
        for k, lo in reading_.left_out.items():
            have_lo = out.left_out.get(k)
            if have_lo is None:  # met in one part alone: its names as that part lists them
                out.left_out[k] = LeftOut(lo.convention, lo.reason, lo.count, list(lo.names))
            else:
                have_lo.count += lo.count
                twice.add(k)
            seen_out.names.setdefault(k, []).extend(seen.names.get(k, ()))
            if k in seen.left_out:
                seen_out.left_out[k] = min(seen.left_out[k], seen_out.left_out.get(k, seen.left_out[k]))
    for k in list(seen_out.names):
        seen_out.names[k] = _first_names(seen_out.names[k])
    for k in twice:
        out.left_out[k].names = [n for n, _ in seen_out.names[k]]
    out.conventions = {k: out.conventions[k] for k in sorted(out.conventions, key=lambda c: seen_out.conventions.get(c, (0, 0)))}
    out.left_out = {k: out.left_out[k] for k in sorted(out.left_out, key=lambda x: seen_out.left_out.get(x, (0, 0)))}
    return out, seen_out


def reading(source: str, part: Part, theirs: Reading | None = None, seen: Seen | None = None) -> Reading:
    """One input's reading: the table's `part`, and the per-span code's (`theirs`, met as `seen`)."""
    ours = _ours(source, part)
    parts = [ours] if ours[0].spans else []
    if part.mapped is not None:
        parts.append(part.mapped)
    if theirs is not None:
        if not parts:
            return theirs
        parts.append((theirs, seen or Seen()))
    if len(parts) == 1 and part.mapped is None:
        return parts[0][0]
    return _combined(source, parts)[0] if parts else ours[0]
