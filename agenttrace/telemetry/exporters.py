"""Where spans go: a trace file of OTLP/JSON lines, and an OTLP endpoint.

The file holds one ExportTraceServiceRequest per line in the OTLP JSON mapping (hex ids,
camelCase, ns timestamps as strings), encoded by the official `opentelemetry-exporter-otlp-json`
encoder and written as its file exporter writes it, so we write no encoding by hand; the lines
go through `LineFile` (telemetry/files.py), so a full disk costs whole batches, never a torn
line. Endpoints use the official OTLP exporters over HTTP/protobuf or gRPC. Every exporter is
wrapped in `GuardedExporter`, so one that raises or cannot connect is counted and logged while
the others (the file above all) still get every span.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from agenttrace.telemetry.files import LineFile, reason
from agenttrace.telemetry.guard import FailureCounter

__all__ = [
    "CountedBatchProcessor",
    "CountedSimpleProcessor",
    "GuardedExporter",
    "TraceFileExporter",
    "lost_line",
    "otlp_exporter",
    "otlp_metric_exporter",
    "resolve_otlp_endpoint",
    "trace_file_exporter",
]

# Jaeger's OTLP receivers: 4318 for HTTP/protobuf, 4317 for gRPC.
DEFAULT_HTTP_ENDPOINT = "http://localhost:4318"
DEFAULT_GRPC_ENDPOINT = "http://localhost:4317"

_log = logging.getLogger("agenttrace.telemetry")


class GuardedExporter(SpanExporter):
    """Wraps an exporter so that its exceptions and failed exports are counted, never raised.

    It also counts the spans handed to its processor (`count_submitted`, called on the thread
    that ends the span), so that spans the processor's queue dropped, or still held when exit
    could wait no longer, show as `spans_submitted - spans_exported - spans_failed`. remote: the
    exporter talks to a collector, so exit does not wait on it past the shutdown bound.
    The first failure is logged (one line, by the FailureCounter); `batches_failed` and
    `lost_to` (the last failure's reason, "No space left on device") feed the exit summary, and
    the first time exports work again after failing, one line says what was lost meanwhile.
    """

    def __init__(self, inner: SpanExporter, failures: FailureCounter, name: str, *, remote: bool = False) -> None:
        self.inner = inner
        self.name = name
        self.remote = remote
        self._failures = failures
        self._lock = threading.Lock()
        self._abandoned = False
        self._closed = False
        self.spans_submitted = 0
        self.spans_exported = 0
        self.spans_failed = 0
        self.batches_failed = 0
        self.lost_to: str | None = None
        self._failing = False  # the last batch failed: the next success is a recovery
        self._recovery_said = False

    def count_submitted(self) -> None:
        with self._lock:
            self.spans_submitted += 1

    @property
    def spans_undelivered(self) -> int:
        """Spans that ended but did not reach this exporter's destination (failed or dropped)."""
        return max(0, self.spans_submitted - self.spans_exported)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._abandoned:  # exit stopped waiting: the rest of the queue is left, not sent
            return SpanExportResult.FAILURE
        why = None
        try:
            result = self.inner.export(spans)
        except Exception as exc:  # the host program must never see an exporter's exception
            self._failures.record(f"export to {self.name}", exc)
            result, why = SpanExportResult.FAILURE, reason(exc)
        else:
            if result is not SpanExportResult.SUCCESS:
                self._failures.record(f"export to {self.name}", f"{len(spans)} spans not accepted")
                why = "not accepted"
        if result is SpanExportResult.SUCCESS:
            self.spans_exported += len(spans)
            if self._failing:
                self._recovered()
        else:
            self.spans_failed += len(spans)
            self.batches_failed += 1
            self.lost_to, self._failing = why, True
        return result

    def _recovered(self) -> None:
        """Exports work again: say once what was lost while they did not (later streaks are
        counted quietly, and the exit summary gives the totals)."""
        self._failing = False
        if not self._recovery_said:
            self._recovery_said = True
            _log.warning("agenttrace: export to %s works again; %s", self.name, self.loss())

    def loss(self) -> str:
        """`3 batches / 1,536 spans lost to: No space left on device` (so far)."""
        return lost_line(self.batches_failed, self.spans_failed, self.lost_to)

    def abandon(self) -> None:
        """Stop exporting: later batches fail at once, and the inner exporter is shut down on a
        daemon thread so that its retry backoff (and, for gRPC, the call in flight) is cut short."""
        self._abandoned = True
        threading.Thread(target=self.shutdown, name=f"agenttrace-abandon {self.name}", daemon=True).start()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        try:
            return self.inner.force_flush(timeout_millis)
        except Exception as exc:
            self._failures.record(f"flush of {self.name}", exc)
            return False

    def shutdown(self) -> None:
        with self._lock:  # once: the processor and `abandon` may both ask
            if self._closed:
                return
            self._closed = True
        try:
            self.inner.shutdown()
        except Exception as exc:
            self._failures.record(f"shutdown of {self.name}", exc)


class _Counted:
    """Counts each sampled span offered to the processor on its guarded exporter."""

    guarded: GuardedExporter

    def on_end(self, span: ReadableSpan) -> None:
        if span.context is not None and span.context.trace_flags.sampled:
            self.guarded.count_submitted()
        super().on_end(span)  # type: ignore[misc]


class CountedBatchProcessor(_Counted, BatchSpanProcessor):
    """The SDK's batch processor, counting what it is given. Its queue drops spans when full
    (the SDK only logs it); the count makes those drops visible in the export summary."""

    def __init__(self, exporter: GuardedExporter, **kwargs: int) -> None:
        super().__init__(exporter, **kwargs)
        self.guarded = exporter


class CountedSimpleProcessor(_Counted, SimpleSpanProcessor):
    """The SDK's synchronous processor (each span exported as it ends), counting what it is given."""

    def __init__(self, exporter: GuardedExporter) -> None:
        super().__init__(exporter)
        self.guarded = exporter


class TraceFileExporter(SpanExporter):
    """Appends each batch to the trace file as one OTLP/JSON line, whole or not at all.

    A batch the disk refuses (full, read-only, gone) raises the OSError from `export` with no
    byte of it left in the file (the `GuardedExporter` around it counts the batch as lost and
    logs the first failure); the next batch is tried as usual, so once space comes back the
    file goes on, every line whole. Construction never raises: a file that cannot be opened
    sets `open_error` (for the caller to name at once) and each batch tries to open it again.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._file = LineFile(self.path)
        self.open_error: OSError | None = None
        try:
            self._file.open()
        except OSError as exc:
            self.open_error = exc

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

        data = encode_spans(spans)
        if not data.resource_spans:
            return SpanExportResult.SUCCESS
        # the official file exporter's line: compact JSON, one request per line
        line = json.dumps(data.to_dict(), separators=(",", ":")) + "\n"
        self._file.append(line.encode("utf-8"))
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True  # every append is a write(2): nothing is held back

    def shutdown(self) -> None:
        self._file.close()


def lost_line(batches: int, spans: int, why: str | None) -> str:
    """`3 batches / 1,536 spans lost to: No space left on device`."""
    return f"{batches:,} batch{'es' if batches != 1 else ''} / {spans:,} span{'s' if spans != 1 else ''} lost to: {why}"


def trace_file_exporter(path: str | os.PathLike[str]) -> TraceFileExporter:
    """Append OTLP/JSON lines to `path` (its folder is created), whole lines only; never raises
    (see `TraceFileExporter.open_error`)."""
    return TraceFileExporter(path)


def resolve_otlp_endpoint(endpoint: str | None, protocol: str | None) -> tuple[str, str] | None:
    """The (endpoint, protocol) to export to, from arguments or the standard OTEL_ variables.

    endpoint None: the OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT variable, or None when it is unset.
    endpoint "" (a bare `--otlp`): that variable, else Jaeger's port for the protocol. A URL
    without a scheme gets `http://`. Protocol is `http/protobuf` (default) or `grpc`.
    """
    protocol = (
        protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    if protocol not in ("http/protobuf", "grpc"):
        raise ValueError(f"unsupported OTLP protocol {protocol!r}: use 'http/protobuf' or 'grpc'")
    if not endpoint:
        from_env = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if from_env:
            endpoint = from_env
        elif endpoint is None:
            return None
        else:  # a bare flag and no variable: Jaeger's default port for the protocol
            endpoint = DEFAULT_GRPC_ENDPOINT if protocol == "grpc" else DEFAULT_HTTP_ENDPOINT
    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    return endpoint, protocol


def otlp_exporter(endpoint: str, protocol: str = "http/protobuf", *, timeout_s: float = 5.0) -> SpanExporter:
    """An official OTLP span exporter. For HTTP a base URL gets the `/v1/traces` path appended,
    as the OTEL_EXPORTER_OTLP_ENDPOINT rules do; a URL with a path is used as given."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        parts = urlsplit(endpoint)
        return GrpcExporter(
            endpoint=parts.netloc or endpoint, insecure=parts.scheme != "https", timeout=timeout_s
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
        OTLPSpanExporter as HttpExporter,
    )

    if urlsplit(endpoint).path in ("", "/"):
        endpoint = endpoint.rstrip("/") + "/v1/traces"
    return HttpExporter(endpoint=endpoint, timeout=timeout_s)


def otlp_metric_exporter(endpoint: str, protocol: str = "http/protobuf", *, timeout_s: float = 5.0) -> MetricExporter:
    """The official OTLP metric exporter for the endpoint the spans go to: for HTTP a base URL
    (or one ending in `/v1/traces`) gets `/v1/metrics`."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcExporter,
        )

        parts = urlsplit(endpoint)
        return GrpcExporter(endpoint=parts.netloc or endpoint, insecure=parts.scheme != "https", timeout=timeout_s)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
        OTLPMetricExporter as HttpExporter,
    )

    path = urlsplit(endpoint).path
    if path in ("", "/"):
        endpoint = endpoint.rstrip("/") + "/v1/metrics"
    elif path.endswith("/v1/traces"):
        endpoint = endpoint[: -len("/v1/traces")] + "/v1/metrics"
    return HttpExporter(endpoint=endpoint, timeout=timeout_s)
