"""Running the server: an engine over a loaded model, uvicorn on a bound socket, and a
background-thread server for tests and for embedding in a program."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agenttrace.serve.app import create_app
from agenttrace.serve.engine import Engine
from agenttrace.telemetry import Telemetry

if TYPE_CHECKING:
    import uvicorn

    from agenttrace.generation.models import LoadedModel

__all__ = ["BackgroundServer", "ServeOptions", "bind", "build_engine"]


@dataclass(frozen=True)
class ServeOptions:
    speculative: bool = True  # prompt-lookup drafting (greedy output is unchanged by it)
    num_speculative_tokens: int = 8  # the most draft tokens per round (k is adaptive)
    prefix_cache: bool = True  # reuse the KV cache of earlier requests' common prefix
    served_name: str | None = None  # the model name clients ask for (default: the model's)


def build_engine(loaded: LoadedModel, telemetry: Telemetry, options: ServeOptions = ServeOptions()) -> Engine:
    """An engine over a loaded model (e.g. `agenttrace.generation.models.load_model()`)."""
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel

    model = LocalChatModel(
        loaded.model,
        loaded.tokenizer,
        name=options.served_name or loaded.name,
        drafter=PromptLookupDrafter() if options.speculative else None,
        num_speculative_tokens=options.num_speculative_tokens,
        adaptive=True,
        prefix_cache=options.prefix_cache,
    )
    return Engine(model, telemetry)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket; port 0 picks a free one (read it back from `getsockname()`)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.listen(128)
    sock.setblocking(False)
    return sock


def _uvicorn_server(engine: Engine, log_level: str) -> uvicorn.Server:
    import uvicorn

    config = uvicorn.Config(create_app(engine), log_level=log_level, access_log=False, lifespan="off")
    return uvicorn.Server(config)


class BackgroundServer:
    """The server on a background thread, bound to `host` on a free port (loopback by default).

    `with BackgroundServer(engine) as server:` ... `server.base_url` ("http://127.0.0.1:PORT/v1").
    """

    def __init__(self, engine: Engine, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning") -> None:
        self.engine = engine
        self.sock = bind(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self._server = _uvicorn_server(engine, log_level)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.sock]}, daemon=True, name="agenttrace-serve")

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.base_url} did not start within {timeout_s:g} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self.sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_forever(engine: Engine, host: str, port: int, log_level: str = "info") -> None:
    """Run in the foreground until interrupted; prints the address it listens on."""
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"agenttrace serve: {engine.model_name} on http://{shown}:{bound_port}/v1 (Ctrl-C stops)", flush=True)
    _uvicorn_server(engine, log_level).run(sockets=[sock])
