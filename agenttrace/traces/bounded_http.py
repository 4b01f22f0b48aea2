"""One HTTP GET with a deadline and a size bound, for the readers of remote trace stores: a slow
server (one that accepts and never answers, or drips a byte a second) ends at the deadline, and
an answer larger than the bound is cut off, not held. Standard library only (`http.client`), no
torch import.

    get(url, headers, timeout_s=30, max_bytes=64 MiB) -> Answer(status, reason, headers, body)

Raises `HTTPGetError` (the message says what happened, without the URL: the caller names its
source) for an unreachable host, a refused connection, the deadline, or the size bound. Any
status is an `Answer`: the caller decides what a 404 means. The deadline covers everything:
connecting, the status line and headers, and the body; a watchdog shuts the socket down when it
passes, so no single read can outlast it.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

from agenttrace.clock import default_clock, elapsed_s
from agenttrace.errors import HTTPGetError

__all__ = ["Answer", "get"]

_CHUNK = 1 << 16


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: dict[str, str]  # lower-case names
    body: bytes


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


def get(url: str, headers: dict[str, str] | None = None, *, timeout_s: float = 30.0,
        max_bytes: int = 64 << 20) -> Answer:
    """GET `url`: the whole answer within `timeout_s` seconds and `max_bytes` bytes of body, or
    HTTPGetError saying which bound it broke (or why there was no answer at all)."""
    conn, target = _connection(url, timeout_s)
    expired = threading.Event()

    def abort() -> None:  # unblocks a read in progress: recv returns or raises at once
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    watchdog = threading.Timer(timeout_s, abort)
    watchdog.daemon = True
    clock = default_clock()  # the real clock: this times a real socket wait
    started = clock.now_ns()
    watchdog.start()
    try:
        conn.request("GET", target, headers={"Accept": "application/json", **(headers or {})})
        resp = conn.getresponse()
        length = resp.getheader("Content-Length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            raise HTTPGetError(f"the answer is {int(length) / 2**20:.1f} MiB, over the bound of "
                               f"{max_bytes / 2**20:.0f} MiB")
        body = bytearray()
        while True:
            chunk = resp.read1(_CHUNK)
            if not chunk:
                break
            body += chunk
            if len(body) > max_bytes:
                raise HTTPGetError(f"the answer is over the bound of {max_bytes / 2**20:.0f} MiB; stopped reading")
            if expired.is_set():
                break
        if expired.is_set():
            raise HTTPGetError(f"no complete answer within {timeout_s:g} s (read {len(body)} bytes)")
        return Answer(resp.status, resp.reason or "", {k.lower(): v for k, v in resp.getheaders()}, bytes(body))
    except HTTPGetError:
        raise
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set():
            raise HTTPGetError(f"no complete answer within {timeout_s:g} s") from exc
        if isinstance(exc, (socket.timeout, TimeoutError)):
            raise HTTPGetError(f"no answer within {timeout_s:g} s") from exc
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc) or type(exc).__name__)
        raise HTTPGetError(f"{reason} after {elapsed_s(clock, started):.1f} s") from exc
    finally:
        watchdog.cancel()
        conn.close()
