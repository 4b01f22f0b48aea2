"""The bench's workloads: the reference examples' suites, tasks, tools and worked examples, through
the one module that may import them (tests/project/test_layout.py checks that no other module does)."""

from __future__ import annotations

import pytest

from agenttrace.bench import workloads
from agenttrace.bench.harness.options import OPT_IN_SUITES, SUITES


def test_the_harness_suite_names_are_the_reference_suites():
    assert SUITES + OPT_IN_SUITES == tuple(workloads.SUITES)  # long_horizon runs when named


def test_suites_load_with_their_tasks_once_each_in_order():
    suites = workloads.load_suites(["code", "tool_calls", "code"])
    assert list(suites) == ["code", "tool_calls"]
    assert all(s.tasks for s in suites.values())
    assert "run_sql" in {t.name for t in suites["code"].tools()}
    with pytest.raises(ValueError, match="tool_calls"):
        workloads.load_suites(["nope"])


def test_the_reference_tasks_tools_and_examples_fit_together():
    tools = {t.name for t in workloads.default_tools()}
    tasks = workloads.tool_call_tasks()
    assert tasks and all(t.expected_call.tool in tools for t in tasks if t.expected_call is not None)
    assert all(call.tool in tools for ex in workloads.EXAMPLES for call in ex.calls)
