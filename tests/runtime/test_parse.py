"""Malformed model output: every case is a clear ParseError (or a schema error), never a crash."""

from __future__ import annotations

import pytest
from agenttrace.examples.tools import default_tools

from agenttrace import AgentConfig, FakeClock, ParseError
from agenttrace.core.tools import validate_arguments
from agenttrace.errors import ArgumentsInvalid
from agenttrace.runtime.agent import Agent
from agenttrace.runtime.parse import FinalAnswer, ToolCall, parse_decision
from agenttrace.testing import ScriptedModel, capture_telemetry

TOOLS = {t.name: t for t in default_tools()}

# (model output, the error kind, a phrase the message must contain)
MALFORMED = [
    ("", "no_json", "no JSON object"),
    ("Sure! I will look up the weather for you.", "no_json", "no JSON object"),
    ('{"tool": "weather", "arguments": {"city": "Par', "truncated_json", "cut off"),
    ('{"tool": "weather", "arguments": {"city": "Paris"}', "truncated_json", "cut off"),
    ("{'tool': 'weather', 'arguments': {'city': 'Paris'}}", "invalid_json", "invalid JSON"),
    ('{"tool": "weather", "arguments": {"city": "Paris",}}', "invalid_json", "invalid JSON"),
    ('{"tool": "weather" "arguments": {}}', "invalid_json", "invalid JSON"),
    ('{"tool": "weather", "arguments": {...}}', "invalid_json", "invalid JSON"),
    ('{"tool": "math", "arguments": {"expression": "1+1"}}', "unknown_tool", "unknown tool 'math'"),
    ('{"tool": "", "arguments": {}}', "unknown_tool", "unknown tool"),
    ('{"tool": 7, "arguments": {}}', "bad_tool_name", '"tool" must be a string'),
    ('{"tool": ["weather"], "arguments": {}}', "bad_tool_name", '"tool" must be a string'),
    ('{"tool": "weather", "arguments": "Paris"}', "bad_arguments", '"arguments" must be a JSON object'),
    ('{"tool": "weather", "arguments": ["Paris"]}', "bad_arguments", '"arguments" must be a JSON object'),
    ('{"tool": "weather", "arguments": {"city": "Paris"}, "city": "Paris"}', "unexpected_keys", "unexpected keys 'city'"),
    ('{"name": "weather", "parameters": {"city": "Paris"}}', "no_decision", 'neither "tool" nor "answer"'),
    ("{}", "no_decision", 'neither "tool" nor "answer"'),
    ('{"answer": {"text": "rain"}}', "bad_answer", '"answer" must be a string'),
    ('{"answer": null}', "bad_answer", '"answer" must be a string'),
    ("[" * 10_000 + "]" * 10_000, "no_json", "no JSON object"),
    ("{" + '"a":{' * 5000 + "1" + "}" * 5001, "invalid_json", "nested too deeply"),
    ('{"tool": "weather", "arguments": {"city": "' + "x" * 1_000_000 + '"}}', "output_too_long", "characters long"),
    ("\x00\x01\x02 {\x7f garbage ]]] }", "invalid_json", "invalid JSON"),
    ('{"tool": "wéather ☀", "arguments": {"city": "Zürich"}}', "unknown_tool", "unknown tool"),
    ("```json\n{\"tool\": \"weather\", \"arguments\": {\"city\": \"Paris\"\n```", "truncated_json", "cut off"),
]


@pytest.mark.parametrize(("text", "kind", "phrase"), MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_output_gives_a_clear_parse_error(text, kind, phrase):
    with pytest.raises(ParseError) as err:
        parse_decision(text, TOOLS.keys())
    assert err.value.error_type == kind
    assert phrase in err.value.message_for_model
    assert len(err.value.message_for_model) < 500  # the message never echoes a huge output


def test_at_least_twenty_malformed_cases():
    assert len(MALFORMED) >= 20


# Parseable calls whose arguments fail the schema: (output, phrase in the validation message)
SCHEMA_FAILURES = [
    ('{"tool": "weather", "arguments": {}}', "'city' is a required property"),
    ('{"tool": "weather", "arguments": {"city": 42}}', "42 is not of type 'string'"),
    ('{"tool": "weather", "arguments": {"city": "Paris", "unit": "kelvin"}}', "'kelvin' is not one of"),
    ('{"tool": "weather", "arguments": {"city": "Paris", "country": "FR"}}', "'country' was unexpected"),
    ('{"tool": "convert_units", "arguments": {"value": "ten", "from_unit": "km", "to_unit": "mi"}}', "'ten' is not of type 'number'"),
    ('{"tool": "search_files", "arguments": {"query": "x", "max_results": 500}}', "500 is greater than the maximum of 20"),
    ('{"tool": "calculator", "arguments": {"expression": "' + "9" * 20_000 + '"}}', "is too long"),
]


@pytest.mark.parametrize(("text", "phrase"), SCHEMA_FAILURES, ids=range(len(SCHEMA_FAILURES)))
def test_arguments_failing_the_schema_give_a_validation_error(text, phrase):
    call = parse_decision(text, TOOLS.keys())
    assert isinstance(call, ToolCall)
    with pytest.raises(ArgumentsInvalid) as err:
        validate_arguments(TOOLS[call.tool], call.arguments)
    assert phrase in str(err.value)
    assert len(str(err.value)) < 1000  # a huge offending value is cut, not echoed to the model


def test_decisions_are_found_inside_prose_and_code_fences():
    assert parse_decision('Here you go:\n```json\n{"tool": "weather", "arguments": {"city": "Oslo"}}\n```', TOOLS) == ToolCall(
        "weather", {"city": "Oslo"}
    )
    assert parse_decision('{"answer": "It is {cold} in \\"Oslo\\""}', TOOLS) == FinalAnswer('It is {cold} in "Oslo"')
    assert parse_decision('{"answer": 42}', TOOLS) == FinalAnswer("42")


def test_every_malformed_output_is_retried_by_the_agent_never_a_crash():
    clock = FakeClock()
    tel, memory = capture_telemetry(clock)
    texts = [text for text, _, _ in MALFORMED] + [t for t, _ in SCHEMA_FAILURES]
    agent = Agent(ScriptedModel(texts, clock), default_tools(), telemetry=tel, config=AgentConfig(max_attempts=len(texts)))
    result = agent.run("What is the weather in Paris?")
    (step,) = result.steps
    assert len(step.attempts) == len(texts)
    assert [a.outcome.value for a in step.attempts] == ["parse_error"] * len(MALFORMED) + ["validation_error"] * len(SCHEMA_FAILURES)
    assert all(a.error for a in step.attempts)
    assert result.outcome.value == "failed" and result.decisions_invalid == len(texts)
    assert all(s.end_time is not None for s in memory.get_finished_spans())


# Integers past Python's int-string limit (4300 digits): int() raises ValueError, so they used
# to escape the parser as a crash.
BIG = "9" * 5000


@pytest.mark.parametrize("text", [
    '{"answer": ' + BIG + "}",
    '{"answer": -' + BIG + "}",
    '{"tool": "weather", "arguments": {"city": ' + BIG + "}}",
    '{"tool": "weather", "arguments": {"days": [1, 2, ' + BIG + "]}}",
])
def test_an_integer_past_the_int_string_limit_is_a_parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_decision(text, TOOLS.keys())
    assert info.value.error_type == "invalid_json"
    assert "5000 digits" in info.value.message_for_model and "5000 digits" in info.value.summary


def test_numbers_within_the_limit_still_parse():
    assert parse_decision('{"answer": ' + "7" * 4300 + "}", TOOLS.keys()) == FinalAnswer("7" * 4300)
    assert parse_decision('{"answer": 1e999}', TOOLS.keys()) == FinalAnswer("inf")


@pytest.mark.parametrize("text", [
    '{"tool": "sk-proj-abcdefghijklmnopqrstuvwx", "arguments": {}}',
    '{"tool": "weather", "arguments": {}, "sk-proj-abcdefghijklmnopqrstuvwx": 1}',
    '{"sk-proj-abcdefghijklmnopqrstuvwx": "x"}',
])
def test_the_summary_of_a_parse_error_holds_nothing_the_model_wrote(text):
    with pytest.raises(ParseError) as info:
        parse_decision(text, TOOLS.keys())
    assert "sk-proj" in info.value.message_for_model  # the model is told what it wrote
    assert "sk-proj" not in info.value.summary


def test_the_parser_never_raises_anything_but_a_parse_error_on_fuzzed_output():
    import random

    rng = random.Random(19)
    pieces = ['{', '}', '[', ']', '"', ':', ',', '\\', '"tool"', '"answer"', '"arguments"', '"weather"', 'null', 'true',
              '1e999', '-0', 'NaN', '9' * 4400, '\x00', '\ud800', 'é', ' ', '{"a":' * 50]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        try:
            parse_decision(text, TOOLS.keys())
        except ParseError:
            pass


def test_schema_error_paths_name_only_what_the_schema_declares():
    tool = TOOLS["weather"]
    with pytest.raises(ArgumentsInvalid) as info:
        validate_arguments(tool, {"city": 5, "sk-proj-abcdefghijklmnopqrstuvwx": "x"})
    assert all("sk-proj" not in p for p in info.value.paths)
    assert "arguments.city" in info.value.paths
    assert info.value.summary.startswith(f"{info.value.count} schema error")
