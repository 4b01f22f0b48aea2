"""`wrap_openai`: an OpenAI client (sync or async) whose chat completions are generation spans.

    client = agenttrace.wrap_openai(OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="-"))
    reply = client.chat.completions.create(model=..., messages=..., tools=TOOLS)

The wrapper holds the client; it patches nothing. `client.chat.completions.create` (and
`.parse`) records a `chat {model}` CLIENT span (SPANS.md) with the request settings, usage,
finish reasons, response id and model, the tool calls' count and names, and for streams the time
to first chunk; everything else is the wrapped client's own attribute. Works against any
OpenAI-compatible server (vLLM, Ollama, llama.cpp's server, `agenttrace serve`).

Two things are added to each request, both standard and both optional: a W3C `traceparent`
header, so a server that reads it (ours does) continues the trace; and, for streams whose caller
did not ask for usage, `stream_options={"include_usage": true}`, whose usage-only final chunk is
recorded and kept from the caller, so the caller sees the stream it asked for.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import propagate as otel_propagate
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.adapters.openai_stream import AsyncTracedStream, ChatCall, TracedStream
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.guard import strict

__all__ = ["wrap_openai"]


class _Settings:
    def __init__(self, client: Any, telemetry: Telemetry | None, provider: str | None, trace_headers: bool, stream_usage: bool) -> None:
        self.telemetry = telemetry
        self.trace_headers = trace_headers
        self.stream_usage = stream_usage
        base = str(getattr(client, "base_url", "") or "")
        parts = urlsplit(base)
        self.address = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80 if parts.scheme == "http" else None)
        host = self.address or ""
        self.provider = provider or ("openai" if host == "api.openai.com" or host.endswith(".openai.com") else "openai_compatible")

    def request_attributes(self, kwargs: Mapping[str, Any]) -> dict[str, AttributeValue]:
        attrs: dict[str, AttributeValue] = {
            sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
            sc.GEN_AI_PROVIDER_NAME: self.provider,
            sc.GEN_AI_REQUEST_MODEL: str(kwargs.get("model", "")),
        }
        max_tokens = _given(kwargs.get("max_completion_tokens")) or _given(kwargs.get("max_tokens"))
        for key, value in (
            (sc.GEN_AI_REQUEST_MAX_TOKENS, max_tokens),
            (sc.GEN_AI_REQUEST_TEMPERATURE, _given(kwargs.get("temperature"))),
            (sc.GEN_AI_REQUEST_TOP_P, _given(kwargs.get("top_p"))),
            (sc.GEN_AI_REQUEST_SEED, _given(kwargs.get("seed"))),
        ):
            if value is not None:
                attrs[key] = value
        stop = _given(kwargs.get("stop"))
        if stop:
            attrs[sc.GEN_AI_REQUEST_STOP_SEQUENCES] = (stop,) if isinstance(stop, str) else tuple(stop)
        if kwargs.get("stream") is True:
            attrs[sc.GEN_AI_REQUEST_STREAM] = True
        if self.address:
            attrs[sc.SERVER_ADDRESS] = self.address
        if self.port:
            attrs[sc.SERVER_PORT] = self.port
        return attrs


def _given(value: Any) -> Any:
    """None for the openai package's NOT_GIVEN / omit sentinels."""
    if value is None or type(value).__name__ in ("NotGiven", "Omit"):
        return None
    return value


def _begin(settings: _Settings, kwargs: dict[str, Any]) -> tuple[ChatCall | None, dict[str, Any], bool]:
    """Open the span and add the optional request extras; (None, kwargs) if recording failed."""
    try:
        call = ChatCall(
            settings.telemetry, str(kwargs.get("model", "")), settings.provider, settings.request_attributes(kwargs),
            kwargs.get("messages"),
        )
    except Exception as exc:  # never break the caller's request over telemetry
        if strict():
            raise
        from agenttrace.instrument import get_telemetry

        (settings.telemetry or get_telemetry()).failures.record("opening an OpenAI generation span", exc)
        return None, kwargs, False
    kwargs = dict(kwargs)
    hide_usage = False
    if kwargs.get("stream") is True and settings.stream_usage and _given(kwargs.get("stream_options")) is None:
        kwargs["stream_options"] = {"include_usage": True}
        hide_usage = True
    if settings.trace_headers:
        headers = dict(_given(kwargs.get("extra_headers")) or {})
        otel_propagate.inject(headers, context=call.context())
        kwargs["extra_headers"] = headers
    return call, kwargs, hide_usage


class _Completions:
    def __init__(self, inner: Any, settings: _Settings) -> None:
        self._inner = inner
        self._settings = settings

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create(self, **kwargs: Any) -> Any:
        """`chat.completions.create`, recorded as a generation span (see the module docstring)."""
        return self._call(self._inner.create, kwargs)

    def parse(self, **kwargs: Any) -> Any:
        """`chat.completions.parse` (structured outputs), recorded like `create`."""
        return self._call(self._inner.parse, kwargs)

    def _call(self, method: Any, kwargs: dict[str, Any]) -> Any:
        call, kwargs, hide_usage = _begin(self._settings, kwargs)
        if call is None:
            return method(**kwargs)
        try:
            result = method(**kwargs)
        except BaseException as exc:
            call.end(exc)
            raise
        if kwargs.get("stream") is True:
            return TracedStream(result, call, hide_usage)
        call.response(result)
        return result


class _AsyncCompletions(_Completions):
    async def create(self, **kwargs: Any) -> Any:  # type: ignore[override]
        return await self._acall(self._inner.create, kwargs)

    async def parse(self, **kwargs: Any) -> Any:  # type: ignore[override]
        return await self._acall(self._inner.parse, kwargs)

    async def _acall(self, method: Any, kwargs: dict[str, Any]) -> Any:
        call, kwargs, hide_usage = _begin(self._settings, kwargs)
        if call is None:
            return await method(**kwargs)
        try:
            result = await method(**kwargs)
        except BaseException as exc:
            call.end(exc)
            raise
        if kwargs.get("stream") is True:
            return AsyncTracedStream(result, call, hide_usage)
        call.response(result)
        return result


class _Chat:
    def __init__(self, inner: Any, completions: _Completions) -> None:
        self._inner = inner
        self.completions = completions

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TracedOpenAI:
    """The wrapped client: `chat.completions` is traced, everything else is the client's own."""

    def __init__(self, client: Any, settings: _Settings) -> None:
        self._client = client
        self._settings = settings
        completions = client.chat.completions
        # openai decorates `create`, hiding that the async client's is a coroutine function
        is_async = inspect.iscoroutinefunction(inspect.unwrap(completions.create)) or type(completions).__name__.startswith("Async")
        wrapped = (_AsyncCompletions if is_async else _Completions)(completions, settings)
        self.chat = _Chat(client.chat, wrapped)

    @property
    def wrapped(self) -> Any:
        """The client this wraps."""
        return self._client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def with_options(self, **kwargs: Any) -> TracedOpenAI:
        return TracedOpenAI(self._client.with_options(**kwargs), self._settings)

    def copy(self, **kwargs: Any) -> TracedOpenAI:
        return TracedOpenAI(self._client.copy(**kwargs), self._settings)


def wrap_openai(
    client: Any,
    *,
    telemetry: Telemetry | None = None,
    provider_name: str | None = None,
    trace_headers: bool = True,
    stream_usage: bool = True,
) -> TracedOpenAI:
    """Wrap an `openai.OpenAI` or `openai.AsyncOpenAI` client (or any object with the same
    `chat.completions.create`) so each chat completion is a generation span.

    telemetry: where spans go (default: the run's, else `agenttrace.configure`'s).
    provider_name: `gen_ai.provider.name` (default `openai` for api.openai.com, else
    `openai_compatible`). trace_headers: send a W3C `traceparent`. stream_usage: ask streams for
    their usage (hidden from the caller when the caller did not ask).
    """
    return TracedOpenAI(client, _Settings(client, telemetry, provider_name, trace_headers, stream_usage))
