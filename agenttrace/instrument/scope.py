"""Scopes: the context managers of the instrumentation API, which are also decorators.

A scope object holds only its arguments; each entry opens a fresh span and handle, so one
decorated function can run in many threads and tasks at once. One scope *object* may also be
entered by many threads or asyncio tasks at once, and re-entered inside itself: each entry is
kept in the context (thread or task) that entered it, and must be exited there. Exiting a scope in
a thread or task that did not enter it is a bug in the caller and raises `ScopeError` (with the
span left open), instead of detaching another task's context and losing its spans.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, Generic, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from agenttrace.errors import ScopeError
from agenttrace.instrument.config import get_telemetry
from agenttrace.instrument.frames import Frame, current_frame, frame_telemetry, pop_frame, push_frame
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.guard import guarded, strict

__all__ = ["Scope", "ScopeError"]

H = TypeVar("H")
# (scope, handle, telemetry, otel token, frame token) for each scope entered and not yet exited in
# this thread or task, innermost last. Per context, so tasks sharing one scope object do not meet.
_Entry = tuple["Scope[Any]", Any, "Telemetry | None", "Token[Any] | None", "Token[Frame | None] | None"]
_entered: ContextVar[tuple[_Entry, ...]] = ContextVar("agenttrace_entered_scopes", default=())


class Scope(Generic[H]):
    """A span scope: `with`, `async with`, or a decorator of sync and async functions.

    Subclasses implement `_open` (start the span, return the handle) and `_close`. Telemetry
    failures in either are counted by the telemetry's guard and never reach the caller (under
    the test runner's strict mode they raise); the caller's own exceptions pass through unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._args, self._kwargs = args, kwargs

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
            _entered.set((*_entered.get(), (self, None, None, None, None)))
            return self._null()  # type: ignore[return-value]
        otel_token = otel_context.attach(trace.set_span_in_context(span))
        frame_token = push_frame(frame) if frame is not None else None
        _entered.set((*_entered.get(), (self, handle, tel, otel_token, frame_token)))
        return handle

    def _pop(self) -> _Entry:
        stack = _entered.get()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i][0] is self:
                _entered.set(stack[:i] + stack[i + 1 :])
                return stack[i]
        raise ScopeError(
            f"{type(self).__name__} exited in a thread or task that did not enter it (or exited twice): "
            "enter and exit a scope in the same thread or asyncio task"
        )

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        _, handle, tel, otel_token, frame_token = self._pop()
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
