"""What the harness writes to its output folder, as pydantic models (the folder is an edge: a
resumed run and the renderer read it back, validated).

    OUT/manifest.json        the options, the machine, the chunks finished so far
    OUT/records.jsonl        one TaskRecord per task run (repeat, suite, arm, task)
    OUT/traces/*.jsonl       the OTLP trace of each chunk and arm, labelled with the arm
    OUT/scenarios/NAME.result.json  one ScenarioResult per scenario (NAME.json: a scenario's own data)
    OUT/report.md            the Markdown report (rewritten after every run or render)
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from agenttrace.errors import InputFileError


class TaskRecord(BaseModel):
    """One task run under one arm: what the agent did and what it cost. Latency figures that
    SPANS.md defines (TTVTC, time to correct action, segments) come from the trace instead."""

    repeat: int
    suite: str
    arm: str
    task_id: str
    position: int = Field(description="where this arm ran among the arms for this task (0: first)")
    outcome: str
    correct: bool | None = Field(description="the task's checkable expectation held (None: nothing to check)")
    first_call_correct: bool | None
    answer_correct: bool | None
    steps: int
    tool_calls: int
    attempts: int
    output_tokens: int
    ttft_s: list[float] = Field(description="per generation: call start to first token")
    tpot_s: list[float] = Field(description="per generation with 2+ tokens: (end - first token) / (tokens - 1)")
    fallbacks: int = 0
    fallback_reasons: list[str] = Field(default_factory=list)
    output_digest: str = Field(description="sha256 of every attempt's text, to compare arms (greedy: equal)")
    peak_rss_bytes: int | None = None
    peak_gpu_bytes: int | None = None
    energy_j: float | None = None
    wall_s: float


class Manifest(BaseModel):
    version: int = 1
    options: dict[str, Any]
    machine: str
    command: str  # the first session's
    started: str
    sessions: list[str] = Field(default_factory=list, description="`date: command` of every session")
    chunks_done: list[str] = Field(default_factory=list, description="`r{repeat}-{suite}` of finished chunks")
    run_s: float = Field(0.0, description="wall time spent measuring, summed over sessions")
    sensors: dict[str, str] = Field(default_factory=dict)


class Check(BaseModel):
    name: str
    passed: bool
    detail: str


class ConcurrencyRecord(BaseModel):
    """One level and arm of the concurrency scenario (OUT/scenarios/concurrency.json is a list)."""

    n: int
    arm: str
    tokens_per_s: float
    tasks_per_s: float
    ttvtc_p50_s: float | None
    ttvtc_p95_s: float | None
    task_p95_s: float | None
    mean_batch_size: float


class ScenarioResult(BaseModel):
    """A scenario's verdict, the checks behind it and its own table (if any)."""

    name: str
    title: str
    passed: bool
    summary: str
    checks: list[Check] = Field(default_factory=list)
    columns: list[str] = Field(default_factory=list)
    rows: list[list[str]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    wall_s: float = 0.0
    options: dict[str, Any] = Field(default_factory=dict, description="the harness options it ran under")

    @classmethod
    def from_checks(cls, name: str, title: str, checks: list[Check], summary: str, **kw: Any) -> ScenarioResult:
        return cls(name=name, title=title, passed=all(c.passed for c in checks), summary=summary, checks=checks, **kw)


def write_json_atomic(path: Path, data: str) -> None:
    """Write through a temporary sibling and rename, so an interrupted write leaves the old file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_records(path: Path) -> list[TaskRecord]:
    """Every record of a records.jsonl; InputFileError names the file and line of a bad one."""
    if not path.exists():
        return []
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(TaskRecord.model_validate_json(line))
            except ValueError as exc:
                raise InputFileError(str(path), n, f"not a task record: {exc}") from exc
    return out


def append_records(path: Path, records: list[TaskRecord]) -> None:
    with path.open("a", encoding="utf-8") as f:
        for r in records:
            f.write(r.model_dump_json() + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_model(path: Path, model: type[BaseModel]) -> Any:
    try:
        return model.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as exc:
        raise InputFileError(str(path), None, f"not a valid {model.__name__}: {exc}") from exc
