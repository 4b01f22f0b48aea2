"""Reading a decision out of model text: a tool call or a final answer.

The model is asked for one JSON object: {"tool": NAME, "arguments": {...}} or {"answer": TEXT}.
Small models wrap it in prose or code fences, cut it off, or emit garbage; every such case is a
`ParseError` whose message tells the model what to fix, and whose summary says the same with no
value from the text (no key, tool name or number the model wrote: spans carry the summary when
content capture is off). Nothing here can raise anything else on arbitrary text (huge, deeply
nested or binary-looking input, integers past Python's int-string limit included).
"""

from __future__ import annotations

import json
import sys
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


class _NumberTooLong(Exception):
    def __init__(self, digits: int) -> None:
        self.digits = digits


def _parse_int(digits: str) -> int:
    # int() refuses more than sys.get_int_max_str_digits() digits (4300 by default) with a
    # ValueError; no tool needs such a number, so it is the model's mistake, said as such.
    limit = sys.get_int_max_str_digits()
    if limit and len(digits.lstrip("-")) > limit:
        raise _NumberTooLong(len(digits.lstrip("-")))
    return int(digits)


def _loads(text: str) -> Any:
    try:
        return json.loads(text, parse_int=_parse_int)
    except RecursionError:
        raise ParseError(f"the JSON is nested too deeply. {_EXPECTED}", error_type="invalid_json",
                         summary="the JSON is nested too deeply") from None
    except _NumberTooLong as exc:
        limit = sys.get_int_max_str_digits()
        raise ParseError(f"a number in the JSON has {exc.digits} digits; numbers may have at most {limit}. {_EXPECTED}",
                         error_type="invalid_json", summary=f"a number in the JSON has {exc.digits} digits") from None
    except json.JSONDecodeError as exc:  # exc.msg is json's own wording ("Expecting ',' delimiter"), never the text
        where = f"invalid JSON ({exc.msg} at column {exc.colno})"
        raise ParseError(f"{where}. {_EXPECTED}", error_type="invalid_json", summary=where) from None
    except ValueError as exc:  # any other refusal of the decoder: still the model's text at fault
        raise ParseError(f"invalid JSON ({type(exc).__name__}). {_EXPECTED}", error_type="invalid_json",
                         summary="invalid JSON") from None


def parse_decision(text: str, tool_names: Collection[str]) -> Decision:
    """The decision in `text`, or ParseError saying what was wrong (`error_type` names the kind)."""
    if len(text) > MAX_OUTPUT_CHARS:
        raise ParseError(
            f"the reply is {len(text)} characters long; a decision is one short JSON object. {_EXPECTED}",
            error_type="output_too_long",
            summary=f"the reply is {len(text)} characters long",
        )
    start, end = _first_object_span(text)
    if start < 0:
        raise ParseError(f"the reply contains no JSON object. {_EXPECTED}", error_type="no_json",
                         summary="the reply contains no JSON object")
    if end is None:
        raise ParseError(f"the JSON object is cut off (unbalanced braces). {_EXPECTED}", error_type="truncated_json",
                         summary="the JSON object is cut off (unbalanced braces)")
    obj = _loads(text[start:end])
    if not isinstance(obj, dict):  # unreachable for '{...}' text, kept as a guard
        raise ParseError(f"expected a JSON object. {_EXPECTED}", error_type="not_an_object", summary="expected a JSON object")

    if "answer" in obj and "tool" not in obj:
        answer = obj["answer"]
        if not isinstance(answer, (str, int, float)) or isinstance(answer, bool):
            raise ParseError('"answer" must be a string.', error_type="bad_answer", summary='"answer" is not a string')
        return FinalAnswer(str(answer))
    if "tool" not in obj:
        keys = ", ".join(sorted(map(str, obj))) or "none"
        raise ParseError(f'the object has neither "tool" nor "answer" (keys: {keys}). {_EXPECTED}', error_type="no_decision",
                         summary=f'the object has neither "tool" nor "answer" ({len(obj)} other keys)')
    tool = obj["tool"]
    if not isinstance(tool, str):
        raise ParseError('"tool" must be a string naming one of the tools.', error_type="bad_tool_name",
                         summary='"tool" is not a string')
    if tool not in tool_names:
        known = ", ".join(sorted(tool_names))
        # the name the model wrote goes to the model only: it may be anything (a key, a prompt)
        raise ParseError(f"unknown tool {tool[:80]!r}; the tools are: {known}.", error_type="unknown_tool",
                         summary=f"unknown tool (not one of the {len(tool_names)} tools)")
    arguments = obj.get("arguments", {})
    if not isinstance(arguments, dict):
        raise ParseError('"arguments" must be a JSON object of argument names to values.', error_type="bad_arguments",
                         summary='"arguments" is not an object')
    extra = sorted(set(obj) - {"tool", "arguments"})
    if extra:
        raise ParseError(
            f'unexpected keys {", ".join(map(repr, extra))}: put every argument inside "arguments".',
            error_type="unexpected_keys",
            summary=f'{len(extra)} unexpected keys beside "tool" and "arguments"',
        )
    return ToolCall(tool, arguments)
