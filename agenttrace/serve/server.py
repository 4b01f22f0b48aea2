"""Running the server: an engine over a loaded model, uvicorn on a bound socket, and a
background-thread server for tests and for embedding in a program.

Stopping (Ctrl-C, SIGTERM, `BackgroundServer.stop`): uvicorn stops accepting, the engine cancels
the generations in flight (each ends at its next round, its client answered 503 or an SSE error)
and the open connections get `_GRACE_S` to finish before their tasks are cancelled."""

from __future__ import annotations

import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agenttrace.clock import default_clock, elapsed_s
from agenttrace.serve.app import create_app
from agenttrace.serve.backend import Engine
from agenttrace.serve.limits import ServeLimits
from agenttrace.telemetry import Telemetry

if TYPE_CHECKING:
    import uvicorn

    from agenttrace.generation.models import LoadedModel

__all__ = ["BackgroundServer", "ServeLimits", "ServeOptions", "bind", "build_engine", "serve_forever"]

_GRACE_S = 5.0  # how long open connections may take to finish once the server is stopping


@dataclass(frozen=True)
class ServeOptions:
    speculative: bool = True  # prompt-lookup drafting (greedy output is unchanged by it)
    num_speculative_tokens: int = 8  # the most draft tokens per round (k is adaptive)
    prefix_cache: bool = True  # reuse the KV cache of earlier requests' common prefix
    served_name: str | None = None  # the model name clients ask for (default: the model's)
    constrained: bool = False  # also constrain tool_choice "auto" requests to the decision grammar
    # requests generated together in one continuous batch (generation/batching); 1: one request at
    # a time, the others queued, as before batching
    max_batch: int = 8
    batch_threads: int | None = None  # torch threads of the batching engine's thread (None: torch's)


def build_engine(loaded: LoadedModel, telemetry: Telemetry, options: ServeOptions = ServeOptions()) -> Engine:
    """An engine over a loaded model (e.g. `agenttrace.generation.models.load_model()`)."""
    from agenttrace.core.chat import Constraint
    from agenttrace.errors import ConstraintUnavailable
    from agenttrace.generation.batching.engine import BatchEngine
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel

    batch = None
    if options.max_batch > 1:
        batch = BatchEngine(loaded.model, max_batch=options.max_batch, threads=options.batch_threads)
    model = LocalChatModel(
        loaded.model,
        loaded.tokenizer,
        name=options.served_name or loaded.name,
        drafter=PromptLookupDrafter() if options.speculative else None,
        num_speculative_tokens=options.num_speculative_tokens,
        adaptive=True,
        prefix_cache=options.prefix_cache,
        engine=batch,
    )
    # Map the tokenizer for the grammar engine now, not on the first request that asks for a
    # schema. A tokenizer it cannot map stops a --constrained server at start-up; any other
    # server runs and refuses only the requests that ask for a grammar, with the reason.
    error = None
    try:
        model.prepare_constraint(Constraint("json_schema", '{"type":"object"}', "response_format_json_object"))
    except ConstraintUnavailable as exc:
        if options.constrained:
            raise
        error = str(exc)
    return Engine(model, telemetry, constrained=options.constrained, constraint_error=error)


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


def _uvicorn_server(engine: Engine, limits: ServeLimits, log_level: str) -> uvicorn.Server:
    import uvicorn

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            engine.shutdown()  # generations in flight stop within a round, so connections can close
            await super().shutdown(sockets)

    config = uvicorn.Config(
        create_app(engine, limits), log_level=log_level, access_log=False, lifespan="off",
        timeout_graceful_shutdown=_GRACE_S,
    )
    return Server(config)


class BackgroundServer:
    """The server on a background thread, bound to `host` on a free port (loopback by default).

    `with BackgroundServer(engine) as server:` ... `server.base_url` ("http://127.0.0.1:PORT/v1").
    """

    def __init__(
        self, engine: Engine, *, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
        limits: ServeLimits = ServeLimits(),
    ) -> None:
        self.engine = engine
        self.sock = bind(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self._server = _uvicorn_server(engine, limits, log_level)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self.sock]}, daemon=True, name="agenttrace-serve")

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> BackgroundServer:
        self._thread.start()
        clock = default_clock()  # a real wait for a real thread: the real clock
        started = clock.now_ns()
        while not self._server.started:
            if not self._thread.is_alive() or elapsed_s(clock, started) > timeout_s:
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


def serve_forever(engine: Engine, host: str, port: int, log_level: str = "info", limits: ServeLimits = ServeLimits()) -> None:
    """Run in the foreground until Ctrl-C or SIGTERM; prints the address it listens on, and
    returns (rather than raising KeyboardInterrupt) once it has shut down."""
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    print(f"agenttrace serve: {engine.model_name} on http://{shown}:{bound_port}/v1 (Ctrl-C stops)", flush=True)
    # uvicorn shuts down on SIGINT or SIGTERM, then raises the signal again under the handler it
    # found: SIGINT's raises KeyboardInterrupt, and SIGTERM is given the same one, so that a
    # terminated server returns here too (and the caller flushes its telemetry) instead of dying.
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if main else None
    try:
        _uvicorn_server(engine, limits, log_level).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        engine.shutdown()
        sock.close()
