"""The prompts the generation benchmark runs: the demo agent's real tool-call prompts (first
steps, and second steps after a tool result) and free-text requests an agent also serves
(rewriting, fixing, summarising given text, where copying from the prompt is common)."""

from __future__ import annotations

from dataclasses import dataclass

from agenttrace.core.chat import Message
from agenttrace.errors import ArgumentsInvalid, ToolFailed
from agenttrace.runtime.execution import render_result, run_tool
from agenttrace.runtime.parse import ToolCall
from agenttrace.runtime.prompt import PromptStyle, build_messages, decision_text, observation, retry_feedback

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
    """The prompts the reference agent sends for one demo task (`task_steps` of the tool_calls
    task at `task_index`)."""
    from agenttrace.bench.workloads import EXAMPLES, default_tools, tool_call_tasks

    steps = task_steps(tool_call_tasks()[task_index], default_tools(), EXAMPLES)
    assert steps is not None
    return steps


def task_steps(task, tools, examples) -> AgentSteps | None:
    """The prompts the reference agent sends for `task` with these tools and worked examples:
    step 1 with the expected call as its decision, step 2 after the tool's real result, and a
    retry of step 1 after a typical schema mistake; None for a task without an expected call
    whose arguments are stated (the call cannot be made without them). A tool that fails gives
    step 2 the failure as the agent shows it to the model."""
    expected = task.expected_call
    by_name = {t.name: t for t in tools}
    if expected is None or not expected.arguments or expected.tool not in by_name:
        return None
    first = build_messages(tools, examples, task.prompt)
    call = ToolCall(expected.tool, expected.arguments)
    try:
        after = observation(render_result(run_tool(by_name[call.tool], call.arguments)), PromptStyle())
    except ToolFailed as exc:
        after = retry_feedback(exc)
    second = first + [Message("assistant", decision_text(call)), after]
    bad = decision_text(ToolCall(call.tool, {**call.arguments, "extra": 1}))
    mistake = ArgumentsInvalid(call.tool, ["arguments: Additional properties are not allowed ('extra' was unexpected)"])
    retry = first + [Message("assistant", bad), retry_feedback(mistake)]
    return AgentSteps(first, second, retry)
