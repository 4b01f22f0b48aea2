"""From spans to per-task figures (SPANS.md, "Figures the reports compute").

For each agent span (a task): its steps, each step's segment times (which sum to the step's wall
time), time to valid tool call, time to correct action, retry cost by segment, decision counts and
the speculation figures of each generation. Step spans whose agent span is missing (a truncated
file) still make a task, marked partial. Run-level aggregation lives in `runs.py`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from agenttrace import semconv as sc
from agenttrace.report.model import (
    SEGMENT_FIELDS,
    GenerationFigures,
    Missing,
    PathSectionFigures,
    StepFigures,
    TaskFigures,
    WaterfallSpan,
    lean,
)
from agenttrace.report.segments import Breakdown, breakdowns, sum_segments
from agenttrace.report.span_tree import SpanTree, critical_path
from agenttrace.report.spec import AcceptanceStats, acceptance_stats, aggregate, generation_figures, server_side
from agenttrace.report.stages import compaction_costs, stage_times
from agenttrace.traces import inferred as inferred_names
from agenttrace.traces.span_records import SpanRecord

NS = 1e9
_OK = sc.AttemptOutcome.OK.value
_OTHER = SEGMENT_FIELDS.index("other")
# Segments that no span of the other instrumentations records (they time model calls and tools
# whole): in a task whose steps were inferred from their spans, a 0 there means unknown.
_UNRECORDED = ("prefill", "draft", "verify", "constrain", "parse", "validation")
_TOOLTIP_KEYS = (sc.GEN_AI_TOOL_NAME, sc.STEP_OUTCOME, sc.ATTEMPT_OUTCOME, sc.SPEC_METHOD, sc.GEN_AI_USAGE_OUTPUT_TOKENS,
                 sc.ERROR_TYPE, sc.PARSE_RESULT)


@dataclass(slots=True)
class TaskAnalysis:
    """A task's figures plus what the run-level what-if needs and the JSON does not carry."""

    figures: TaskFigures
    acceptance: list[tuple[str, AcceptanceStats]] = field(default_factory=list)  # (method, stats) per generation


def _decision_end(span: SpanRecord) -> int | None:
    """The moment `span` made a valid decision, if it is a decision span (SPANS.md, TTVTC): a
    validation that held, the parse of a final answer, or (traces of other instrumentations,
    agenttrace.traces) a generation whose reply was then acted on without error."""
    seg = span.segment
    if seg == sc.Segment.VALIDATION and span.attributes.get(sc.VALIDATION_OK) is True:
        return span.end_ns
    if seg == sc.Segment.PARSE and span.attributes.get(sc.PARSE_RESULT) == "final_answer":
        return span.end_ns
    if seg == sc.Segment.GENERATION and sc.INFERRED_DECISION in span.attributes:
        return span.end_ns
    return None


def _decision_spans(tree: SpanTree, span: SpanRecord) -> Iterator[SpanRecord]:
    """The span and its descendants, depth first, not descending into generations: what a model
    server recorded inside a generation (its own parse of the reply) is not the agent's decision."""
    stack = [span]
    while stack:
        s = stack.pop()
        yield s
        if s.segment != sc.Segment.GENERATION:
            stack.extend(reversed(tree.kids(s)))


def _attempt_valid(tree: SpanTree, attempt: SpanRecord) -> bool:
    """Parse and (for a tool call) validation succeeded in this attempt. An attempt without a
    parse span (a wrapped agent that validates the OpenAI tool call it got) is valid when its
    validation held; one with neither (inferred from another instrumentation's spans) when its
    outcome is ok."""
    parse, validation = None, None
    for s in _decision_spans(tree, attempt):
        if s.segment == sc.Segment.PARSE:
            parse = s.attributes.get(sc.PARSE_OK) is True
        elif s.segment == sc.Segment.VALIDATION:
            validation = s.attributes.get(sc.VALIDATION_OK) is True
    if parse is None and validation is None:
        return attempt.attributes.get(sc.ATTEMPT_OUTCOME) == _OK
    return parse is not False and validation is not False


@dataclass(slots=True)
class _StepScan:
    moments: list[int] = field(default_factory=list)
    correct: list[int] = field(default_factory=list)
    parse_ok_ends: list[int] = field(default_factory=list)
    generations: list[GenerationFigures] = field(default_factory=list)
    marks_correct: bool = False
    compactions: list[SpanRecord] = field(default_factory=list)  # a sub-agent's, inside this step
    sub_agents: int = 0


def _scan_step(tree: SpanTree, step: SpanRecord, index: int, task_start: int,
               acceptance: list[tuple[str, AcceptanceStats]]) -> _StepScan:
    scan = _StepScan()
    stack: list[tuple[SpanRecord, int]] = [(step, 0)]
    while stack:
        s, attempt = stack.pop()
        seg = s.segment
        if seg == sc.Segment.ATTEMPT:
            attempt = int(s.attributes.get(sc.ATTEMPT_INDEX) or 0)
        elif seg == sc.Segment.GENERATION:
            # One model call, however many ends recorded it: a model server's own span under the
            # caller's is the same generation, and its speculation figures are the call's.
            served = server_side(tree, s)
            g = generation_figures(tree, s, index, attempt, task_start, served)
            scan.generations.append(g)
            acceptance.append((g.method, acceptance_stats(tree, served)))
        elif seg == sc.Segment.PARSE and s.attributes.get(sc.PARSE_OK) is True:
            scan.parse_ok_ends.append(s.end_ns)
        elif seg == sc.Segment.COMPACTION:
            scan.compactions.append(s)
        elif seg == sc.Segment.DELEGATION and s.kind != "PRODUCER":  # a run, not the hand-off before it
            scan.sub_agents += 1
        end = _decision_end(s)
        if end is not None:
            scan.moments.append(end)
            if sc.DECISION_CORRECT in s.attributes:
                scan.marks_correct = True
            if s.attributes.get(sc.DECISION_CORRECT) is True:
                scan.correct.append(end)
        if seg != sc.Segment.GENERATION:  # see _decision_spans
            stack.extend((k, attempt) for k in reversed(tree.kids(s)))
    scan.generations.sort(key=lambda g: g.start_s)
    if not scan.moments and step.attributes.get(sc.STEP_OUTCOME) == sc.StepOutcome.FINAL_ANSWER and scan.parse_ok_ends:
        # Traces from tools that do not write agenttrace.parse.result: a step that ended in a final
        # answer made its decision at the end of its last successful parse.
        scan.moments.append(max(scan.parse_ok_ends))
    return scan


def _step_breakdown(tree: SpanTree, step: SpanRecord, memo: dict[int, Breakdown], parent: SpanRecord | None) -> dict[int, Breakdown]:
    # A step that overflows its agent span (bad data) gets its own breakdown over its own interval,
    # so its segments still sum to its wall time.
    if parent is None or (parent.start_ns <= step.start_ns and step.end_ns <= parent.end_ns):
        return memo
    return breakdowns(tree, step)


def step_figures(tree: SpanTree, step: SpanRecord, task_start: int, memo: dict[int, Breakdown],
                 acceptance: list[tuple[str, AcceptanceStats]], parent: SpanRecord | None = None) -> tuple[StepFigures, _StepScan]:
    """A step's figures (and the raw decision moments, for the task's figures)."""
    memo = _step_breakdown(tree, step, memo, parent)
    if id(step) not in memo:  # a step entirely outside its agent span: its own interval
        memo = breakdowns(tree, step)
    b = memo[id(step)]
    index = int(step.attributes.get(sc.STEP_INDEX) or 0)
    scan = _scan_step(tree, step, index, task_start, acceptance)
    attempts = [k for k in tree.kids(step) if k.segment == sc.Segment.ATTEMPT]
    retry = Breakdown()
    for a in attempts:
        if a.attributes.get(sc.ATTEMPT_OUTCOME, _OK) != _OK and id(a) in memo:
            retry.add(memo[id(a)])
    first = min(scan.moments) if scan.moments else None
    correct = min(scan.correct) if scan.correct else None
    figures = lean(StepFigures(
        index=index,
        outcome=str(step.attributes.get(sc.STEP_OUTCOME, "unknown")),
        attempts=int(step.attributes.get(sc.STEP_ATTEMPTS) or len(attempts)),
        start_s=(step.start_ns - task_start) / NS,
        wall_s=step.duration_ns / NS,
        ttvtc_s=(first - step.start_ns) / NS if first is not None else None,
        segments=b.segments(),
        retry_s=retry.total_ns() / NS,
        retry_segments=retry.segments(),
        overlap_s=sum(b.overlap_ns) / NS,
        overlap_segments=b.overlap_segments(),
        time_to_correct_action_s=(correct - step.start_ns) / NS if correct is not None else None,
        generations=scan.generations,
        inferred=sc.INFERRED in step.attributes,
    ))
    return figures, scan


def _waterfall(tree: SpanTree, root: SpanRecord, start: int) -> list[WaterfallSpan]:
    on_path = {id(sec.span) for sec in critical_path(tree, root)}
    out = []
    stack = [(root, 0)]
    while stack:
        s, depth = stack.pop()
        attrs = {k: str(s.attributes[k]) for k in _TOOLTIP_KEYS if k in s.attributes}
        out.append(WaterfallSpan(name=s.name, segment=s.segment or "other", depth=depth, start_s=(s.start_ns - start) / NS,
                                 end_s=(s.end_ns - start) / NS, status=s.status, on_critical_path=id(s) in on_path,
                                 attributes=attrs))
        stack.extend((k, depth + 1) for k in reversed(tree.kids(s)))
    return out


_NOT_INTO = {sc.Segment.STEP, sc.Segment.DELEGATION, sc.Segment.AGENT}


def task_steps(tree: SpanTree, agent: SpanRecord) -> list[SpanRecord]:
    """The task's step spans, in start order: at any depth below the agent span (a user's own
    span or a framework's layer may sit between), but not inside a step or a sub-agent's run."""
    steps: list[SpanRecord] = []
    stack = list(reversed(tree.kids(agent)))
    while stack:
        s = stack.pop()
        if s.segment == sc.Segment.STEP:
            steps.append(s)
        if s.segment not in _NOT_INTO:
            stack.extend(reversed(tree.kids(s)))
    steps.sort(key=lambda s: s.start_ns)
    return steps


def task_figures(tree: SpanTree, agent: SpanRecord, *, waterfall: bool = False) -> TaskAnalysis:
    """The figures of one task (an agent span and its subtree)."""
    marks: list[tuple[SpanRecord, SpanRecord | None]] = []
    memo = breakdowns(tree, agent, marks)
    b = memo[id(agent)]
    steps = task_steps(tree, agent)
    analysis = _assemble(tree, agent, steps, memo, b, agent.start_ns, agent.end_ns, partial=False, waterfall=waterfall)
    analysis.figures.stages = stage_times(memo, agent, marks)
    return analysis


def _assemble(tree: SpanTree, root: SpanRecord, steps: list[SpanRecord], memo: dict[int, Breakdown], b: Breakdown,
              start: int, end: int, *, partial: bool, waterfall: bool) -> TaskAnalysis:
    acceptance: list[tuple[str, AcceptanceStats]] = []
    step_figs: list[StepFigures] = []
    moments: list[int] = []
    correct: list[int] = []
    marks = False
    compactions = [k for k in tree.kids(root) if k.segment == sc.Segment.COMPACTION] if not partial else []
    sub_agents = 0
    for st in steps:
        f, scan = step_figures(tree, st, start, memo, acceptance, None if partial else root)
        step_figs.append(f)
        moments += scan.moments
        correct += scan.correct
        marks = marks or scan.marks_correct
        compactions += scan.compactions
        sub_agents += scan.sub_agents
    reprefill_tokens, reprefill_s = compaction_costs(tree, compactions)
    retry = sum_segments(f.retry_segments for f in step_figs)
    attempts = [s for st in steps for s in tree.walk(st) if s.segment == sc.Segment.ATTEMPT]
    wall = (end - start) / NS
    valid = len(moments)
    a = root.attributes if not partial else {}
    overlap = sum(b.overlap_ns) / NS
    segments = b.segments()
    inferred = a.get(sc.INFERRED)
    inferred = [str(x) for x in inferred] if isinstance(inferred, (list, tuple)) else []
    outcome = str(a.get(sc.TASK_OUTCOME, "unknown"))
    figures = lean(TaskFigures(
        trace_id=root.trace_id,
        task_id=str(a.get(sc.TASK_ID, root.span_id if not partial else f"{root.trace_id[:12]} (partial)")),
        agent=str(a.get(sc.GEN_AI_AGENT_NAME, root.name if not partial else "?")),
        run_label=root.resource.get(sc.RUN_LABEL),
        run_id=root.resource.get(sc.RUN_ID),
        outcome=outcome,
        wall_s=wall,
        ttvtc_s=(min(moments) - start) / NS if moments else None,
        time_to_correct_action_s=(min(correct) - start) / NS if correct else None,
        decisions_valid=valid,
        decisions_invalid=int(a.get(sc.DECISIONS_INVALID) or 0),
        decision_throughput=valid / wall if wall > 0 else 0.0,
        attempts=len(attempts),
        valid_attempts=sum(_attempt_valid(tree, at) for at in attempts),
        segments=segments,
        retry_s=sum(f.retry_s for f in step_figs),
        retry_segments=retry,
        speculation=aggregate(g for f in step_figs for g in f.generations),
        steps=step_figs,
        overlap_s=overlap,
        overlap_segments=b.overlap_segments(),
        partial=partial,
        expects_correct_action=marks,
        inferred=inferred,
        absent=[f for f in _UNRECORDED if not getattr(segments, f)] if inferred_names.STEPS in inferred else [],
        not_inferred=not_inferred(a.get(sc.NOT_INFERRED), steps=len(step_figs), attempts=len(attempts),
                                  has_ttvtc=bool(moments), outcome_known=outcome != "unknown", partial=partial),
        sub_agents=sub_agents,
        compactions=len(compactions),
        reprefill_tokens=reprefill_tokens,
        reprefill_s=reprefill_s,
    ))
    if not partial and (overlap > 0 or waterfall):
        figures.critical_path = [
            PathSectionFigures(name=sec.span.name, segment=sec.span.segment or "other",
                               start_s=(sec.start_ns - start) / NS, end_s=(sec.end_ns - start) / NS)
            for sec in critical_path(tree, root)
        ] if overlap > 0 else []
        if waterfall:
            figures.waterfall = _waterfall(tree, root, start)
    return TaskAnalysis(figures, acceptance)


_MISSING_ORDER = {"steps": 0, "TTVTC": 1, "outcome": 2}


def not_inferred(said: object, *, steps: int, attempts: int, has_ttvtc: bool, outcome_known: bool,
                 partial: bool) -> list[Missing]:
    """What the task's figures lack, and why: the reasons the reading of the trace gave
    (`agenttrace.not_inferred`, "figure: reason"), else the plain one for each missing figure."""
    out = []
    for text in said if isinstance(said, (list, tuple)) else ():
        figure, _, reason = str(text).partition(": ")
        out.append(Missing(figure=figure, reason=reason))
    named = {m.figure for m in out}
    if not steps and "steps" not in named:
        out.append(Missing(figure="steps", reason="no step span, and no model call or tool execution under this agent span"))
    if not has_ttvtc and "TTVTC" not in named:
        out.append(Missing(figure="TTVTC", reason="no step, so no decision" if not steps else
                           "no attempt made a valid decision (no validation that held, no final answer)" if attempts else
                           "its steps hold no attempt span, so no decision span"))
    if not outcome_known and "outcome" not in named and not partial:
        out.append(Missing(figure="outcome", reason="the agent span records none (agenttrace.task.outcome)"))
    out.sort(key=lambda m: _MISSING_ORDER.get(m.figure, len(_MISSING_ORDER)))
    return out


def orphan_steps(tree: SpanTree) -> list[list[SpanRecord]]:
    """Per trace (in the order their first orphaned step came), its step spans whose agent span
    is missing, by start."""
    by_trace: dict[str, list[SpanRecord]] = defaultdict(list)
    for s in tree.orphans:
        if s.segment == sc.Segment.STEP:
            by_trace[s.trace_id].append(s)
    for steps in by_trace.values():
        steps.sort(key=lambda s: s.start_ns)
    return list(by_trace.values())


def partial_task(tree: SpanTree, steps: list[SpanRecord]) -> TaskAnalysis:
    """A task rebuilt from one trace's orphaned step spans (sorted by start)."""
    start, end = steps[0].start_ns, max(s.end_ns for s in steps)
    memo: dict[int, Breakdown] = {}
    total = Breakdown()
    for st in steps:
        memo.update(breakdowns(tree, st))
        total.add(memo[id(st)])
    total.ns[_OTHER] += max(0, (end - start) - sum(s.duration_ns for s in steps))  # gaps between steps: other
    return _assemble(tree, steps[0], steps, memo, total, start, end, partial=True, waterfall=False)


def partial_tasks(tree: SpanTree) -> list[TaskAnalysis]:
    """Tasks rebuilt from step spans whose agent span is missing, one per trace."""
    return [partial_task(tree, steps) for steps in orphan_steps(tree)]


def _inside_agent(tree: SpanTree, span: SpanRecord) -> bool:
    parent = tree.parent(span)
    while parent is not None:
        if parent.segment == sc.Segment.AGENT:
            return True
        parent = tree.parent(parent)
    return False


def agent_roots(tree: SpanTree) -> list[SpanRecord]:
    """The tasks' agent spans (agents inside no other agent), by start (ties: input order)."""
    return sorted((s for s in tree.by_id.values() if s.segment == sc.Segment.AGENT and not _inside_agent(tree, s)),
                  key=lambda s: s.start_ns)


def analyse(tree: SpanTree, *, waterfalls: int = 0) -> list[TaskAnalysis]:
    """Every task in the tree, in start order: agent spans, then partial tasks. The first
    `waterfalls` tasks carry their spans for a waterfall chart."""
    tasks = [task_figures(tree, a, waterfall=i < waterfalls) for i, a in enumerate(agent_roots(tree))]
    return tasks + partial_tasks(tree)
