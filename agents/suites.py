"""The benchmark suites: each a task set under `agents/tasks/` with the tools, worked examples and
agent budget the reference agent uses for it.

    tool_calls      one short call, then the answer (the demo's 32 tasks)
    long_reasoning  chains of three or more calls, each on the last one's result
    code            arguments that are programs (SQL, Python-syntax arithmetic) or code answers
    multilingual    French, German, Spanish and Chinese requests for English-language tools
    long_horizon    memory, documents long enough to compact the context, and delegation to
                    specialists (agents/long_horizon.py: its own agent, not the reference one)

Every suite shows the model the same four worked examples (`EXAMPLES`); the code suite adds one
SQL call, since without an example of the tool the 135M model never calls it. Long chains get
more steps: three calls and an answer fill the default budget of four with no room for a retry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from agenttrace.examples.agents.function_calling import DEFAULT_CONFIG, EXAMPLES, TASKS_DIR
from agenttrace import (
    Agent,
    AgentConfig,
    ChatModel,
    Example,
    Task,
    Telemetry,
    Tool,
    ToolCall,
    load_tasks,
)
from agenttrace.examples.agents.long_horizon import CONFIG as LONG_HORIZON_CONFIG
from agenttrace.examples.agents.long_horizon import build_long_horizon_agent
from agenttrace.examples.tools import default_tools
from agenttrace.examples.tools.sql import sql

__all__ = ["SUITES", "Suite", "load_suite"]


@dataclass(frozen=True)
class Suite:
    """A task set and how the reference agent is set up for it."""

    name: str
    file: str  # under agents/tasks/
    description: str
    tools: Callable[[], list[Tool]] = default_tools
    examples: tuple[Example, ...] = EXAMPLES
    config: AgentConfig = DEFAULT_CONFIG
    tasks: list[Task] = field(default_factory=list, compare=False, repr=False)
    # agents of its own instead of the reference one: (model, telemetry, config, workdir) -> what runs a task
    builder: Callable[..., Agent] | None = field(default=None, compare=False, repr=False)

    def build_agent(self, model: ChatModel, telemetry: Telemetry, *, config: AgentConfig | None = None,
                    workdir: Path | None = None) -> Agent:
        """The agent for this suite over `model`, recording to `telemetry`; `workdir` is the run's
        folder, where an agent with memory keeps its file (a temporary folder when None). A suite
        with several agents returns them behind one `run(task)` (each task names its agent)."""
        if self.builder is not None:
            return self.builder(model, telemetry, config or self.config, workdir=workdir)
        return Agent(model, self.tools(), telemetry=telemetry, examples=self.examples, config=config or self.config)


SQL_EXAMPLE = Example(
    "Using SQL, how many products cost more than 50?",
    (ToolCall("run_sql", {"query": "SELECT COUNT(*) FROM products WHERE price > 50"}),),
)

SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite("tool_calls", "tool_calls.jsonl", "one call to one of four tools, then the answer"),
        Suite(
            "long_reasoning", "long_reasoning.jsonl", "three or more dependent calls, then the answer",
            config=replace(DEFAULT_CONFIG, max_steps=8),
        ),
        Suite(
            "code", "code.jsonl", "SQL and Python-syntax arguments, code as the answer",
            tools=lambda: [*default_tools(), sql], examples=(*EXAMPLES[:3], SQL_EXAMPLE, EXAMPLES[3]),
        ),
        Suite("multilingual", "multilingual.jsonl", "requests in French, German, Spanish and Chinese"),
        Suite(
            "long_horizon", "long_horizon.jsonl", "memory, long documents that compact the context, delegation",
            config=LONG_HORIZON_CONFIG, builder=build_long_horizon_agent,
        ),
    )
}


def load_suite(name: str) -> Suite:
    """The suite `name` with its tasks loaded; ValueError names the suites there are."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; the suites are {', '.join(SUITES)}")
    suite = SUITES[name]
    return replace(suite, tasks=load_tasks(TASKS_DIR / suite.file))
