"""What one request may ask of the server, and reading a request body within it.

One model serves one request at a time, so every request must be bounded before it reaches the
model: its body (read in chunks, refused at the limit with a 413), its JSON (no NaN surprises,
no nesting or integers deep enough to exhaust the parser, no lone surrogates the tokenizer cannot
take), its prompt (counted in tokens, before it waits for the model) and its completion
(`max_tokens` above the cap is refused, not trimmed, as OpenAI and vLLM do). Each refusal is a
`RequestError`, answered with an OpenAI error body. A client that hangs up before its body is
whole gets a 499 nobody reads and one debug line, not a traceback in the server's log.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect

from agenttrace.errors import RequestError

if TYPE_CHECKING:
    from starlette.requests import Request

    from agenttrace.core.chat import GenerationParams

__all__ = [
    "DEFAULT_PROMPT_TOKENS",
    "ServeLimits",
    "check_json",
    "check_params",
    "check_prompt",
    "parse_body",
    "read_body",
]

DEFAULT_PROMPT_TOKENS = 8192  # the prompt limit when the model's context length is unknown or longer
# A body over the limit is still read (and dropped) up to this size, so the client, still
# sending, gets the 413 instead of a reset connection; past it the connection is just closed.
_DRAIN_BYTES = 64 << 20

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeLimits:
    """Per-request limits of `agenttrace serve` (each also a command-line option)."""

    max_body_bytes: int = 1 << 20  # a larger request body is answered 413 unparsed
    max_prompt_tokens: int | None = None  # None: the model's context length, at most 8192
    max_tokens: int = 4096  # the most completion tokens a request may ask for (more: 400)
    max_json_depth: int = 64  # deeper nesting is answered 400 (tool schemas need a handful)
    max_stop: int = 16  # stop sequences per request (each is checked after every round)
    disconnect_poll_s: float = 0.1  # how often a non-streaming request checks its client is there

    def prompt_limit(self, context_length: int | None) -> int:
        """The prompt-token limit for a model with `context_length` positions (None: unknown)."""
        if self.max_prompt_tokens is not None:
            return self.max_prompt_tokens
        return min(context_length or DEFAULT_PROMPT_TOKENS, DEFAULT_PROMPT_TOKENS)


def _too_large(limit: int) -> RequestError:
    return RequestError(
        f"the request body is larger than this server's limit of {limit} bytes",
        status=413, code="request_too_large",
    )


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or RequestError(413) once it passes `limit` bytes (a declared
    Content-Length over the limit is refused without keeping any of the body), or
    RequestError(499) when the client disconnects before the body ends (the answer is never
    sent; the server logs one debug line)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > _DRAIN_BYTES:
        raise _too_large(limit)
    over = declared.isdigit() and int(declared) > limit
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                over = True
                chunks.clear()
            if over:
                if size > _DRAIN_BYTES:
                    break
                continue
            chunks.append(chunk)
    except ClientDisconnect:
        # A hang-up is the client's choice, not a server fault: no traceback, nothing to answer.
        _log.debug("a client disconnected after %d of %s body bytes", size, declared or "an unknown number of")
        raise RequestError("the client closed the connection before the request body ended", status=499,
                           code="client_closed_request") from None
    if over:
        raise _too_large(limit)
    return b"".join(chunks)


def parse_body(raw: bytes, max_depth: int) -> Any:
    """The body's JSON, checked by `check_json`, or RequestError(400) saying what is wrong with it."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise RequestError(f"the request body nests deeper than the limit of {max_depth} levels") from None
    except UnicodeDecodeError as exc:
        raise RequestError(f"the request body is not valid UTF-8 JSON: {exc.reason} at byte {exc.start}") from None
    except ValueError as exc:  # JSONDecodeError, or an integer too long to convert
        if "integer string conversion" in str(exc):
            digits = sys.get_int_max_str_digits()
            raise RequestError(f"the request body holds an integer of more than {digits} digits") from None
        raise RequestError(f"the request body is not valid JSON: {exc}") from None
    check_json(value, max_depth)
    return value


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return f"{parent}.{key}" if parent else key


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = f"U+{ord(text[exc.start]):04X}"
        raise RequestError(
            f"{where or 'the request'}: the text holds a lone surrogate ({bad}), which is not valid Unicode",
            param=where or None,
        ) from None


def check_json(value: Any, max_depth: int) -> None:
    """RequestError(400) for nesting deeper than `max_depth` or a string (value or key) that is
    not valid Unicode: JSON's `\\ud800` escapes decode to lone surrogates, which the tokenizer
    cannot take. Iterative, so it cannot itself run out of stack."""
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, where)
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > max_depth:
            raise RequestError(f"the request body nests deeper than the limit of {max_depth} levels", param=where or None)
        if isinstance(item, dict):
            for key, child in item.items():
                _check_text(key, where)
                stack.append((child, _path(where, key), depth + 1))
        else:
            stack.extend((child, _path(where, i), depth + 1) for i, child in enumerate(item))


def check_params(params: GenerationParams, limits: ServeLimits) -> None:
    """RequestError(400) for a completion longer than the cap or too many stop sequences."""
    if params.max_tokens > limits.max_tokens:
        raise RequestError(
            f"max_tokens is too large: {params.max_tokens}; this server allows at most {limits.max_tokens} "
            "completion tokens per request",
            param="max_tokens",
        )
    if len(params.stop) > limits.max_stop:
        raise RequestError(f"at most {limits.max_stop} stop sequences are allowed, not {len(params.stop)}", param="stop")


def check_prompt(prompt_tokens: int, limit: int) -> None:
    """RequestError(400, code context_length_exceeded) for a prompt over `limit` tokens."""
    if prompt_tokens > limit:
        raise RequestError(
            f"the prompt is {prompt_tokens} tokens long; this server takes at most {limit} prompt tokens",
            param="messages", code="context_length_exceeded",
        )
