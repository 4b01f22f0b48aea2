"""What can go wrong, and what the agent loop does next in each case.

    AgentTraceError                 agenttrace's own errors
    ├── ModelMistake                retryable: the model's output was unusable; carries the message
    │   │                           to show the model on the next attempt
    │   ├── ParseError              no tool call or answer could be read from the text
    │   ├── ArgumentsInvalid        the arguments fail the tool's JSON schema
    │   └── ToolFailed              the tool raised or timed out on these arguments
    ├── ModelUnavailable            a model could not be loaded; says what to install or set
    ├── GenerationCancelled         generation stopped at a cancel request
    ├── ContextTooLong              a prompt longer than the model's context; compact or shorten it
    ├── MemoryUnavailable           the memory file cannot be used (corrupt, locked, unwritable);
    │                               the agent goes on without memory and the span says why
    ├── InputFileError              a trace or task file (or one line of it) could not be read
    ├── InputError                  the inputs cannot be read at all (no such path, nothing named)
    ├── JSONError                   text that is not JSON we can hold (also a ValueError)
    ├── NotTyped                    a line the fast OTLP reader cannot type: read the general way
    ├── SourceUnavailable           a trace store, query API or collector cannot be used
    │   ├── ClickHouseError         ClickHouse (unreachable, refused, another schema)
    │   ├── PhoenixError            Phoenix (unreachable, no such project, not Phoenix)
    │   └── HTTPGetError            a bounded HTTP read (unreachable, too slow, too large)
    │       └── ReadCut             stopped at a bound of the read: its deadline, byte or
    │                               request budget, or one answer's size
    ├── ReplayError                 a collector refused a replayed batch (spans_sent says how far)
    ├── GrammarDeadEnd              the grammar allows no token although it is not complete
    ├── ProgramNotFound             `agenttrace run`: the program is not on PATH (exit 127)
    ├── RequestError                `agenttrace serve`: a request answered with `status`
    └── ScopeError                  a span scope exited in another thread or task (also a RuntimeError)

    ToolError                       raised *by tools* for an expected failure (unknown city, ...);
                                    the loop turns it into ToolFailed and shows it to the model

Bugs in agenttrace itself are not wrapped: they raise as they are, with their cause chained.
"""

from __future__ import annotations

import asyncio

__all__ = [
    "AgentTraceError",
    "ArgumentsInvalid",
    "ConstraintUnavailable",
    "GenerationCancelled",
    "ModelMistake",
    "ModelUnavailable",
    "ParseError",
    "ToolError",
    "ToolFailed",
    "InputFileError",
    "MemoryUnavailable",
    "SourceUnavailable",
    "InputError",
    "ClickHouseError",
    "PhoenixError",
    "HTTPGetError",
    "ReadCut",
    "ReplayError",
    "JSONError",
    "NotTyped",
    "GrammarDeadEnd",
    "ProgramNotFound",
    "RequestError",
    "ScopeError",
]


class AgentTraceError(Exception):
    """Base of every error agenttrace raises on purpose."""


class ModelMistake(AgentTraceError):
    """The model produced something unusable; the step may retry.

    `error_type` is the short machine-readable kind written to `error.type`; `message_for_model`
    is what the next attempt's prompt tells the model about its mistake, values included so the
    model can fix its call. `summary` says the same without any value from the model's output or
    the tool (its kind and where: "2 schema errors at arguments.unit, arguments.city"); spans
    carry it when content capture is off.
    """

    error_type: str = "model_mistake"

    def __init__(self, message: str, *, error_type: str | None = None, summary: str | None = None) -> None:
        super().__init__(message)
        if error_type is not None:
            self.error_type = error_type
        self._summary = summary

    @property
    def message_for_model(self) -> str:
        return str(self)

    @property
    def summary(self) -> str:
        return self._summary or self.error_type.replace("_", " ")


class ParseError(ModelMistake):
    error_type = "parse_error"


class ArgumentsInvalid(ModelMistake):
    """The arguments failed schema validation; `errors` lists each failure as `path: message`
    (for the model), `paths` where each failure is (`arguments.unit`; no values, for spans)."""

    error_type = "validation_error"

    def __init__(self, tool: str, errors: list[str], count: int | None = None, *, paths: list[str] | None = None) -> None:
        self.tool = tool
        self.errors = errors
        self.count = len(errors) if count is None else count  # all violations, listed or not
        self.paths = list(dict.fromkeys(paths)) if paths else []
        listed = "; ".join(errors)
        super().__init__(f"arguments for tool {tool!r} are invalid: {listed}", summary=schema_summary(self.count, self.paths))


def schema_summary(count: int, paths: list[str]) -> str:
    """"2 schema errors at arguments.unit, arguments.city": how many and where, no values."""
    noun = "schema error" if count == 1 else "schema errors"
    return f"{count} {noun} at {', '.join(paths)}" if paths else f"{count} {noun}"


class ToolFailed(ModelMistake):
    """The tool raised or timed out. `timed_out` tells which; `cause_type` names what it raised
    (the summary says that, not the tool's message, which may hold anything)."""

    error_type = "tool_error"

    def __init__(self, tool: str, message: str, *, timed_out: bool = False, error_type: str | None = None,
                 cause_type: str | None = None) -> None:
        self.tool = tool
        self.timed_out = timed_out
        self.cause_type = cause_type
        super().__init__(f"tool {tool!r} failed: {message}", error_type=error_type or ("timeout" if timed_out else None))

    @property
    def summary(self) -> str:
        if self.timed_out:
            return f"tool {self.tool!r} timed out"
        # raised `from` the tool's exception: its type is known when the failure is recorded
        cause = self.cause_type or (type(self.__cause__).__name__ if self.__cause__ is not None else None)
        return f"tool {self.tool!r} failed" + (f" ({cause})" if cause else "")


class ToolError(Exception):
    """Raise from a tool for an expected failure; the message is shown to the model."""


class ModelUnavailable(AgentTraceError):
    """A model could not be loaded. The message says what to install, set or download."""


class ConstraintUnavailable(AgentTraceError):
    """Decoding cannot be constrained with this model (no grammar engine, or a tokenizer the
    engine cannot map). Raised when the agent or model is set up, never mid-task; the message
    says how to run without constraints."""


class GenerationCancelled(AgentTraceError):
    """Generation stopped because its cancel token was set (or its task was cancelled)."""


class ContextTooLong(AgentTraceError):
    """A prompt longer than the model's context: nothing was generated; the message says to
    shorten (or compact) the conversation and retry."""


class MemoryUnavailable(AgentTraceError):
    """The memory store's file could not be used: `path` names it, `reason` says why (not a
    SQLite database, locked by another process, not writable). The runtime records it on the
    memory span and goes on without memory; nothing the agent holds is lost."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"memory file {path}: {reason}; the agent goes on without memory")


class InputFileError(AgentTraceError):
    """A trace or task file could not be read; `path` and `line` (1-based, or None) say where."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")


class SourceUnavailable(AgentTraceError):
    """A trace store, query API or collector cannot be used; the message says which and why."""


class InputError(AgentTraceError):
    """The inputs cannot be read at all (a named path does not exist, nothing named, a bad
    option); the message says which and what to do."""


class ClickHouseError(SourceUnavailable):
    """The store cannot be used (unreachable, refused, another schema); the message says what."""


class PhoenixError(SourceUnavailable):
    """Phoenix cannot be read (unreachable, no such project, not Phoenix, refused); the message
    says what and what to do."""


class HTTPGetError(SourceUnavailable):
    """No usable answer: unreachable, refused, too slow or too large (the message says which)."""


class ReadCut(HTTPGetError):
    """A remote read stopped at one of its bounds: the deadline of the whole read, its byte or
    request budget, or one answer's size bound; the message says which and the option that
    raises it. What was read before stands. `answer_too_large`: it was one answer's size, so
    asking for less at a time may fit."""

    def __init__(self, message: str, *, answer_too_large: bool = False) -> None:
        super().__init__(message)
        self.answer_too_large = answer_too_large


class ReplayError(AgentTraceError):
    """The endpoint was unreachable or refused a batch. The message names the URL, how many
    spans were accepted before, the exporter's reason, and what to check."""

    def __init__(self, message: str, spans_sent: int) -> None:
        super().__init__(message)
        self.spans_sent = spans_sent


class JSONError(AgentTraceError, ValueError):
    """Text that is not JSON we can hold; the message says why (for a problem line)."""


class NotTyped(AgentTraceError):
    """The line is not OTLP/JSON in the shape the structs take: read it the general way."""


class GrammarDeadEnd(AgentTraceError):
    """The grammar allows no token here although it is not complete."""


class ProgramNotFound(AgentTraceError):
    """The command's program is not on PATH (nothing ran; the shell's exit status is 127)."""


class RequestError(AgentTraceError):
    """A request the server cannot serve: answered with `status` and an OpenAI error body."""

    def __init__(self, message: str, *, status: int = 400, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code


class ScopeError(AgentTraceError, RuntimeError):
    """A scope was exited in a thread or asyncio task that did not enter it (or exited twice)."""


def is_cancellation(exc: BaseException | None) -> bool:
    """Whether `exc` stops the work on purpose (our cancel token, asyncio's, Ctrl-C) rather than
    failing it: spans say `cancelled`, outcomes `cancelled`, never `error`."""
    return isinstance(exc, (GenerationCancelled, asyncio.CancelledError, KeyboardInterrupt))
