"""`agenttrace bench overhead`: every arm runs the same tasks and writes the spans it should; the
figures are computed from them (the speed itself is the bench's to print, not a test's)."""

from __future__ import annotations

from agenttrace.bench.overhead import ARMS, ECHO, InstantModel, markdown, measure, rows
from agenttrace.clock import default_clock
from agenttrace.runtime.agent import Agent, AgentConfig
from agenttrace.runtime.tasks import Task


def test_every_arm_runs_the_same_tasks_and_off_writes_nothing():
    clock = default_clock()
    tasks = [Task(id=f"t{i}", prompt="echo") for i in range(3)]
    runs = measure(lambda tel: Agent(InstantModel(clock), [ECHO], telemetry=tel, config=AgentConfig(max_steps=2)),
                   tasks, ARMS, 2, clock)
    assert set(runs) == set(ARMS)
    assert all(len(r.task_s) == 6 and r.steps == 12 for r in runs.values())  # a tool call, then the answer
    assert runs["off"].spans == 0
    # per step: agent (every other step), step, attempt, chat, prefill, parse, validation or none, tool or none
    assert runs["file"].spans == runs["file+otlp"].spans == runs["content"].spans > 0
    assert runs["fine"].spans == runs["file"].spans + 12 * 4 * 2  # a draft and a verify span per round
    table = rows(runs, step_s=2.0)
    assert [r.arm for r in table] == [a for a in ARMS if a != "off"]
    assert all(r.ratio.n_a == 6 and r.us_per_span is not None and r.share_of_step is not None for r in table)
    assert "| fine |" in markdown(table, None, 2.0, "header")
