"""Recording a tool call's validation: the moment a wrapped agent's decision becomes valid.

`validate_tool_call` checks a call's arguments against a JSON schema, a pydantic model, an
agenttrace `Tool` or the OpenAI `tools=` list the call was made with, inside a
`validate_arguments {tool}` span (SPANS.md), and returns what it found. Its end is the step's
time-to-valid-tool-call moment when the arguments hold. `validation_span` is the same span for
callers that validate by other means.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.core.decisions import is_cancellation
from agenttrace.core.tools import Tool, declared_names, validate_arguments
from agenttrace.errors import ArgumentsInvalid, schema_summary
from agenttrace.instrument.config import get_telemetry
from agenttrace.instrument.frames import Frame, Placement, current_frame, frame_telemetry, place_leaf
from agenttrace.instrument.scope import Scope
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.spans import mark_error

__all__ = ["ValidationHandle", "ValidationResult", "validate_tool_call", "validate_tool_calls", "validation_span"]

Schema = Mapping[str, Any] | type | Tool
# The span name and `gen_ai.tool.name` of a call to a tool that is not among those given, when
# content capture is off: the name is the model's own text, and may be anything.
UNKNOWN_TOOL_NAME = "unknown_tool"


@dataclass(frozen=True)
class ValidationResult:
    """What validating one tool call found.

    `arguments` is the decoded argument object (None when it was not valid JSON); `value` is the
    pydantic model instance for a pydantic schema, else the arguments. `errors` lists each
    problem as `path: message` (the first few); `error_count` counts them all; `paths` says
    where each is with no value in it. `message` is the text to show the model on a retry.
    """

    tool: str
    ok: bool
    arguments: dict[str, Any] | None
    value: Any = None
    errors: tuple[str, ...] = ()
    error_count: int = 0
    error_type: str | None = None
    call_id: str | None = None
    validator: str = "jsonschema"
    message: str = field(default="", repr=False)
    paths: tuple[str, ...] = ()

    def raise_if_invalid(self) -> None:
        """Raise `ArgumentsInvalid` (a retryable model mistake) when the call failed validation."""
        if not self.ok:
            raise ArgumentsInvalid(self.tool, list(self.errors) or [self.message], count=self.error_count or 1,
                                   paths=list(self.paths))


# -- the span -------------------------------------------------------------------------------------
class ValidationHandle:
    """Say how validation went: `ok()` or `failed(errors)`. An exception leaving the block, or
    neither call, counts as failed. `errors` are content (they quote the arguments): the status
    message lists them only when content capture is on, redacted; otherwise it gives their
    count and `paths`."""

    def __init__(self, placement: Placement, span: Span) -> None:
        self.placement, self.span = placement, span
        self.passed: bool | None = None
        self.errors: Sequence[str] = ()
        self.paths: Sequence[str] = ()
        self.error_count = 0
        self.error_type = "validation_error"

    def ok(self) -> None:
        self.passed = True

    def correct(self, value: bool) -> None:
        """Whether the call is the one the task expected (`agenttrace.decision.correct`, which
        the time-to-correct-action figure reads)."""
        self.span.set_attribute(sc.DECISION_CORRECT, bool(value))

    def failed(self, errors: Sequence[str] | int = 1, *, error_type: str = "validation_error",
               paths: Sequence[str] = ()) -> None:
        """The arguments are invalid: `errors` (`path: message` each, or a count), `paths`
        (where, e.g. `arguments.unit`, no values) and the kind."""
        self.passed = False
        self.placement.note(validation_error=True)
        self.errors = [] if isinstance(errors, int) else list(errors)
        self.error_count = errors if isinstance(errors, int) else len(errors)
        self.paths = list(paths)
        self.error_type = error_type

    def summary(self) -> str:
        """What failed and where, with no value in it."""
        count = max(1, self.error_count)
        if self.error_type == "validation_error":
            return schema_summary(count, list(dict.fromkeys(self.paths)))
        return _KIND_SUMMARY.get(self.error_type, self.error_type.replace("_", " "))


_KIND_SUMMARY = {"invalid_json": "arguments are not valid JSON", "unknown_tool": "unknown tool"}


class validation_span(Scope[ValidationHandle]):  # noqa: N801
    """`validate_arguments {tool}` (segment validation). Counts a valid or invalid decision."""

    def __init__(self, tool: str, *, validator: str = "jsonschema", call_id: str | None = None, telemetry: Telemetry | None = None) -> None:
        super().__init__(tool, validator=validator, call_id=call_id, telemetry=telemetry)

    def _open(self) -> tuple[ValidationHandle, Telemetry, Span, Frame | None]:
        tool, kw = self._args[0], self._kwargs
        placement = place_leaf(kw["telemetry"])
        attrs: dict[str, AttributeValue] = {sc.GEN_AI_TOOL_NAME: tool, sc.VALIDATION_VALIDATOR: kw["validator"]}
        if kw["call_id"]:
            attrs[sc.GEN_AI_TOOL_CALL_ID] = kw["call_id"]
        span = placement.tel.start_span(sc.Segment.VALIDATION, sc.validation_span_name(tool), attrs, parent=placement.parent)
        return ValidationHandle(placement, span), placement.tel, span, None

    def _close(self, handle: ValidationHandle, exc: BaseException | None) -> None:
        p = handle.placement
        if exc is not None and is_cancellation(exc):
            p.tel.end_span(handle.span, exc)
            return
        ok = exc is None and handle.passed is True
        count = 0 if ok else max(1, handle.error_count or (getattr(exc, "count", 0) if exc is not None else 0))
        handle.span.set_attributes({sc.VALIDATION_OK: ok, sc.VALIDATION_ERRORS: count})
        if ok:
            p.note(valid_call=True)
            if p.run is not None:
                p.run.count(valid=1)
        else:
            p.note(validation_error=True)
            if p.run is not None:
                p.run.count(invalid=1)
            if exc is None:
                mark_error(handle.span, handle.error_type, p.tel.content.status_text("; ".join(handle.errors), handle.summary()))
        p.tel.end_span(handle.span, exc)


# -- checking arguments ---------------------------------------------------------------------------
_tool_cache: dict[str, Tool] = {}
_cache_lock = threading.Lock()


def _schema_tool(name: str, schema: Mapping[str, Any]) -> Tool:
    """A `Tool` for a JSON schema, cached, so the schema is checked and compiled once."""
    key = name + "\0" + json.dumps(schema, sort_keys=True, default=str)
    with _cache_lock:
        tool = _tool_cache.get(key)
    if tool is None:
        tool = Tool(name, "", dict(schema), _never_called)
        with _cache_lock:
            if len(_tool_cache) > 512:  # schemas come from code, so this only bounds a leak
                _tool_cache.clear()
            _tool_cache[key] = tool
    return tool


def _never_called(**_: Any) -> None:  # pragma: no cover - validation-only tools are never run
    raise RuntimeError("validation-only tool")


def _call_parts(call: Any, arguments: Any) -> tuple[str, Any, str | None]:
    """(name, arguments, call id) from an OpenAI tool call, a dict, our ToolCall or a name."""
    if isinstance(call, str):
        return call, arguments, None
    if isinstance(call, Mapping):
        fn = call.get("function") or call
        return str(fn.get("name") or fn.get("tool")), fn.get("arguments", arguments), call.get("id")
    fn = getattr(call, "function", None)
    if fn is not None:
        return str(fn.name), fn.arguments, getattr(call, "id", None)
    if hasattr(call, "tool") and hasattr(call, "arguments"):  # agenttrace.ToolCall
        return str(call.tool), call.arguments, None
    raise TypeError(f"cannot read a tool call from {type(call).__name__}: pass a name and arguments")


def _find_schema(name: str, schema: Schema | None, tools: Iterable[Any] | None) -> Schema | None:
    if schema is not None:
        return schema
    for t in tools or ():
        if isinstance(t, Tool):
            if t.name == name:
                return t
            continue
        fn = t.get("function", t) if isinstance(t, Mapping) else getattr(t, "function", t)
        get: Callable[[str], Any] = fn.get if isinstance(fn, Mapping) else (lambda k, _f=fn: getattr(_f, k, None))
        if get("name") == name:
            return get("parameters") or {"type": "object"}
    return None


def _check(name: str, args: Any, schema: Schema | None, tools: Iterable[Any] | None) -> tuple[Any, list[str], int, str | None, str, list[str]]:
    """(value, errors, error count, error type, validator, paths)."""
    target = _find_schema(name, schema, tools)
    if target is None:
        known = sorted(_tool_names(tools))
        return None, [f"unknown tool {name!r}; the tools are: {', '.join(known) or 'none'}"], 1, "unknown_tool", "jsonschema", []
    if isinstance(target, type):
        from pydantic import BaseModel, ValidationError

        if not issubclass(target, BaseModel):
            raise TypeError(f"schema for {name!r} must be a JSON schema, a pydantic model or a Tool, got {target!r}")
        try:
            return target.model_validate(args), [], 0, None, "pydantic", []
        except ValidationError as exc:
            problems = [f"arguments.{'.'.join(map(str, e['loc']))}: {e['msg']}" if e["loc"] else f"arguments: {e['msg']}" for e in exc.errors()]
            declared = _model_names(target)
            paths = [".".join(["arguments", *(str(p) if isinstance(p, int) or p in declared else "*" for p in e["loc"])])
                     for e in exc.errors()[:5]]
            return None, problems[:5], len(problems), "validation_error", "pydantic", paths
    tool = target if isinstance(target, Tool) else _schema_tool(name, target)
    try:
        validate_arguments(tool, args)
    except ArgumentsInvalid as exc:
        return None, exc.errors, exc.count, "validation_error", "jsonschema", exc.paths
    return args, [], 0, None, "jsonschema", []


def _model_names(model: type) -> frozenset[str]:
    # the field names a pydantic model declares (a path on a span names only these)
    try:
        return declared_names(model.model_json_schema())  # type: ignore[attr-defined]
    except Exception:  # a model whose schema cannot be generated: every key is written `*`
        return frozenset()


def _tool_names(tools: Iterable[Any] | None) -> list[str]:
    names = []
    for t in tools or ():
        if isinstance(t, Tool):
            names.append(t.name)
        elif isinstance(t, Mapping):
            names.append(str((t.get("function") or t).get("name")))
    return names


def validate_tool_call(
    call: Any,
    arguments: Mapping[str, Any] | str | None = None,
    *,
    schema: Schema | None = None,
    tools: Iterable[Any] | None = None,
    telemetry: Telemetry | None = None,
) -> ValidationResult:
    """Validate one tool call inside a `validate_arguments {tool}` span and return the result.

    `call` is an OpenAI tool call (`.function.name`, `.function.arguments`, `.id`), its dict
    form, an agenttrace `ToolCall`, or a tool name with `arguments` (a dict or a JSON string).
    The schema is `schema` (a JSON schema dict, a pydantic model class or a `Tool`) or, found by
    the call's name, the entry of `tools` (the OpenAI `tools=` list, or `Tool`s). Arguments that
    are not valid JSON, an unknown tool and schema violations all make an invalid decision;
    nothing here raises for the model's mistakes (a schema that is itself invalid raises).
    """
    name, raw, call_id = _call_parts(call, arguments)
    args: Any = raw
    pre_errors: list[str] = []
    if isinstance(raw, str):
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            args, pre_errors = None, [f"arguments are not valid JSON ({exc})"]
    elif raw is None:
        args = {}
    if args is not None and not isinstance(args, Mapping):
        args, pre_errors = None, [f"arguments must be a JSON object, got {type(args).__name__}"]

    validator = "pydantic" if isinstance(schema, type) else "jsonschema"
    paths: list[str] = []
    span_tool = name
    if _find_schema(name, schema, tools) is None:
        content = (telemetry or frame_telemetry(current_frame()) or get_telemetry()).content
        span_tool = content.clean(name) if content.enabled else UNKNOWN_TOOL_NAME
    with validation_span(span_tool, validator=validator, call_id=call_id, telemetry=telemetry) as v:
        if pre_errors:
            value, errors, count, etype = None, pre_errors, 1, "invalid_json"
        else:
            value, errors, count, etype, validator, paths = _check(name, dict(args), schema, tools)  # type: ignore[arg-type]
        if v is not None:
            v.span.set_attribute(sc.VALIDATION_VALIDATOR, validator)
            if etype is None:
                v.ok()
            else:
                v.failed(errors, error_type=etype, paths=paths)
                v.error_count = count
    message = "" if etype is None else f"arguments for tool {name!r} are invalid: " + "; ".join(errors)
    return ValidationResult(
        tool=name,
        ok=etype is None,
        arguments=dict(args) if isinstance(args, Mapping) else None,
        value=value,
        errors=tuple(errors),
        error_count=count,
        error_type=etype,
        call_id=call_id,
        validator=validator,
        message=message,
        paths=tuple(paths),
    )


def validate_tool_calls(
    response: Any,
    *,
    tools: Iterable[Any] | None = None,
    schemas: Mapping[str, Schema] | None = None,
    telemetry: Telemetry | None = None,
) -> list[ValidationResult]:
    """Validate every tool call of an OpenAI response (a `ChatCompletion`, its message, a traced
    stream after it ended, or a list of calls), one validation span each, in order."""
    calls = _tool_calls_of(response)
    tools = list(tools) if tools is not None else None
    out = []
    for call in calls:
        name = _call_parts(call, None)[0]
        schema = (schemas or {}).get(name)
        out.append(validate_tool_call(call, schema=schema, tools=None if schema is not None else tools, telemetry=telemetry))
    return out


def _tool_calls_of(response: Any) -> list[Any]:
    if isinstance(response, (list, tuple)):
        return list(response)
    choices = getattr(response, "choices", None)
    if choices:
        response = choices[0].message
    calls = getattr(response, "tool_calls", None)
    if calls is None and isinstance(response, Mapping):
        calls = response.get("tool_calls")
    return list(calls or ())
