"""`wrap_model`: any function that calls a model, traced in one line like `wrap_openai`.

    ask = agenttrace.wrap_model(my_client_call, provider="anthropic")
    message = ask(messages=..., tools=...)   # a `chat {model}` span per call

For agents whose model is not an OpenAI client: a function of a vendor SDK, a local pipeline,
an HTTP helper. The function is called unchanged and its return value passed back unchanged;
the span reads what the reply says about itself (`adapters.replies`: usage, finish reasons,
tool-call names, the response's model and id) from an OpenAI completion or message, an
Anthropic-style message, their dict forms, a string, or an agenttrace `Generation`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.adapters.openai_stream import ChatCall
from agenttrace.core.chat import Generation
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.generation_attributes import record_generation
from agenttrace.telemetry.guard import strict

__all__ = ["wrap_model"]

F = TypeVar("F", bound=Callable[..., Any])


def _request_attributes(operation: str, model: str | None, provider: str | None, kwargs: dict[str, Any]) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {sc.GEN_AI_OPERATION_NAME: operation}
    if provider:
        attrs[sc.GEN_AI_PROVIDER_NAME] = provider
    if model:
        attrs[sc.GEN_AI_REQUEST_MODEL] = model
    for key, names in ((sc.GEN_AI_REQUEST_MAX_TOKENS, ("max_tokens", "max_completion_tokens", "max_new_tokens")),
                       (sc.GEN_AI_REQUEST_TEMPERATURE, ("temperature",))):
        for name in names:
            value = kwargs.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                attrs[key] = value
                break
    return attrs


def wrap_model(
    fn: F,
    *,
    model: str | None = None,
    provider: str | None = None,
    operation: str = sc.OP_CHAT,
    remote: bool = True,
    telemetry: Telemetry | None = None,
) -> F:
    """Wrap a sync or async function that calls a model so each call is a generation span.

    model: `gen_ai.request.model` (default: the call's `model=` keyword, else the reply's model,
    which then names the span). provider: `gen_ai.provider.name`, set only when given (it may be
    unknowable). remote: the model is behind a network call (a CLIENT span); False for an
    in-process model. The span is placed in the current step's attempt like every other, and an
    exception from `fn` marks it failed and passes through. Recording never raises.
    """

    def begin(kwargs: dict[str, Any]) -> ChatCall | None:
        name = model or (kwargs.get("model") if isinstance(kwargs.get("model"), str) else None)
        try:
            return ChatCall(telemetry, name, provider, _request_attributes(operation, name, provider, kwargs),
                            kwargs.get("messages"), kind=SpanKind.CLIENT if remote else SpanKind.INTERNAL)
        except Exception as exc:  # telemetry never breaks the call
            if strict():
                raise
            from agenttrace.instrument import get_telemetry

            (telemetry or get_telemetry()).failures.record("opening a model call's generation span", exc)
            return None

    def finish(call: ChatCall, result: Any) -> None:
        if isinstance(result, Generation):
            call.tel.guard("recording a generation", record_generation, call.tel, call.span, result)
            call.placement.usage(result.input_tokens, result.output_tokens)
            call.end(None)
        else:
            call.response(result)

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            call = begin(kwargs)
            if call is None:
                return await fn(*args, **kwargs)
            try:
                result = await fn(*args, **kwargs)
            except BaseException as exc:
                call.end(exc)
                raise
            finish(call, result)
            return result

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        call = begin(kwargs)
        if call is None:
            return fn(*args, **kwargs)
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            call.end(exc)
            raise
        finish(call, result)
        return result

    return wrapper  # type: ignore[return-value]
