"""The one clock every timing in agenttrace is read through.

Spans need wall-clock (Unix epoch) nanoseconds; latency needs a monotonic source. `MonotonicClock`
gives both: `perf_counter_ns` anchored once to the epoch, so readings never go backwards and still
line up with other processes' spans in Jaeger. Tests inject `FakeClock` and get exact figures.
On a GPU, reading the clock must wait for queued kernels or draft/verify times are fiction: pass
`sync` (e.g. `torch.cuda.synchronize`) and every reading synchronises first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "MonotonicClock", "default_clock"]


@runtime_checkable
class Clock(Protocol):
    """A source of epoch-aligned, monotonic nanoseconds."""

    def now_ns(self) -> int:
        """Current time in ns since the Unix epoch; never smaller than an earlier reading."""
        ...


class MonotonicClock:
    """`perf_counter_ns` anchored to `time_ns` once, at construction."""

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self._sync = sync
        self._offset = time.time_ns() - time.perf_counter_ns()

    def now_ns(self) -> int:
        if self._sync is not None:
            self._sync()
        return self._offset + time.perf_counter_ns()

    def with_sync(self, sync: Callable[[], None] | None) -> MonotonicClock:
        """The same time base, synchronising with a device before each reading."""
        clock = MonotonicClock(sync)
        clock._offset = self._offset
        return clock


class FakeClock:
    """A clock that moves only when told to: `advance(ns)` or `advance_s(seconds)`.

    Thread-safe, so a fake clock can drive code that runs tools in threads.
    """

    def __init__(self, start_ns: int = 1_700_000_000_000_000_000) -> None:
        self._now = start_ns
        self._lock = threading.Lock()

    def now_ns(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ns: int) -> int:
        if ns < 0:
            raise ValueError("a clock cannot go backwards")
        with self._lock:
            self._now += ns
            return self._now

    def advance_s(self, seconds: float) -> int:
        return self.advance(round(seconds * 1e9))


_default = MonotonicClock()


def default_clock() -> MonotonicClock:
    """The process-wide monotonic clock (one time base for every span of the process)."""
    return _default
