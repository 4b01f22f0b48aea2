"""Telemetry never breaks the agent.

Failures in recording or exporting spans are logged (once per kind, then counted quietly) and
never raised into the agent. Under tests, set AGENTTRACE_STRICT_TELEMETRY=1 and failures in
agenttrace's own recording code raise instead, so bugs there cannot hide behind the guard.
Exporter failures (a collector that is down) are counted, never raised, strict or not.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable
from typing import ParamSpec, TypeVar

_log = logging.getLogger("agenttrace.telemetry")
P = ParamSpec("P")
R = TypeVar("R")


class FailureCounter:
    """Thread-safe counts of telemetry failures by kind; logs the first of each kind."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def record(self, kind: str, exc: BaseException | str) -> None:
        with self._lock:
            self._counts[kind] += 1
            first = self._counts[kind] == 1
        if first:
            _log.warning("telemetry %s failed (the agent goes on; further failures are counted): %s", kind, exc)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())


def strict() -> bool:
    return os.environ.get("AGENTTRACE_STRICT_TELEMETRY", "") not in ("", "0")


def guarded(failures: FailureCounter, kind: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
    """Call `fn`; on an exception count it under `kind` and return None (re-raise when strict)."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        if strict():
            raise
        failures.record(kind, exc)
        return None
