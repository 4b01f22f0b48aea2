"""A/B comparison of two runs: for each figure, the ratio of medians (B over A) with a seeded
bootstrap 95% interval; a ratio whose interval contains 1.0 is noise, not a gain or regression
(SPANS.md). The statistics are `stats.bootstrap_ratio_of_medians`, shared with the benchmarks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agenttrace.report.model import (
    SEGMENT_FIELDS,
    Comparison,
    FigureComparison,
    Report,
    TaskFigures,
)
from agenttrace.report.runs import run_figures
from agenttrace.report.stats import bootstrap_ratio_of_medians

Samples = Callable[[list[TaskFigures]], list[float]]


@dataclass(frozen=True, slots=True)
class FigureSpec:
    """A figure to compare: its samples from a run's tasks, its unit, which way is better."""

    name: str
    unit: str
    samples: Samples
    higher_is_better: bool = False


def _whole(tasks: list[TaskFigures]) -> list[TaskFigures]:
    return [t for t in tasks if not t.partial]


def _vals(xs) -> list[float]:
    return [float(x) for x in xs if x is not None]


def _segment_spec(seg: str) -> FigureSpec:
    label = "rest of generation" if seg == "generation" else seg
    return FigureSpec(f"step time: {label}", "s", lambda ts: _vals(getattr(s.segments, seg) for t in ts for s in t.steps))


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec("task wall time", "s", lambda ts: _vals(t.wall_s for t in _whole(ts))),
    FigureSpec("time to valid tool call (task)", "s", lambda ts: _vals(t.ttvtc_s for t in _whole(ts))),
    FigureSpec("time to correct action (task)", "s",
               lambda ts: _vals(t.time_to_correct_action_s for t in _whole(ts) if t.expects_correct_action)),
    FigureSpec("step wall time", "s", lambda ts: _vals(s.wall_s for t in ts for s in t.steps)),
    FigureSpec("time to valid tool call (step)", "s", lambda ts: _vals(s.ttvtc_s for t in ts for s in t.steps)),
    FigureSpec("retry cost per step", "s", lambda ts: _vals(s.retry_s for t in ts for s in t.steps)),
    FigureSpec("decision throughput (task)", "1/s", lambda ts: _vals(t.decision_throughput for t in _whole(ts)), True),
    FigureSpec("generation tokens/s", "1/s",
               lambda ts: _vals(g.tokens_per_s for t in ts for s in t.steps for g in s.generations), True),
    FigureSpec("decode time per token", "s",
               lambda ts: _vals(g.decode_s_per_token for t in ts for s in t.steps for g in s.generations)),
    *(_segment_spec(seg) for seg in SEGMENT_FIELDS),
)


def compare_tasks(
    a: list[TaskFigures], b: list[TaskFigures], *, a_name: str, b_name: str, a_sources: list[str] | None = None,
    b_sources: list[str] | None = None, seed: int = 0, resamples: int = 10_000, confidence: float = 0.95,
    problems: list[str] | None = None,
) -> Comparison:
    """Every figure of FIGURES for B against A. Figures with no samples on either side, or zero on
    both (a segment neither run used), are left out."""
    rows = []
    for spec in FIGURES:
        xa, xb = spec.samples(a), spec.samples(b)
        if not xa and not xb or not any(xa) and not any(xb):
            continue
        est = bootstrap_ratio_of_medians(xa, xb, resamples=resamples, confidence=confidence, seed=seed,
                                         higher_is_better=spec.higher_is_better)
        rows.append(FigureComparison(
            figure=spec.name, unit=spec.unit, better="higher" if spec.higher_is_better else "lower", n_a=est.n_a,
            n_b=est.n_b, median_a=est.median_a, median_b=est.median_b, ratio=est.ratio, low=est.low, high=est.high,
            verdict=est.verdict,
        ))
    return Comparison(
        a=a_name, b=b_name, a_sources=a_sources or [], b_sources=b_sources or [], seed=seed, resamples=resamples,
        confidence=confidence, figures=rows, a_run=run_figures(a, a_name), b_run=run_figures(b, b_name),
        problems=problems or [],
    )


def compare_reports(a: Report, b: Report, *, a_name: str, b_name: str, **kwargs) -> Comparison:
    """B's report against A's (two files or sets of files)."""
    return compare_tasks(a.tasks, b.tasks, a_name=a_name, b_name=b_name, a_sources=a.sources, b_sources=b.sources,
                         problems=[*a.problems, *b.problems], **kwargs)


def compare_labels(report: Report, a_label: str, b_label: str, **kwargs) -> Comparison:
    """Two `agenttrace.run.label` values of one report against each other. Raises ValueError
    naming the labels present when one is missing."""
    present = sorted({t.run_label for t in report.tasks if t.run_label is not None})
    missing = [lab for lab in (a_label, b_label) if lab not in present]
    if missing:
        raise ValueError(f"run label(s) {', '.join(map(repr, missing))} not found; the traces hold "
                         f"{', '.join(map(repr, present)) or 'no run labels'}")
    a = [t for t in report.tasks if t.run_label == a_label]
    b = [t for t in report.tasks if t.run_label == b_label]
    return compare_tasks(a, b, a_name=a_label, b_name=b_label, a_sources=report.sources, b_sources=report.sources,
                         problems=list(report.problems), **kwargs)
