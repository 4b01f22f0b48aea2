"""Run a program traced, as `opentelemetry-instrument` does for services: the parent half of
`agenttrace run`.

The parent starts the loopback receiver (receiver.py), runs the command with the bootstrap
folder first on its PYTHONPATH (bootstrap/sitecustomize.py is the child half) and the
AGENTTRACE_RUN_* variables saying where spans go, waits for it, and returns its exit status and
the trace file. While the program runs, Ctrl-C is ignored here (the terminal sends it to the
program too, which decides what it means) and SIGTERM is passed on to the program; either way
the parent lives to report what was recorded.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from agenttrace.clock import default_clock, elapsed_s
from agenttrace.errors import ProgramNotFound
from agenttrace.profiling.bootstrap import BOOTSTRAP_DIR
from agenttrace.profiling.bootstrap.sitecustomize import (
    ENDPOINT_ENV,
    NESTED_ENV,
    OTLP_ENV,
    RUN_ID_ENV,
    SERVICE_ENV,
    STARTED_ENV,
)
from agenttrace.profiling.receiver import receiving

__all__ = ["RunResult", "child_env", "run_traced", "traces_url"]

FORWARDED = (signal.SIGTERM,)  # passed on to the program; SIGINT reaches it from the terminal itself


@dataclass(frozen=True)
class RunResult:
    """What one traced run gave.

    exit_code: the program's exit status, 128 + N when signal N ended it (as shells say it).
    trace_file: our OTLP/JSON lines, or None when no span arrived (the file is not created).
    spans / requests: what the receiver wrote. services: service.name of each process that sent.
    rejected: requests that were not OTLP/HTTP protobuf (another exporter pointed at us).
    """

    exit_code: int
    trace_file: Path | None
    spans: int
    requests: int
    seconds: float
    services: list[str] = field(default_factory=list)
    rejected: int = 0


def traces_url(endpoint: str) -> str:
    """An OTLP/HTTP traces URL: a base URL gets `/v1/traces`, as OTEL_EXPORTER_OTLP_ENDPOINT's
    rules say; a URL with a path is used as given; no scheme means http."""
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    if urlsplit(endpoint).path in ("", "/"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return endpoint


def trace_path(out_dir: Path, prefix: str = "run") -> Path:
    """`<out_dir>/<prefix>-<time>.jsonl`, not one that exists already."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = out_dir / f"{prefix}-{stamp}.jsonl"
    n = 1
    while path.exists():
        n += 1
        path = out_dir / f"{prefix}-{stamp}-{n}.jsonl"
    return path


def child_env(base: Mapping[str, str], endpoint: str, *, run_id: str, otlp: str | None = None,
              service: str | None = None) -> dict[str, str]:
    """The program's environment: `base` with the bootstrap folder first on PYTHONPATH (once)
    and the variables the bootstrap reads."""
    env = {k: v for k, v in base.items() if k not in (OTLP_ENV, SERVICE_ENV, NESTED_ENV, STARTED_ENV)}
    here = str(BOOTSTRAP_DIR)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.abspath(p) != here]
    env["PYTHONPATH"] = os.pathsep.join([here, *rest])
    env[ENDPOINT_ENV] = endpoint
    env[RUN_ID_ENV] = run_id
    if otlp:
        env[OTLP_ENV] = traces_url(otlp)
    if service:
        env[SERVICE_ENV] = service
    return env


def run_traced(command: Sequence[str], *, out_dir: Path, otlp: str | None = None, service: str | None = None,
               env: Mapping[str, str] | None = None, cwd: Path | None = None) -> RunResult:
    """Run `command` with tracing set up in its Python processes; wait for it (however it ends)
    and return its exit status and trace file. Raises ProgramNotFound when the program is not
    found. Signal handling as the module docstring says, when called from the main thread."""
    if not command:
        raise ProgramNotFound("no command given: put it after `--`, e.g. `agenttrace run -- python agent.py`")
    environ = dict(os.environ if env is None else env)
    if shutil.which(command[0], path=environ.get("PATH")) is None and not Path(command[0]).is_file():
        raise ProgramNotFound(f"{command[0]}: no such program (not on PATH)")
    clock = default_clock()
    started = clock.now_ns()
    with receiving(trace_path(out_dir)) as receiver:
        child = child_env(environ, receiver.endpoint, run_id=uuid.uuid4().hex, otlp=otlp, service=service)
        try:
            proc = subprocess.Popen(list(command), env=child, cwd=cwd)
        except OSError as exc:  # found but not runnable (no execute bit, wrong format)
            raise ProgramNotFound(f"{command[0]}: {exc.strerror or exc}") from exc
        code = _wait(proc)
    return RunResult(
        exit_code=code, trace_file=receiver.path if receiver.spans else None, spans=receiver.spans,
        requests=receiver.requests, seconds=elapsed_s(clock, started), services=sorted(receiver.services),
        rejected=receiver.rejected,
    )


def _wait(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the program with Ctrl-C ignored and SIGTERM passed on; the handlers that were
    there before are put back. Signal N's end is 128 + N."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        code = proc.wait()
        return code if code >= 0 else 128 - code

    def forward(signum: int, frame: object) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    for sig in FORWARDED:
        previous[sig] = signal.signal(sig, forward)
    try:
        code = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return code if code >= 0 else 128 - code
