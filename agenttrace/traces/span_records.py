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

__all__ = ["ATTRIBUTE_TYPES", "SPAN_KINDS", "STATUS_CODES", "EventRecord", "LoadResult", "SpanRecord", "break_cycles",
           "checked", "short"]

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
    # `agenttrace.segment` when it is a string, else None: read on every visit of every report
    # pass, so kept rather than looked up (set from the attributes; `attributes` is only ever
    # replaced through `dataclasses.replace` or `checked`, which set it again)
    segment: str | None = field(init=False, default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        value = self.attributes.get(sc.SEGMENT)
        self.segment = value if isinstance(value, str) else None

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


@dataclass
class LoadResult:
    spans: list[SpanRecord]
    problems: list[str]  # "file:line: what was wrong", one per skipped line or span



# --- the validation boundary -------------------------------------------------------------------
# Every reader's records pass through `checked` (traces.load) before anything reads them: what
# the reports, compare and export do with a value is then always defined.

MAX_TIME_NS = 2**63 - 1  # OTLP times are fixed64 nanoseconds; past int64 no clock or chart copes
MAX_INT = 2**63  # attribute integers are int64 in OTLP
MAX_SECONDS = 1e9  # a *_s figure of over 30 years is a broken value, not a measurement

_INT, _NUMBER, _TEXT, _BOOL, _LIST = "an integer", "a number", "a string", "a boolean", "a list"
# The type of every attribute the report reads: a value of another type is left out, with a problem.
ATTRIBUTE_TYPES: dict[str, str] = {
    **dict.fromkeys((sc.STEP_INDEX, sc.STEP_ATTEMPTS, sc.ATTEMPT_INDEX, sc.STEPS, sc.TOKENS, sc.DECISIONS_VALID,
                     sc.DECISIONS_INVALID, sc.VALIDATION_ERRORS, sc.MEMORY_ITEMS, sc.COMPACTION_TOKENS_BEFORE,
                     sc.COMPACTION_TOKENS_AFTER, sc.SPEC_NUM_SPECULATIVE_TOKENS, sc.SPEC_ROUNDS, sc.SPEC_DRAFT_TOKENS,
                     sc.SPEC_ACCEPTED_TOKENS, sc.SPEC_DRAFTED, sc.SPEC_ACCEPTED, sc.GEN_AI_USAGE_INPUT_TOKENS,
                     sc.GEN_AI_USAGE_OUTPUT_TOKENS, sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, sc.CONSTRAIN_DRAFTS_CUT,
                     sc.CONSTRAIN_ROLLBACKS, sc.SPEC_TREE_DEPTH), _INT),
    **dict.fromkeys((sc.SPEC_DRAFT_S, sc.SPEC_VERIFY_S, sc.SPEC_PREFILL_S, sc.SPEC_TOKENS_PER_S,
                     sc.SPEC_ACCEPTANCE_RATE, sc.SPEC_MEAN_ACCEPTANCE_LENGTH, sc.SERVE_QUEUE_S, sc.CONSTRAIN_MASK_S,
                     sc.CONSTRAIN_COMPILE_S, sc.SPEC_TREE_NODES), _NUMBER),
    **dict.fromkeys((sc.SEGMENT, sc.TASK_ID, sc.TASK_OUTCOME, sc.STEP_OUTCOME, sc.ATTEMPT_OUTCOME, sc.RUN_ID,
                     sc.RUN_LABEL, sc.PARSE_RESULT, sc.VALIDATION_VALIDATOR, sc.SPEC_METHOD, sc.SPEC_FALLBACK_REASON,
                     sc.GEN_AI_AGENT_NAME, sc.GEN_AI_TOOL_NAME, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL,
                     sc.ERROR_TYPE, sc.CONSTRAIN_ENGINE, sc.CONSTRAIN_GRAMMAR, sc.CONSTRAIN_FALLBACK,
                     sc.CONSTRAIN_DEAD_END), _TEXT),
    **dict.fromkeys((sc.PARSE_OK, sc.VALIDATION_OK, sc.DECISION_CORRECT, sc.SPEC_FALLBACK,
                     sc.STREAM_STOPPED_EARLY), _BOOL),
    **dict.fromkeys((sc.SPEC_ACCEPTANCE_PER_POSITION,), _LIST),
}
# The attributes of a `speculate.round` event.
ROUND_TYPES: dict[str, str] = {sc.ROUND_DRAFTED: _INT, sc.ROUND_ACCEPTED: _INT, sc.ROUND_K: _INT,
                               sc.ROUND_TREE_DEPTH: _INT, sc.ROUND_DRAFT_S: _NUMBER, sc.ROUND_VERIFY_S: _NUMBER}


def _fits(value: Any, kind: str) -> bool:
    cls = value.__class__
    if kind == _TEXT:
        return cls is str
    if kind == _INT:
        return cls is int and -MAX_INT <= value < MAX_INT
    if kind == _NUMBER:
        return (cls is int or cls is float) and -MAX_SECONDS <= value <= MAX_SECONDS  # NaN fails both
    if kind == _BOOL:
        return cls is bool
    return isinstance(value, (list, tuple)) and all(
        v.__class__ in (int, float) and -MAX_SECONDS <= v <= MAX_SECONDS for v in value)


def _typed(attrs: dict[str, Any], types: dict[str, str], what: str | SpanRecord, problems: list[str]) -> dict[str, Any]:
    """`attrs` without the values of the wrong type (the same dict when all fit). Runs for every
    span and every round event: one dict lookup per attribute, one class check per typed one."""
    bad = None
    for k, v in attrs.items():
        kind = types.get(k)
        if kind is None:
            continue
        cls = v.__class__
        if kind is _TEXT:
            if cls is str:
                continue
        elif kind is _INT:
            if cls is int and -MAX_INT <= v < MAX_INT:
                continue
        elif kind is _NUMBER:
            if (cls is float or cls is int) and -MAX_SECONDS <= v <= MAX_SECONDS:  # NaN fails
                continue
        elif kind is _BOOL:
            if cls is bool:
                continue
        elif _fits(v, kind):
            continue
        bad = [k] if bad is None else [*bad, k]
    if bad is None:
        return attrs
    what = _where(what) if isinstance(what, SpanRecord) else what
    for k in bad:
        problems.append(f"{what}: {k} is {_describe(attrs[k])}, not {types[k]}{' in range' if _is_number(attrs[k]) else ''}; "
                        "left out")
    return {k: v for k, v in attrs.items() if k not in bad}


def _is_number(value: Any) -> bool:
    return value.__class__ in (int, float)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:40] + '...' if len(text) > 40 else text}"


def _where(span: SpanRecord) -> str:
    return f"{span.source}: span {span.span_id}"


def checked(spans: list[SpanRecord], problems: list[str]) -> list[SpanRecord]:
    """The spans every report can use, problems listed with file, line and span id: a span whose
    start or end is not a time (negative, past int64) is dropped; one that ends before it starts
    is made to end at its start; a name that is not text becomes its text; an attribute the
    report reads that has the wrong type (ATTRIBUTE_TYPES) is left out, the span kept; a span
    that is its own parent becomes a root. Records are fixed in place (they are the reader's
    own, fresh), so clean input costs one pass and no copies."""
    out: list[SpanRecord] = []
    resources: dict[int, dict[str, Any]] = {}
    last_res: dict[str, Any] | None = None  # spans of one request share a resource: skip the lookup
    types, typed_of, top = ATTRIBUTE_TYPES, _typed, MAX_TIME_NS
    for s in spans:
        start, end = s.start_ns, s.end_ns
        if not (start.__class__ is int and end.__class__ is int and 0 <= start <= top and 0 <= end <= top):
            problems.append(f"{s.source}: span {s.span_id} ({_name(s.name)!r}): start {_describe(start)}, "
                            f"end {_describe(end)} are not nanosecond times (0 to 2^63); span skipped")
            continue
        if end < start:
            problems.append(f"{_where(s)} ends {(start - end) / 1e6:.3f} ms before it starts; analysed as ending at its start")
            s.end_ns = start
        if s.name.__class__ is not str:
            problems.append(f"{_where(s)}: its name is {_describe(s.name)}, not a string")
            s.name = _name(s.name)
        if s.status_message.__class__ is not str:
            s.status_message = _name(s.status_message)
        if s.parent_id == s.span_id:
            problems.append(f"{_where(s)} ({s.name!r}) names itself as its parent; analysed as a root")
            s.parent_id = None
        attrs = s.attributes
        typed = typed_of(attrs, types, s, problems)
        if typed is not attrs:
            s.attributes = typed
            s.__post_init__()
        if s.events:
            s.events = _checked_events(s.events, s, problems)
        res = s.resource
        if res is not last_res:
            fixed = resources.get(id(res))
            if fixed is None:
                fixed = resources[id(res)] = typed_of(res, types, f"{s.source}: resource", problems)
            if fixed is not res:
                s.resource = fixed
            else:
                last_res = res
        out.append(s)
    return out


def _checked_events(events: Sequence[EventRecord], span: SpanRecord, problems: list[str]) -> Sequence[EventRecord]:
    out = []
    changed = False
    for e in events:
        t = e.time_ns
        if not (t.__class__ is int and 0 <= t <= MAX_TIME_NS):
            problems.append(f"{_where(span)}: event {_name(e.name)!r} at {_describe(t)} is not a nanosecond time; "
                            "event skipped")
            changed = True
            continue
        if e.name == sc.EVENT_SPECULATE_ROUND and not _round_fits(e._flat):
            e = EventRecord(e.name, t, _typed(e.attributes, ROUND_TYPES, f"{_where(span)}: event {e.name}", problems))
            changed = True
        out.append(e)
    return out if changed else events


def _round_fits(flat: tuple[Any, ...]) -> bool:
    """Whether a round event's typed attributes (all numbers) fit, read off its flat tuple."""
    types = ROUND_TYPES
    for i in range(0, len(flat), 2):
        kind = types.get(flat[i])
        if kind is None:
            continue
        v = flat[i + 1]
        cls = v.__class__
        if cls is int:
            if not (-MAX_INT <= v < MAX_INT if kind is _INT else -MAX_SECONDS <= v <= MAX_SECONDS):
                return False
        elif cls is not float or kind is _INT or not -MAX_SECONDS <= v <= MAX_SECONDS:
            return False
    return True


def _name(value: Any) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


def break_cycles(spans: list[SpanRecord], problems: list[str]) -> None:
    """Make one span of every parent cycle a root (the first in input order), listing each cycle:
    a cycle has no root, so its spans would vanish from every tree. Linear: each span's parent
    chain is followed once. Of spans sharing an id the first is the one children name."""
    first: dict[tuple[str, str], SpanRecord] = {}
    for s in spans:
        first.setdefault((s.trace_id, s.span_id), s)
    done: set[tuple[str, str]] = set()
    order: dict[int, int] = {}  # id(span) -> input position, built at the first cycle
    get = first.get
    for k, s in first.items():
        if not s.parent_id or k in done:
            continue
        up = (s.trace_id, s.parent_id)
        if up in done or (p := get(up)) is None:  # the common case: the parent is done, or absent
            done.add(k)
            continue
        path = {k: None}  # insertion-ordered: the chain followed from k
        while p is not None and up not in done and up not in path:
            path[up] = None
            up = (p.trace_id, p.parent_id) if p.parent_id else None
            p = get(up) if up is not None else None
        if up is not None and up in path:  # back on this chain: a cycle from `up`
            chain = list(path)
            ring = [first[r] for r in chain[chain.index(up):]]
            if not order:
                order = {id(s): i for i, s in enumerate(spans)}
            head = min(ring, key=lambda r: order.get(id(r), 0))
            problems.append(f"{head.source}: spans {', '.join(r.span_id for r in ring[:5])}"
                            f"{' ...' if len(ring) > 5 else ''} of trace {head.trace_id} are each other's "
                            f"ancestors (a parent cycle); {head.span_id} ({head.name!r}) is analysed as a root")
            head.parent_id = None
        done.update(path)
