"""The report's figures, as pydantic models: the JSON schema of `agenttrace report --format json`.

Times are seconds. Every figure is defined in SPANS.md ("Figures the reports compute"). The
schema is versioned by `Report.schema_version`; fields are only ever added.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, computed_field

SEGMENT_FIELDS = (
    "prefill",
    "draft",
    "verify",
    "generation",
    "parse",
    "validation",
    "tool",
    "network",
    "memory",
    "compaction",
    "delegation",
    "other",
)


class SegmentTimes(BaseModel):
    """Self time charged to each segment, in seconds. `generation` is the rest of generation:
    generation time that is not prefill, draft or verify (decode steps, sampling, tokenizing)."""

    prefill: float = 0.0
    draft: float = 0.0
    verify: float = 0.0
    generation: float = 0.0
    parse: float = 0.0
    validation: float = 0.0
    tool: float = 0.0
    network: float = 0.0
    memory: float = 0.0
    compaction: float = 0.0
    delegation: float = 0.0
    other: float = 0.0  # agent, step and attempt self time, and spans of unknown segments

    def total(self) -> float:
        return sum(getattr(self, f) for f in SEGMENT_FIELDS)

    def add(self, segment: str, seconds: float) -> None:
        field = segment if segment in SEGMENT_FIELDS else "other"
        setattr(self, field, getattr(self, field) + seconds)

    def merge(self, other: SegmentTimes) -> None:
        for f in SEGMENT_FIELDS:
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
                  "fallbacks", "draft_s", "verify_s"):
            setattr(self, f, getattr(self, f) + getattr(other, f))


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


class Distribution(BaseModel):
    count: int
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None  # only with 100 samples or more


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


class Report(BaseModel):
    schema_version: int = 1
    sources: list[str]
    problems: list[str]  # lines or spans that could not be used, with file and line
    run: RunFigures
    tasks: list[TaskFigures]
