"""What a task run leaves behind: its steps, their attempts, and how it ended (`Agent.run`
returns a `TaskResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agenttrace import semconv as sc
from agenttrace.core.chat import Generation
from agenttrace.errors import ModelMistake
from agenttrace.runtime.parse import FinalAnswer, ToolCall

__all__ = ["AttemptRecord", "StepRecord", "TaskResult"]


@dataclass
class AttemptRecord:
    index: int
    outcome: sc.AttemptOutcome
    text: str = ""
    error: str | None = None
    mistake: ModelMistake | None = None  # what the next attempt is told about
    generation: Generation | None = None


@dataclass
class StepRecord:
    index: int
    outcome: sc.StepOutcome = sc.StepOutcome.INVALID
    attempts: list[AttemptRecord] = field(default_factory=list)
    decision: ToolCall | FinalAnswer | None = None
    result: str | None = None  # what the tool returned, as shown to the model
    loop: bool = False  # its decision repeated an earlier call loop_repeats times (not run again)


@dataclass
class TaskResult:
    task_id: str
    outcome: sc.TaskOutcome
    steps: list[StepRecord] = field(default_factory=list)
    answer: str | None = None
    decisions_valid: int = 0
    decisions_invalid: int = 0
    # Whether the first valid decision matched the task's expectation (None: nothing to check).
    first_decision_correct: bool | None = None
    compactions: int = 0  # times the history was compacted

    @property
    def generations(self) -> list[Generation]:
        return [a.generation for s in self.steps for a in s.attempts if a.generation is not None]
