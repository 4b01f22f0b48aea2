"""HTTP GETs with a deadline and a size bound, for the readers of remote trace stores, and the
budget of one whole read (many GETs): a slow server (one that accepts and never answers, or
drips a byte every few seconds) ends at the deadline, an answer larger than the bound is cut
off, not held, and a server that pages forever ends at the read's byte or request budget.
Standard library only (`http.client`), no torch import.

    budget = ReadBudget(ReadLimits(deadline_s=600, max_bytes=4 GiB, max_requests=10_000,
                                   max_answer_bytes=64 MiB))
    get(url, headers, timeout_s=30, budget=budget) -> Answer(status, reason, headers, body)

`get` raises `HTTPGetError` (the message says what happened, without the URL: the caller names
its source) for an unreachable host, a refused connection, a body shorter than its
Content-Length, or a request's own timeout; `ReadCut` (an HTTPGetError) when a bound of the read
stops it: the read's deadline, its byte or request budget, or one answer's size. Any status is
an `Answer`: the caller decides what a 404 means. A deadline covers everything: connecting, the
status line and headers, and the body; a watchdog shuts the socket down when it passes, so no
single read can outlast it. The largest body held is one answer's bound, so memory is bounded
by `max_answer_bytes` whatever the server sends.

`ReadBudget` is usable without `get` (a source read through its own client): `why_stop()`
before each request, `spend(nbytes)` after it.
"""

from __future__ import annotations

import http.client
import math
import socket
import ssl
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from agenttrace.clock import Clock, default_clock, elapsed_s
from agenttrace.errors import HTTPGetError, ReadCut

__all__ = ["Answer", "ReadBudget", "ReadLimits", "get"]

_CHUNK = 1 << 16
_MiB = 1 << 20


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass(frozen=True)
class ReadLimits:
    """The bounds of one read of a remote source, each raised by the option its message names.
    The defaults are far above a real read (Jaeger's own UI lists at most 1,500 traces a search)
    and stop a server that never ends in minutes, not hours."""

    deadline_s: float = 600.0  # the whole read, first request to last byte (--deadline)
    max_bytes: int = 4 << 30  # answer bodies in all (--max-mb)
    max_requests: int = 2_000  # requests (pages) in all: 200k traces of Jaeger at 100 a page (--max-requests)
    max_answer_bytes: int = 64 << 20  # one answer, held whole while it is parsed (--max-answer-mb)


class ReadBudget:
    """What one read has spent against its `ReadLimits`: time since the budget was made, bytes
    and requests. One read, one thread: not thread-safe."""

    def __init__(self, limits: ReadLimits | None = None, clock: Clock | None = None) -> None:
        self.limits = limits or ReadLimits()
        self.clock = clock or default_clock()  # the real clock: this times real socket waits
        self.started_ns = self.clock.now_ns()
        self.bytes = 0
        self.requests = 0

    def left_s(self) -> float:
        """Seconds left before the read's deadline (0 once it has passed)."""
        return max(0.0, self.limits.deadline_s - elapsed_s(self.clock, self.started_ns))

    def bytes_left(self) -> int:
        return max(0, self.limits.max_bytes - self.bytes)

    def why_stop(self) -> str | None:
        """The line saying which bound of the read is spent (deadline, bytes, requests), or None
        while another request may be made."""
        lim = self.limits
        if self.left_s() <= 0:
            return deadline_line(lim.deadline_s)
        if self.bytes >= lim.max_bytes:
            return f"the byte budget of {lim.max_bytes / _MiB:g} MiB is spent (raise it with --max-mb)"
        if self.requests >= lim.max_requests:
            n = lim.max_requests
            return f"the budget of {n} request{'s' if n != 1 else ''} is spent (raise it with --max-requests)"
        return None

    def spend(self, nbytes: int, requests: int = 1) -> None:
        self.bytes += nbytes
        self.requests += requests

    def summary(self) -> str:
        """`12 requests, 3.4 MiB in 5.1 s`: what the read has spent so far."""
        return (f"{self.requests} request{'s' if self.requests != 1 else ''}, {self.bytes / _MiB:.1f} MiB in "
                f"{elapsed_s(self.clock, self.started_ns):.1f} s")


def deadline_line(deadline_s: float) -> str:
    return f"the deadline of {deadline_s:g} s for the whole read passed (raise it with --deadline)"


def _connection(url: str, timeout_s: float) -> tuple[http.client.HTTPConnection, str]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HTTPGetError(f"{url!r} is not an http(s):// URL")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        port = parts.port
    except ValueError as exc:
        raise HTTPGetError(f"bad port in {url!r}") from exc
    if parts.scheme == "https":
        return http.client.HTTPSConnection(parts.hostname, port, timeout=timeout_s,
                                           context=ssl.create_default_context()), target
    return http.client.HTTPConnection(parts.hostname, port, timeout=timeout_s), target


@dataclass(frozen=True)
class _Bounds:
    """One request's bounds, and the line that says which one stopped it."""

    timeout_s: float
    max_bytes: int
    timeout_line: str
    size_line: str
    timeout_is_deadline: bool  # the read's deadline, not this request's own timeout
    size_is_answer: bool  # one answer's bound (asking for less may fit), not the read's bytes

    def too_large(self, detail: str) -> ReadCut:
        return ReadCut(f"{detail}, {self.size_line}", answer_too_large=self.size_is_answer)

    def timed_out(self, read: int) -> HTTPGetError:
        if self.timeout_is_deadline:  # the caller says what the whole read spent
            return ReadCut(self.timeout_line)
        return HTTPGetError(f"{self.timeout_line} (read {read} bytes)")


def _bounds(timeout_s: float, max_bytes: int | None, budget: ReadBudget | None) -> _Bounds:
    answer = max_bytes if max_bytes is not None else (budget.limits.max_answer_bytes if budget else 64 * _MiB)
    timeout_line = f"no complete answer within {timeout_s:g} s"
    size_line = f"over the bound of {answer / _MiB:g} MiB for one answer (raise it with --max-answer-mb)"
    timeout_is_deadline, size_is_answer = False, True
    if budget is not None:
        if budget.left_s() < timeout_s:
            timeout_s, timeout_line, timeout_is_deadline = budget.left_s(), deadline_line(budget.limits.deadline_s), True
        if budget.bytes_left() < answer:
            answer, size_is_answer = budget.bytes_left(), False
            size_line = (f"over what is left of the byte budget of {budget.limits.max_bytes / _MiB:g} MiB for the "
                         "whole read (raise it with --max-mb)")
    return _Bounds(timeout_s, answer, timeout_line, size_line, timeout_is_deadline, size_is_answer)


def get(url: str, headers: dict[str, str] | None = None, *, timeout_s: float = 30.0,
        max_bytes: int | None = None, budget: ReadBudget | None = None) -> Answer:
    """GET `url`: the whole answer within `timeout_s` seconds and `max_bytes` bytes of body
    (default: the budget's `max_answer_bytes`, else 64 MiB), or HTTPGetError saying which bound
    it broke (or why there was no answer at all). With a `budget`, the request is one of the
    read's: refused (ReadCut) once a bound of the read is spent, given what is left of its
    deadline and bytes, and its body bytes (whole or cut) counted against it."""
    if budget is not None:
        why = budget.why_stop()
        if why is not None:
            raise ReadCut(why)
    bounds = _bounds(timeout_s, max_bytes, budget)
    if not math.isfinite(bounds.timeout_s) or bounds.timeout_s <= 0:
        raise HTTPGetError(f"a request needs a deadline of more than 0 s, not {bounds.timeout_s}")
    body = bytearray()
    try:
        return _get(url, headers, bounds, body)
    finally:
        if budget is not None:
            budget.spend(len(body))


def _get(url: str, headers: dict[str, str] | None, bounds: _Bounds, body: bytearray) -> Answer:
    conn, target = _connection(url, bounds.timeout_s)
    expired = threading.Event()

    def abort() -> None:  # unblocks a read in progress: recv returns or raises at once
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(bounds.timeout_s, abort)
    watchdog.daemon = True
    clock = default_clock()  # the real clock: this times a real socket wait
    started = clock.now_ns()
    watchdog.start()
    try:
        conn.request("GET", target, headers={"Accept": "application/json", **(headers or {})})
        resp = conn.getresponse()
        length_text = resp.getheader("Content-Length")
        length = int(length_text) if length_text is not None and length_text.strip().isdigit() else None
        if length is not None and length > bounds.max_bytes:
            raise bounds.too_large(f"the answer is {length / _MiB:.1f} MiB")
        while not expired.is_set():
            # never more than one byte past the bound: a 700 MB answer costs the bound, not 700 MB
            chunk = resp.read1(min(_CHUNK, bounds.max_bytes + 1 - len(body)))
            if not chunk:
                break
            body += chunk
            if len(body) > bounds.max_bytes:
                raise bounds.too_large(f"stopped reading at {len(body)} bytes")
        if expired.is_set():
            raise bounds.timed_out(len(body))
        if length is not None and len(body) < length:  # read1 ends quietly on a short body
            raise HTTPGetError(f"the connection closed after {len(body)} of the {length} bytes the answer "
                               "announced (Content-Length); the answer is incomplete")
        return Answer(resp.status, resp.reason or "", {k.lower(): v for k, v in resp.getheaders()}, bytes(body))
    except HTTPGetError:
        raise
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set():
            raise bounds.timed_out(len(body)) from exc
        if isinstance(exc, (socket.timeout, TimeoutError)):
            raise bounds.timed_out(len(body)) from exc
        if isinstance(exc, http.client.IncompleteRead):  # a chunked body that stopped mid-chunk
            raise HTTPGetError(f"the connection closed mid-answer after {len(body)} bytes; the answer is "
                               "incomplete") from exc
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc) or type(exc).__name__)
        raise HTTPGetError(f"{reason} after {elapsed_s(clock, started):.1f} s") from exc
    finally:
        watchdog.cancel()
        conn.close()
