"""What can go wrong, and what the agent loop does next in each case.

    AgentTraceError                 agenttrace's own errors
    ├── ModelMistake                retryable: the model's output was unusable; carries the message
    │   │                           to show the model on the next attempt
    │   ├── ParseError              no tool call or answer could be read from the text
    │   ├── ArgumentsInvalid        the arguments fail the tool's JSON schema
    │   └── ToolFailed              the tool raised or timed out on these arguments
    ├── ModelUnavailable            a model could not be loaded; says what to install or set
    ├── GenerationCancelled         generation stopped at a cancel request
    └── InputFileError              a trace or task file (or one line of it) could not be read

    ToolError                       raised *by tools* for an expected failure (unknown city, ...);
                                    the loop turns it into ToolFailed and shows it to the model

Bugs in agenttrace itself are not wrapped: they raise as they are, with their cause chained.
"""

from __future__ import annotations

import asyncio

__all__ = [
    "AgentTraceError",
    "ArgumentsInvalid",
    "GenerationCancelled",
    "ModelMistake",
    "ModelUnavailable",
    "ParseError",
    "ToolError",
    "ToolFailed",
    "InputFileError",
]


class AgentTraceError(Exception):
    """Base of every error agenttrace raises on purpose."""


class ModelMistake(AgentTraceError):
    """The model produced something unusable; the step may retry.

    `error_type` is the short machine-readable kind written to `error.type`; `message_for_model`
    is what the next attempt's prompt tells the model about its mistake.
    """

    error_type: str = "model_mistake"

    def __init__(self, message: str, *, error_type: str | None = None) -> None:
        super().__init__(message)
        if error_type is not None:
            self.error_type = error_type

    @property
    def message_for_model(self) -> str:
        return str(self)


class ParseError(ModelMistake):
    error_type = "parse_error"


class ArgumentsInvalid(ModelMistake):
    """The arguments failed schema validation; `errors` lists each failure as `path: message`."""

    error_type = "validation_error"

    def __init__(self, tool: str, errors: list[str], count: int | None = None) -> None:
        self.tool = tool
        self.errors = errors
        self.count = len(errors) if count is None else count  # all violations, listed or not
        listed = "; ".join(errors)
        super().__init__(f"arguments for tool {tool!r} are invalid: {listed}")


class ToolFailed(ModelMistake):
    """The tool raised or timed out. `timed_out` tells which."""

    error_type = "tool_error"

    def __init__(self, tool: str, message: str, *, timed_out: bool = False, error_type: str | None = None) -> None:
        self.tool = tool
        self.timed_out = timed_out
        super().__init__(f"tool {tool!r} failed: {message}", error_type=error_type or ("timeout" if timed_out else None))


class ToolError(Exception):
    """Raise from a tool for an expected failure; the message is shown to the model."""


class ModelUnavailable(AgentTraceError):
    """A model could not be loaded. The message says what to install, set or download."""


class GenerationCancelled(AgentTraceError):
    """Generation stopped because its cancel token was set (or its task was cancelled)."""


class InputFileError(AgentTraceError):
    """A trace or task file could not be read; `path` and `line` (1-based, or None) say where."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


def is_cancellation(exc: BaseException | None) -> bool:
    """Whether `exc` stops the work on purpose (our cancel token, asyncio's, Ctrl-C) rather than
    failing it: spans say `cancelled`, outcomes `cancelled`, never `error`."""
    return isinstance(exc, (GenerationCancelled, asyncio.CancelledError, KeyboardInterrupt))
