"""Opt-in content capture: prompts, outputs, tool arguments and results on spans.

Off by default. On when `ContentPolicy(enabled=True)` is given (`agenttrace.configure(
capture_content=True)`) or when the standard `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`
variable says so (`true`, `1`, `span_only`, `span_and_event`; `event_only` means "not on spans"
and so stays off here: agenttrace records content on spans only).

Captured text follows the GenAI conventions (`gen_ai.input.messages`, `gen_ai.output.messages`
as JSON of `{role, parts: [...]}`; `gen_ai.tool.call.arguments` / `.result` on tool spans) and
always passes through `ContentPolicy.clean`: every configured pattern is replaced by a marker
(API keys and e-mail addresses by default), then each string is capped at `max_chars`. The cap
applies per string, so the JSON around it stays valid.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from agenttrace import semconv as sc

__all__ = [
    "CONTENT_ENV",
    "DEFAULT_REDACTIONS",
    "ContentPolicy",
    "chat_input_messages",
    "chat_output_messages",
    "content_enabled_from_env",
]

CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_ON = {"true", "1", "yes", "on", "span_only", "span_and_event"}
DEFAULT_MAX_CHARS = 4000

# (what, pattern). Key formats first, so a key inside an `api_key=...` pair is named by its kind.
DEFAULT_REDACTIONS: tuple[tuple[str, str], ...] = (
    ("api_key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"),  # OpenAI, Anthropic
    ("api_key", r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    ("api_key", r"\b(?:ghp|gho|ghs|ghu)_[A-Za-z0-9]{30,}\b|\bgithub_pat_[A-Za-z0-9_]{30,}"),
    ("api_key", r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"),  # Slack
    ("api_key", r"\bAIza[0-9A-Za-z_\-]{35}\b"),  # Google
    ("api_key", r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*"),
    # `api_key=...`, `"password": "..."`: only the value (the `value` group) is replaced
    ("secret", r"(?i)\b(?:api[_-]?key|(?:access|auth|refresh)?[_-]?token|secret|password|passwd)\b[\"']?\s*[:=]\s*[\"']?(?P<value>[^\s\"',;]{4,})"),
    ("email", r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b"),
)


def content_enabled_from_env() -> bool:
    """Whether `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` asks for content on spans."""
    return os.environ.get(CONTENT_ENV, "").strip().lower() in _ON


def _compile(patterns: Iterable[tuple[str, str | re.Pattern[str]] | str | re.Pattern[str]]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    out = []
    for p in patterns:
        label, pat = p if isinstance(p, tuple) else ("redacted", p)
        out.append((label, pat if isinstance(pat, re.Pattern) else re.compile(pat)))
    return tuple(out)


@dataclass(frozen=True)
class ContentPolicy:
    """Whether content is recorded, what is redacted from it and how long each string may be.

    enabled: None reads the standard variable (at construction). redact: extra patterns, each a
    regex (string or compiled) or a `(label, regex)` pair; they are applied after the defaults
    unless `default_redactions=False`. A match becomes `[REDACTED:<label>]`.
    """

    enabled: bool | None = None
    redact: Sequence[tuple[str, str | re.Pattern[str]] | str | re.Pattern[str]] = ()
    max_chars: int = DEFAULT_MAX_CHARS
    default_redactions: bool = True
    _patterns: tuple[tuple[str, re.Pattern[str]], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.enabled is None:
            object.__setattr__(self, "enabled", content_enabled_from_env())
        if self.max_chars < 1:
            raise ValueError(f"max_chars must be at least 1, got {self.max_chars}")
        base = DEFAULT_REDACTIONS if self.default_redactions else ()
        object.__setattr__(self, "_patterns", _compile((*base, *self.redact)))

    def redact_text(self, text: str) -> str:
        """Every match of every pattern replaced by `[REDACTED:<label>]` (for a pattern with a
        `value` group, only that group)."""
        for label, pattern in self._patterns:
            marker = f"[REDACTED:{label}]"
            if "value" in pattern.groupindex:
                text = pattern.sub(lambda m, mk=marker: _replace_group(m, "value", mk), text)
            else:
                text = pattern.sub(marker, text)
        return text

    def clean(self, text: str) -> str:
        """Redact, then cap at `max_chars` (the cut is marked with how much was dropped)."""
        text = self.redact_text(text)
        if len(text) > self.max_chars:
            text = text[: self.max_chars] + f"...[{len(text) - self.max_chars} more characters]"
        return text

    def clean_value(self, value: Any) -> Any:
        """`clean` applied to every string inside nested lists and mappings."""
        if isinstance(value, str):
            return self.clean(value)
        if isinstance(value, Mapping):
            return {str(k): self.clean_value(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.clean_value(v) for v in value]
        return value

    def to_json(self, value: Any) -> str:
        """Cleaned JSON of `value` (strings cleaned individually, so the JSON stays valid)."""
        return json.dumps(self.clean_value(value), ensure_ascii=False, default=str)

    # -- recording ---------------------------------------------------------------------------
    def record_messages(self, span: Span, inputs: Sequence[Mapping[str, Any]] | None, outputs: Sequence[Mapping[str, Any]] | None) -> None:
        """`gen_ai.input.messages` / `gen_ai.output.messages`, when enabled."""
        if not self.enabled:
            return
        if inputs is not None:
            span.set_attribute(sc.GEN_AI_INPUT_MESSAGES, self.to_json(list(inputs)))
        if outputs is not None:
            span.set_attribute(sc.GEN_AI_OUTPUT_MESSAGES, self.to_json(list(outputs)))

    def record_tool_call(self, span: Span, arguments: Any = None, result: Any = None) -> None:
        """`gen_ai.tool.call.arguments` / `.result` on a tool span, when enabled."""
        if not self.enabled:
            return
        if arguments is not None:
            span.set_attribute(sc.GEN_AI_TOOL_CALL_ARGUMENTS, self._as_text(arguments))
        if result is not None:
            span.set_attribute(sc.GEN_AI_TOOL_CALL_RESULT, self._as_text(result))

    def _as_text(self, value: Any) -> str:
        return self.clean(value) if isinstance(value, str) else self.to_json(value)


def _replace_group(match: re.Match[str], group: str, marker: str) -> str:
    start, end = match.span(group)
    whole = match.group(0)
    offset = match.start()
    return whole[: start - offset] + marker + whole[end - offset :]


# -- GenAI message shapes ----------------------------------------------------------------------
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
