"""Scopes: the context managers of the instrumentation API, which are also decorators.

A scope object holds only its arguments; each entry opens a fresh span and handle, so one
decorated function can run in many threads and tasks at once.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import Token
from typing import Any, Generic, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from agenttrace.instrument.config import get_telemetry
from agenttrace.instrument.frames import (
    Frame,
    current_frame,
    frame_telemetry,
    pop_frame,
    push_frame,
)
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.guard import guarded, strict

__all__ = ["Scope"]

H = TypeVar("H")


class Scope(Generic[H]):
    """A span scope: `with`, `async with`, or a decorator of sync and async functions.

    Subclasses implement `_open` (start the span, return the handle) and `_close`. Telemetry
    failures in either are counted by the telemetry's guard and never reach the caller (under
    the test runner's strict mode they raise); the caller's own exceptions pass through unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args, self._kwargs = args, kwargs
        self._entered: list[tuple[H | None, Telemetry | None, Token[Any] | None, Token[Frame | None] | None]] = []

    # subclass hooks --------------------------------------------------------------------------
    def _open(self) -> tuple[H, Telemetry, Span, Frame | None]:
        raise NotImplementedError

    def _close(self, handle: H, exc: BaseException | None) -> None:
        raise NotImplementedError

    def _null(self) -> H | None:
        return None

    # context manager -------------------------------------------------------------------------
    def __enter__(self) -> H:
        tel = None
        try:
            handle, tel, span, frame = self._open()
        except Exception as exc:  # telemetry must not break the host: count, run the block untraced
            if strict():
                raise
            tel = self._kwargs.get("telemetry") or frame_telemetry(current_frame()) or get_telemetry()
            tel.failures.record(f"opening a {type(self).__name__}", exc)
            self._entered.append((None, None, None, None))
            return self._null()  # type: ignore[return-value]
        otel_token = otel_context.attach(trace.set_span_in_context(span))
        frame_token = push_frame(frame) if frame is not None else None
        self._entered.append((handle, tel, otel_token, frame_token))
        return handle

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        handle, tel, otel_token, frame_token = self._entered.pop()
        if frame_token is not None:
            pop_frame(frame_token)
        if otel_token is not None:
            otel_context.detach(otel_token)
        if handle is not None and tel is not None:
            guarded(tel.failures, f"closing a {type(self).__name__}", self._close, handle, exc)
        return False  # never swallow the caller's exception

    async def __aenter__(self) -> H:
        return self.__enter__()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        return self.__exit__(exc_type, exc, tb)

    # decorator -------------------------------------------------------------------------------
    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        make = functools.partial(type(self), *self._args, **self._kwargs)
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                async with make():
                    return await fn(*args, **kwargs)

            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with make():
                return fn(*args, **kwargs)

        return wrapper
