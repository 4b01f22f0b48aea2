"""Scopes (instrument/scope.py): one scope object entered by many asyncio tasks or threads at once
records every span, each in its own task; exiting a scope where it was not entered is an error."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading

import pytest

from agenttrace.errors import ScopeError
from agenttrace.instrument import agent_span, step_span, tool_span
from agenttrace.testing import capture_telemetry


def test_one_step_span_entered_by_32_tasks_records_every_attempt(caplog: pytest.LogCaptureFixture) -> None:
    tel, memory = capture_telemetry()
    step = step_span(telemetry=tel)

    async def work(i: int) -> None:
        async with step:
            await asyncio.sleep(0.001 * (i % 3))  # tasks exit in another order than they entered
            with tool_span(f"t{i}", telemetry=tel):
                await asyncio.sleep(0)

    async def main() -> None:
        with agent_span("bot", telemetry=tel):
            await asyncio.gather(*(work(i) for i in range(32)))

    with caplog.at_level(logging.ERROR):
        asyncio.run(main())
    spans = memory.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    steps = [s for s in spans if s.name.startswith("agent_step")]
    attempts = [s for s in spans if s.name.startswith("attempt")]
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    assert len(steps) == len(attempts) == len(tools) == 32
    # each tool sits in its own task's attempt, in its own task's step
    assert len({by_id[t.parent.span_id].context.span_id for t in tools}) == 32
    assert {by_id[t.parent.span_id].parent.span_id for t in tools} == {s.context.span_id for s in steps}
    assert "Failed to detach context" not in caplog.text


def test_one_scope_entered_by_threads_at_once() -> None:
    tel, memory = capture_telemetry()
    step = step_span(telemetry=tel)
    barrier = threading.Barrier(8)

    def work() -> None:
        with step:
            barrier.wait(5)  # all eight inside at once

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert sum(s.name.startswith("agent_step") for s in memory.get_finished_spans()) == 8


def test_exiting_a_scope_in_a_context_that_did_not_enter_it_raises() -> None:
    tel, _ = capture_telemetry()
    scope = tool_span("t", telemetry=tel)
    contextvars.copy_context().run(scope.__enter__)  # entered in another context
    with pytest.raises(ScopeError, match="did not enter it"):
        scope.__exit__(None, None, None)
