"""Tools as data: a name, a description, a JSON schema for the arguments and a function, and the
check of a call's arguments against that schema (jsonschema, Draft 2020-12). Where and how a tool
runs (a worker process or a thread, its timeout, its result's size) is `runtime/execution.py`.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from agenttrace.errors import ArgumentsInvalid

__all__ = ["MAX_RESULT_CHARS", "VALIDATOR_NAME", "Isolation", "Tool", "declared_names", "validate_arguments"]

Isolation = Literal["auto", "process", "thread"]

MAX_RESULT_CHARS = 2000  # what the model sees of a result


@dataclass(frozen=True)
class Tool:
    """A callable the model may choose, described by a JSON schema of its keyword arguments."""

    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of an object
    function: Callable[..., Any]
    timeout_s: float = 10.0
    isolation: Isolation = "auto"  # where it runs: see runtime/execution.py
    result_chars: int = MAX_RESULT_CHARS  # what the model sees of a result (a document reader: far more)
    validator: Draft202012Validator = field(init=False, repr=False, compare=False)
    runs_in: Literal["process", "thread"] = field(init=False, repr=False, compare=False)  # isolation resolved

    def __post_init__(self) -> None:
        try:
            Draft202012Validator.check_schema(self.parameters)
        except SchemaError as exc:
            raise ValueError(f"tool {self.name!r} has an invalid JSON schema: {exc.message}") from exc
        object.__setattr__(self, "validator", Draft202012Validator(self.parameters))
        if self.isolation not in ("auto", "process", "thread"):
            raise ValueError(f"tool {self.name!r}: isolation must be 'auto', 'process' or 'thread'")
        runs_in: Literal["process", "thread"] = "thread"
        if self.isolation != "thread":
            why = _why_not_picklable(self.function)
            if why is None:
                runs_in = "process"
            elif self.isolation == "process":
                raise ValueError(f"tool {self.name!r} cannot run in a worker process ({why}): "
                                 "define its function at module level, or declare isolation='thread'")
        object.__setattr__(self, "runs_in", runs_in)

    def definition(self) -> dict[str, Any]:
        """What the model is shown: name, description and argument schema."""
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}


def _why_not_picklable(function: Callable[..., Any]) -> str | None:
    try:
        pickle.dumps(function)
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        return str(exc)
    return None


VALIDATOR_NAME = "jsonschema"
_MAX_REPORTED = 5  # the model needs the first few problems, not hundreds


def validate_arguments(tool: Tool, arguments: dict[str, Any]) -> None:
    """Raise ArgumentsInvalid listing each schema violation as `path: message` (for the model)
    and each path with only the schema's own names in it (for spans: `paths`)."""
    errors = sorted(tool.validator.iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        described = [f"{_path(e.absolute_path)}: {_short(e.message, e.instance)}" for e in errors[:_MAX_REPORTED]]
        if len(errors) > _MAX_REPORTED:
            described.append(f"and {len(errors) - _MAX_REPORTED} more")
        declared = declared_names(tool.parameters)
        paths = [_path(e.absolute_path, declared) for e in errors[:_MAX_REPORTED]]
        raise ArgumentsInvalid(tool.name, described, count=len(errors), paths=paths)


def _path(path: Any, declared: frozenset[str] | None = None) -> str:
    # With `declared`, a key the schema does not name (the model's own, e.g. under
    # additionalProperties) is written `*`: a path on a span must not carry the model's text.
    parts = [str(p) if declared is None or isinstance(p, int) or p in declared else "*" for p in path]
    return "arguments." + ".".join(parts) if parts else "arguments"


def declared_names(schema: Any) -> frozenset[str]:
    """Every property name a JSON schema declares, at any depth."""
    names: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            props = node.get("properties")
            if isinstance(props, Mapping):
                names.update(k for k in props if isinstance(k, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(names)


def _short(message: str, instance: Any, limit: int = 60) -> str:
    # jsonschema quotes the offending value, which may be a megabyte string: shorten the quote,
    # keep what is wrong with it ("... is too long").
    quoted = repr(instance)
    if len(quoted) > limit and quoted in message:
        message = message.replace(quoted, quoted[: limit - 5] + "...", 1)
    return message if len(message) <= 4 * limit else message[: 4 * limit] + "..."
