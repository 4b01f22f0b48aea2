"""Tools as data: a name, a description, a JSON schema for the arguments, and a function.

Running a tool happens on a worker thread with a timeout, inside a copy of the caller's context
(so spans the tool opens, e.g. for an HTTP call, nest under its `execute_tool` span). A tool that
hangs is abandoned after its timeout (Python cannot kill a thread); one that raises becomes a
`ToolFailed` the loop shows the model. Neither crashes the agent.
"""

from __future__ import annotations

import contextvars
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agenttrace.errors import ToolError, ToolFailed

__all__ = ["Tool", "run_tool"]


@dataclass(frozen=True)
class Tool:
    """A callable the model may choose, described by a JSON schema of its keyword arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of an object
    function: Callable[..., Any]
    timeout_s: float = 10.0
    validator: Draft202012Validator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            Draft202012Validator.check_schema(self.parameters)
        except SchemaError as exc:
            raise ValueError(f"tool {self.name!r} has an invalid JSON schema: {exc.message}") from exc
        object.__setattr__(self, "validator", Draft202012Validator(self.parameters))

    def definition(self) -> dict[str, Any]:
        """What the model is shown: name, description and argument schema."""
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}


def run_tool(tool: Tool, arguments: Mapping[str, Any], timeout_s: float | None = None) -> Any:
    """Call the tool with validated arguments on a worker thread.

    Raises ToolFailed (error_type `tool_error`, or `timeout` after `timeout_s`, default the
    tool's own) with a message fit to show the model.
    """
    timeout = tool.timeout_s if timeout_s is None else timeout_s
    outcome: dict[str, Any] = {}
    ctx = contextvars.copy_context()

    def work() -> None:
        try:
            outcome["value"] = ctx.run(tool.function, **arguments)
        except BaseException as exc:  # reported to the caller below, not lost in the thread
            outcome["error"] = exc

    worker = threading.Thread(target=work, name=f"tool-{tool.name}", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise ToolFailed(tool.name, f"no result within {timeout:g} s", timed_out=True)
    if "error" in outcome:
        exc = outcome["error"]
        if isinstance(exc, ToolError):
            raise ToolFailed(tool.name, str(exc)) from exc
        raise ToolFailed(tool.name, f"{type(exc).__name__}: {exc}", error_type="tool_error") from exc
    return outcome["value"]


def _jsonable(value: Any) -> Any:
    return list(value) if isinstance(value, (set, frozenset)) else str(value)


def render_result(value: Any, limit: int = 2000) -> str:
    """A tool result as the text the model sees: JSON when possible, capped at `limit` chars."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=_jsonable)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"
