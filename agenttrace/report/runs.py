"""Run-level figures: tasks aggregated over a whole report and per `agenttrace.run.label`, with
p50/p95/p99 and counts across tasks, steps and generations (SPANS.md)."""

from __future__ import annotations

import copy
import operator
from collections import defaultdict
from collections.abc import Iterable

from agenttrace import semconv as sc
from agenttrace.report.figures import TaskAnalysis
from agenttrace.report.model import SEGMENT_FIELDS, Report, RunFigures, SegmentDistributions, StageTimes, TaskFigures
from agenttrace.report.roofline_fold import RooflineFold
from agenttrace.report.segments import add_segments, segment_times
from agenttrace.report.spec import SpecSums
from agenttrace.report.stats import Sampler
from agenttrace.report.whatif import WhatIfFold


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


_SEGMENT_VALUES = operator.attrgetter(*SEGMENT_FIELDS)
_N = len(SEGMENT_FIELDS)


class RunFold:
    """The run figures of tasks added one at a time (`add`), then read once (`figures`). Without
    `limit` every value is kept (the figures are exact); with it each distribution keeps a uniform
    sample of at most `limit` values and its count, mean and extremes exact, so the fold's memory
    is bounded whatever the number of tasks (the summary of a very large input). Partial tasks
    (agent span missing) count in step and generation figures but not in task-level rates and
    distributions."""

    def __init__(self, limit: int | None = None) -> None:
        def dist(seed: int, width: int | None = None) -> Sampler:  # a seed each: samples drawn independently
            return Sampler(limit, width=width, seed=seed)

        self.task_wall, self.ttvtc, self.tca, self.throughput = dist(1), dist(2), dist(3), dist(4)
        self.step_wall, self.step_ttvtc, self.retry_per_step = dist(5), dist(6), dist(7)
        self.step_segments = dist(8, _N)
        self.tokens_per_s, self.decode_per_token, self.acceptance = dist(9), dist(10), dist(11)
        self.segs, self.retry_segs, self.overlap_segs = [0.0] * _N, [0.0] * _N, [0.0] * _N
        self.speculation = SpecSums()
        self.by_method: defaultdict[str, SpecSums] = defaultdict(SpecSums)
        self.stages = StageTimes()
        self.whole = self.partial = self.completed = self.loops = 0
        self.attempts = self.valid_attempts = self.steps = self.retried = 0
        self.decisions = self.sub_agents = self.compactions = self.reprefill_tokens = 0
        self.wall = self.retry_s = self.overlap_s = self.reprefill_s = 0.0
        self.generations = self.constrained = self.fallbacks = self.drafts_cut = 0
        self.not_inferred: defaultdict[str, int] = defaultdict(int)

    def add(self, t: TaskFigures) -> None:
        if t.partial:
            self.partial += 1
        else:
            self.whole += 1
            self.completed += t.outcome == sc.TaskOutcome.COMPLETED
            self.loops += t.outcome == sc.TaskOutcome.LOOP_DETECTED
            self.wall += t.wall_s
            self.decisions += t.decisions_valid
            self.task_wall.add(t.wall_s)
            self.ttvtc.add(t.ttvtc_s)
            if t.expects_correct_action:
                self.tca.add(t.time_to_correct_action_s)
            self.throughput.add(t.decision_throughput)
            self.stages.merge(t.stages)
        add_segments(self.segs, t.segments)
        add_segments(self.retry_segs, t.retry_segments)
        add_segments(self.overlap_segs, t.overlap_segments)
        self.attempts += t.attempts
        self.valid_attempts += t.valid_attempts
        self.retry_s += t.retry_s
        self.overlap_s += t.overlap_s
        self.sub_agents += t.sub_agents
        self.compactions += t.compactions
        for m in t.not_inferred:
            self.not_inferred[m.figure] += 1
        self.reprefill_tokens += t.reprefill_tokens or 0
        self.reprefill_s += t.reprefill_s or 0.0
        for s in t.steps:
            self.steps += 1
            self.retried += s.attempts > 1
            self.step_wall.add(s.wall_s)
            self.step_ttvtc.add(s.ttvtc_s)
            self.retry_per_step.add(s.retry_s)
            self.step_segments.add(_SEGMENT_VALUES(s.segments))
            for g in s.generations:
                self.generations += 1
                self.constrained += g.constrained
                self.fallbacks += g.constrain_engine is not None and g.constrain_fallback is not None
                self.drafts_cut += g.drafts_cut
                self.tokens_per_s.add(g.tokens_per_s)
                self.decode_per_token.add(g.decode_s_per_token)
                if g.method != "none":
                    self.acceptance.add(g.acceptance_rate)
                self.speculation.add(g)
                self.by_method[g.method].add(g)

    def figures(self, label: str | None = None) -> RunFigures:
        return RunFigures(
            label=label,
            tasks=self.whole,
            partial_tasks=self.partial,
            completed=self.completed,
            completion_rate=_ratio(self.completed, self.whole),
            attempts=self.attempts,
            valid_attempts=self.valid_attempts,
            validity_rate=_ratio(self.valid_attempts, self.attempts),
            steps=self.steps,
            steps_with_retry=self.retried,
            retry_share=_ratio(self.retried, self.steps),
            decision_throughput=_ratio(self.decisions, self.wall),
            task_wall=self.task_wall.distribution(),
            ttvtc=self.ttvtc.distribution(),
            step_wall=self.step_wall.distribution(),
            step_ttvtc=self.step_ttvtc.distribution(),
            time_to_correct_action=self.tca.distribution(),
            decision_throughput_per_task=self.throughput.distribution(),
            retry_per_step=self.retry_per_step.distribution(),
            tokens_per_s=self.tokens_per_s.distribution(),
            decode_s_per_token=self.decode_per_token.distribution(),
            acceptance_rate=self.acceptance.distribution(),
            step_segments=SegmentDistributions(**dict(zip(SEGMENT_FIELDS, self.step_segments.distributions()))),
            segments=segment_times(self.segs),
            retry_s=self.retry_s,
            retry_segments=segment_times(self.retry_segs),
            overlap_s=self.overlap_s,
            overlap_segments=segment_times(self.overlap_segs),
            speculation=self.speculation.figures(),
            generations=self.generations,
            constrained_generations=self.constrained,
            constrain_fallbacks=self.fallbacks,
            drafts_cut=self.drafts_cut,
            speculation_by_method=[self.by_method[m].figures() for m in sorted(self.by_method)],
            stages=self.stages,
            loops_detected=self.loops,
            not_inferred=dict(self.not_inferred),
            sub_agents=self.sub_agents,
            compactions=self.compactions,
            reprefill_tokens=self.reprefill_tokens,
            reprefill_s=self.reprefill_s,
        )


def run_figures(tasks: Iterable[TaskFigures], label: str | None = None) -> RunFigures:
    """The run figures of `tasks`, every value kept (see RunFold)."""
    fold = RunFold()
    for t in tasks:
        fold.add(t)
    return fold.figures(label)


class ReportFold:
    """The report of analysed tasks added one at a time: the run as a whole, per run label, the
    what-if and the roofline folded as they come. With `limit` the distributions are sampled (see
    RunFold) and the tasks themselves not kept (`keep_tasks`), so the fold's memory is bounded by
    the number of run labels and drafters, not of tasks."""

    def __init__(self, limit: int | None = None, *, keep_tasks: bool = True) -> None:
        self.limit = limit
        self.keep_tasks = keep_tasks
        self.tasks: list[TaskFigures] = []
        self.run = RunFold(limit)
        # Each run label's fold; None for the first label while it is the only one: the run's fold
        # holds its tasks (a report of one run, the usual case, folds every task once, not twice).
        self.labels: dict[str | None, RunFold | None] = {}
        self.whatif = WhatIfFold()
        self.roofline = RooflineFold()

    def add(self, a: TaskAnalysis) -> None:
        t = a.figures
        if self.keep_tasks:
            self.tasks.append(t)
        label = t.run_label
        if label not in self.labels:
            if len(self.labels) == 1:  # a second label: the first's tasks so far are the run's
                (first,) = self.labels
                self.labels[first] = copy.deepcopy(self.run)  # the same tasks in the same order, seeds and all
            self.labels[label] = RunFold(self.limit) if self.labels else None
        self.run.add(t)
        fold = self.labels[label]
        if fold is not None:
            fold.add(t)
        self.whatif.add(a)
        self.roofline.add(t)

    def report(self, sources: list[str], problems: list[str]) -> Report:
        labels = list(self.labels)
        run = self.run.figures(labels[0] if len(labels) == 1 else None)
        by_label = [fold.figures(lab) for lab, fold in self.labels.items() if fold is not None] if len(labels) > 1 else [run]
        return Report(sources=sources, problems=problems, run=run, tasks=self.tasks, by_label=by_label,
                      whatif=self.whatif.figures(),
                      roofline=self.roofline.figures(labels if len(labels) > 1 else [None]))


def assemble_report(analyses: Iterable[TaskAnalysis], sources: list[str], problems: list[str]) -> Report:
    """The report of analysed tasks: the run as a whole, per run label, and the what-if."""
    fold = ReportFold()
    for a in analyses:
        fold.add(a)
    return fold.report(sources, problems)
