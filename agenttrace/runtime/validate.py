"""Checking a tool call's arguments against the tool's JSON schema (jsonschema, Draft 2020-12)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agenttrace.errors import ArgumentsInvalid
from agenttrace.runtime.tools import Tool

__all__ = ["declared_names", "validate_arguments", "VALIDATOR_NAME"]

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
