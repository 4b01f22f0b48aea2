"""Carrying the current span (and agenttrace's frame) into worker threads.

OpenTelemetry's context and agenttrace's frame are context variables. asyncio tasks copy them
when created, and `asyncio.to_thread` / `loop.run_in_executor` with our executor carry them, so a
tool call awaited in a task nests under the step that started it. Threads and thread pools start
with an empty context: wrap the function with `propagate`, or the pool with `PropagatingExecutor`.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

__all__ = ["PropagatingExecutor", "propagate"]

P = ParamSpec("P")
R = TypeVar("R")


def propagate(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` bound to the caller's current context: call it on any thread and the spans it opens
    nest where `propagate` was called. Each call runs in its own copy, so concurrent calls (and
    context changes made inside them) never interfere."""
    ctx = contextvars.copy_context()

    @functools.wraps(fn)
    def run_in_context(*args: P.args, **kwargs: P.kwargs) -> R:
        return ctx.copy().run(fn, *args, **kwargs)

    return run_in_context


class PropagatingExecutor(Executor):
    """An executor that runs each submitted function in the submitter's context.

    Wraps any `concurrent.futures.Executor` (a `ThreadPoolExecutor` by default, created with
    `max_workers`); `submit` and `map` behave as the wrapped executor's, `shutdown` shuts it down.
    Usable with `loop.run_in_executor`.
    """

    def __init__(self, inner: Executor | None = None, *, max_workers: int | None = None) -> None:
        if inner is None:
            from concurrent.futures import ThreadPoolExecutor

            inner = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="agenttrace")
        self.inner = inner

    def submit(self, fn: Callable[..., R], /, *args: Any, **kwargs: Any) -> Future[R]:
        return self.inner.submit(propagate(fn), *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.inner.shutdown(wait=wait, cancel_futures=cancel_futures)
