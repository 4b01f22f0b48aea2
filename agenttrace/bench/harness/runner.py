"""The suite runs: every arm on the same tasks, interleaved, into a resumable output folder.

A run is a list of chunks, one per (repeat, suite). A chunk runs its tasks one after another and,
for each task, every arm in an order shuffled for that task (seeded), so drift of the machine's
speed within a chunk hits every arm alike. Each arm keeps one `LocalChatModel` for the whole run
(its prefix cache and k controller warm up as a served model's would); its spans go to one trace
file per chunk, labelled with the arm. A chunk is committed by appending its records and then
naming it in the manifest: a run stopped mid-chunk resumes at that chunk, its partial trace files
and records dropped.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agenttrace import semconv as sc
from agenttrace.bench.harness.arms import arm_config
from agenttrace.bench.harness.options import HarnessOptions
from agenttrace.bench.harness.records import (
    Manifest,
    TaskRecord,
    append_records,
    read_model,
    read_records,
    write_json_atomic,
)
from agenttrace.bench.harness.sensors import ResourceMeter, ResourceUse
from agenttrace.clock import Clock, default_clock, elapsed_s
from agenttrace.runtime.agent import TaskResult
from agenttrace.runtime.parse import FinalAnswer, ToolCall
from agenttrace.runtime.tasks import Task, decision_matches
from agenttrace.telemetry import Telemetry

if TYPE_CHECKING:
    from agenttrace.bench.workloads import Suite
    from agenttrace.generation.models import LoadedModel

SERVICE_NAME = "agenttrace-bench"
Tick = Callable[[str], None]  # called before each unit of work with what it is


@dataclass(frozen=True)
class Chunk:
    repeat: int
    suite: str
    tasks: tuple[Task, ...]

    @property
    def key(self) -> str:
        return f"r{self.repeat}-{self.suite}"


def plan(opts: HarnessOptions, suites: dict[str, Suite]) -> list[Chunk]:
    """Chunks in run order: repeat by repeat, suite by suite. Each suite's tasks are shuffled once
    (seeded) and repeat r takes the next `tasks_per_suite` of them, wrapping around, so repeats
    cover the suite rather than the same few tasks."""
    chunks = []
    order = {}
    for name, suite in suites.items():
        tasks = list(suite.tasks)
        random.Random(f"{opts.seed}-{name}").shuffle(tasks)
        order[name] = tasks
    for r in range(opts.repeats):
        for name in suites:
            tasks = order[name]
            n = min(opts.tasks_per_suite, len(tasks))
            picked = tuple(tasks[(r * n + i) % len(tasks)] for i in range(n))
            chunks.append(Chunk(r, name, picked))
    return chunks


def arm_order(opts: HarnessOptions, chunk: Chunk, task: Task) -> list[str]:
    arms = list(opts.arms)
    random.Random(f"{opts.seed}-{chunk.key}-{task.id}").shuffle(arms)
    return arms


def trace_path(out: Path, chunk_key: str, arm: str) -> Path:
    return out / "traces" / f"{chunk_key}-{arm}.jsonl"


def output_digest(result: TaskResult) -> str:
    """sha256 of every attempt's text: equal across arms and loads when greedy decoding is lossless."""
    return hashlib.sha256("\x00".join(a.text for s in result.steps for a in s.attempts).encode()).hexdigest()


def task_record(task: Task, result: TaskResult, *, repeat: int, suite: str, arm: str, position: int,
                use: ResourceUse, wall_s: float) -> TaskRecord:
    """What the harness keeps of one task run besides its trace."""
    answer_ok = None
    if task.expected_answer is not None:
        answer_ok = result.answer is not None and bool(decision_matches(task, FinalAnswer(result.answer)))
    correct = answer_ok if answer_ok is not None else result.first_decision_correct
    gens = result.generations
    ttft = [(g.first_token_ns - g.start_ns) / 1e9 for g in gens if g.first_token_ns is not None]
    tpot = [(g.end_ns - g.first_token_ns) / 1e9 / (g.output_tokens - 1)
            for g in gens if g.first_token_ns is not None and g.output_tokens >= 2]
    reasons = sorted({g.fallback_reason.split(":")[0] for g in gens if g.fallback_reason})
    return TaskRecord(
        repeat=repeat, suite=suite, arm=arm, task_id=task.id, position=position, outcome=result.outcome.value,
        correct=correct, first_call_correct=result.first_decision_correct, answer_correct=answer_ok,
        steps=len(result.steps), tool_calls=sum(isinstance(s.decision, ToolCall) for s in result.steps),
        attempts=sum(len(s.attempts) for s in result.steps), output_tokens=sum(g.output_tokens for g in gens),
        ttft_s=ttft, tpot_s=tpot, fallbacks=sum(g.fallback_reason is not None for g in gens),
        fallback_reasons=reasons,
        output_digest=output_digest(result),
        peak_rss_bytes=use.peak_rss_bytes, peak_gpu_bytes=use.peak_gpu_bytes, energy_j=use.energy_j, wall_s=wall_s,
    )


# -- the output folder ---------------------------------------------------------------------
_OURS = ("manifest.json", "records.jsonl", "report.md", "summary.json", "traces", "scenarios", "memory")


def open_output(opts: HarnessOptions, *, fresh: bool, machine: str, command: str) -> Manifest:
    """The manifest of `opts.out`: a new one, or the one there when it measured the same thing.

    SystemExit (with what to do) when the folder holds a run with other settings. `fresh` removes
    only what the harness writes there, never other files."""
    out = opts.out
    path = out / "manifest.json"
    if fresh:
        for name in _OURS:
            target = out / name
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    if path.exists():
        manifest = read_model(path, Manifest)
        diffs = opts.differences(HarnessOptions.from_json(manifest.options))
        if diffs:
            raise SystemExit(
                f"agenttrace bench: {out} holds a run with other settings ({'; '.join(diffs)}); "
                "pass --fresh to start it over, or --out another folder"
            )
        manifest.options = opts.to_json()  # scenario settings may change between sessions
        manifest.sessions.append(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}: {command}")
        return manifest
    out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return Manifest(options=opts.to_json(), machine=machine, command=command, started=started,
                    sessions=[f"{started}: {command}"])


def drop_unfinished(out: Path, manifest: Manifest) -> None:
    """Forget what a stopped session left of chunks it did not finish: their trace files and any
    records appended before the manifest named the chunk."""
    done = set(manifest.chunks_done)
    for f in (out / "traces").glob("*.jsonl") if (out / "traces").is_dir() else ():
        if f.name.rsplit("-", 1)[0] not in done:
            f.unlink()
    records = read_records(out / "records.jsonl")
    kept = [r for r in records if f"r{r.repeat}-{r.suite}" in done]
    if len(kept) != len(records):
        write_json_atomic(out / "records.jsonl", "".join(r.model_dump_json() + "\n" for r in kept))


def save_manifest(out: Path, manifest: Manifest) -> None:
    write_json_atomic(out / "manifest.json", manifest.model_dump_json(indent=2))


# -- running -------------------------------------------------------------------------------
class SuiteRunner:
    """Runs chunks for one session: the arms' models, the meter, the output folder."""

    def __init__(self, opts: HarnessOptions, loaded: LoadedModel, suites: dict[str, Suite], manifest: Manifest,
                 meter: ResourceMeter, models: dict[str, object], clock: Clock | None = None) -> None:
        self.opts = opts
        self.loaded = loaded
        self.suites = suites
        self.manifest = manifest
        self.meter = meter
        self.models = models  # arm -> LocalChatModel, kept for the whole session
        # what each task's wall time and its spans read (the models read theirs, on the same time base)
        self.clock = clock if clock is not None else default_clock()

    def _config(self, suite: Suite, arm: str):
        cfg = replace(arm_config(arm, suite.config), deadline_s=self.opts.task_deadline_s,
                      # a suite whose calls are longer (delegating two sub-tasks) keeps its larger budget
                      params=replace(suite.config.params, max_tokens=max(self.opts.max_tokens,
                                                                         suite.config.params.max_tokens)))
        return replace(cfg, max_steps=self.opts.max_steps) if self.opts.max_steps else cfg

    def warm_up(self, task: Task, suite: Suite) -> None:
        """One untimed run per arm, so no arm's first call (allocations, lazy set-up) is measured."""
        for arm, model in self.models.items():
            suite.build_agent(model, Telemetry(service_name=SERVICE_NAME, clock=self.clock),
                              config=self._config(suite, arm), workdir=self._workdir(arm)).run(task)

    def _workdir(self, arm: str) -> Path:
        """Where an arm's agents keep their files (a memory store), in the output folder."""
        return self.opts.out / "memory" / arm

    def run_chunk(self, chunk: Chunk, tick: Tick) -> list[TaskRecord]:
        out, suite = self.opts.out, self.suites[chunk.suite]
        telemetry = {
            arm: Telemetry(
                service_name=SERVICE_NAME, run_label=arm, trace_file=trace_path(out, chunk.key, arm),
                resource_attributes={sc.BENCH_SUITE: chunk.suite, sc.BENCH_REPEAT: chunk.repeat}, clock=self.clock,
            )
            for arm in self.opts.arms
        }
        agents = {arm: suite.build_agent(self.models[arm], telemetry[arm], config=self._config(suite, arm),
                                         workdir=self._workdir(arm))
                  for arm in self.opts.arms}
        records = []
        try:
            for task in chunk.tasks:
                for position, arm in enumerate(arm_order(self.opts, chunk, task)):
                    tick(f"r{chunk.repeat + 1}/{self.opts.repeats} {chunk.suite} {task.id} [{arm}]")
                    self.meter.start()
                    t0 = self.clock.now_ns()
                    result = agents[arm].run(task)
                    wall = elapsed_s(self.clock, t0)
                    use = self.meter.stop()
                    records.append(task_record(task, result, repeat=chunk.repeat, suite=chunk.suite, arm=arm,
                                               position=position, use=use, wall_s=wall))
        finally:
            for tel in telemetry.values():
                tel.shutdown()
        return records

    def commit(self, chunk: Chunk, records: list[TaskRecord], seconds: float) -> None:
        append_records(self.opts.out / "records.jsonl", records)
        self.manifest.chunks_done.append(chunk.key)
        self.manifest.run_s += seconds
        save_manifest(self.opts.out, self.manifest)
