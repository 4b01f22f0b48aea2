"""Any trace onto our span tree: what the report computes its figures from.

Our own spans carry `agenttrace.segment` and pass through untouched. Every other span is asked
of the conventions (agenttrace.traces.conventions): a span they recognise becomes a copy with its
segment and our attribute names added; one they recognise but cannot map, or none recognises,
stays as it is (its own time counts as other) and is counted as left out, with the reason. Then,
only where other instrumentations' spans are present: remote generations are split
(traces/remote.py), foreign agents inside another agent become delegations, tasks are found for
generations no agent span holds, and steps, attempts and decision moments are inferred
(traces/foreign_structure.py). `Reading` says, per input, what was recognised, mapped and left out, and
which figures were inferred: the report prints it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from agenttrace import semconv as sc
from agenttrace.traces import foreign_structure
from agenttrace.traces.conventions import AGENTTRACE, SpanRole, classify
from agenttrace.traces.index import Key, SpanIndex, key_of
from agenttrace.traces.inferred import TASK
from agenttrace.traces.remote import split_remote_generations
from agenttrace.traces.span_records import SpanRecord

__all__ = ["ConventionSeen", "Normalised", "Reading", "input_of", "normalise"]

MAX_NAMES = 8  # distinct span names listed per left-out reason
NO_CONVENTION = "no known convention: its own time counts as other"


@dataclass
class ConventionSeen:
    """One convention in one input: spans recognised, mapped per segment, attribute sets seen."""

    name: str
    spans: int = 0
    segments: Counter[str] = field(default_factory=Counter)
    variants: set[str] = field(default_factory=set)


@dataclass
class LeftOut:
    convention: str | None
    reason: str
    count: int = 0
    names: list[str] = field(default_factory=list)


@dataclass
class Reading:
    """What the report saw in one input (a file, or a Jaeger query)."""

    source: str
    spans: int = 0
    conventions: dict[str, ConventionSeen] = field(default_factory=dict)
    left_out: dict[tuple[str | None, str], LeftOut] = field(default_factory=dict)
    inferred: set[str] = field(default_factory=set)

    def saw(self, convention: str, segment: str | None, variant: str = "") -> None:
        seen = self.conventions.get(convention)
        if seen is None:
            seen = self.conventions[convention] = ConventionSeen(convention)
        seen.spans += 1
        if segment is not None:
            seen.segments[segment] += 1
        if variant:
            seen.variants.add(variant)

    def leave_out(self, convention: str | None, reason: str, name: str) -> None:
        entry = self.left_out.get((convention, reason))
        if entry is None:
            entry = self.left_out[(convention, reason)] = LeftOut(convention, reason)
        entry.count += 1
        if name not in entry.names and len(entry.names) < MAX_NAMES:
            entry.names.append(name)


@dataclass
class Normalised:
    spans: list[SpanRecord]
    readings: list[Reading]
    problems: list[str]
    remote: int = 0  # problems[:remote] are the remote calls' (every trace's come before the structure's)


def input_of(span: SpanRecord) -> str:
    """The input a span came from: its source without the `:line` suffix."""
    head, sep, tail = span.source.rpartition(":")
    return head if sep and tail.isdigit() else span.source


# Called with each span as the mapping meets it, and its role (None: ours, or of no known convention).
Observer = Callable[[SpanRecord, SpanRole | None], None]


def _map(spans: list[SpanRecord], readings: dict[str, Reading], observe: Observer | None) -> tuple[list[SpanRecord], set[Key]]:
    out: list[SpanRecord] = []
    foreign: set[Key] = set()
    for s in spans:
        source = input_of(s)
        reading = readings.get(source)
        if reading is None:
            reading = readings[source] = Reading(source)
        reading.spans += 1
        segment = s.segment
        if segment is not None:
            reading.saw(AGENTTRACE, segment)
            out.append(s)
            if observe is not None:
                observe(s, None)
            continue
        role = classify(s)
        if observe is not None:
            observe(s, role)
        if role is None:
            reading.leave_out(None, NO_CONVENTION, s.name)
            out.append(s)
            continue
        reading.saw(role.convention, role.segment, role.variant)
        if role.segment is None:
            reading.leave_out(role.convention, role.reason, s.name)
            out.append(s)
            continue
        attrs = {**role.attributes, **s.attributes, sc.SEGMENT: role.segment}
        if sc.ERROR_TYPE in role.attributes:  # a failure kind the convention states more exactly
            attrs[sc.ERROR_TYPE] = role.attributes[sc.ERROR_TYPE]
        copy = dataclasses.replace(s, attributes=attrs)
        foreign.add(key_of(copy))
        out.append(copy)
    return out, foreign


_HOLDERS = {sc.Segment.AGENT.value, sc.Segment.DELEGATION.value, sc.Segment.STEP.value, sc.Segment.ATTEMPT.value}
_OUR_LOOP = {sc.Segment.DELEGATION.value, sc.Segment.STEP.value, sc.Segment.ATTEMPT.value}


def _task_roots(index: SpanIndex, foreign: set[Key]) -> list[SpanRecord]:
    """Agent spans no agent (or step) holds, and a task for each root above generations no agent
    holds. A foreign agent inside one of our steps is a delegation; one inside another agent is
    left to the task's reading (foreign_structure.py: a wrapper, or a delegation)."""
    roots: list[SpanRecord] = []
    for s in list(index):
        if s.segment != sc.Segment.AGENT:
            continue
        up = index.ancestors(s)
        if any(a.segment in _HOLDERS for a in up):
            if key_of(s) in foreign and any(a.segment in _OUR_LOOP and key_of(a) not in foreign for a in up):
                index.with_attributes(s, {sc.SEGMENT: sc.Segment.DELEGATION.value})
            continue
        roots.append(s)
    seen: set[Key] = {key_of(r) for r in roots}
    for s in list(index):
        if key_of(s) not in foreign or s.segment not in (sc.Segment.GENERATION, sc.Segment.TOOL):
            continue
        up = index.ancestors(s)
        if any(a.segment in _HOLDERS for a in up):
            continue
        top = up[-1] if up else s
        if key_of(top) in seen:
            continue
        seen.add(key_of(top))
        if top.segment in (sc.Segment.GENERATION, sc.Segment.TOOL):  # a lone call: a task around it
            task = index.add_synthetic(top, f"{top.span_id}.task", top.parent_id, f"{sc.OP_INVOKE_AGENT} (inferred)",
                                       top.start_ns, top.end_ns, {sc.SEGMENT: sc.Segment.AGENT.value,
                                                                  sc.GEN_AI_AGENT_NAME: top.name, sc.INFERRED: (TASK,)})
            index.update(top, parent_id=task.span_id)
            roots.append(task)
        else:
            roots.append(index.with_attributes(top, {sc.SEGMENT: sc.Segment.AGENT.value, sc.INFERRED: (TASK,)}))
    return roots


def _remote_calls(spans: list[SpanRecord]) -> bool:
    """Whether a client generation has a server generation under it (the caller's and the model
    server's spans of one call: traces/remote.py splits the caller's)."""
    servers = {(s.trace_id, s.parent_id) for s in spans if s.segment == sc.Segment.GENERATION and s.kind == "SERVER"}
    return bool(servers) and any(s.segment == sc.Segment.GENERATION and s.kind == "CLIENT" and (s.trace_id, s.span_id) in servers
                                 for s in spans)


def normalise(spans: list[SpanRecord], observe: Observer | None = None) -> Normalised:
    """Our span tree from any trace (module docstring). Spans of ours only: returned as given,
    but for remote generations (a model server's span under the caller's: split, whatever else
    the input holds).
    `observe`: told each span's role as the mapping classifies it (columnar/readings.py notes
    where each convention first appears without classifying every span again)."""
    readings: dict[str, Reading] = {}
    mapped, foreign = _map(spans, readings, observe)
    problems: list[str] = []
    if not foreign and not _remote_calls(mapped):
        return Normalised(mapped, list(readings.values()), problems)
    index = SpanIndex(mapped)
    split_remote_generations(index, problems)
    remote = len(problems)
    for s in list(index):
        if s.segment == sc.Segment.STEP and key_of(s) not in foreign:
            foreign_structure.place_foreign_in_our_steps(index, s, foreign)
    for root in _task_roots(index, foreign):
        foreign_structure.infer_structure(index, root, foreign, problems)
        _collect_inferred(index, index.current(root), readings)
    return Normalised(index.spans, list(readings.values()), problems, remote)


def _collect_inferred(index: SpanIndex, root: SpanRecord, readings: dict[str, Reading]) -> None:
    """Everything inferred anywhere in a task, listed on its root (the report's `inferred`)."""
    names: list[str] = []
    for s in (root, *index.walk(root)):
        marked = s.attributes.get(sc.INFERRED)
        if isinstance(marked, tuple):
            names += marked
    if names:
        ordered = tuple(dict.fromkeys(names))
        index.with_attributes(root, {sc.INFERRED: ordered})
        readings[input_of(root)].inferred.update(ordered)
