"""The report's figures, as pydantic models: the JSON schema of `agenttrace report --format json`.

Times are seconds. Every figure is defined in SPANS.md ("Figures the reports compute"). The
schema is versioned by `Report.schema_version`; fields are only ever added.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel, Field, computed_field, create_model

from agenttrace.core.roofline import RooflinePhase
from agenttrace.report.inputs import InputFigures
from agenttrace.report.jsondoc import JsonDocument
from agenttrace.report.roofline_model import RooflineFigures
from agenttrace.report.whatif_model import SpeedupPoint, WhatIf  # noqa: F401  (part of the report's schema)
from agenttrace.semconv import Segment

M = TypeVar("M", bound=BaseModel)
# One set shared by the figures built in bulk (see `lean`).
_SHARED_FIELDS_SET: set[str] = set()


def lean(model: M) -> M:
    """Drop the per-instance record of which fields were passed (pydantic keeps a set per model:
    2 KB for a GenerationFigures, more than its values). Reports never dump with
    `exclude_unset`, so nothing reads it; a 1M-span report builds ~10^5 models."""
    object.__setattr__(model, "__pydantic_fields_set__", _SHARED_FIELDS_SET)
    return model


# The loop's containers: the self time of agent, step and attempt spans is the loop's own
# overhead, which the report shows as `other` together with spans of unknown segments.
_CONTAINERS = frozenset({Segment.AGENT, Segment.STEP, Segment.ATTEMPT})
OTHER = "other"
# The report's segments: every other `Segment`, in that enum's order, then `other`. The segment
# models below have one field per name, in this order (their JSON field order).
SEGMENT_FIELDS: tuple[str, ...] = (*(s.value for s in Segment if s not in _CONTAINERS), OTHER)
# Segments added after the schema's first version: their distributions default to empty, so
# report JSON written before them still loads (`Report.schema_version`: fields are only added).
_ADDED_AFTER_V1 = frozenset({Segment.QUEUE, Segment.CONSTRAIN})


class _SegmentTimesBase(BaseModel):
    """SegmentTimes' methods; its fields are made from SEGMENT_FIELDS below."""

    def total(self) -> float:
        return sum(getattr(self, f) for f in SEGMENT_FIELDS)

    def add(self, segment: str, seconds: float) -> None:
        field = segment if segment in SEGMENT_FIELDS else OTHER
        setattr(self, field, getattr(self, field) + seconds)

    def merge(self, other: SegmentTimes) -> None:
        for f in SEGMENT_FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def is_zero(self) -> bool:
        return not any(getattr(self, f) for f in SEGMENT_FIELDS)

    def model_time(self) -> float:
        """Time in model calls: prefill, draft, verify, constrain and the rest of generation."""
        return self.prefill + self.draft + self.verify + self.constrain + self.generation


# Made from SEGMENT_FIELDS, so a segment is named once (semconv.Segment): one float per name.
SegmentTimes = create_model(
    "SegmentTimes",
    __base__=_SegmentTimesBase,
    __module__=__name__,
    __doc__="""Self time charged to each segment, in seconds. `generation` is the rest of generation:
    generation time that is not prefill, draft or verify (decode steps, sampling, tokenizing).""",
    **{name: (float, 0.0) for name in SEGMENT_FIELDS},
)

STAGE_FIELDS = ("generation", "tool", "memory", "compaction", "delegation_overhead", "other")
STAGE_LABELS = {f: f.replace("_", " ") for f in STAGE_FIELDS}  # as tables and notes print them


class StageTimes(BaseModel):
    """A task's critical path by stage (report/stages.py), in seconds; the fields sum to the
    task's time on its path. Coarser than the segments, and it counts two subtrees whole: a
    compaction (its summary's generation included) and, in a task that delegates, the
    coordinator's own time apart from the sub-agents' (`delegation_overhead`: time in the
    coordinator not spent waiting for a sub-agent, memory aside)."""

    generation: float = 0.0
    tool: float = 0.0
    memory: float = 0.0
    compaction: float = 0.0
    delegation_overhead: float = 0.0
    other: float = 0.0

    def total(self) -> float:
        return sum(getattr(self, f) for f in STAGE_FIELDS)

    def share(self, name: str) -> float | None:
        total = self.total()
        return getattr(self, name) / total if total > 0 else None

    def merge(self, other: StageTimes) -> None:
        for f in STAGE_FIELDS:
            setattr(self, f, getattr(self, f) + getattr(other, f))


class SpecFigures(BaseModel):
    """Speculation and throughput over a set of generation spans."""

    methods: list[str] = Field(default_factory=list)
    generations: int = 0
    output_tokens: int = 0
    generation_s: float = 0.0
    rounds: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    fallbacks: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    prefill_s: float = Field(0.0, description="prefill time of these generations (s)")
    num_speculative_tokens: int = Field(0, description="the largest k (agenttrace.spec.num_speculative_tokens) seen")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def mean_acceptance_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.rounds if self.rounds else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def tokens_per_s(self) -> float | None:
        return self.output_tokens / self.generation_s if self.generation_s > 0 else None

    def merge(self, other: SpecFigures) -> None:
        self.methods = sorted(set(self.methods) | set(other.methods))
        for f in ("generations", "output_tokens", "generation_s", "rounds", "draft_tokens", "accepted_tokens",
                  "fallbacks", "draft_s", "verify_s", "prefill_s"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        self.num_speculative_tokens = max(self.num_speculative_tokens, other.num_speculative_tokens)


class GenerationFigures(BaseModel):
    """One generation span (a model call), with its speculation figures."""

    step: int = Field(description="index of the step it belongs to (0 if outside a step)")
    attempt: int = Field(description="index of the attempt it belongs to (0 if outside an attempt)")
    start_s: float = Field(description="offset from the task's start (s)")
    wall_s: float
    model: str | None = None
    method: str = Field("none", description="agenttrace.spec.method")
    num_speculative_tokens: int = Field(0, description="k, or the maximum k when adaptive")
    input_tokens: int = 0
    output_tokens: int = 0
    prefill_s: float = 0.0
    draft_s: float = 0.0
    verify_s: float = 0.0
    rounds: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    acceptance_rate: float | None = Field(None, description="accepted / drafted tokens")
    mean_acceptance_length: float | None = Field(None, description="1 + accepted / rounds (with the bonus token)")
    tokens_per_s: float | None = Field(None, description="output tokens over the generation's wall time")
    decode_s_per_token: float | None = Field(
        None, description="time after prefill per output token: (wall - prefill) / output tokens")
    fallback: bool = False
    fallback_reason: str | None = None
    # agenttrace.constrain.*: the engine (None: unconstrained), mask + compile time, drafted
    # tokens cut before verification, and why a call that asked for a grammar decoded without it
    constrain_engine: str | None = None
    constrain_s: float = 0.0
    drafts_cut: int = 0
    constrain_fallback: str | None = None
    # continuous batching and the roofline (issue 15; SPANS.md is silent on them)
    batch_size: float | None = Field(None, description="agenttrace.batch.size: requests per pass, mean")
    spec_policy: str | None = None
    roofline: list[RooflinePhase] = Field(default_factory=list)  # the generation's phases as recorded
    roofline_peaks: tuple[float, float, str] | None = Field(
        None, description="(peak FLOP/s, peak bytes/s, device) as measured where the trace was recorded")

    @property
    def constrained(self) -> bool:
        return self.constrain_engine is not None and self.constrain_fallback is None


class PathSectionFigures(BaseModel):
    """A stretch of a task's critical path (as Jaeger's UI computes it): what the task waited for."""

    name: str
    segment: str
    start_s: float = Field(description="offset from the task's start (s)")
    end_s: float


class WaterfallSpan(BaseModel):
    """One span of a task, laid out for a waterfall chart."""

    name: str
    segment: str
    depth: int
    start_s: float = Field(description="offset from the task's start (s)")
    end_s: float
    status: str = "UNSET"
    on_critical_path: bool = False
    attributes: dict[str, str] = Field(default_factory=dict, description="a few attributes, as text, for tooltips")


class StepFigures(BaseModel):
    index: int
    outcome: str
    attempts: int
    start_s: float  # offset from the task's start
    wall_s: float
    ttvtc_s: float | None  # step start -> first valid decision in this step
    segments: SegmentTimes
    retry_s: float  # wall time of this step's attempts whose outcome is not ok
    retry_segments: SegmentTimes
    overlap_s: float = 0.0  # time children ran in parallel (not on the critical path)
    overlap_segments: SegmentTimes | None = Field(
        None, description="the overlapped time by segment (off the critical path); None when there was none")
    time_to_correct_action_s: float | None = Field(
        None, description="step start -> first decision marked agenttrace.decision.correct=true in this step")
    generations: list[GenerationFigures] = Field(default_factory=list)
    inferred: bool = Field(False, description="this step and its attempts were inferred from another instrumentation's "
                                              "spans (SPANS.md, Traces from other instrumentations)")


class Missing(BaseModel):
    """A figure the trace could not give for a task, and why (SPANS.md: "Said, not hidden")."""

    figure: str = Field(description="steps, TTVTC or outcome")
    reason: str


class TaskFigures(BaseModel):
    trace_id: str
    task_id: str
    agent: str
    run_label: str | None = None
    run_id: str | None = None
    outcome: str
    wall_s: float
    ttvtc_s: float | None  # task start -> first valid decision
    time_to_correct_action_s: float | None  # task start -> first decision marked correct
    decisions_valid: int
    decisions_invalid: int
    decision_throughput: float  # valid decisions per second of task wall time
    attempts: int
    valid_attempts: int
    segments: SegmentTimes
    retry_s: float
    retry_segments: SegmentTimes
    speculation: SpecFigures
    steps: list[StepFigures]
    overlap_s: float = Field(0.0, description="time of parallel branches off the critical path (s)")
    overlap_segments: SegmentTimes | None = Field(None, description="that time by segment; None when there was none")
    partial: bool = Field(False, description="the agent span is missing (e.g. a truncated file): built from its "
                                             "step spans, left out of task-level rates and distributions")
    expects_correct_action: bool = Field(
        False, description="some decision span carries agenttrace.decision.correct (the task states its expected call)")
    critical_path: list[PathSectionFigures] = Field(
        default_factory=list, description="the task's critical path, only where children overlap (else empty)")
    waterfall: list[WaterfallSpan] | None = Field(None, description="the task's spans, when asked for (HTML report)")
    inferred: list[str] = Field(default_factory=list, description="the figures of this task that were inferred, not "
                                "recorded (e.g. steps and attempts from another instrumentation's spans)")
    absent: list[str] = Field(default_factory=list, description="segments this task's trace cannot show (no span of its "
                              "instrumentation records them): their 0 means unknown, not none")
    not_inferred: list[Missing] = Field(
        default_factory=list, description="figures this task's trace could not give (no steps, no TTVTC, an unknown "
                                          "outcome), each with why: never a bare 0/0 or unknown")
    stages: StageTimes = Field(default_factory=StageTimes, description="the critical path by stage (StageTimes)")
    sub_agents: int = Field(0, description="sub-agent runs (delegation spans) in the task")
    compactions: int = Field(0, description="compact_context spans in the task")
    reprefill_tokens: int | None = Field(
        None, description="prompt tokens prefilled again after compactions because the cached prefix no longer "
                          "matched (agenttrace.compaction.reprefill_tokens); None: no compaction recorded them")
    reprefill_s: float | None = Field(
        None, description="their prefill time: each next generation's prefill time times its share of re-prefilled tokens")


class Distribution(BaseModel):
    count: int
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None  # only with 100 samples or more
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    sample: int | None = Field(None, description="the percentiles come from a uniform sample of this many of the count "
                                                 "values (a summary of a very large input); None: from all of them")


SegmentDistributions = create_model(
    "SegmentDistributions",
    __module__=__name__,
    __doc__="Per-step time in each segment, as distributions across steps.",
    **{name: (Distribution, Field(default_factory=lambda: Distribution(count=0))) if name in _ADDED_AFTER_V1
       else (Distribution, ...) for name in SEGMENT_FIELDS},
)


class RunFigures(BaseModel):
    tasks: int
    completed: int
    completion_rate: float | None
    attempts: int
    valid_attempts: int
    validity_rate: float | None
    steps: int
    steps_with_retry: int
    retry_share: float | None  # steps that needed more than one attempt, over steps
    decision_throughput: float | None  # valid decisions per second of summed task wall time
    task_wall: Distribution
    ttvtc: Distribution
    step_wall: Distribution
    segments: SegmentTimes
    retry_s: float
    speculation: SpecFigures
    label: str | None = Field(None, description="the agenttrace.run.label these figures cover (None: all tasks)")
    # model calls; those decoded under a grammar, those that asked for one and decoded without
    # it (it did not compile); drafted tokens cut before verification
    generations: int = 0
    constrained_generations: int = 0
    constrain_fallbacks: int = 0
    drafts_cut: int = 0
    partial_tasks: int = Field(0, description="tasks whose agent span is missing (not in task-level figures)")
    retry_segments: SegmentTimes = Field(default_factory=SegmentTimes)
    overlap_s: float = 0.0
    overlap_segments: SegmentTimes = Field(default_factory=SegmentTimes)
    step_ttvtc: Distribution = Field(default_factory=lambda: Distribution(count=0))
    time_to_correct_action: Distribution = Field(default_factory=lambda: Distribution(count=0))
    decision_throughput_per_task: Distribution = Field(default_factory=lambda: Distribution(count=0))
    retry_per_step: Distribution = Field(default_factory=lambda: Distribution(count=0))
    tokens_per_s: Distribution = Field(default_factory=lambda: Distribution(count=0),
                                       description="per generation")
    decode_s_per_token: Distribution = Field(default_factory=lambda: Distribution(count=0),
                                             description="per generation")
    acceptance_rate: Distribution = Field(default_factory=lambda: Distribution(count=0),
                                          description="per speculative generation")
    step_segments: SegmentDistributions | None = None
    speculation_by_method: list[SpecFigures] = Field(default_factory=list, description="one per spec method")
    stages: StageTimes = Field(default_factory=StageTimes, description="the tasks' critical paths by stage, summed")
    loops_detected: int = Field(0, description="tasks stopped with outcome loop_detected")
    not_inferred: dict[str, int] = Field(
        default_factory=dict, description="tasks whose trace could not give a figure, by figure (steps, TTVTC, "
                                          "outcome); each such task says why (TaskFigures.not_inferred)")
    sub_agents: int = 0
    compactions: int = 0
    reprefill_tokens: int = 0
    reprefill_s: float = 0.0


class Report(JsonDocument):
    STREAMED = "tasks"  # written one task at a time (jsondoc.py)
    schema_version: int = 1
    sources: list[str]
    problems: list[str]  # lines or spans that could not be used, with file and line
    run: RunFigures
    tasks: list[TaskFigures]
    by_label: list[RunFigures] = Field(default_factory=list, description="the run figures per agenttrace.run.label")
    whatif: list[WhatIf] = Field(default_factory=list, description="speculation what-if per label and drafter")
    inputs: list[InputFigures] = Field(default_factory=list, description="per input: the conventions recognised, "
                                       "spans mapped per segment, spans left out and why, figures inferred")
    roofline: RooflineFigures | None = Field(None, description="None: no generation carried roofline figures")


class FigureComparison(BaseModel):
    """One figure of two runs: median(b) / median(a) with its bootstrap interval and verdict."""

    figure: str
    unit: str
    better: str = Field(description="'lower' or 'higher': which direction is a gain")
    n_a: int
    n_b: int
    median_a: float | None
    median_b: float | None
    ratio: float | None = Field(description="median(b) / median(a)")
    low: float | None = Field(description="lower end of the bootstrap interval of the ratio")
    high: float | None
    verdict: str = Field(description="gain, regression, noise (the interval contains 1.0) or n/a (no ratio)")


class Comparison(JsonDocument):
    """`agenttrace compare A B`: B against A, figure by figure."""

    schema_version: int = 1
    a: str
    b: str
    a_sources: list[str]
    b_sources: list[str]
    seed: int
    resamples: int
    confidence: float
    figures: list[FigureComparison]
    a_run: RunFigures
    b_run: RunFigures
    problems: list[str] = Field(default_factory=list)
