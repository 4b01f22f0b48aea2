"""A real OTLP receiver for the end-to-end test: Arize Phoenix, in its own virtual environment.

Jaeger cannot be installed on these machines; Phoenix can, from PyPI, and it ingests OTLP over
HTTP (on its web port, `/v1/traces`) and gRPC, and serves the spans back through a REST API. Its
dependencies are heavy, so it lives in a separate virtual environment, created once with a pinned
version and cached (AGENTTRACE_PHOENIX_VENV, default: the user cache dir), never in the project's
own environment. The server runs on free loopback ports with a throw-away working dir and no
outside requests, and is always stopped (its whole process group) when the context exits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cached_venv

PHOENIX_VERSION = "20.26.1"
START_TIMEOUT_S = 180  # about 15 s warm; the first start after an install compiles more


def venv_dir() -> Path:
    """Where the Phoenix environment lives: AGENTTRACE_PHOENIX_VENV, else the user cache dir."""
    return cached_venv.venv_dir(f"phoenix-{PHOENIX_VERSION}", "AGENTTRACE_PHOENIX_VENV")


def ensure_phoenix() -> Path:
    """The `phoenix` executable of a cached environment with arize-phoenix==PHOENIX_VERSION,
    created on first use (about a minute and 850 MB)."""
    return cached_venv.ensure_venv(venv_dir(), [f"arize-phoenix=={PHOENIX_VERSION}"]) / "phoenix"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Phoenix:
    """A running Phoenix: OTLP/HTTP at `http_url` (`/v1/traces`), OTLP/gRPC at `grpc_url`."""

    http_url: str
    grpc_url: str
    log: Path
    started_in_s: float

    def get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        with urllib.request.urlopen(f"{self.http_url}{path}?{query}", timeout=30) as response:
            return json.load(response)

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        """Every span of the project, through the REST API, following its cursor pages."""
        spans: list[dict[str, Any]] = []
        cursor = None
        while True:
            page = self.get(f"/v1/projects/{project}/spans", limit=1000, cursor=cursor)
            spans.extend(page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return spans

    def wait_for_spans(self, span_ids: set[str], timeout_s: float = 60.0) -> dict[str, dict[str, Any]]:
        """The project's spans by id once all of `span_ids` are there (Phoenix ingests in the
        background), or whatever arrived when the time is up."""
        deadline = time.monotonic() + timeout_s
        while True:
            by_id = {s["context"]["span_id"]: s for s in self.spans()}
            if span_ids <= by_id.keys() or time.monotonic() > deadline:
                return by_id
            time.sleep(0.5)


def _log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"


@contextlib.contextmanager
def running_phoenix(workdir: Path) -> Iterator[Phoenix]:
    """Start `phoenix serve` on free loopback ports, wait for /healthz, stop it on exit."""
    executable = ensure_phoenix()
    http_port, grpc_port = free_port(), free_port()
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "phoenix.log"
    env = dict(os.environ)
    env.update(
        PHOENIX_WORKING_DIR=str(workdir),
        PHOENIX_TELEMETRY_ENABLED="false",
        PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
    )
    for var in [v for v in env if v.startswith("OTEL_")]:
        del env[var]  # the server must not export its own telemetry anywhere
    started = time.monotonic()
    with open(log, "w") as out:
        process = subprocess.Popen(
            [str(executable), "serve", "--host", "127.0.0.1", "--port", str(http_port), "--grpc-port", str(grpc_port)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=workdir,
            start_new_session=True,  # its own process group, so teardown stops every child
        )
    try:
        url = f"http://127.0.0.1:{http_port}"
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"phoenix serve exited with {process.returncode}; log {log}:\n{_log_tail(log)}")
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() - started > START_TIMEOUT_S:
                raise RuntimeError(f"phoenix serve not healthy after {START_TIMEOUT_S} s; log {log}:\n{_log_tail(log)}")
            time.sleep(0.25)
        yield Phoenix(url, f"http://127.0.0.1:{grpc_port}", log, time.monotonic() - started)
    finally:
        _stop(process)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
