"""The GenAI conventions' message shapes that content capture records: `{role, parts: [...]}` for
`gen_ai.input.messages` / `gen_ai.output.messages`, built from our `Message`s or OpenAI-style
messages (dicts or objects). Shapes only: `ContentPolicy` redacts and caps what goes on a span."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["chat_input_messages", "chat_output_messages"]


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "content": text}


def chat_input_messages(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """GenAI `{role, parts}` messages from our `Message`s or OpenAI-style message dicts/objects."""
    out = []
    for m in messages:
        get = m.get if isinstance(m, Mapping) else (lambda k, d=None, _m=m: getattr(_m, k, d))
        role = str(get("role", "user"))
        parts: list[dict[str, Any]] = []
        content = get("content")
        if role == "tool":
            parts.append({"type": "tool_call_response", "id": get("tool_call_id"), "response": _flatten(content)})
        elif content:
            parts.append(_text_part(_flatten(content)))
        for call in get("tool_calls") or ():
            parts.append(_tool_call_part(call))
        out.append({"role": role, "parts": parts})
    return out


def chat_output_messages(text: str | None, finish_reason: str | None, tool_calls: Iterable[Any] = ()) -> list[dict[str, Any]]:
    """One assistant output message in the GenAI shape."""
    parts = [_text_part(text)] if text else []
    parts += [_tool_call_part(c) for c in tool_calls]
    return [{"role": "assistant", "parts": parts, "finish_reason": finish_reason or "stop"}]


def _tool_call_part(call: Any) -> dict[str, Any]:
    if isinstance(call, Mapping):
        fn = call.get("function") or {}
        cid, name, args = call.get("id"), fn.get("name"), fn.get("arguments")
    else:
        fn = getattr(call, "function", None)
        cid = getattr(call, "id", None)
        name = getattr(fn, "name", None) if fn is not None else getattr(call, "name", None)
        args = getattr(fn, "arguments", None) if fn is not None else getattr(call, "arguments", None)
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            pass
    return {"type": "tool_call", "id": cid, "name": name, "arguments": args}


def _flatten(content: Any) -> str:
    # OpenAI content may be a list of parts ({"type": "text", "text": ...}); keep the text.
    if isinstance(content, str) or content is None:
        return content or ""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(getattr(p, "text", "")) for p in content)
    return str(content)
