"""The OpenAI chat-completions wire format: requests (pydantic, validated at the edge), the
conversion of their messages into our prompt (tools shown as in our own loop), and the response
and stream-chunk bodies."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agenttrace.core.chat import Constraint, GenerationParams, Message
from agenttrace.core.tools import Tool
from agenttrace.errors import RequestError
from agenttrace.runtime.decision_grammar import decision_constraint, schema_source
from agenttrace.runtime.parse import ToolCall
from agenttrace.runtime.prompt import DEFAULT_INSTRUCTIONS, PromptStyle, decision_text, observation, tool_catalogue

__all__ = [
    "ChatRequest",
    "ServedReply",
    "chunk_body",
    "completion_body",
    "error_body",
    "prompt_messages",
    "request_constraint",
    "request_params",
    "request_tools",
]

DEFAULT_MAX_TOKENS = 128


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")  # fields we do not use are accepted and ignored


class FunctionCall(_Wire):
    name: str
    arguments: str = ""


class ToolCallIn(_Wire):
    id: str | None = None
    type: str = "function"
    function: FunctionCall


class ContentPart(_Wire):
    type: str
    text: str | None = None


class ChatMessage(_Wire):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.text or "" for p in self.content if p.type == "text")
        return self.content or ""


class FunctionSpec(_Wire):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolSpec(_Wire):
    type: Literal["function"] = "function"
    function: FunctionSpec


class StreamOptions(_Wire):
    include_usage: bool = False


class ResponseFormat(_Wire):
    type: Literal["text", "json_object", "json_schema"] = "text"
    json_schema: dict[str, Any] | None = None


class ChatRequest(_Wire):
    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    # NaN and infinities (Python's json reads NaN, Infinity and 1e999) get "a finite number"
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)  # what torch's generator takes
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    response_format: ResponseFormat | None = None
    n: int = 1


def request_params(req: ChatRequest, default_max_tokens: int = DEFAULT_MAX_TOKENS) -> GenerationParams:
    """Sampling settings; `default_max_tokens` when the request gives no max_tokens. Temperature
    defaults to 0 (greedy), not OpenAI's 1: small local models are only useful greedy, and greedy
    makes speculative decoding exact."""
    if req.n != 1:
        raise RequestError("only n=1 is supported", param="n")
    stop = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
    return GenerationParams(
        max_tokens=req.max_completion_tokens or req.max_tokens or default_max_tokens,
        temperature=req.temperature if req.temperature is not None else 0.0,
        top_p=req.top_p if req.top_p is not None else 1.0,
        seed=req.seed,
        stop=stop,
    )


def request_constraint(req: ChatRequest, tools: Sequence[Tool], max_tokens: int, *,
                       constrain_auto: bool = False) -> Constraint | None:
    """The grammar a request asks for: `response_format` json_schema (its schema) or
    json_object; `tool_choice` "required" (a call to one of the tools) or a named function (a
    call to it); with `constrain_auto` (the server's --constrained), "auto" too (a call or an
    answer). None: decode freely. Span attributes name the grammar by kind, never by the
    caller's own schema name."""
    rf = req.response_format
    if rf is not None and rf.type == "json_schema":
        schema = (rf.json_schema or {}).get("schema")
        if not isinstance(schema, dict):
            raise RequestError("response_format.json_schema.schema must be a JSON schema object",
                               param="response_format.json_schema.schema")
        return Constraint("json_schema", schema_source(schema), "response_format_json_schema")
    if rf is not None and rf.type == "json_object":
        return Constraint("json_schema", schema_source({"type": "object"}), "response_format_json_object")
    if not tools:
        return None
    choice = req.tool_choice
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return decision_constraint([t for t in tools if t.name == name], max_tokens, answer=False)
    if choice == "required":
        return decision_constraint(tools, max_tokens, answer=False)
    return decision_constraint(tools, max_tokens) if constrain_auto else None


def _unused(**_: Any) -> None:  # pragma: no cover - the server never runs the caller's tools
    raise RuntimeError("tools are run by the caller")


def request_tools(req: ChatRequest) -> list[Tool]:
    """The request's tools as `Tool`s (schema checked), or [] when tools are off for this call."""
    if not req.tools or req.tool_choice == "none":
        return []
    tools = []
    for i, spec in enumerate(req.tools):
        try:
            tools.append(Tool(spec.function.name, spec.function.description, spec.function.parameters, _unused))
        except ValueError as exc:
            raise RequestError(str(exc), param=f"tools[{i}].function.parameters") from None
    return tools


def _tool_instruction(req: ChatRequest, tools: Sequence[Tool]) -> str:
    choice = req.tool_choice
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        if name not in {t.name for t in tools}:
            raise RequestError(f"tool_choice names {name!r}, which is not among the tools", param="tool_choice")
        return f"\nCall the tool {name}."
    if choice == "required":
        return "\nYou must call one of the tools."
    return ""


def prompt_messages(req: ChatRequest, tools: Sequence[Tool], style: PromptStyle = PromptStyle()) -> list[Message]:
    """The conversation as our model sees it. With tools, the system prompt is our loop's
    (instructions and one line per tool) followed by the caller's system text; earlier tool calls
    are shown as the JSON decisions the model is asked for, and tool results as observations."""
    system = [m.text() for m in req.messages if m.role in ("system", "developer") and m.text()]
    out: list[Message] = []
    if tools:
        head = f"{DEFAULT_INSTRUCTIONS} Or, to answer, reply {{\"answer\": \"...\"}}.\n{tool_catalogue(tools)}"
        out.append(Message("system", "\n".join([head + _tool_instruction(req, tools), *system])))
    elif system:
        out.append(Message("system", "\n".join(system)))
    for m in req.messages:
        if m.role in ("system", "developer"):
            continue
        if m.role == "user":
            out.append(Message("user", m.text()))
        elif m.role == "assistant":
            calls = [ToolCall(c.function.name, _arguments(c.function.arguments)) for c in m.tool_calls or ()]
            text = "\n".join(decision_text(c) for c in calls) if calls else m.text()
            out.append(Message("assistant", text))
        else:  # tool result
            out.append(observation(m.text(), style) if tools else Message("user", m.text()))
    return out


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return {"_unparsed": text}
    return value if isinstance(value, dict) else {"_value": value}


# -- responses ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServedReply:
    """What one request produced, in OpenAI terms."""

    content: str | None
    tool_call: ToolCall | None
    finish_reason: str  # stop, length, tool_calls
    prompt_tokens: int
    completion_tokens: int
    call_id: str = ""

    def tool_calls(self) -> list[dict[str, Any]]:
        if self.tool_call is None:
            return []
        args = json.dumps(self.tool_call.arguments, ensure_ascii=False)
        return [{"id": self.call_id, "type": "function", "function": {"name": self.tool_call.tool, "arguments": args}}]

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }


def new_ids() -> tuple[str, str]:
    """(completion id, tool call id)."""
    return f"chatcmpl-{uuid.uuid4().hex}", f"call_{uuid.uuid4().hex[:24]}"


def completion_body(cid: str, created: int, model: str, reply: ServedReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_call is not None:
        message["tool_calls"] = reply.tool_calls()
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason, "logprobs": None}],
        "usage": reply.usage(),
    }


def chunk_body(
    cid: str, created: int, model: str, delta: dict[str, Any] | None, finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One `chat.completion.chunk`; `delta=None` gives the usage-only chunk (no choices)."""
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
    body["choices"] = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}]
    if usage is not None:
        body["usage"] = usage
    return body


def error_body(message: str, *, kind: str = "invalid_request_error", param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
