"""The grammar of a decision, for constrained decoding: one JSON object that either calls one of
the tools with arguments its schema accepts or gives the final answer. It is the envelope
`parse.py` reads, built from the same argument schemas `validate.py` checks, so a constrained
model can only write what parsing and validation accept (up to the schema keywords the grammar
engine cannot express, which validation still catches)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from agenttrace.core.chat import Constraint
from agenttrace.core.tools import Tool

__all__ = ["GRAMMAR_NAME", "answer_bound", "decision_constraint", "decision_schema", "schema_source"]

GRAMMAR_NAME = "tool_call_json"  # agenttrace.constrain.grammar


def decision_schema(tools: Sequence[Tool], answer_max_chars: int | None = None, *, answer: bool = True) -> dict[str, Any]:
    """anyOf: {"tool": <name>, "arguments": <its schema>} per tool, or {"answer": <text>}; keys in
    the order the prompt's examples show them, nothing else allowed. `answer_max_chars` bounds
    the answer so that the object closes within the token budget (see `answer_bound`);
    `answer=False` leaves the answer out (a call is required)."""
    calls = [
        {
            "type": "object",
            "properties": {"tool": {"const": t.name}, "arguments": _bounded(t.parameters, answer_max_chars)},
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    final = {
        "type": "object",
        "properties": {"answer": {"type": "string", **({"maxLength": answer_max_chars} if answer_max_chars else {})}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    return {"anyOf": [*calls, final] if answer else calls}


def _bounded(schema: Any, chars: int | None) -> Any:
    """`schema` with every free string (no enum, const or pattern) bounded to at most `chars`, for
    the grammar only: a small model that misses a string's closing quote otherwise writes inside
    the string until its budget runs out (`"17*23}} - Calculate ...`), and the call never closes.
    Validation still checks the tool's own schema."""
    if chars is None:
        return schema
    if isinstance(schema, list):
        return [_bounded(s, chars) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k in _MAPS and isinstance(v, dict):
            out[k] = {name: _bounded(sub, chars) for name, sub in v.items()}
        else:
            out[k] = _bounded(v, chars) if k in _NESTED else v
    if out.get("type") == "string" and not {"enum", "const", "pattern"} & out.keys():
        out["maxLength"] = min(chars, out.get("maxLength", chars))
    return out


# keywords whose value is a schema (or a list of them), and those whose value maps names to schemas
_NESTED = frozenset({"items", "anyOf", "oneOf", "allOf", "prefixItems", "additionalProperties", "not", "if", "then",
                     "else"})
_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions"})


def schema_source(schema: Any) -> str:
    """Compact JSON text of a schema: equal tool sets make equal constraints (one cache entry).
    Keys keep their order: the grammar writes properties in the order the schema lists them."""
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def answer_bound(max_tokens: int) -> int:
    """The longest answer that still closes within `max_tokens`: n ASCII characters take at
    most n tokens, and the envelope about eight. Without a bound a small
    model writes its answer until the budget runs out and the object is cut off, the failure
    constraining exists to remove (other scripts may need more tokens per character)."""
    return max(8, max_tokens - 8)


def decision_constraint(tools: Sequence[Tool], max_tokens: int | None = None, *, answer: bool = True) -> Constraint:
    """The constraint of a decision among `tools`, the answer bounded for `max_tokens` (or no
    answer allowed: a tool call is required)."""
    bound = answer_bound(max_tokens) if max_tokens else None
    return Constraint("json_schema", schema_source(decision_schema(tools, bound, answer=answer)), GRAMMAR_NAME)
