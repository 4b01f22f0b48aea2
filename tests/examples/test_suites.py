"""The benchmark suites as data: enough tasks, each well-formed and checkable, for the tools its
suite gives the agent."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from agenttrace.examples.agents.suites import SUITES, load_suite

from agenttrace import FakeClock, Telemetry
from agenttrace.runtime.execution import run_tool
from agenttrace.testing import ScriptedModel

MIN_TASKS = 20


def agent_tools(suite, workdir) -> dict:
    """The tools of the agents the suite builds (a suite with agents of its own has their tools;
    with several, each task's own agent is checked in the test below)."""
    # (a scripted model cannot constrain decoding: the tools are the same either way)
    config = replace(suite.config, constrained=False)
    built = suite.build_agent(ScriptedModel([], FakeClock()), Telemetry(), config=config, workdir=workdir)
    agents = getattr(built, "agents", {None: built})
    return {name: agent.tools for name, agent in agents.items()}


def tools_for(task, tools_by_agent) -> dict:
    return tools_by_agent[task.agent] if task.agent is not None else next(iter(tools_by_agent.values()))


@pytest.mark.parametrize("name", list(SUITES))
def test_every_suite_has_enough_checkable_tasks_for_its_tools(name, tmp_path):
    suite = load_suite(name)
    by_agent = agent_tools(suite, tmp_path)
    assert len(suite.tasks) >= MIN_TASKS
    for task in suite.tasks:
        assert task.suite == name, task.id
        assert task.expected_call is not None or task.expected_answer is not None, task.id
        if task.expected_call is not None:
            tool = tools_for(task, by_agent)[task.expected_call.tool]
            # listed arguments are a valid subset of the tool's arguments
            props = tool.parameters["properties"]
            assert set(task.expected_call.arguments) <= set(props), task.id
            for key, value in task.expected_call.arguments.items():
                assert not list(tool.validator.iter_errors({**_required(tool), key: value})), (task.id, key)


def _required(tool):
    filler = {"string": "x", "number": 1, "integer": 1}
    return {k: filler[tool.parameters["properties"][k]["type"]] if "enum" not in tool.parameters["properties"][k]
            else tool.parameters["properties"][k]["enum"][0] for k in tool.parameters.get("required", ())}


def test_task_ids_are_unique_across_suites():
    ids = [t.id for name in SUITES for t in load_suite(name).tasks]
    assert len(ids) == len(set(ids))


def test_multilingual_covers_french_german_spanish_and_chinese():
    ids = [t.id for t in load_suite("multilingual").tasks]
    for lang in ("fr", "de", "es", "zh"):
        assert sum(i.startswith(f"ml-{lang}-") for i in ids) >= 5, lang
    zh = [t.prompt for t in load_suite("multilingual").tasks if t.id.startswith("ml-zh-")]
    assert all(re.search(r"[\u4e00-\u9fff]", p) for p in zh)


def test_expected_first_calls_really_produce_what_the_task_needs(tmp_path):
    """Running each expected first call must work (a typo in a city or unit would make a task
    impossible); for one-call tasks its result must contain the expected answer."""
    for name in SUITES:
        suite = load_suite(name)
        by_agent = agent_tools(suite, tmp_path / name)
        for task in suite.tasks:
            call = task.expected_call
            tools = tools_for(task, by_agent)
            if call is None or not call.arguments or not set(tools[call.tool].parameters.get("required", ())) <= set(call.arguments):
                continue
            result = str(run_tool(tools[call.tool], call.arguments))
            if name in ("tool_calls", "multilingual") and task.expected_answer:
                assert task.expected_answer.casefold().split(".")[0] in result.casefold(), (task.id, result)


def test_code_suite_answers_come_from_the_shop_data():
    from agenttrace.examples.tools.sql import run_query

    suite = load_suite("code")
    # a spot check that the data behind the SQL tasks is what the expected answers say
    assert str(run_query("SELECT COUNT(*) FROM orders WHERE month = '2025-03'")["rows"][0][0]) == next(
        t.expected_answer for t in suite.tasks if t.id == "code-sql-march-orders")
    assert run_query("SELECT name FROM products ORDER BY price DESC LIMIT 1")["rows"][0][0] == "monitor"


def test_long_horizon_needs_memory_documents_and_delegation(tmp_path):
    """Each kind of task the issue asks for, with enough of each; a document task's two documents
    fill the default compaction budget of the bundled model (90% of 8,192 positions, less the reply)."""
    from agenttrace.examples.tools.documents import DOCUMENTS

    from agenttrace.runtime.compaction import default_budget

    tasks = load_suite("long_horizon").tasks
    kinds = {k: [t for t in tasks if t.expected_call.tool in tools] for k, tools in
             {"memory": ("recall", "remember"), "documents": ("read_documents",),
              "delegation": ("delegate", "delegate_parallel")}.items()}
    assert len(tasks) >= 20 and all(len(v) >= 5 for v in kinds.values())
    assert sum(t.expected_call.tool == "delegate_parallel" for t in tasks) >= 3
    assert sum(t.expected_call.tool == "remember" for t in tasks) >= 3  # memory written during the task
    budget = default_budget(8192, 128)
    for task in kinds["documents"]:
        names = re.findall(r"\b([a-z]+-[a-z0-9]+)\b", task.prompt)
        docs = [DOCUMENTS / f"{n}.txt" for n in names if (DOCUMENTS / f"{n}.txt").exists()]
        assert docs, task.id
        fact = task.expected_answer.casefold()
        assert any(fact in d.read_text().casefold() for d in docs), task.id
        if len(docs) >= 2:  # about 4.5 characters a token: two documents pass the budget
            assert sum(len(d.read_text()) for d in docs) / 4.5 > budget * 0.9, task.id
