"""What the model is shown: instructions, tool schemas, worked examples, the conversation, and
the messages added after a tool result or a mistake."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agenttrace.core.chat import Message, Role
from agenttrace.core.tools import Tool
from agenttrace.errors import ModelMistake
from agenttrace.runtime.parse import FinalAnswer, ToolCall

__all__ = ["Example", "PromptStyle", "build_messages", "decision_text", "observation", "retry_feedback"]

DEFAULT_INSTRUCTIONS = 'You answer by calling a tool. Reply with one JSON object: {"tool": name, "arguments": {...}}.'
DEFAULT_OBSERVATION = 'Tool result: {result}\nIf this answers the request, reply {{"answer": "..."}}; otherwise call a tool.'


@dataclass(frozen=True)
class Example:
    """A worked example shown before the request, as real conversation turns.

    Each call is shown as the assistant's reply; `results` (one per call) and `answer` are
    optional. Small models copy everything they see: with the bundled 135M model, examples of
    the first call alone gave 20/32 schema-valid calls and full examples with results 8/32.
    """

    request: str
    calls: tuple[ToolCall, ...] = ()
    results: tuple[str, ...] = ()
    answer: str | None = None


@dataclass(frozen=True)
class PromptStyle:
    """How turns are rendered. Small chat models follow `user` turns better than a `tool` role
    they were never trained on, hence the default role for tool results."""

    instructions: str = DEFAULT_INSTRUCTIONS
    observation_role: Role = "user"
    observation_template: str = DEFAULT_OBSERVATION  # `{result}` is the tool's rendered result


def decision_text(decision: ToolCall | FinalAnswer) -> str:
    """The canonical JSON the model is taught to produce for a decision."""
    if isinstance(decision, FinalAnswer):
        return json.dumps({"answer": decision.text}, ensure_ascii=False)
    return json.dumps({"tool": decision.tool, "arguments": decision.arguments}, ensure_ascii=False)


def _type_hint(schema: Mapping[str, Any]) -> str:
    enum = schema.get("enum")
    if enum and len(enum) <= 4:
        return "|".join(json.dumps(v) for v in enum)
    return _TYPE_NAMES.get(str(schema.get("type")), str(schema.get("type", "any")))


_TYPE_NAMES = {"string": "str", "integer": "int", "number": "number", "boolean": "bool", "array": "list", "object": "object"}


def tool_signature(tool: Tool) -> str:
    """One line per tool, e.g. `weather {"city": str, "unit"?: "celsius"|"fahrenheit"} - ...`.

    Far shorter than the JSON schema (every prompt token is prefilled at every step), and
    what small models copy most faithfully."""
    required = set(tool.parameters.get("required", ()))
    fields = [
        f'"{name}"{"" if name in required else "?"}: {_type_hint(spec)}'
        for name, spec in tool.parameters.get("properties", {}).items()
    ]
    return f"{tool.name} {{{', '.join(fields)}}} - {tool.description}"


def tool_catalogue(tools: Sequence[Tool]) -> str:
    return "Tools:\n" + "\n".join(tool_signature(t) for t in tools)


def observation(text: str, style: PromptStyle) -> Message:
    return Message(style.observation_role, style.observation_template.format(result=text))


def retry_feedback(mistake: ModelMistake) -> Message:
    """The message that tells the model what was wrong with its last reply."""
    return Message("user", f"Error: {mistake.message_for_model} Try again with one JSON object.")


def build_messages(
    tools: Sequence[Tool], examples: Sequence[Example], request: str, style: PromptStyle = PromptStyle()
) -> list[Message]:
    """System prompt (instructions, tools), each example as real turns, then the request."""
    messages = [Message("system", f"{style.instructions}\n{tool_catalogue(tools)}")]
    for ex in examples:
        messages.append(Message("user", ex.request))
        for i, call in enumerate(ex.calls):
            messages.append(Message("assistant", decision_text(call)))
            if i < len(ex.results):
                messages.append(observation(ex.results[i], style))
        if ex.answer is not None:
            messages.append(Message("assistant", decision_text(FinalAnswer(ex.answer))))
    messages.append(Message("user", request))
    return messages
