"""Run-level figures: tasks aggregated over a whole report and per `agenttrace.run.label`, with
p50/p95/p99 and counts across tasks, steps and generations (SPANS.md)."""

from __future__ import annotations

import operator
from collections import defaultdict

import numpy as np

from agenttrace import semconv as sc
from agenttrace.report.figures import TaskAnalysis
from agenttrace.report.model import (
    SEGMENT_FIELDS,
    Report,
    RunFigures,
    SegmentDistributions,
    StageTimes,
    TaskFigures,
)
from agenttrace.report.roofline import roofline_figures
from agenttrace.report.segments import sum_segments
from agenttrace.report.spec import aggregate
from agenttrace.report.stats import distribution
from agenttrace.report.whatif import whatifs


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


_SEGMENT_VALUES = operator.attrgetter(*SEGMENT_FIELDS)


def _step_segments(steps: list) -> SegmentDistributions:
    """Each segment's distribution across steps, from one table of steps x segments (a column
    per segment: gathered once, not once per segment)."""
    table = np.array([_SEGMENT_VALUES(s.segments) for s in steps], dtype=float).reshape(len(steps), len(SEGMENT_FIELDS))
    return SegmentDistributions(**{f: distribution(table[:, i]) for i, f in enumerate(SEGMENT_FIELDS)})


def _stages(tasks: list[TaskFigures]) -> StageTimes:
    total = StageTimes()
    for t in tasks:
        total.merge(t.stages)
    return total


def run_figures(tasks: list[TaskFigures], label: str | None = None) -> RunFigures:
    """Aggregates over `tasks`. Partial tasks (agent span missing) count in step and generation
    figures but not in task-level rates and distributions."""
    whole = [t for t in tasks if not t.partial]
    segs = sum_segments(t.segments for t in tasks)
    retry = sum_segments(t.retry_segments for t in tasks)
    overlap = sum_segments(t.overlap_segments for t in tasks)
    steps = [s for t in tasks for s in t.steps]
    gens = [g for s in steps for g in s.generations]
    attempts = sum(t.attempts for t in tasks)
    valid_attempts = sum(t.valid_attempts for t in tasks)
    completed = sum(t.outcome == sc.TaskOutcome.COMPLETED for t in whole)
    retried = sum(s.attempts > 1 for s in steps)
    wall = sum(t.wall_s for t in whole)
    by_method: dict[str, list] = defaultdict(list)
    for g in gens:
        by_method[g.method].append(g)
    return RunFigures(
        label=label,
        tasks=len(whole),
        partial_tasks=len(tasks) - len(whole),
        completed=completed,
        completion_rate=_ratio(completed, len(whole)),
        attempts=attempts,
        valid_attempts=valid_attempts,
        validity_rate=_ratio(valid_attempts, attempts),
        steps=len(steps),
        steps_with_retry=retried,
        retry_share=_ratio(retried, len(steps)),
        decision_throughput=_ratio(sum(t.decisions_valid for t in whole), wall),
        task_wall=distribution(t.wall_s for t in whole),
        ttvtc=distribution(t.ttvtc_s for t in whole),
        step_wall=distribution(s.wall_s for s in steps),
        step_ttvtc=distribution(s.ttvtc_s for s in steps),
        time_to_correct_action=distribution(t.time_to_correct_action_s for t in whole if t.expects_correct_action),
        decision_throughput_per_task=distribution(t.decision_throughput for t in whole),
        retry_per_step=distribution(s.retry_s for s in steps),
        tokens_per_s=distribution(g.tokens_per_s for g in gens),
        decode_s_per_token=distribution(g.decode_s_per_token for g in gens),
        acceptance_rate=distribution(g.acceptance_rate for g in gens if g.method != "none"),
        step_segments=_step_segments(steps),
        segments=segs,
        retry_s=sum(t.retry_s for t in tasks),
        retry_segments=retry,
        overlap_s=sum(t.overlap_s for t in tasks),
        overlap_segments=overlap,
        speculation=aggregate(gens),
        generations=len(gens),
        constrained_generations=sum(g.constrained for g in gens),
        constrain_fallbacks=sum(g.constrain_engine is not None and g.constrain_fallback is not None for g in gens),
        drafts_cut=sum(g.drafts_cut for g in gens),
        speculation_by_method=[aggregate(by_method[m]) for m in sorted(by_method)],
        stages=_stages(whole),
        loops_detected=sum(t.outcome == sc.TaskOutcome.LOOP_DETECTED for t in whole),
        sub_agents=sum(t.sub_agents for t in tasks),
        compactions=sum(t.compactions for t in tasks),
        reprefill_tokens=sum(t.reprefill_tokens or 0 for t in tasks),
        reprefill_s=sum(t.reprefill_s or 0.0 for t in tasks),
    )


def labels_of(tasks: list[TaskFigures]) -> list[str | None]:
    """The run labels present, in first-seen order."""
    return list(dict.fromkeys(t.run_label for t in tasks))


def assemble_report(analyses: list[TaskAnalysis], sources: list[str], problems: list[str]) -> Report:
    """The report of analysed tasks: the run as a whole, per run label, and the what-if."""
    tasks = [a.figures for a in analyses]
    labels = labels_of(tasks)
    run = run_figures(tasks, labels[0] if len(labels) == 1 else None)
    by_label = [run_figures([t for t in tasks if t.run_label == lab], lab) for lab in labels] if len(labels) > 1 else [run]
    return Report(
        sources=sources,
        problems=problems,
        run=run,
        tasks=tasks,
        by_label=by_label,
        whatif=whatifs(analyses),
        roofline=roofline_figures(tasks, labels if len(labels) > 1 else [None]),
    )
