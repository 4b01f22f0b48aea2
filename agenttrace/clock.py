"""The one clock every timing in agenttrace is read through.

Spans need wall-clock (Unix epoch) nanoseconds; latency needs a monotonic source. `MonotonicClock`
gives both: `perf_counter_ns` anchored once to the epoch, so readings never go backwards and still
line up with other processes' spans in Jaeger. Tests inject `FakeClock` and get exact figures.
On a GPU, reading the clock must wait for queued kernels or draft/verify times are fiction:
`with_sync(clock, torch.cuda.synchronize)` gives a clock whose every reading synchronises first,
on any clock (a fake one in tests); with no sync (a CPU) it is the clock itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "FakeClock", "MonotonicClock", "SyncedClock", "default_clock", "elapsed_s", "with_sync"]


@runtime_checkable
class Clock(Protocol):
    """A source of epoch-aligned, monotonic nanoseconds."""

    def now_ns(self) -> int:
        """Current time in ns since the Unix epoch; never smaller than an earlier reading."""
        ...


class MonotonicClock:
    """`perf_counter_ns` anchored to `time_ns` once, at construction."""

    def __init__(self) -> None:
        self._offset = time.time_ns() - time.perf_counter_ns()

    def now_ns(self) -> int:
        return self._offset + time.perf_counter_ns()

    def with_sync(self, sync: Callable[[], None] | None) -> Clock:
        """This clock (the same time base), synchronising with a device before each reading;
        this clock itself when `sync` is None."""
        return with_sync(self, sync)


class SyncedClock:
    """`inner`'s readings, each taken after `sync()` returns.

    On a GPU, `sync` waits for the kernels queued so far, so a reading marks when the work before
    it finished rather than when it was launched (gpt-fast's `device_sync()` before every timer).
    """

    def __init__(self, inner: Clock, sync: Callable[[], None]) -> None:
        self.inner = inner
        self.sync = sync

    def now_ns(self) -> int:
        self.sync()  # first: a reading taken before the device is done would be too early
        return self.inner.now_ns()


def with_sync(clock: Clock, sync: Callable[[], None] | None) -> Clock:
    """`clock`, synchronising with a device before each reading; `clock` itself when `sync` is
    None (a CPU: nothing is queued, so a reading costs nothing more than the plain clock's)."""
    return clock if sync is None else SyncedClock(clock, sync)


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


def elapsed_s(clock: Clock, start_ns: int) -> float:
    """Seconds from `start_ns` (an earlier reading of `clock`) to now."""
    return (clock.now_ns() - start_ns) / 1e9
