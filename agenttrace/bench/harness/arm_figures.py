"""Per suite and arm: the figures of the issue's list, from the traces (everything SPANS.md
defines: TTVTC, time to correct action, task time, completion and validity, speculation) and
from the harness's own records (TTFT, time per output token, correctness, memory, energy).
Then each arm against the baseline, with the reports' bootstrap comparison.

Imports neither torch nor transformers: a finished output folder renders anywhere.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from agenttrace.bench.harness.arms import decoding
from agenttrace.bench.harness.records import TaskRecord
from agenttrace.report import report_from_files
from agenttrace.report.compare import FIGURES
from agenttrace.report.model import Distribution, StageTimes, TaskFigures
from agenttrace.report.runs import run_figures
from agenttrace.report.stats import RatioEstimate, bootstrap_paired_ratio, bootstrap_ratio_of_medians, distribution

ALL = "all suites"
# Fewer samples a side than this get no verdict: a bootstrap of one or two values has an interval
# of zero width and would call any difference a gain or a regression.
MIN_SAMPLES = 5


def judged(est: RatioEstimate) -> RatioEstimate:
    """`est`, its verdict replaced by "too few" when either side has under MIN_SAMPLES values."""
    if est.ratio is not None and min(est.n_a, est.n_b) < MIN_SAMPLES:
        return replace(est, verdict="too few")  # type: ignore[arg-type]
    return est


@dataclass
class ArmFigures:
    """One arm on one suite (or on every suite: `suite == ALL`)."""

    suite: str
    arm: str
    tasks: int
    completion_rate: float | None
    validity_rate: float | None
    correct: int
    checkable: int
    ttvtc: Distribution
    correct_action: Distribution
    task_wall: Distribution
    ttft: Distribution
    tpot: Distribution
    tokens_per_s: float | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    generations: int
    fallbacks: int
    tool_calls_per_task: float | None
    same_output: tuple[int, int] | None  # (task runs whose texts equal the reference arm's, compared)
    same_as: str | None  # the reference arm: the baseline, or the plain constrained arm for a constrained one
    lost_share: float | None  # wall time of failed attempts over task wall time
    constrain_share: float | None  # grammar mask + compile time over model-call time (None: unconstrained)
    peak_rss_bytes: int | None
    peak_gpu_bytes: int | None
    energy_j_per_task: float | None
    power_w: float | None
    # where task time went by stage (report/stages.py) and what long tasks did (issue 16)
    stages: StageTimes = field(default_factory=StageTimes)
    compactions: int = 0
    reprefill_tokens: int = 0
    reprefill_s: float = 0.0
    sub_agents: int = 0
    loops_detected: int = 0

    @property
    def correctness_rate(self) -> float | None:
        return self.correct / self.checkable if self.checkable else None


@dataclass
class Versus:
    """One figure of one arm against the baseline on one suite."""

    suite: str
    arm: str
    figure: str
    unit: str
    estimate: RatioEstimate


@dataclass
class BenchFigures:
    arms: list[ArmFigures] = field(default_factory=list)
    versus: list[Versus] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def arm(self, suite: str, arm: str) -> ArmFigures | None:
        return next((a for a in self.arms if a.suite == suite and a.arm == arm), None)


# Figures compared against the baseline: (name, unit, samples, higher is better). The trace
# figures reuse the report's own definitions (agenttrace compare shows the same numbers).
_TRACE_FIGURES = {
    "time to correct action (task)": "time to correct action",
    "time to valid tool call (task)": "time to valid tool call",
    "task wall time": "task time",
    "generation tokens/s": "generation tokens/s",
}


def _trace_specs():
    return [(short, spec) for spec in FIGURES for name, short in _TRACE_FIGURES.items() if spec.name == name]


# A task run: its repeat and task id (one trace file holds one repeat of one suite and arm),
# prefixed with the suite when several suites are pooled.
RunKey = tuple


def load_traces(out: Path, records: list[TaskRecord]) -> tuple[dict[tuple[str, str], dict[RunKey, TaskFigures]], list[str]]:
    """TaskFigures per (suite, arm) and task run, read from the trace file of each chunk and arm."""
    tasks: dict[tuple[str, str], dict[RunKey, TaskFigures]] = defaultdict(dict)
    problems: list[str] = []
    files = sorted({(r.repeat, r.suite, r.arm) for r in records})
    for repeat, suite, arm in files:
        path = out / "traces" / f"r{repeat}-{suite}-{arm}.jsonl"
        if not path.exists():
            problems.append(f"{path}: missing; its task runs are left out of the trace figures")
            continue
        report = report_from_files([str(path)])
        problems += report.problems
        tasks[(suite, arm)].update(((repeat, t.task_id), t) for t in report.tasks)
    return tasks, problems


def _same_output(mine: list[TaskRecord], base: dict[tuple[int, str], str]) -> tuple[int, int] | None:
    pairs = [(r.output_digest, base.get((r.repeat, r.task_id))) for r in mine]
    pairs = [(a, b) for a, b in pairs if b is not None]
    return (sum(a == b for a, b in pairs), len(pairs)) if pairs else None


def _max(xs) -> int | None:
    xs = [x for x in xs if x is not None]
    return max(xs) if xs else None


def _model_share(run) -> float | None:
    segs = run.segments
    return segs.constrain / segs.model_time() if segs.constrain > 0 else None


def arm_figures(suite: str, arm: str, traced: list[TaskFigures], recs: list[TaskRecord],
                base: dict[tuple[int, str], str] | None, same_as: str | None = None) -> ArmFigures:
    run = run_figures(traced, arm)
    task_s = sum(t.wall_s for t in traced)
    spec = run.speculation
    checkable = [r for r in recs if r.correct is not None]
    energy = [r.energy_j for r in recs]
    has_energy = recs and all(e is not None for e in energy)
    wall = sum(r.wall_s for r in recs)
    return ArmFigures(
        suite=suite, arm=arm, tasks=len(recs), completion_rate=run.completion_rate, validity_rate=run.validity_rate,
        correct=sum(bool(r.correct) for r in checkable), checkable=len(checkable),
        ttvtc=run.ttvtc, correct_action=run.time_to_correct_action, task_wall=run.task_wall,
        ttft=distribution(x for r in recs for x in r.ttft_s), tpot=distribution(x for r in recs for x in r.tpot_s),
        tokens_per_s=spec.tokens_per_s,
        acceptance_rate=spec.acceptance_rate, mean_acceptance_length=spec.mean_acceptance_length,
        generations=spec.generations, fallbacks=spec.fallbacks,
        tool_calls_per_task=sum(r.tool_calls for r in recs) / len(recs) if recs else None,
        same_output=None if base is None else _same_output(recs, base), same_as=same_as,
        lost_share=run.retry_s / task_s if task_s > 0 else None, constrain_share=_model_share(run),
        peak_rss_bytes=_max(r.peak_rss_bytes for r in recs), peak_gpu_bytes=_max(r.peak_gpu_bytes for r in recs),
        energy_j_per_task=sum(energy) / len(recs) if has_energy else None,  # type: ignore[arg-type]
        power_w=sum(energy) / wall if has_energy and wall > 0 else None,  # type: ignore[arg-type]
        stages=run.stages, compactions=run.compactions, reprefill_tokens=run.reprefill_tokens,
        reprefill_s=run.reprefill_s, sub_agents=run.sub_agents, loops_detected=run.loops_detected,
    )


def _pairs(a: dict[RunKey, list[float]], b: dict[RunKey, list[float]]) -> list[tuple[float, float]]:
    """Values of the same task run on both sides, position by position (a task run's generations
    line up: greedy decoding makes every arm generate the same texts)."""
    return [(x, y) for key in sorted(a.keys() & b.keys()) if len(a[key]) == len(b[key]) for x, y in zip(a[key], b[key])]


def paired_estimate(a: dict[RunKey, list[float]], b: dict[RunKey, list[float]], seed: int,
              higher_is_better: bool = False) -> RatioEstimate:
    """Paired by task run when at least MIN_SAMPLES pairs line up (every arm runs the same task
    runs, interleaved: the spread between tasks, far larger than any arm's effect on a dozen
    heterogeneous tasks, cancels in each pair); else the unpaired ratio of medians."""
    pairs = _pairs(a, b)
    if len(pairs) >= MIN_SAMPLES:
        return bootstrap_paired_ratio(pairs, seed=seed, higher_is_better=higher_is_better)
    flat_a = [x for xs in a.values() for x in xs]
    flat_b = [x for xs in b.values() for x in xs]
    return judged(bootstrap_ratio_of_medians(flat_a, flat_b, seed=seed, higher_is_better=higher_is_better))


def _versus(suite: str, arm: str, base_t: dict[RunKey, TaskFigures], arm_t: dict[RunKey, TaskFigures],
            base_r: list[TaskRecord], arm_r: list[TaskRecord], seed: int) -> list[Versus]:
    out = []
    for short, spec in _trace_specs():
        a = {key: spec.samples([t]) for key, t in base_t.items()}
        b = {key: spec.samples([t]) for key, t in arm_t.items()}
        out.append(Versus(suite, arm, short, spec.unit, paired_estimate(a, b, seed, spec.higher_is_better)))
    for name, attr in (("TTFT", "ttft_s"), ("time per output token", "tpot_s")):
        a = {(r.repeat, r.task_id): list(getattr(r, attr)) for r in base_r}
        b = {(r.repeat, r.task_id): list(getattr(r, attr)) for r in arm_r}
        out.append(Versus(suite, arm, name, "s", paired_estimate(a, b, seed)))
    return out


def reference_arm(arm: str, arms: tuple[str, ...]) -> str | None:
    """The arm whose greedy text `arm` must reproduce: under a constraint, the plain constrained
    arm when it ran (speculation must not change the constrained text either), else the
    baseline; None for the baseline itself and for the plain constrained arm when the baseline
    is unconstrained (the constraint is meant to change the text)."""
    if arm == arms[0]:
        return None
    constrained = decoding(arm)[1]
    ref = "constrained" if constrained and arm != "constrained" and "constrained" in arms else arms[0]
    return ref if decoding(ref)[1] == constrained else None


def compute(out: Path, records: list[TaskRecord], suites: tuple[str, ...], arms: tuple[str, ...],
            seed: int = 0) -> BenchFigures:
    """Every figure of a run's output folder: per suite and arm, over all suites, and against
    the baseline (the first arm). Suites or arms without records are left out."""
    traced, problems = load_traces(out, records)
    by: dict[tuple[str, str], list[TaskRecord]] = defaultdict(list)
    for r in records:
        by[(r.suite, r.arm)].append(r)
    baseline = arms[0]
    figs = BenchFigures(problems=problems)
    groups = [(s, [s]) for s in suites if any((s, a) in by for a in arms)]
    if len(groups) > 1:
        groups.append((ALL, [s for s, _ in groups]))
    for label, members in groups:
        for arm in arms:
            recs = [r for s in members for r in by[(s, arm)]]
            if not recs:
                continue
            keyed = {(s, *key): t for s in members for key, t in traced[(s, arm)].items()}
            ref = reference_arm(arm, arms)
            ref_digest = {(r.repeat, r.task_id): r.output_digest for s in members for r in by[(s, ref)]} if ref else None
            figs.arms.append(arm_figures(label, arm, list(keyed.values()), recs, ref_digest, ref))
            if arm != baseline:
                base_t = {(s, *key): t for s in members for key, t in traced[(s, baseline)].items()}
                base_r = [r for s in members for r in by[(s, baseline)]]
                figs.versus += _versus(label, arm, base_t, keyed, base_r, recs, seed)
    return figs
