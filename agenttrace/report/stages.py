"""A task's time by stage, and what its compactions cost the prefix cache (issue 16).

Stages are coarser than segments and answer "where does an agent's time accumulate": in
generation, tools, memory, compaction, or in coordinating sub-agents. Everything is read off the
task's critical path (the segment breakdown's own arithmetic, segments.py), so the stages sum to
the time on the path, and with two subtree rules:

- a `compact_context` span counts whole as compaction, the generation that wrote its summary
  included (without compaction that generation would not exist);
- in a task that delegates, the path splits into the sub-agents' runs (`invoke_agent` spans of
  segment delegation: their time goes to its stages as for any agent) and the coordinator's own
  time: all of that, memory aside, is `delegation_overhead`, the time the coordinator spends not
  waiting for a sub-agent (deciding to delegate, joining, answering).

Compaction's second cost comes after it: the next generation's cached prefix ends where the
summary starts. The runtime records how many prompt tokens that costs
(`agenttrace.compaction.reprefill_tokens`); their time is the next generation's measured prefill
time, scaled by the share of its prefilled tokens they are.
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.report.model import SEGMENT_FIELDS, StageTimes, lean
from agenttrace.report.segments import Breakdown
from agenttrace.report.span_tree import SpanTree
from agenttrace.traces.span_records import SpanRecord

__all__ = ["STAGE_OF_SEGMENT", "compaction_costs", "stage_times"]

_MODEL = ("prefill", "draft", "verify", "constrain", "generation", "queue")
# Each segment's stage; a sub-agent run's own self time (segment delegation) is its loop's overhead.
STAGE_OF_SEGMENT = {**{s: "generation" for s in _MODEL}, "tool": "tool", "memory": "memory",
                    "compaction": "compaction"}
_MEMORY = SEGMENT_FIELDS.index("memory")
_N = len(SEGMENT_FIELDS)


def _minus(a: list[int], b: list[int]) -> list[int]:
    return [x - y for x, y in zip(a, b, strict=True)]


def _plus(a: list[int], b: list[int]) -> list[int]:
    return [x + y for x, y in zip(a, b, strict=True)]


def _by_stage(ns: list[int], into: dict[str, int]) -> None:
    for i, name in enumerate(SEGMENT_FIELDS):
        if ns[i]:
            stage = STAGE_OF_SEGMENT.get(name, "other")
            into[stage] = into.get(stage, 0) + ns[i]


def stage_times(memo: dict[int, Breakdown], root: SpanRecord,
                marks: list[tuple[SpanRecord, SpanRecord | None]]) -> StageTimes:
    """The stages of `root`'s critical path; `memo` and `marks` are what `segments.breakdowns`
    gave for `root` (marks: its on-path compaction and delegation spans)."""
    above = {id(span): up for span, up in marks}

    def inside(span: SpanRecord, segment: str) -> bool:  # under an on-path span of `segment`?
        up = above.get(id(span))
        while up is not None:
            if up.segment == segment:
                return True
            up = above.get(id(up))
        return False

    compactions = [s for s, _ in marks if s.segment == sc.Segment.COMPACTION and not inside(s, sc.Segment.COMPACTION)]
    subs = [s for s, _ in marks if s.segment == sc.Segment.DELEGATION
            and not inside(s, sc.Segment.DELEGATION) and not inside(s, sc.Segment.COMPACTION)]
    comp, comp_in_subs, sub = [0] * _N, [0] * _N, [0] * _N
    for c in compactions:
        comp = _plus(comp, memo[id(c)].ns)
        if inside(c, sc.Segment.DELEGATION):
            comp_in_subs = _plus(comp_in_subs, memo[id(c)].ns)
    for d in subs:
        sub = _plus(sub, memo[id(d)].ns)
    own = _minus(_minus(memo[id(root)].ns, sub), _minus(comp, comp_in_subs))  # the task's agent itself
    stages: dict[str, int] = {"compaction": sum(comp)}
    if subs:
        stages["memory"] = own[_MEMORY]
        stages["delegation_overhead"] = sum(own) - own[_MEMORY]
        _by_stage(_minus(sub, comp_in_subs), stages)
    else:
        _by_stage(own, stages)
    return lean(StageTimes(**{k: v / 1e9 for k, v in stages.items() if v}))


def _next_prefill(tree: SpanTree, compaction: SpanRecord) -> SpanRecord | None:
    """The prefill of the first generation its run makes after `compaction`."""
    run = tree.parent(compaction)
    if run is None:
        return None
    step = next((k for k in tree.kids(run) if k.segment == sc.Segment.STEP and k.start_ns >= compaction.end_ns), None)
    if step is None:
        return None
    first: SpanRecord | None = None
    stack = [step]
    while stack:  # the step's own generations: not a sub-agent's, not a server's inside a generation
        s = stack.pop()
        if s.segment == sc.Segment.GENERATION:
            if first is None or s.start_ns < first.start_ns:
                first = s
            continue
        if s.segment != sc.Segment.DELEGATION:
            stack.extend(tree.kids(s))
    if first is None:
        return None
    return next((k for k in tree.kids(first) if k.segment == sc.Segment.PREFILL), None)


def compaction_costs(tree: SpanTree, compactions: list[SpanRecord]) -> tuple[int | None, float | None]:
    """(tokens, seconds) prefilled again because of `compactions`; None where none recorded it."""
    tokens, seconds, known = 0, 0.0, False
    for c in compactions:
        n = c.attributes.get(sc.COMPACTION_REPREFILL_TOKENS)
        if not isinstance(n, int) or isinstance(n, bool):
            continue
        known = True
        tokens += n
        prefill = _next_prefill(tree, c)
        if prefill is None or n <= 0:
            continue
        prefilled = prefill.attributes.get(sc.TOKENS)
        share = min(1.0, n / prefilled) if isinstance(prefilled, int) and prefilled > 0 else 1.0
        seconds += share * prefill.duration_ns / 1e9
    return (tokens, seconds) if known else (None, None)
