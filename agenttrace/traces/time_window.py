"""The time windows the command line asks remote sources for (`--lookback`, `--since`,
`--until`), range-checked here, where the text becomes a number, so nothing further on
overflows or wraps:

- a lookback (`90s`, `30m`, `2h`, `1d`, `1w`) is a length from 0 to a century; `infh`, `nanh`,
  `-1h` and `1e300d` are refused (ValueError, one line);
- a time is epoch nanoseconds clamped to what a span can carry, 0 to 2^63-1 (1970-01-01 to
  2262-04-11T23:47:16.854775807Z): a bound past them selects as the edge does, so `--until
  2300-01-01` is no upper bound, `--since 2300-01-01` selects nothing and `--since 1900-01-01`
  (or a lookback reaching before 1970) no lower bound. A store comparing int64 nanoseconds
  (ClickHouse's DateTime64(9)) then never sees a value that wraps.

Standard library only; no torch import.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agenttrace.traces.span_records import MAX_TIME_NS

__all__ = ["MAX_LOOKBACK_S", "MAX_TIME_NS", "lookback_seconds", "parse_lookback", "time_ns"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
MAX_LOOKBACK_S = 36500 * 86400  # a century: far past any trace, and well inside int64 nanoseconds
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def lookback_seconds(text: str) -> float | None:
    """Seconds in a lookback like `90s`, `30m`, `2h`, `1d` or `1w`; None when `text` does not
    have a lookback's form (a number and a unit). Raises ValueError for a lookback that is not a
    length from 0 to MAX_LOOKBACK_S (`infh`, `nanh`, `-1h`, `1e300d`)."""
    t = text.strip().lower()
    if len(t) < 2 or t[-1] not in _UNITS:
        return None
    try:
        number = float(t[:-1])
    except ValueError:
        return None
    seconds = number * _UNITS[t[-1]]
    if not 0 <= seconds <= MAX_LOOKBACK_S:  # NaN fails too
        raise ValueError(f"lookback {text.strip()!r}: expected a length from 0 to {MAX_LOOKBACK_S // 86400}d "
                         "(a century)")
    return seconds


def parse_lookback(text: str) -> float:
    """Seconds in a lookback like `90s`, `30m`, `2h`, `1d` or `1w`, at most a century. Raises
    ValueError (a one-line reason) for anything else."""
    seconds = lookback_seconds(text)
    if seconds is None:
        raise ValueError(f"lookback {text.strip()!r}: expected a number and a unit (s, m, h, d, w), e.g. 1h")
    return seconds


def time_ns(text: str, now_s: float) -> int:
    """A lookback (`2h`) back from `now_s` (epoch seconds), or an ISO 8601 time (UTC when it names
    no zone), as epoch nanoseconds clamped to 0..MAX_TIME_NS (see the module docstring). Raises
    ValueError (a one-line reason) for anything else, a lookback of more than a century among
    them."""
    seconds = lookback_seconds(text)
    if seconds is not None:
        return max(0, round(now_s * 1e9) - round(seconds * 1e9))
    try:
        t = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ValueError(f"{text!r}: expected a lookback (30m, 2h, 1d) or an ISO time (2026-12-02T10:00)") from exc
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    try:
        ns = (t - _EPOCH) // timedelta(microseconds=1) * 1000
    except OverflowError:  # year 1 or 9999, moved past the calendar's ends by its zone
        ns = -1 if t.year < 1970 else MAX_TIME_NS
    return min(max(ns, 0), MAX_TIME_NS)
