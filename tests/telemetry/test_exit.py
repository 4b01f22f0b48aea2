"""Leaving on time (telemetry/exit.py): exit waits for a dead or silent collector at most the
shutdown bound, the trace file still gets every span, the spans the collector missed are named in
one line, SIGTERM writes the trace file first, and `agenttrace export` gives up on a silent
collector within its --timeout.

Each case runs a real child process, since what is measured is how (and when) a process ends.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agenttrace.telemetry.exit import SHUTDOWN_TIMEOUT_ENV, shutdown_timeout_s
from agenttrace.telemetry.setup import ExportSummary

BOUND_S = 1.0
# What exit may add beyond the bound: writing the last spans to the file, interpreter teardown
# (on a loaded machine)
SLACK_S = 1.5
SPANS = 3000

# Makes SPANS spans as fast as it can with OTLP where argv says, then prints its span ids and the
# moment its run ended; exit (the bounded shutdown) happens at interpreter exit.
_BURST = """
import sys, time
import agenttrace
path, endpoint, protocol, n, bound = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
tel = agenttrace.configure(trace_file=path, otlp_endpoint=endpoint, otlp_protocol=protocol, shutdown_timeout_s=bound)
ids = []
for i in range(n):
    with tel.span("tool", f"s{i}") as span:
        ids.append(format(span.get_span_context().span_id, "016x"))
print(" ".join(ids))
print(f"ENDED {time.time():.6f}", flush=True)
"""

# Ends a span every few ms, printing its index once ended, until it is terminated. argv[2]
# "host": a SIGTERM handler installed before configure prints HOST and exits with status 7.
_SLOW = """
import signal, sys, time
import agenttrace
path, mode = sys.argv[1], sys.argv[2]
if mode == "host":
    def host(signum, frame):
        print("HOST", flush=True)
        sys.exit(7)
    signal.signal(signal.SIGTERM, host)
tel = agenttrace.configure(trace_file=path, otlp_endpoint=sys.argv[3] if len(sys.argv) > 3 else None)
i = 0
while True:
    with tel.span("tool", f"s{i}"):
        time.sleep(0.002)
    print(i, flush=True)
    i += 1
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.pop("AGENTTRACE_STRICT_TELEMETRY", None)  # the child is a user's program, not a test
    return env


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: connections are refused


@pytest.fixture
def black_hole() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(1)
    for conn in held:
        conn.close()
    server.close()


def _file_spans(path: Path) -> dict[str, str]:
    """span id -> name, for every span in an OTLP/JSON lines file."""
    out = {}
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    out[span["spanId"]] = span["name"]
    return out


def _run_burst(tmp_path: Path, endpoint: str, protocol: str) -> None:
    path = tmp_path / "trace.jsonl"
    args = [sys.executable, "-c", _BURST, str(path), endpoint, protocol, str(SPANS), str(BOUND_S)]
    proc = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=60)
    exited = time.time()
    assert proc.returncode == 0, proc.stderr[-2000:]
    ids_line, ended_line = proc.stdout.strip().splitlines()[-2:]
    ended = float(ended_line.split()[1])
    assert exited - ended < BOUND_S + SLACK_S, f"exit took {exited - ended:.2f} s after the run"

    in_file = _file_spans(path)
    assert set(ids_line.split()) == set(in_file), "the trace file must hold every span"
    assert len(in_file) == SPANS

    lines = [line for line in proc.stderr.splitlines() if line.startswith("agenttrace: ")]
    assert len(lines) == 1, proc.stderr[-2000:]
    m = re.match(r"agenttrace: ([\d,]+) of ([\d,]+) spans did not reach OTLP", lines[0])
    assert m and m.group(1) == m.group(2) == f"{SPANS:,}", lines[0]
    assert str(path) in lines[0]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_exit_is_bounded_when_the_collector_is_down(tmp_path: Path, protocol: str) -> None:
    _run_burst(tmp_path, f"http://127.0.0.1:{_closed_port()}", protocol)


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_exit_is_bounded_when_the_collector_never_answers(tmp_path: Path, protocol: str, black_hole: int) -> None:
    _run_burst(tmp_path, f"http://127.0.0.1:{black_hole}", protocol)


def _terminate_after(args: list[str], spans: int) -> tuple[subprocess.Popen[str], int, str]:
    """Start the child, SIGTERM it once `spans` spans have ended; (process, last ended index, rest of stdout)."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout is not None
    last = -1
    while last < spans - 1:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        last = int(line)
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=30)
    return proc, last, rest


def _ended(last: int, rest: str) -> int:
    """How many spans had ended when the signal came: the child may have printed more after our read."""
    return max([last, *(int(word) for word in rest.split() if word.isdigit())]) + 1


def test_sigterm_writes_every_ended_span_then_ends_as_sigterm_does(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    # a dead collector as well: the file is written on SIGTERM regardless
    args = [sys.executable, "-c", _SLOW, str(path), "default", f"http://127.0.0.1:{_closed_port()}"]
    proc, last, rest = _terminate_after(args, 200)
    assert proc.returncode == -signal.SIGTERM
    names = set(_file_spans(path).values())
    assert {f"s{i}" for i in range(_ended(last, rest))} <= names


def test_sigterm_chains_the_host_handler(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    proc, last, rest = _terminate_after([sys.executable, "-c", _SLOW, str(path), "host"], 200)
    assert "HOST" in rest.split()
    assert proc.returncode == 7
    names = set(_file_spans(path).values())
    assert {f"s{i}" for i in range(_ended(last, rest))} <= names


def _trace_file(tmp_path: Path, spans: int) -> Path:
    from agenttrace.telemetry import Telemetry

    path = tmp_path / "source.jsonl"
    with Telemetry(trace_file=path, synchronous=True, flush_on_sigterm=False) as tel:
        for i in range(spans):
            with tel.span("tool", f"s{i}"):
                pass
    return path


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_replay_to_a_silent_collector_gives_up_within_its_timeout(tmp_path: Path, protocol: str, black_hole: int) -> None:
    from agenttrace.errors import ReplayError
    from agenttrace.traces.otlp_file import read_spans
    from agenttrace.traces.replay import replay_spans

    spans = read_spans([str(_trace_file(tmp_path, 600))]).spans
    started = time.monotonic()
    with pytest.raises(ReplayError, match="did not accept batch 1") as info:
        replay_spans(spans, f"http://127.0.0.1:{black_hole}", protocol, timeout_s=1.0)
    assert time.monotonic() - started < 1.0 + 1.0
    assert info.value.spans_sent == 0


def _export(source: Path, port: int) -> tuple[subprocess.CompletedProcess[str], float]:
    args = [sys.executable, "-m", "agenttrace", "export", str(source), "--otlp", f"http://127.0.0.1:{port}", "--timeout", "1"]
    started = time.monotonic()
    proc = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=60)
    return proc, time.monotonic() - started


def test_export_command_to_a_silent_collector_says_so_within_its_timeout(tmp_path: Path, black_hole: int) -> None:
    source = _trace_file(tmp_path, 600)
    # a closed port is reported at once: its time is the interpreter's start and the imports
    refused, baseline = _export(source, _closed_port())
    assert refused.returncode == 1 and "cannot reach" in refused.stderr
    silent, took = _export(source, black_hole)
    assert silent.returncode == 1
    assert "did not accept batch 1" in silent.stderr
    assert took - baseline < 1.0 + 2.0, f"{took:.1f} s against {baseline:.1f} s to start and read the file"


def test_undelivered_line_names_failed_and_dropped_spans() -> None:
    summary = ExportSummary(
        exported={"file t.jsonl": 4800, "OTLP grpc http://x:4317": 0},
        failed={"file t.jsonl": 0, "OTLP grpc http://x:4317": 2560},
        failures={},
        submitted={"file t.jsonl": 4800, "OTLP grpc http://x:4317": 4800},
    )
    assert summary.undelivered() == {"OTLP grpc http://x:4317": 4800}
    assert summary.undelivered_line(Path("t.jsonl")) == (
        "agenttrace: 4,800 of 4,800 spans did not reach OTLP grpc http://x:4317 (2,560 failed to export, "
        "2,240 dropped by the queue or left at exit); the trace file t.jsonl holds them"
    )
    delivered = ExportSummary(exported={"a": 3}, failed={"a": 0}, failures={}, submitted={"a": 3})
    assert delivered.undelivered_line() is None


def test_shutdown_timeout_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHUTDOWN_TIMEOUT_ENV, raising=False)
    assert shutdown_timeout_s(None) == 3.0
    assert shutdown_timeout_s(0.5) == 0.5
    monkeypatch.setenv(SHUTDOWN_TIMEOUT_ENV, "1.5")
    assert shutdown_timeout_s(None) == 1.5
    monkeypatch.setenv(SHUTDOWN_TIMEOUT_ENV, "soon")
    with pytest.raises(ValueError, match=SHUTDOWN_TIMEOUT_ENV):
        shutdown_timeout_s(None)
