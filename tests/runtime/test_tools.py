"""Tools as data, and running them on a thread: timeouts, exceptions, context propagation,
rendering. Worker processes are tested in test_tool_isolation."""

from __future__ import annotations

import contextvars
import time
from functools import partial

import pytest
from opentelemetry import trace

from agenttrace import Tool, ToolError
from agenttrace.errors import ToolFailed
from agenttrace.runtime.execution import OversizedResult, render_result, render_tool_result, run_tool

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}}


def test_an_invalid_schema_is_refused_when_the_tool_is_defined():
    with pytest.raises(ValueError, match="invalid JSON schema"):
        Tool("t", "d", {"type": "no-such-type"}, lambda: None)


def test_exceptions_become_tool_failed_with_the_cause_chained():
    def boom(x: int) -> int:
        raise KeyError("missing")

    with pytest.raises(ToolFailed) as err:
        run_tool(Tool("t", "d", SCHEMA, boom), {"x": 1})
    assert err.value.error_type == "tool_error" and "KeyError" in str(err.value)
    assert isinstance(err.value.__cause__, KeyError)

    def expected(x: int) -> int:
        raise ToolError("x must be even")

    with pytest.raises(ToolFailed, match="x must be even"):
        run_tool(Tool("t", "d", SCHEMA, expected), {"x": 1})


def test_a_hanging_tool_times_out_quickly():
    started = time.perf_counter()
    with pytest.raises(ToolFailed) as err:
        run_tool(Tool("slow", "d", SCHEMA, lambda x: time.sleep(3), timeout_s=0.05), {"x": 1})
    assert time.perf_counter() - started < 1
    assert err.value.timed_out and err.value.error_type == "timeout"


def test_the_tool_runs_inside_the_callers_context():
    from opentelemetry.sdk.trace import TracerProvider

    tracer = TracerProvider().get_tracer("t")
    seen = {}

    def record(x: int) -> int:
        seen["span"] = trace.get_current_span().get_span_context().span_id
        return x

    with tracer.start_as_current_span("parent") as parent:
        assert run_tool(Tool("t", "d", SCHEMA, record), {"x": 3}) == 3
    assert seen["span"] == parent.get_span_context().span_id


def test_results_are_rendered_as_capped_json():
    assert render_result({"a": "é"}) == '{"a": "é"}'
    assert render_result("plain") == "plain"
    long = render_result("x" * 5000, limit=100)
    assert long.startswith("x" * 100) and long.endswith("[4900 more characters]")
    assert render_result({"when": __import__("datetime").date(2026, 1, 2), "ids": {7}}) == '{"when": "2026-01-02", "ids": [7]}'


def test_a_rendered_result_carries_its_full_size_for_the_span():
    small = render_tool_result({"a": 1})
    assert (small.text, small.chars, small.truncated) == ('{"a": 1}', 8, False)
    big = render_tool_result("y" * 3000)
    assert big.truncated and big.chars == 3000 and big.text.endswith("[1000 more characters]")
    sent = render_tool_result(OversizedResult(text="z" * 2000, chars=10**8))  # capped in the worker
    assert sent.chars == 10**8 and sent.text.endswith(f"[{10**8 - 2000} more characters]")


def test_a_thread_tool_declared_as_such_keeps_the_callers_context():
    var = contextvars.ContextVar("var", default="unset")
    var.set("caller")
    tool = Tool("t", "d", SCHEMA, partial(var.get), isolation="thread")
    assert tool.runs_in == "thread" and run_tool(tool, {}) == "caller"
