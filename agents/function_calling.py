"""The reference function-calling agent: the four reference tools, a few worked examples and a
small budget of steps and retries, over any agenttrace `ChatModel`."""

from __future__ import annotations

from pathlib import Path

from agenttrace import (
    Agent,
    AgentConfig,
    ChatModel,
    Example,
    GenerationParams,
    Task,
    Telemetry,
    ToolCall,
    load_tasks,
)
from agenttrace.examples.tools import default_tools

TASKS_DIR = Path(__file__).parent / "tasks"
TOOL_CALL_TASKS = TASKS_DIR / "tool_calls.jsonl"

# Worked examples, shown as real turns before the request: they teach the JSON format, the tool
# names and the argument spelling. One call per tool; only the last shows a result and the final
# answer. Measured on the bundled 135M model over the 32 tasks (greedy): this mix gave 21/32
# schema-valid first calls and 27/32 answers after a tool result; results on every example gave
# 8/32 valid first calls (it copies result fields into its arguments), none gave 0/32 answers.
EXAMPLES = (
    Example("What's the weather in Rome?", (ToolCall("weather", {"city": "Rome"}),)),
    Example("Convert 3 miles to km.", (ToolCall("convert_units", {"value": 3, "from_unit": "mi", "to_unit": "km"}),)),
    Example("Search my files for the wifi password.", (ToolCall("search_files", {"query": "wifi"}),)),
    Example(
        "What is 12 times 7 plus 5?",
        (ToolCall("calculator", {"expression": "12*7+5"}),),
        ('{"expression": "12*7+5", "result": 89}',),
        "12 times 7 plus 5 is 89.",
    ),
)

DEFAULT_CONFIG = AgentConfig(
    name="function-calling-agent",
    max_steps=4,
    max_attempts=3,
    deadline_s=120.0,
    params=GenerationParams(max_tokens=64),
)


def build_agent(model: ChatModel, telemetry: Telemetry, config: AgentConfig = DEFAULT_CONFIG) -> Agent:
    return Agent(model, default_tools(), telemetry=telemetry, examples=EXAMPLES, config=config)


def tool_call_tasks() -> list[Task]:
    return load_tasks(TOOL_CALL_TASKS)
