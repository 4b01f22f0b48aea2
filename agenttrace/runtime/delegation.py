"""Delegation: a coordinator agent hands sub-tasks to specialist sub-agents through tools.

    delegate           one sub-task to one specialist; the coordinator waits for its answer
    delegate_parallel  a sub-task for every specialist at once (an argument per specialist: its
                       sub-task); the coordinator waits for all (a join)

Each sub-agent run is an `invoke_agent {name}` span (segment delegation) under the coordinator's
`execute_tool delegate...` span, in the same trace: the context is carried into the threads the
sub-agents run on, so the report's critical path runs through them and decision throughput
counts the whole agent tree. Two parallel sub-agents overlap under one tool span; the report
follows the later one and shows the other as overlap. Sub-agents sharing one model batch their
calls when that model runs on a `BatchEngine` (LocalChatModel(engine=...)); without one its
calls take turns.

A sub-agent that raises, runs past its deadline (it is cancelled: it stops within one
speculation round and its spans close) or returns no usable answer becomes a tool failure the
coordinator is shown, never an exception out of its step. In `delegate_parallel` the answers
that did arrive are kept and the failures named beside them.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agenttrace import semconv as sc
from agenttrace.clock import default_clock, elapsed_s
from agenttrace.core.chat import CancelToken, current_cancel
from agenttrace.core.tools import Tool
from agenttrace.errors import ToolError
from agenttrace.instrument.propagation import propagate
from agenttrace.instrument.structure import current_run, delegation_span
from agenttrace.runtime.tasks import Task

if TYPE_CHECKING:
    from agenttrace.runtime.agent import Agent

__all__ = ["MAX_ANSWER_CHARS", "SubAgent", "delegation_tools"]

MAX_ANSWER_CHARS = 4000  # a longer "answer" is not one: the sub-agent's reply is garbage
_counter = itertools.count(1)


@dataclass(frozen=True)
class SubAgent:
    """A specialist: an `Agent` with its own tools and prompt (record it to the coordinator's
    telemetry, so its spans land in the same trace), or any function `run(task, cancel) -> str`
    of a user's own. `deadline_s`: wall time it gets per sub-task before it is cancelled."""

    name: str
    description: str
    agent: Agent | None = None
    run: Callable[[str, CancelToken], Any] | None = None
    deadline_s: float = 60.0

    def __post_init__(self) -> None:
        if (self.agent is None) == (self.run is None):
            raise ValueError(f"sub-agent {self.name!r}: give exactly one of agent= or run=")


class _Pending:
    """One sub-agent run on its own thread (in the caller's context, so its spans nest)."""

    def __init__(self, sub: SubAgent, text: str, parent_cancel: CancelToken | None) -> None:
        self.sub, self.text, self.parent_cancel = sub, text, parent_cancel
        self.cancel = CancelToken()
        self.value: str | None = None
        self.error: BaseException | None = None
        run = current_run()
        parent_id = run.task_id if run is not None else "task"
        self.task_id = f"{parent_id}/{sub.name}-{next(_counter)}"
        self.thread = threading.Thread(target=propagate(self._work), name=f"subagent-{sub.name}", daemon=True)
        # the deadline runs on the coordinator's clock (a FakeClock in tests drives it too)
        self.clock = run.tel.clock if run is not None else default_clock()
        self.started = self.clock.now_ns()
        self.thread.start()

    def _work(self) -> None:
        try:
            self.value = _invoke(self.sub, self.task_id, self.text, self.cancel)
        except BaseException as exc:  # shown to the coordinator, never lost in the thread
            self.error = exc

    def wait(self, grace_s: float) -> str:
        """The answer; ToolError saying what went wrong otherwise (cancelling a late run)."""
        while self.thread.is_alive():
            left = self.sub.deadline_s - elapsed_s(self.clock, self.started)
            if left <= 0 or (self.parent_cancel is not None and self.parent_cancel.cancelled):
                self.cancel.cancel()
                self.thread.join(grace_s)  # it stops within a round; its spans close
                if self.parent_cancel is not None and self.parent_cancel.cancelled:
                    raise ToolError(f"sub-agent {self.sub.name} was cancelled with the task")
                raise ToolError(f"sub-agent {self.sub.name} did not answer within {self.sub.deadline_s:g} s "
                                "and was cancelled")
            self.thread.join(min(left, 0.1))
        if self.error is not None:
            if isinstance(self.error, ToolError):
                raise self.error
            raise ToolError(f"sub-agent {self.sub.name} failed: {type(self.error).__name__}: {self.error}") from self.error
        assert self.value is not None
        return self.value


def _usable(sub: SubAgent, value: Any) -> str:
    if not isinstance(value, str):
        raise ToolError(f"sub-agent {sub.name} returned {type(value).__name__}, not an answer")
    text = value.strip()
    if not text:
        raise ToolError(f"sub-agent {sub.name} returned an empty answer")
    if len(text) > MAX_ANSWER_CHARS or "\x00" in text:
        raise ToolError(f"sub-agent {sub.name} returned {len(text)} characters that are not an answer")
    return text


def _invoke(sub: SubAgent, task_id: str, text: str, cancel: CancelToken) -> str:
    if sub.agent is not None:
        result = sub.agent.run(Task(id=task_id, prompt=text), cancel=cancel, delegated=True)
        if result.outcome is not sc.TaskOutcome.COMPLETED or result.answer is None:
            raise ToolError(f"sub-agent {sub.name} ended {result.outcome.value} without an answer")
        return _usable(sub, result.answer)
    assert sub.run is not None
    with delegation_span(sub.name, task_id=task_id, description=sub.description) as run:
        try:
            return _usable(sub, sub.run(text, cancel))
        except ToolError:
            if run is not None:
                run.set_outcome(sc.TaskOutcome.FAILED)
            raise


def delegation_tools(subagents: Sequence[SubAgent], *, parallel: bool = True, grace_s: float = 5.0) -> list[Tool]:
    """`delegate` (and, with two or more sub-agents and `parallel`, `delegate_parallel`) over
    `subagents`. Each tool's timeout covers the longest deadline plus `grace_s` for each
    cancelled run to stop."""
    if not subagents:
        raise ValueError("delegation needs at least one sub-agent")
    by_name = {s.name: s for s in subagents}
    if len(by_name) != len(subagents):
        raise ValueError(f"sub-agent names must be unique, got {[s.name for s in subagents]}")
    names = list(by_name)
    roster = "; ".join(f"{s.name}: {s.description}" for s in subagents)
    # each run may overstay its deadline by a grace while it is cancelled, one after another
    timeout = max(s.deadline_s for s in subagents) + grace_s * (len(names) + 1)
    item = {"type": "object", "properties": {"agent": {"type": "string", "enum": names},
                                             "task": {"type": "string", "minLength": 1}},
            "required": ["agent", "task"], "additionalProperties": False}

    def delegate(agent: str, task: str) -> str:
        return _Pending(by_name[agent], task, current_cancel()).wait(grace_s)

    def delegate_parallel(**tasks: str) -> str:
        parent = current_cancel()
        pending = [_Pending(by_name[name], task, parent) for name, task in tasks.items()]  # all start, then the join
        lines, failed = [], 0
        for p in pending:
            try:
                lines.append(f"{p.sub.name}: {p.wait(grace_s)}")
            except ToolError as exc:
                failed += 1
                lines.append(f"{p.sub.name}: failed ({exc})")
        if failed == len(pending):
            raise ToolError("every sub-agent failed: " + "; ".join(lines))
        return "\n".join(lines)

    tools = [Tool("delegate", f"Hand a sub-task to a specialist and wait for its answer. Specialists: {roster}",
                  item, delegate, timeout_s=timeout, isolation="thread")]
    if parallel and len(names) >= 2:
        # flat, one argument per specialist with its sub-task, all of them: small models keep
        # nested lists of objects balanced far less often than a flat object, and a grammar
        # engine (llguidance) bounds an object's size only when every listed key is required
        tools.append(Tool(
            "delegate_parallel", "Hand a sub-task to every specialist at once and wait for all answers: "
            "each argument is a specialist's name and its sub-task.",
            {"type": "object", "properties": {n: {"type": "string", "minLength": 1} for n in names},
             "required": names, "additionalProperties": False},
            delegate_parallel, timeout_s=timeout, isolation="thread"))
    return tools
