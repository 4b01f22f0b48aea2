"""Which `Telemetry` the instrumentation API records into: the one given to `configure`.

A span opened inside an agent span uses that agent's telemetry; anything else uses the configured
one, or, when nothing was configured, a default `Telemetry()` that exports only where the
standard OTEL_EXPORTER_OTLP_* variables point (a warning says so once).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace.export import SpanExporter

from agenttrace.clock import Clock
from agenttrace.telemetry import Detail, Telemetry
from agenttrace.telemetry.content import DEFAULT_MAX_CHARS, ContentPolicy
from agenttrace.telemetry.setup import ExportSummary

__all__ = ["configure", "get_telemetry", "shutdown"]

_log = logging.getLogger("agenttrace.instrument")
_lock = threading.Lock()
_current: Telemetry | None = None
_owned = False  # whether `shutdown` may close it (we built it) or only flush it (the caller did)


def configure(
    *,
    telemetry: Telemetry | None = None,
    service_name: str = "agenttrace",
    trace_file: str | os.PathLike[str] | None = None,
    otlp_endpoint: str | None = None,
    otlp_protocol: str | None = None,
    run_label: str | None = None,
    clock: Clock | None = None,
    detail: Detail = "default",
    capture_content: bool | None = None,
    redact: Sequence[tuple[str, str | re.Pattern[str]] | str | re.Pattern[str]] = (),
    max_content_chars: int = DEFAULT_MAX_CHARS,
    exporters: Sequence[SpanExporter] = (),
    synchronous: bool = False,
    metrics: bool = False,
    shutdown_timeout_s: float | None = None,
) -> Telemetry:
    """Set the telemetry that wrapped agents record into, and return it.

    Either pass a ready `telemetry`, or the settings to build one: where spans go (`trace_file`,
    OTLP `otlp_endpoint` — "" for Jaeger's default port, None for OTEL_EXPORTER_OTLP_ENDPOINT —
    or any SDK `exporters`), the `service_name` and `run_label` on the resource, the `clock`,
    and content capture (`capture_content`: None follows
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT; `redact`: extra patterns; each captured
    string capped at `max_content_chars`), and `metrics=True` for the GenAI client metrics
    (`gen_ai.client.operation.duration`, `gen_ai.client.token.usage`), exported where the spans
    go (`<trace_file>.metrics.jsonl`, the OTLP endpoint). Calling it again replaces the previous telemetry,
    which is shut down if `configure` built it and flushed otherwise.

    Exit is bounded: at shutdown (or process exit) the trace file gets every span, and OTLP
    collectors get at most `shutdown_timeout_s` more (None: AGENTTRACE_SHUTDOWN_TIMEOUT, else
    3 s); spans they did not get are counted and named in one warning. On SIGTERM the trace file
    is written before the host program's own SIGTERM handler runs (or the process ends).
    """
    global _current, _owned
    if telemetry is None:
        telemetry = Telemetry(
            service_name=service_name,
            trace_file=trace_file,
            otlp_endpoint=otlp_endpoint,
            otlp_protocol=otlp_protocol,
            run_label=run_label,
            clock=clock,
            detail=detail,
            exporters=exporters,
            synchronous=synchronous,
            metrics=metrics,
            shutdown_timeout_s=shutdown_timeout_s,
            content=ContentPolicy(enabled=capture_content, redact=tuple(redact), max_chars=max_content_chars),
        )
        owned = True
    else:
        owned = False
    with _lock:
        previous, previous_owned = _current, _owned
        _current, _owned = telemetry, owned
    if previous is not None and previous is not telemetry:
        previous.shutdown() if previous_owned else previous.flush()
    return telemetry


def get_telemetry() -> Telemetry:
    """The configured telemetry (a default one is made on first use when nothing was configured)."""
    global _current, _owned
    with _lock:
        if _current is None:
            _current, _owned = Telemetry(), True
            if not any(True for _ in _current.exporters()):
                _log.warning(
                    "agenttrace is not configured: spans are recorded but exported nowhere. "
                    "Call agenttrace.configure(trace_file=...) or set OTEL_EXPORTER_OTLP_ENDPOINT."
                )
        return _current


def shutdown() -> ExportSummary | None:
    """Flush and close the configured telemetry (if `configure` built it); None if there is none."""
    global _current, _owned
    with _lock:
        tel, owned = _current, _owned
        _current, _owned = None, False
    if tel is None:
        return None
    if owned:
        return tel.shutdown()
    tel.flush()
    return tel.summary()
