"""Leaving on time: a bounded wait for collectors at exit, and the trace file written on SIGTERM.

A collector that is down or silent must not hold a finished agent (or CLI) at exit: the trace
file, written first and in full, already holds every span. So `Telemetry.shutdown` waits for its
OTLP exporters at most `shutdown_timeout_s` (default `DEFAULT_SHUTDOWN_TIMEOUT_S`, or the
AGENTTRACE_SHUTDOWN_TIMEOUT variable), then abandons what they still hold and names the count in
one line. On SIGTERM every live `Telemetry` writes its ended spans to its local exporters (the
trace file) before the handler the host program had installed runs, or the process ends as it
would have without us.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any, Protocol, TypeVar

Summary = TypeVar("Summary", covariant=True)


class Tracked(Protocol[Summary]):
    """What exit needs of a `Telemetry` (setup.py, which imports this module): its bounded
    shutdown and summary, and the local flush SIGTERM does."""

    shutdown_timeout_s: float

    def shutdown(self) -> Summary: ...

    def summary(self) -> Summary: ...

    def flush_local(self) -> Any: ...


__all__ = [
    "DEFAULT_SHUTDOWN_TIMEOUT_S",
    "SHUTDOWN_TIMEOUT_ENV",
    "call_within",
    "shutdown_all",
    "shutdown_timeout_s",
    "track",
    "untrack",
]

DEFAULT_SHUTDOWN_TIMEOUT_S = 3.0
SHUTDOWN_TIMEOUT_ENV = "AGENTTRACE_SHUTDOWN_TIMEOUT"


def shutdown_timeout_s(value: float | None) -> float:
    """The exit bound in seconds: `value`, else AGENTTRACE_SHUTDOWN_TIMEOUT, else the default."""
    if value is None:
        raw = os.environ.get(SHUTDOWN_TIMEOUT_ENV, "").strip()
        try:
            value = float(raw) if raw else DEFAULT_SHUTDOWN_TIMEOUT_S
        except ValueError as exc:
            raise ValueError(f"{SHUTDOWN_TIMEOUT_ENV} must be a number of seconds, not {raw!r}") from exc
    if value < 0:
        raise ValueError(f"the shutdown timeout must be at least 0 s, not {value}")
    return value


def call_within(fn: Callable[[], Any], timeout_s: float, name: str) -> bool:
    """Run `fn` on a daemon thread and wait at most `timeout_s`; True if it returned in time.

    A daemon thread that is still waiting (on a socket, a retry backoff) does not hold the
    process at exit. `fn` must not raise (wrap it in a guard).
    """
    thread = threading.Thread(target=fn, name=name, daemon=True)
    thread.start()
    thread.join(max(0.0, timeout_s))
    return not thread.is_alive()


# Every Telemetry not shut down yet, held strongly: its queued spans must reach the file at exit
# even if the program dropped its last reference to it.
_open: dict[int, Tracked[Any]] = {}
_lock = threading.Lock()
_exit_hook = False
_previous: Any = None  # the SIGTERM handler that was there before ours


def track(telemetry: Tracked[Any], *, sigterm: bool) -> None:
    """Shut `telemetry` down at process exit (bounded, together with the others) unless it is
    shut down before; with `sigterm`, also write its ended spans to the trace file on SIGTERM.

    The SIGTERM handler is installed once per process, and only from the main thread (Python's
    rule). It writes every open telemetry's ended spans to its local exporters, then runs the
    handler installed before it, or ends the process as SIGTERM does by default. A handler the
    host installs later replaces ours, as it should.
    """
    global _exit_hook, _previous
    with _lock:
        _open[id(telemetry)] = telemetry
        if not _exit_hook:
            atexit.register(_at_exit)
            _exit_hook = True
        if sigterm and threading.current_thread() is threading.main_thread():
            current = signal.getsignal(signal.SIGTERM)
            if current is not _on_sigterm:
                _previous = current
                signal.signal(signal.SIGTERM, _on_sigterm)


def untrack(telemetry: Tracked[Any]) -> None:
    with _lock:
        _open.pop(id(telemetry), None)


S = TypeVar("S")


def shutdown_all(telemetries: Iterable[Tracked[S]]) -> list[S]:
    """Shut several telemetries down at once, so that their collectors' bounds overlap instead of
    adding up; the summaries in the order given."""
    tels = list(telemetries)
    summaries: list[S | None] = [None] * len(tels)

    def shut(i: int) -> None:
        summaries[i] = tels[i].shutdown()

    threads = [threading.Thread(target=shut, args=(i,), name="agenttrace-shutdown", daemon=True) for i in range(len(tels))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()  # each shutdown bounds its own wait for collectors
    return [s if s is not None else tel.summary() for s, tel in zip(summaries, tels, strict=True)]


def _at_exit() -> None:
    with _lock:
        tels = list(_open.values())
    shutdown_all(tels)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    with _lock:
        tels = list(_open.values())
    for telemetry in tels:
        # on a helper thread, bounded: the signal may have come while this thread held an
        # exporter's lock, and waiting on it here would never end
        call_within(telemetry.flush_local, telemetry.shutdown_timeout_s, "agenttrace-sigterm-flush")
    previous = _previous
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:  # SIG_DFL, or None (set outside Python): end as it would have
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
