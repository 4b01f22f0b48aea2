"""From spans to figures (SPANS.md, "Figures the reports compute").

For each agent span (a task): its steps, each step's segment times (self time per segment, which
sum to the step's wall time), time to valid tool call, retry cost, decision counts and the
speculation figures of its generations; then the run's aggregates and distributions.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from agenttrace import semconv as sc
from agenttrace.report.model import (
    Distribution,
    Report,
    RunFigures,
    SegmentTimes,
    SpecFigures,
    StepFigures,
    TaskFigures,
)
from agenttrace.report.tree import SpanTree, clipped, critical_path, union_ns
from agenttrace.tracedata import SpanRecord, load_spans

NS = 1e9
_OK = sc.AttemptOutcome.OK.value


def _overlapping(children: list[SpanRecord]) -> bool:
    end = None
    for c in children:  # sorted by start
        if end is not None and c.start_ns < end:
            return True
        end = c.end_ns if end is None else max(end, c.end_ns)
    return False


def segment_times(tree: SpanTree, root: SpanRecord) -> tuple[SegmentTimes, float]:
    """Self time per segment over `root`'s subtree, and the overlapped time shown apart.

    Where siblings overlap, only those on the critical path are followed, so the segments still
    sum to the root's wall time and the parallel remainder is reported as overlap.
    """
    segs = SegmentTimes()
    overlap_ns = 0
    stack = [root]
    while stack:
        span = stack.pop()
        kids = tree.kids(span)
        followed = kids
        if _overlapping(kids):
            followed = critical_path(span, kids)
            on_path = {id(k) for k in followed}
            overlap_ns += sum(max(0, e - s) for s, e in (clipped(k, span) for k in kids if id(k) not in on_path))
        self_ns = max(0, span.duration_ns - union_ns(clipped(k, span) for k in followed))
        _charge(span, self_ns / NS, kids, segs)
        stack.extend(followed)
    return segs, overlap_ns / NS


def _charge(span: SpanRecord, self_s: float, kids: list[SpanRecord], segs: SegmentTimes) -> None:
    segment = span.segment or "other"
    if segment in (sc.Segment.AGENT, sc.Segment.STEP, sc.Segment.ATTEMPT):
        segment = "other"
    if segment == sc.Segment.GENERATION and not any(k.segment in (sc.Segment.DRAFT, sc.Segment.VERIFY) for k in kids):
        # At the default detail level draft and verify are not spans but totals on the generation
        # span: carve them out of its self time so the breakdown is the same at either level.
        draft = min(self_s, float(span.attributes.get(sc.SPEC_DRAFT_S) or 0.0))
        verify = min(self_s - draft, float(span.attributes.get(sc.SPEC_VERIFY_S) or 0.0))
        segs.add("draft", draft)
        segs.add("verify", verify)
        self_s -= draft + verify
    segs.add(segment, self_s)


def _decision_end(span: SpanRecord) -> int | None:
    """The moment `span` made a valid decision, if it is a decision span (SPANS.md, TTVTC)."""
    if span.segment == sc.Segment.VALIDATION and span.attributes.get(sc.VALIDATION_OK) is True:
        return span.end_ns
    if span.segment == sc.Segment.PARSE and span.attributes.get(sc.PARSE_RESULT) == "final_answer":
        return span.end_ns
    return None


def _final_answer_fallback(tree: SpanTree, step: SpanRecord) -> int | None:
    # Traces from tools that do not write agenttrace.parse.result: a step that ended in a final
    # answer made its decision at the end of the last successful parse of its last ok attempt.
    if step.attributes.get(sc.STEP_OUTCOME) != sc.StepOutcome.FINAL_ANSWER:
        return None
    ends = [s.end_ns for s in tree.walk(step) if s.segment == sc.Segment.PARSE and s.attributes.get(sc.PARSE_OK) is True]
    return max(ends) if ends else None


def _spec(generations: Iterable[SpanRecord]) -> SpecFigures:
    f = SpecFigures()
    methods = set()
    for g in generations:
        a = g.attributes
        f.generations += 1
        f.output_tokens += int(a.get(sc.GEN_AI_USAGE_OUTPUT_TOKENS) or 0)
        f.generation_s += g.duration_ns / NS
        f.rounds += int(a.get(sc.SPEC_ROUNDS) or 0)
        f.draft_tokens += int(a.get(sc.SPEC_DRAFT_TOKENS) or 0)
        f.accepted_tokens += int(a.get(sc.SPEC_ACCEPTED_TOKENS) or 0)
        f.fallbacks += bool(a.get(sc.SPEC_FALLBACK))
        f.draft_s += float(a.get(sc.SPEC_DRAFT_S) or 0.0)
        f.verify_s += float(a.get(sc.SPEC_VERIFY_S) or 0.0)
        if a.get(sc.SPEC_METHOD):
            methods.add(str(a[sc.SPEC_METHOD]))
    f.methods = sorted(methods)
    return f


def _attempt_valid(tree: SpanTree, attempt: SpanRecord) -> bool:
    """Parse and (for a tool call) validation succeeded in this attempt."""
    parse_ok, validation = False, None
    for s in tree.walk(attempt):
        if s.segment == sc.Segment.PARSE:
            parse_ok = s.attributes.get(sc.PARSE_OK) is True
        elif s.segment == sc.Segment.VALIDATION:
            validation = s.attributes.get(sc.VALIDATION_OK) is True
    return parse_ok and validation is not False


def step_figures(tree: SpanTree, step: SpanRecord, task_start: int) -> tuple[StepFigures, list[int], list[int]]:
    """A step's figures, and its valid and correct decision moments (ns)."""
    segs, overlap = segment_times(tree, step)
    attempts = [k for k in tree.kids(step) if k.segment == sc.Segment.ATTEMPT]
    retry = SegmentTimes()
    retry_s = 0.0
    for a in attempts:
        if a.attributes.get(sc.ATTEMPT_OUTCOME, _OK) != _OK:
            retry.merge(segment_times(tree, a)[0])
            retry_s += a.duration_ns / NS
    moments, correct = [], []
    for s in tree.walk(step):
        end = _decision_end(s)
        if end is not None:
            moments.append(end)
            if s.attributes.get(sc.DECISION_CORRECT) is True:
                correct.append(end)
    if not moments and (fallback := _final_answer_fallback(tree, step)) is not None:
        moments.append(fallback)
    first = min(moments) if moments else None
    figures = StepFigures(
        index=int(step.attributes.get(sc.STEP_INDEX) or 0),
        outcome=str(step.attributes.get(sc.STEP_OUTCOME, "unknown")),
        attempts=int(step.attributes.get(sc.STEP_ATTEMPTS) or len(attempts)),
        start_s=(step.start_ns - task_start) / NS,
        wall_s=step.duration_ns / NS,
        ttvtc_s=(first - step.start_ns) / NS if first is not None else None,
        segments=segs,
        retry_s=retry_s,
        retry_segments=retry,
        overlap_s=overlap,
    )
    return figures, moments, correct


def task_figures(tree: SpanTree, agent: SpanRecord) -> TaskFigures:
    steps = [k for k in tree.kids(agent) if k.segment == sc.Segment.STEP]
    step_figs: list[StepFigures] = []
    moments: list[int] = []
    correct: list[int] = []
    for st in steps:
        f, m, c = step_figures(tree, st, agent.start_ns)
        step_figs.append(f)
        moments += m
        correct += c
    segs, _ = segment_times(tree, agent)
    retry = SegmentTimes()
    for f in step_figs:
        retry.merge(f.retry_segments)
    subtree = list(tree.walk(agent))
    attempts = [s for s in subtree if s.segment == sc.Segment.ATTEMPT]
    wall = agent.duration_ns / NS
    valid = len(moments)
    a = agent.attributes
    return TaskFigures(
        trace_id=agent.trace_id,
        task_id=str(a.get(sc.TASK_ID, agent.span_id)),
        agent=str(a.get(sc.GEN_AI_AGENT_NAME, agent.name)),
        run_label=agent.resource.get(sc.RUN_LABEL),
        run_id=agent.resource.get(sc.RUN_ID),
        outcome=str(a.get(sc.TASK_OUTCOME, "unknown")),
        wall_s=wall,
        ttvtc_s=(min(moments) - agent.start_ns) / NS if moments else None,
        time_to_correct_action_s=(min(correct) - agent.start_ns) / NS if correct else None,
        decisions_valid=valid,
        decisions_invalid=int(a.get(sc.DECISIONS_INVALID) or 0),
        decision_throughput=valid / wall if wall > 0 else 0.0,
        attempts=len(attempts),
        valid_attempts=sum(_attempt_valid(tree, at) for at in attempts),
        segments=segs,
        retry_s=sum(f.retry_s for f in step_figs),
        retry_segments=retry,
        speculation=_spec(s for s in subtree if s.segment == sc.Segment.GENERATION),
        steps=step_figs,
    )


def distribution(values: Iterable[float | None]) -> Distribution:
    xs = np.array([v for v in values if v is not None], dtype=float)
    if xs.size == 0:
        return Distribution(count=0)
    p50, p95, p99 = np.percentile(xs, [50, 95, 99])
    return Distribution(count=int(xs.size), p50=float(p50), p95=float(p95), p99=float(p99) if xs.size >= 100 else None)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def run_figures(tasks: list[TaskFigures]) -> RunFigures:
    segs, spec = SegmentTimes(), SpecFigures()
    for t in tasks:
        segs.merge(t.segments)
        spec.merge(t.speculation)
    steps = [s for t in tasks for s in t.steps]
    attempts = sum(t.attempts for t in tasks)
    valid_attempts = sum(t.valid_attempts for t in tasks)
    completed = sum(t.outcome == sc.TaskOutcome.COMPLETED for t in tasks)
    retried = sum(s.attempts > 1 for s in steps)
    wall = sum(t.wall_s for t in tasks)
    return RunFigures(
        tasks=len(tasks),
        completed=completed,
        completion_rate=_ratio(completed, len(tasks)),
        attempts=attempts,
        valid_attempts=valid_attempts,
        validity_rate=_ratio(valid_attempts, attempts),
        steps=len(steps),
        steps_with_retry=retried,
        retry_share=_ratio(retried, len(steps)),
        decision_throughput=_ratio(sum(t.decisions_valid for t in tasks), wall),
        task_wall=distribution(t.wall_s for t in tasks),
        ttvtc=distribution(t.ttvtc_s for t in tasks),
        step_wall=distribution(s.wall_s for s in steps),
        segments=segs,
        retry_s=sum(t.retry_s for t in tasks),
        speculation=spec,
    )


def build_report(spans: list[SpanRecord], sources: list[str], problems: list[str]) -> Report:
    """Figures for every agent span (task) found among `spans`."""
    tree = SpanTree(spans)
    agents = [s for s in tree.by_id.values() if s.segment == sc.Segment.AGENT]
    agents.sort(key=lambda s: s.start_ns)
    tasks = [task_figures(tree, a) for a in agents]
    return Report(sources=sources, problems=problems, run=run_figures(tasks), tasks=tasks)


def report_from_files(paths: list[str]) -> Report:
    """Load trace files or folders and compute their report."""
    loaded = load_spans(paths)
    return build_report(loaded.spans, [str(p) for p in paths], loaded.problems)
