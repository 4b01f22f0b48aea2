from __future__ import annotations

from agenttrace import Example, ToolCall
from agenttrace.errors import ArgumentsInvalid
from agenttrace.runtime.prompt import (
    PromptStyle,
    build_messages,
    observation,
    retry_feedback,
    tool_signature,
)
from agenttrace.examples.tools import default_tools, weather


def test_tool_signatures_are_compact_and_mark_optional_arguments():
    assert tool_signature(weather) == 'weather {"city": str, "unit"?: "celsius"|"fahrenheit"} - Current weather in a city.'


def test_examples_render_as_conversation_turns_before_the_request():
    ex = [
        Example("Weather in Rome?", (ToolCall("weather", {"city": "Rome"}),)),
        Example("2+2?", (ToolCall("calculator", {"expression": "2+2"}),), ('{"result": 4}',), "4"),
    ]
    msgs = build_messages(default_tools(), ex, "Weather in Oslo?")
    assert [m.role for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert msgs[0].content.startswith("You answer by calling a tool") and "search_files {" in msgs[0].content
    assert msgs[2].content == '{"tool": "weather", "arguments": {"city": "Rome"}}'
    assert msgs[5].content.startswith('Tool result: {"result": 4}')
    assert msgs[6].content == '{"answer": "4"}'
    assert msgs[-1].content == "Weather in Oslo?"


def test_observation_and_retry_messages():
    style = PromptStyle(observation_role="tool", observation_template="RESULT {result}")
    assert observation("x", style).role == "tool" and observation("x", style).content == "RESULT x"
    msg = retry_feedback(ArgumentsInvalid("weather", ["arguments: 'city' is a required property"]))
    assert msg.role == "user" and "'city' is a required property" in msg.content
