"""Reading a decision out of model text: a tool call or a final answer.

The model is asked for one JSON object: {"tool": NAME, "arguments": {...}} or {"answer": TEXT}.
Small models wrap it in prose or code fences, cut it off, or emit garbage; every such case is a
`ParseError` whose message tells the model what to fix. Nothing here can raise anything else on
arbitrary text (huge, deeply nested or binary-looking input included).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from agenttrace.errors import ParseError

__all__ = ["FinalAnswer", "ToolCall", "parse_decision", "MAX_OUTPUT_CHARS"]

# Longer outputs are rejected before any JSON work: a tool call is a few hundred characters.
MAX_OUTPUT_CHARS = 32_000
_EXPECTED = 'Reply with exactly one JSON object: {"tool": "<name>", "arguments": {...}} or {"answer": "<text>"}.'


@dataclass(frozen=True)
class ToolCall:
    tool: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class FinalAnswer:
    text: str


Decision = ToolCall | FinalAnswer


def _first_object_span(text: str) -> tuple[int, int | None]:
    """Start of the first '{' and the index after its matching '}', or None if it never closes.

    Tracks strings and escapes so braces inside values do not count.
    """
    start = text.find("{")
    if start < 0:
        return -1, None
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return start, i + 1
    return start, None


def parse_decision(text: str, tool_names: Collection[str]) -> Decision:
    """The decision in `text`, or ParseError saying what was wrong (`error_type` names the kind)."""
    if len(text) > MAX_OUTPUT_CHARS:
        raise ParseError(
            f"the reply is {len(text)} characters long; a decision is one short JSON object. {_EXPECTED}",
            error_type="output_too_long",
        )
    start, end = _first_object_span(text)
    if start < 0:
        raise ParseError(f"the reply contains no JSON object. {_EXPECTED}", error_type="no_json")
    if end is None:
        raise ParseError(f"the JSON object is cut off (unbalanced braces). {_EXPECTED}", error_type="truncated_json")
    try:
        obj = json.loads(text[start:end])
    except RecursionError:
        raise ParseError(f"the JSON is nested too deeply. {_EXPECTED}", error_type="invalid_json") from None
    except json.JSONDecodeError as exc:
        raise ParseError(f"invalid JSON ({exc.msg} at column {exc.colno}). {_EXPECTED}", error_type="invalid_json") from None
    if not isinstance(obj, dict):  # unreachable for '{...}' text, kept as a guard
        raise ParseError(f"expected a JSON object. {_EXPECTED}", error_type="not_an_object")

    if "answer" in obj and "tool" not in obj:
        answer = obj["answer"]
        if not isinstance(answer, (str, int, float)) or isinstance(answer, bool):
            raise ParseError('"answer" must be a string.', error_type="bad_answer")
        return FinalAnswer(str(answer))
    if "tool" not in obj:
        keys = ", ".join(sorted(map(str, obj))) or "none"
        raise ParseError(f'the object has neither "tool" nor "answer" (keys: {keys}). {_EXPECTED}', error_type="no_decision")
    tool = obj["tool"]
    if not isinstance(tool, str):
        raise ParseError('"tool" must be a string naming one of the tools.', error_type="bad_tool_name")
    if tool not in tool_names:
        known = ", ".join(sorted(tool_names))
        raise ParseError(f"unknown tool {tool[:80]!r}; the tools are: {known}.", error_type="unknown_tool")
    arguments = obj.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ParseError('"arguments" must be a JSON object of argument names to values.', error_type="bad_arguments")
    extra = sorted(set(obj) - {"tool", "arguments"})
    if extra:
        raise ParseError(
            f'unexpected keys {", ".join(map(repr, extra))}: put every argument inside "arguments".',
            error_type="unexpected_keys",
        )
    return ToolCall(tool, arguments)
