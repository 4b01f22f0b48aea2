"""The OpenAI-compatible HTTP API (Starlette): chat completions, streamed over SSE or not.

    POST /v1/chat/completions   messages, tools, tool_choice, stream, stream_options, stop, ...
    GET  /v1/models             the one served model
    GET  /health                {"status": "ok"}

Starlette and uvicorn: a small ASGI stack made for this (routing, SSE streaming responses,
client-disconnect detection), with no framework beyond it. Every request is checked against the
server's `ServeLimits` before it waits for the model, and the schema it asks decoding to follow
is compiled then too (one that does not compile is a 400 saying why). Generation runs on a
worker thread; a client that disconnects, mid-stream or while waiting for a whole completion,
cancels its generation at the next round. Every failure, unknown routes and our own bugs included, is
answered with an OpenAI error body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agenttrace.core.chat import CancelToken, Constraint
from agenttrace.errors import ConstraintUnavailable, GenerationCancelled, RequestError
from agenttrace.serve.backend import Engine, EngineResult
from agenttrace.serve.limits import ServeLimits, check_params, check_prompt, parse_body, read_body
from agenttrace.serve.protocol import (
    DEFAULT_MAX_TOKENS,
    ChatRequest,
    chunk_body,
    completion_body,
    error_body,
    new_ids,
    prompt_messages,
    request_constraint,
    request_params,
    request_tools,
)

__all__ = ["create_app"]

_DONE = object()


def _error(exc: RequestError) -> JSONResponse:
    kind = "invalid_request_error" if exc.status < 500 else "server_error"
    return JSONResponse(error_body(str(exc), kind=kind, param=exc.param, code=exc.code), status_code=exc.status)


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


class _TextStream:
    """Turns the token lists the generator reports into text deltas: held back while the text
    ends in an incomplete character or could still turn out to be the start of a stop string."""

    def __init__(self, decode: Any, stops: tuple[str, ...]) -> None:
        self.decode = decode
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.stops = stops
        self.sent = ""

    def delta(self, tokens: list[int]) -> str:
        text = self.decode(tokens)
        if any(s in text for s in self.stops):
            return ""  # the final text (cut at the stop string) is sent at the end
        text = text.rstrip("\ufffd")
        safe = text[: len(text) - self.hold] if self.hold else text
        if not safe.startswith(self.sent) or len(safe) <= len(self.sent):
            return ""
        out, self.sent = safe[len(self.sent) :], safe
        return out

    def rest(self, final: str) -> str:
        return final[len(self.sent) :] if final.startswith(self.sent) else ""


def create_app(engine: Engine, limits: ServeLimits = ServeLimits()) -> Starlette:
    """The ASGI app serving `engine` within `limits`."""
    prompt_limit = limits.prompt_limit(engine.context_length)

    async def health(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def models(_: Request) -> Response:
        created = engine.telemetry.clock.now_ns() // 1_000_000_000
        card = {"id": engine.model_name, "object": "model", "created": created, "owned_by": "agenttrace"}
        return JSONResponse({"object": "list", "data": [card]})

    async def chat(request: Request) -> Response:
        try:
            body = parse_body(await read_body(request, limits.max_body_bytes), limits.max_json_depth)
            req = ChatRequest.model_validate(body)
            if req.model != engine.model_name:
                raise RequestError(
                    f"model {req.model!r} is not served here; this server serves {engine.model_name!r}",
                    status=404, param="model", code="model_not_found",
                )
            params = request_params(req, default_max_tokens=min(DEFAULT_MAX_TOKENS, limits.max_tokens))
            check_params(params, limits)
            tools = request_tools(req)
            messages = prompt_messages(req, tools)  # (checks a named tool_choice against the tools)
            constraint = request_constraint(req, tools, params.max_tokens, constrain_auto=engine.constrained)
            if constraint is not None:
                await _check_constraint(engine, constraint)
            params = replace(params, constraint=constraint)
            prompt = await anyio.to_thread.run_sync(engine.encode, messages)
            check_prompt(len(prompt), prompt_limit)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(map(str, first["loc"]))
            said = f"{where}: {first['msg']}" if where else first["msg"]
            return _error(RequestError(f"invalid request: {said}", param=where or None))
        except RequestError as exc:
            return _error(exc)

        cid, call_id = new_ids()
        created = engine.telemetry.clock.now_ns() // 1_000_000_000
        span = engine.begin(request.headers, params, req.stream)
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            stream = _stream(engine, span, messages, prompt, params, tools, cid, call_id, created, include_usage)
            return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        cancel = CancelToken()
        try:
            result = await _complete(
                request, cancel, limits.disconnect_poll_s,
                lambda: engine.run(span, messages, prompt, params, tools, call_id, cancel=cancel),
            )
        except BaseException as exc:
            cancel.cancel()
            engine.end(span, exc)
            if isinstance(exc, GenerationCancelled):
                if engine.closing:
                    return _error(RequestError("the server is shutting down", status=503, code="server_shutting_down"))
                # The client is gone: nobody reads this, but the handler ends without an error.
                return _error(RequestError("the client closed the request", status=499, code="client_closed_request"))
            if isinstance(exc, Exception):
                return _error(RequestError(f"generation failed: {type(exc).__name__}: {exc}", status=500))
            raise
        engine.end(span, None)
        return JSONResponse(completion_body(cid, created, engine.model_name, result.reply))

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        return JSONResponse(error_body(exc.detail, kind=kind), status_code=exc.status_code, headers=exc.headers)

    async def internal_error(_: Request, exc: Exception) -> Response:
        # Our bug: answered in the API's shape; Starlette re-raises it for the server's log.
        return JSONResponse(
            error_body(f"internal server error: {type(exc).__name__}: {exc}", kind="server_error"), status_code=500
        )

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: internal_error},
    )


async def _check_constraint(engine: Engine, constraint: Constraint) -> None:
    """RequestError(400) when the request asks for a grammar this server cannot give it: the
    engine cannot constrain at all, or the schema does not compile (answered here, before the
    request waits for the model, rather than decoded unconstrained)."""
    from_format = constraint.name.startswith("response_format")
    param = "response_format" if from_format else "tool_choice"
    unavailable = engine.constraint_error
    if not unavailable:
        try:
            why = await anyio.to_thread.run_sync(engine.grammar_error, constraint)
        except ConstraintUnavailable as exc:  # an engine not built by build_engine, mapping the tokenizer now
            unavailable = str(exc)
    if unavailable:
        raise RequestError(f"this server cannot constrain decoding: {unavailable}", param=param)
    if why is None:
        return
    if from_format:
        raise RequestError(f"invalid schema for response_format: {why}", param="response_format.json_schema.schema",
                           code="invalid_json_schema")
    raise RequestError(f"the tools' parameter schemas do not compile into a grammar: {why}", param="tools",
                       code="invalid_json_schema")


async def _complete(request: Request, cancel: CancelToken, poll_s: float, work: Any) -> EngineResult:
    """`work()` on a worker thread, polling every `poll_s` for the client going away, which sets
    `cancel` (the worker stops at its next round and the model is free for the next request)."""

    async def watch() -> None:
        try:
            while not await request.is_disconnected():
                await anyio.sleep(poll_s)
        finally:  # disconnected, or this request is being cancelled: stop generating either way
            cancel.cancel()

    failure: Exception | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        try:
            result = await anyio.to_thread.run_sync(work, abandon_on_cancel=False)
        except Exception as exc:  # raised from here, not wrapped in the task group's ExceptionGroup
            failure = exc
        finally:
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


async def _stream(
    engine: Engine, span: Any, messages: Any, prompt: list[int], params: Any, tools: Any, cid: str, call_id: str,
    created: int, include_usage: bool,
) -> AsyncIterator[str]:
    """SSE events: a role chunk, content deltas as tokens arrive (or, with tools, the decision
    once parsed), the finish chunk, the usage chunk if asked, then `[DONE]`."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    cancel = CancelToken()
    text = _TextStream(engine.model.decode, params.stop)

    def on_tokens(tokens: list[int]) -> None:  # on the worker thread
        if not tools:
            loop.call_soon_threadsafe(queue.put_nowait, tokens)

    def work() -> None:
        try:
            outcome: Any = engine.run(span, messages, prompt, params, tools, call_id, on_tokens=on_tokens, cancel=cancel)
        except BaseException as exc:  # handed to the event loop, which ends the span
            outcome = exc
        loop.call_soon_threadsafe(queue.put_nowait, (_DONE, outcome))

    model = engine.model_name
    loop.run_in_executor(None, work)
    error: BaseException | None = None
    try:
        yield _sse(chunk_body(cid, created, model, {"role": "assistant", "content": ""}))
        while True:
            item = await queue.get()
            if isinstance(item, tuple) and item and item[0] is _DONE:
                outcome = item[1]
                break
            delta = text.delta(item)
            if delta:
                yield _sse(chunk_body(cid, created, model, {"content": delta}))
        if isinstance(outcome, BaseException):
            error = outcome
            yield _sse(error_body(f"generation failed: {type(outcome).__name__}: {outcome}", kind="server_error"))
            return
        reply = outcome.reply
        if reply.tool_call is not None:
            calls = [dict(c, index=i) for i, c in enumerate(reply.tool_calls())]
            yield _sse(chunk_body(cid, created, model, {"tool_calls": calls}))
        else:
            rest = text.rest(reply.content or "") if not tools else reply.content or ""
            if rest:
                yield _sse(chunk_body(cid, created, model, {"content": rest}))
        yield _sse(chunk_body(cid, created, model, {}, reply.finish_reason))
        if include_usage:
            yield _sse(chunk_body(cid, created, model, None, usage=reply.usage()))
        yield "data: [DONE]\n\n"
    except BaseException as exc:  # the client went away (cancelled) or sending failed
        error = exc
        cancel.cancel()
        raise
    finally:
        if error is not None:
            cancel.cancel()  # the worker stops at its next round and frees the model
        engine.end(span, error)
