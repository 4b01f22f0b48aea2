"""What a model's reply says about itself, read from whichever shape it comes in.

The wrappers record usage, finish reasons, tool-call names and the response's model and id from
the reply, and replies come as objects or dicts: an OpenAI `ChatCompletion` or its message, an
Anthropic-style message (content blocks, `stop_reason`, `input_tokens`), a plain dict of either,
or a string. `read_reply` turns any of them into one `Reply`; a field the reply lacks is None.
Nothing here imports a client library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Reply", "read_reply", "usage_of"]


@dataclass(frozen=True)
class Reply:
    text: str | None = None
    tool_names: tuple[str, ...] = ()
    tool_calls: tuple[Any, ...] = field(default=(), repr=False)  # the first choice's, as the reply holds them
    finish_reasons: tuple[str, ...] = ()
    model: str | None = None
    response_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_input_tokens: int | None = None


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _call_name(call: Any) -> str:
    fn = _get(call, "function")
    name = _get(fn, "name") if fn is not None else _get(call, "name")
    return str(name or "")


def usage_of(usage: Any) -> tuple[int | None, int | None, int | None]:
    """(input, output, cached input) tokens of a usage object or dict (OpenAI's or Anthropic's names)."""
    if usage is None:
        return None, None, None
    inp = _int(_get(usage, "prompt_tokens"))
    out = _int(_get(usage, "completion_tokens"))
    if inp is None:
        inp = _int(_get(usage, "input_tokens"))
    if out is None:
        out = _int(_get(usage, "output_tokens"))
    details = _get(usage, "prompt_tokens_details")
    cached = _int(_get(details, "cached_tokens")) if details is not None else _int(_get(usage, "cache_read_input_tokens"))
    return inp, out, cached


def _message_parts(message: Any) -> tuple[str | None, list[Any]]:
    """(text, tool calls) of one message: OpenAI's `content` + `tool_calls`, or content blocks."""
    content = _get(message, "content")
    calls = list(_get(message, "tool_calls") or ())
    if isinstance(content, Sequence) and not isinstance(content, str):  # content blocks
        texts = []
        for block in content:
            kind = _get(block, "type")
            if kind == "text" and isinstance(_get(block, "text"), str):
                texts.append(_get(block, "text"))
            elif kind == "tool_use":
                calls.append(block)
        return ("".join(texts) or None), calls
    return (content if isinstance(content, str) else None), calls


def read_reply(reply: Any) -> Reply:
    """The facts of `reply` (see the module docstring); never raises on an unknown shape."""
    if isinstance(reply, str):
        return Reply(text=reply, finish_reasons=("stop",))
    if reply is None:
        return Reply()
    inp, out, cached = usage_of(_get(reply, "usage"))
    model, response_id = _str(_get(reply, "model")), _str(_get(reply, "id"))
    choices = _get(reply, "choices")
    if isinstance(choices, Sequence) and not isinstance(choices, str):  # a ChatCompletion
        reasons = tuple(str(r) for c in choices if (r := _get(c, "finish_reason")))
        names: list[str] = []
        text, first = None, []
        for i, choice in enumerate(choices):
            t, cs = _message_parts(_get(choice, "message") or {})
            names += map(_call_name, cs)
            if i == 0:
                text, first = t, cs
        return Reply(text=text, tool_names=tuple(names), tool_calls=tuple(first), finish_reasons=reasons, model=model,
                     response_id=response_id, input_tokens=inp, output_tokens=out, cached_input_tokens=cached)
    text, calls = _message_parts(reply)  # a message
    reason = _get(reply, "finish_reason") or _get(reply, "stop_reason")
    reasons = (str(reason),) if reason else (("tool_calls",) if calls else ("stop",))
    return Reply(
        text=text, tool_names=tuple(_call_name(c) for c in calls), tool_calls=tuple(calls), finish_reasons=reasons,
        model=model, response_id=response_id, input_tokens=inp, output_tokens=out, cached_input_tokens=cached,
    )
