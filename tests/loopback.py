"""A test server of the standard library's `socketserver` family, served on a thread for the
length of a `with` block and always stopped (shut down, socket closed, thread joined)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from socketserver import BaseServer
from typing import TypeVar

S = TypeVar("S", bound=BaseServer)


@contextlib.contextmanager
def serving(server: S) -> Iterator[S]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
