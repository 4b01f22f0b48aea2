"""Checking a tool call's arguments against the tool's JSON schema (jsonschema, Draft 2020-12)."""

from __future__ import annotations

from typing import Any

from agenttrace.errors import ArgumentsInvalid
from agenttrace.runtime.tools import Tool

__all__ = ["validate_arguments", "VALIDATOR_NAME"]

VALIDATOR_NAME = "jsonschema"
_MAX_REPORTED = 5  # the model needs the first few problems, not hundreds


def validate_arguments(tool: Tool, arguments: dict[str, Any]) -> None:
    """Raise ArgumentsInvalid listing each schema violation as `path: message`."""
    errors = sorted(tool.validator.iter_errors(arguments), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        described = [f"{_path(e.absolute_path)}: {_short(e.message, e.instance)}" for e in errors[:_MAX_REPORTED]]
        if len(errors) > _MAX_REPORTED:
            described.append(f"and {len(errors) - _MAX_REPORTED} more")
        raise ArgumentsInvalid(tool.name, described, count=len(errors))


def _path(path: Any) -> str:
    parts = [str(p) for p in path]
    return "arguments." + ".".join(parts) if parts else "arguments"


def _short(message: str, instance: Any, limit: int = 60) -> str:
    # jsonschema quotes the offending value, which may be a megabyte string: shorten the quote,
    # keep what is wrong with it ("... is too long").
    quoted = repr(instance)
    if len(quoted) > limit and quoted in message:
        message = message.replace(quoted, quoted[: limit - 5] + "...", 1)
    return message if len(message) <= 4 * limit else message[: 4 * limit] + "..."
