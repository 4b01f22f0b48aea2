"""Tools that cannot outlive their timeout: a hanging, busy or GIL-holding tool in a worker
process is killed and replaced, leaving no thread or process behind; results are bounded."""

from __future__ import annotations

import multiprocessing
import os
import re
import threading
import time
from functools import partial

import pytest

from agenttrace import Tool, ToolError
from agenttrace.errors import ToolFailed
from agenttrace.runtime.execution import OversizedResult, render_tool_result, run_tool, shutdown_workers

SCHEMA = {"type": "object"}
TIMEOUT_S = 0.1
# Importing the tool in a fresh worker, the kill, the reap, the pipe round trip: generous, as
# the test machine is shared.
SLACK_S = 1.0


# Built from the standard library so a fresh worker imports nothing (a function defined here
# would make each replacement worker import this module, and pytest with it, on its first call).
HANGING = [
    Tool("sleeps", "d", SCHEMA, partial(time.sleep, 60), timeout_s=TIMEOUT_S),
    Tool("spins", "d", SCHEMA, partial(sum, range(10**15)), timeout_s=TIMEOUT_S),  # a busy loop
    # Catastrophic backtracking in one C call: the GIL is held for minutes.
    Tool("holds_the_gil", "d", SCHEMA, partial(re.match, r"(a+)+$", "a" * 30 + "b"), timeout_s=TIMEOUT_S),
]


# Module-level, so they travel to a worker process by reference.
def answers(x: int) -> int:
    return x * 2


def refuses() -> None:
    raise ToolError("x must be even")


def raises() -> None:
    raise KeyError("missing")


def exits() -> None:
    os._exit(3)


def huge() -> str:
    return "x" * 50_000_000



@pytest.fixture
def warm_pool():
    """The processes running before the pool had a worker; then one warm worker."""
    before = set(multiprocessing.active_children())
    run_tool(Tool("answers", "d", SCHEMA, answers), {"x": 1})
    yield before
    shutdown_workers()


def test_module_level_functions_run_in_a_process_and_closures_on_a_thread():
    assert Tool("t", "d", SCHEMA, answers).runs_in == "process"
    assert Tool("t", "d", SCHEMA, lambda: None).runs_in == "thread"
    assert Tool("t", "d", SCHEMA, answers, isolation="thread").runs_in == "thread"
    with pytest.raises(ValueError, match="cannot run in a worker process"):
        Tool("t", "d", SCHEMA, lambda: None, isolation="process")


def test_results_and_errors_travel_back(warm_pool):
    assert run_tool(Tool("t", "d", SCHEMA, answers), {"x": 21}) == 42
    with pytest.raises(ToolFailed, match="x must be even") as err:
        run_tool(Tool("t", "d", SCHEMA, refuses), {})
    assert err.value.error_type == "tool_error" and isinstance(err.value.__cause__, ToolError)
    with pytest.raises(ToolFailed, match="KeyError") as err:
        run_tool(Tool("t", "d", SCHEMA, raises), {})
    assert isinstance(err.value.__cause__, KeyError)
    assert any("raises" in note for note in err.value.__cause__.__notes__)  # the worker's traceback


def test_a_worker_that_dies_is_a_tool_error_and_is_replaced(warm_pool):
    with pytest.raises(ToolFailed, match="exited") as err:
        run_tool(Tool("t", "d", SCHEMA, exits), {})
    assert err.value.error_type == "tool_error" and not err.value.timed_out
    assert run_tool(Tool("t", "d", SCHEMA, answers), {"x": 2}) == 4


def test_a_huge_result_comes_back_capped_with_its_full_size(warm_pool):
    value = run_tool(Tool("t", "d", SCHEMA, huge), {})
    assert isinstance(value, OversizedResult) and value.chars == 50_000_000
    rendered = render_tool_result(value)
    assert rendered.truncated and rendered.chars == 50_000_000
    assert rendered.text.endswith(f"[{50_000_000 - 2000} more characters]")


def test_hung_tools_leave_no_thread_or_process_and_return_on_time(warm_pool):
    threads, children = set(threading.enumerate()), set(multiprocessing.active_children())
    slowest = 0.0
    for i in range(100):
        started = time.perf_counter()
        with pytest.raises(ToolFailed) as err:
            run_tool(HANGING[i % 3], {})
        slowest = max(slowest, time.perf_counter() - started)
        assert err.value.timed_out and err.value.error_type == "timeout"
    assert slowest < TIMEOUT_S + SLACK_S, f"a call took {slowest:.2f} s"
    assert set(threading.enumerate()) <= threads
    # Each killed worker was reaped and replaced once: one warm worker, as before.
    assert len(set(multiprocessing.active_children()) - warm_pool) == len(children - warm_pool) == 1
    assert run_tool(Tool("t", "d", SCHEMA, answers), {"x": 3}) == 6  # and the pool still works
    shutdown_workers()
    assert set(multiprocessing.active_children()) <= warm_pool


def test_warm_up_starts_the_worker_before_the_first_call():
    from agenttrace.examples.tools import calculator

    from agenttrace.runtime.execution import shutdown_workers, warm_up

    shutdown_workers()
    warm_up([calculator])
    start = time.perf_counter()
    assert run_tool(calculator, {"expression": "2+3"}, 10) is not None
    assert time.perf_counter() - start < 1.0  # the fork server and the import happened in warm_up


def test_a_tool_on_a_thread_learns_that_its_call_timed_out():
    # Before: the abandoned thread had no way to know (current_cancel() was the task's, or None).
    from agenttrace.core.chat import current_cancel

    stopped = threading.Event()

    def reads_until_told() -> None:
        while not current_cancel().cancelled:
            time.sleep(0.01)
        stopped.set()

    with pytest.raises(ToolFailed) as err:
        run_tool(Tool("walks", "d", SCHEMA, reads_until_told, isolation="thread"), {}, TIMEOUT_S)
    assert err.value.timed_out
    assert stopped.wait(SLACK_S)  # it looked, saw the call was given up on, and returned


def test_a_tool_on_a_thread_sees_its_task_cancelled_and_not_a_finished_call():
    from agenttrace.core.chat import CancelToken, current_cancel, task_cancel

    def looks() -> bool:
        return current_cancel().cancelled

    tool = Tool("looks", "d", SCHEMA, looks, isolation="thread")
    task = CancelToken()
    with task_cancel(task):
        assert run_tool(tool, {}) is False
        task.cancel()
        assert run_tool(tool, {}) is True  # the task's cancel reaches the tool (a delegate stops its sub-agent)
