from __future__ import annotations

import pytest

from agenttrace.examples.agents.function_calling import tool_call_tasks
from agenttrace import InputFileError, Task, ToolCall, load_tasks
from agenttrace.runtime.parse import FinalAnswer
from agenttrace.runtime.tasks import decision_matches
from agenttrace.examples.tools import default_tools


def test_the_reference_task_set_is_well_formed():
    tasks = tool_call_tasks()
    assert len(tasks) >= 30
    tools = {t.name: t for t in default_tools()}
    for t in tasks:
        assert t.expected_call is not None and t.expected_call.tool in tools
        # the expected arguments are themselves valid for the tool
        assert not list(tools[t.expected_call.tool].validator.iter_errors(t.expected_call.arguments)), t.id


def test_expected_calls_match_modulo_case_spacing_and_number_type():
    task = Task(id="x", prompt="p", expected_call={"tool": "calculator", "arguments": {"expression": "17*23"}},
                expected_answer="391")
    assert decision_matches(task, ToolCall("calculator", {"expression": "17 * 23"})) is True
    assert decision_matches(task, ToolCall("calculator", {"expression": "17+23"})) is False
    assert decision_matches(task, ToolCall("weather", {"expression": "17*23"})) is False
    assert decision_matches(task, FinalAnswer("It is 391.")) is True
    units = Task(id="u", prompt="p", expected_call={"tool": "convert_units", "arguments": {"value": 10, "from_unit": "km"}})
    assert decision_matches(units, ToolCall("convert_units", {"value": 10.0, "from_unit": "KM", "to_unit": "mi"})) is True
    assert decision_matches(Task(id="n", prompt="p"), FinalAnswer("x")) is None


def test_a_bad_task_line_names_the_file_and_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "a", "prompt": "p"}\n\n{"id": "b"}\n')
    with pytest.raises(InputFileError) as err:
        load_tasks(path)
    assert err.value.line == 3 and str(path) in str(err.value) and "prompt" in str(err.value)
    path.write_text('{"id": "a", "prompt": "p"}\n{"id": "a", "prompt": "q"}\n')
    with pytest.raises(InputFileError, match="duplicate task id 'a'"):
        load_tasks(path)
