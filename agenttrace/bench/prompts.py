"""The prompts the generation benchmark runs: the demo agent's real tool-call prompts (first
steps, and second steps after a tool result) and free-text requests an agent also serves
(rewriting, fixing, summarising given text, where copying from the prompt is common)."""

from __future__ import annotations

from dataclasses import dataclass

from agenttrace.errors import ArgumentsInvalid
from agenttrace.generation.chat import Message
from agenttrace.runtime.parse import ToolCall
from agenttrace.runtime.prompt import (
    PromptStyle,
    build_messages,
    decision_text,
    observation,
    retry_feedback,
)
from agenttrace.runtime.tools import render_result, run_tool

FREE_TEXT = (
    "Rewrite this message in a formal tone: Hey team, the build broke again last night because someone "
    "pushed without running the tests. Please run the tests before you push, and if the build breaks, fix "
    "it or revert your change right away. Thanks!",
    "Fix the grammar and spelling: me and him goes to the store yesterday and buyed three apple and a bread, "
    "then we was going home but the bus were late so we walks.",
    "Summarize in two sentences: The nightly benchmark runs at 02:00 UTC on the GPU cluster. It measures the "
    "latency of every agent step, including prefill, decoding, parsing, validation and tool execution. "
    "Results are written to the trace volume and compared with the previous night. When a regression larger "
    "than five percent is found, the on-call engineer is paged.",
)


@dataclass(frozen=True)
class AgentSteps:
    """One task's consecutive prompts: step 1, step 2 (after the tool result) and a retry of step 1."""

    first: list[Message]
    second: list[Message]
    retry: list[Message]


def tool_call_prompts(n_tasks: int = 2) -> list[list[Message]]:
    """First-step and second-step prompts of the first `n_tasks` demo tasks."""
    return [m for steps in (agent_steps(i) for i in range(n_tasks)) for m in (steps.first, steps.second)]


def free_text_prompts() -> list[list[Message]]:
    return [[Message("user", text)] for text in FREE_TEXT]


def agent_steps(task_index: int = 0) -> AgentSteps:
    """The prompts the reference agent sends for one task, with the expected call as step 1's
    decision and the tool's real result, and a retry after a typical schema mistake."""
    from agenttrace.bench.workloads import EXAMPLES, default_tools, tool_call_tasks

    tools = default_tools()
    by_name = {t.name: t for t in tools}
    task = tool_call_tasks()[task_index]
    assert task.expected_call is not None
    first = build_messages(tools, EXAMPLES, task.prompt)
    call = ToolCall(task.expected_call.tool, task.expected_call.arguments)
    result = render_result(run_tool(by_name[call.tool], call.arguments))
    second = first + [Message("assistant", decision_text(call)), observation(result, PromptStyle())]
    bad = decision_text(ToolCall(call.tool, {**call.arguments, "extra": 1}))
    mistake = ArgumentsInvalid(call.tool, ["arguments: Additional properties are not allowed ('extra' was unexpected)"])
    retry = first + [Message("assistant", bad), retry_feedback(mistake)]
    return AgentSteps(first, second, retry)
