"""Tasks: a request for the agent and, when it can be checked, the call or answer expected.

Task sets are JSON lines (`agents/tasks/*.jsonl`), validated with pydantic at load time so a bad
line is reported with its file and line number rather than failing mid-run.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agenttrace.errors import InputFileError
from agenttrace.runtime.parse import FinalAnswer, ToolCall

__all__ = ["ExpectedCall", "Task", "decision_matches", "load_tasks"]


class ExpectedCall(BaseModel):
    """The call a correct agent makes first. Arguments listed here must match; others may vary."""

    model_config = ConfigDict(extra="forbid")
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Task(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    prompt: str
    expected_call: ExpectedCall | None = None
    # A substring the final answer must contain (case-insensitive) to count as correct.
    expected_answer: str | None = None
    suite: str = "tool_calls"
    # Which of its suite's agents the task is for, when the suite has several (a coordinator, a
    # reader, ...); None: the suite's one agent.
    agent: str | None = None


def _normal(value: Any) -> Any:
    # Models vary case and spacing ("New York" / "new york", "17*23" / "17 * 23"): compare
    # strings without either; numbers by value, whatever their JSON type.
    if isinstance(value, str):
        return re.sub(r"\s+", "", value).casefold()
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return round(float(value), 6)
    if isinstance(value, list):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    return value


def decision_matches(task: Task, decision: ToolCall | FinalAnswer) -> bool | None:
    """Whether `decision` is what the task expects; None when the task states nothing to check."""
    if isinstance(decision, ToolCall):
        exp = task.expected_call
        if exp is None:
            return None
        return decision.tool == exp.tool and all(
            k in decision.arguments and _normal(decision.arguments[k]) == _normal(v) for k, v in exp.arguments.items()
        )
    if task.expected_answer is None:
        return None
    return task.expected_answer.casefold() in decision.text.casefold()


def load_tasks(path: str | os.PathLike[str]) -> list[Task]:
    """Every task in a JSONL file; InputFileError names the file and line of a bad one."""
    path = Path(path)
    tasks: list[Task] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or line.lstrip().startswith("//"):
                continue
            try:
                task = Task.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValidationError) as exc:
                raise InputFileError(str(path), n, f"not a valid task: {exc}") from exc
            if task.id in seen:
                raise InputFileError(str(path), n, f"duplicate task id {task.id!r}")
            seen.add(task.id)
            tasks.append(task)
    return tasks
