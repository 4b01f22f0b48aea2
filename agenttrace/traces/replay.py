"""Replaying recorded spans to an OTLP collector or Jaeger.

Spans read back from a trace file (`otlp_file.read_spans`, original ids, parents, times and
everything else) go to the official OTLP exporter, HTTP/protobuf or gRPC, in batches. The
exporter encodes them exactly as it encodes live spans and retries transient failures (connection
refused, 429/502/503/504, gRPC UNAVAILABLE) with exponential backoff until its timeout. We add
what a command-line replay needs: a quick reachability check so that a collector that is not
running is reported at once, not after the backoff; a stop at the first batch the endpoint did not
accept, with the reason the exporter gave; a hard bound on each batch (a collector that accepts
the connection and never answers is reported once the timeout is up, whatever the exporter's own
timers do); and the count of spans accepted.
"""

from __future__ import annotations

import logging
import socket
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from agenttrace.clock import default_clock, elapsed_s
from agenttrace.errors import ReplayError
from agenttrace.telemetry.exit import call_within
from agenttrace.telemetry.exporters import otlp_exporter

__all__ = ["DEFAULT_BATCH_SIZE", "ReplayResult", "replay_spans"]

# The SDK's BatchSpanProcessor default: a few hundred kB per request for agenttrace spans, well
# under the 4 MiB a gRPC receiver accepts by default.
DEFAULT_BATCH_SIZE = 512
DEFAULT_TIMEOUT_S = 10.0
_EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp", "opentelemetry.exporter.http")
# Past its timeout the exporter is given this long to return on its own before the batch is
# reported as unanswered (its timers are not exact), and this long to close.
_GRACE_S = 0.5
_CLOSE_S = 1.0


@dataclass(frozen=True)
class ReplayResult:
    """What a replay delivered."""

    endpoint: str
    protocol: str
    spans_sent: int
    batches: int
    seconds: float


def _hint(protocol: str) -> str:
    where = "port 4317" if protocol == "grpc" else "port 4318, path /v1/traces"
    return (
        f"Check that Jaeger (or your OpenTelemetry collector) is running and that the URL is its "
        f"OTLP {protocol} receiver (Jaeger: {where}); see README, 'Viewing traces in Jaeger'."
    )


def _host_port(endpoint: str) -> tuple[str, int]:
    parts = urlsplit(endpoint if "://" in endpoint else "http://" + endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname or "localhost", port


def _behind_proxy(host: str) -> bool:
    # With a proxy in the environment the exporter may reach a host we cannot reach directly:
    # leave the verdict to the exporter then.
    return bool(urllib.request.getproxies()) and not urllib.request.proxy_bypass(host)


def check_reachable(endpoint: str, protocol: str, timeout_s: float) -> None:
    """Raise ReplayError at once when nothing accepts TCP connections at the endpoint."""
    host, port = _host_port(endpoint)
    if _behind_proxy(host):
        return
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ReplayError(
            f"cannot reach the OTLP {protocol} endpoint {endpoint} ({host}:{port}: {reason}); "
            f"nothing was sent. {_hint(protocol)}",
            0,
        ) from exc


class _Capture(logging.Handler):
    """Keeps the exporter's warnings and errors, the only place it says why an export failed."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _capture_exporter_logs() -> Iterator[_Capture]:
    handler = _Capture()
    loggers = [logging.getLogger(name) for name in _EXPORTER_LOGGERS]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield handler
    finally:
        for lg in loggers:
            lg.removeHandler(handler)


def _batches(spans: Sequence[ReadableSpan], size: int) -> Iterator[Sequence[ReadableSpan]]:
    for i in range(0, len(spans), size):
        yield spans[i : i + size]


def _export_within(
    exporter: SpanExporter, batch: Sequence[ReadableSpan], timeout_s: float, messages: list[str]
) -> SpanExportResult:
    """`exporter.export(batch)`, given up (FAILURE, with the reason in `messages`) after `timeout_s`."""
    outcome: list[SpanExportResult] = []

    def export() -> None:
        try:
            outcome.append(exporter.export(batch))
        except Exception as exc:  # an exporter that raises is reported like one that refuses
            messages.append(f"{type(exc).__name__}: {exc}")
            outcome.append(SpanExportResult.FAILURE)

    if not call_within(export, timeout_s, "agenttrace-replay-export"):
        messages.append(f"no answer within {timeout_s - _GRACE_S:g} s")
        return SpanExportResult.FAILURE
    return outcome[0]


def _close(exporter: SpanExporter) -> None:
    try:
        exporter.shutdown()
    except Exception:  # closing a connection that failed says nothing new
        logging.getLogger(__name__).debug("closing the OTLP exporter failed", exc_info=True)


def replay_spans(
    spans: Sequence[ReadableSpan],
    endpoint: str,
    protocol: str = "http/protobuf",
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    exporter: SpanExporter | None = None,
    check: bool = True,
    on_batch: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Send `spans` in order, `batch_size` per request, to the OTLP endpoint.

    endpoint: a base URL (`http://host:4318`, `/v1/traces` is appended for HTTP) or a full one;
    protocol `http/protobuf` or `grpc`. timeout_s bounds each batch, retries included. Returns
    the count accepted; raises ReplayError (spans accepted so far in `spans_sent`) when the
    endpoint cannot be reached or a batch is not accepted after the exporter's retries; the
    remaining batches are then not sent. `exporter` replaces the official one (tests);
    `on_batch(sent, total)` is called after each accepted batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, not {batch_size}")
    clock = default_clock()
    started = clock.now_ns()
    if check and exporter is None:
        check_reachable(endpoint, protocol, min(timeout_s, 5.0))
    exporter = exporter or otlp_exporter(endpoint, protocol, timeout_s=timeout_s)
    sent = batches = 0
    try:
        with _capture_exporter_logs() as logs:
            for batch in _batches(spans, batch_size):
                logs.messages.clear()
                result = _export_within(exporter, batch, timeout_s + _GRACE_S, logs.messages)
                if result is not SpanExportResult.SUCCESS:
                    # the first message names the cause, the last how the exporter gave up
                    said = [m.rstrip(". ") for m in logs.messages[:1] + logs.messages[-1:]]
                    reason = "; ".join(dict.fromkeys(said)) or "no reason given"
                    raise ReplayError(
                        f"the OTLP {protocol} endpoint {endpoint} did not accept batch {batches + 1} "
                        f"({len(batch)} spans): {reason} (each batch may take {timeout_s:g} s, retries "
                        f"included). {sent} of {len(spans)} spans were accepted; the rest were not sent. "
                        f"{_hint(protocol)}",
                        sent,
                    )
                sent += len(batch)
                batches += 1
                if on_batch is not None:
                    on_batch(sent, len(spans))
    finally:
        call_within(lambda: _close(exporter), _CLOSE_S, "agenttrace-replay-close")
    return ReplayResult(endpoint, protocol, sent, batches, elapsed_s(clock, started))
