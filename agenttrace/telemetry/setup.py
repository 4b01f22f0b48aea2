"""`Telemetry`: one run's tracer provider, resource, exporters and failure counts."""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, ParamSpec, TypeVar

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Link, Span, SpanKind, Tracer
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.clock import Clock, default_clock, elapsed_s
from agenttrace.telemetry import exit as exit_
from agenttrace.telemetry.content import ContentPolicy
from agenttrace.telemetry.exit import call_within
from agenttrace.telemetry.exporters import (
    CountedBatchProcessor,
    CountedSimpleProcessor,
    GuardedExporter,
    lost_line,
    otlp_exporter,
    resolve_otlp_endpoint,
    trace_file_exporter,
)
from agenttrace.telemetry.guard import FailureCounter, guarded
from agenttrace.telemetry.spans import end_span, open_span, start_span
from agenttrace.telemetry.truncation import TruncatingExporter, max_value_length

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider

__all__ = ["Detail", "ExportSummary", "Telemetry"]

_log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

Detail = Literal["default", "fine"]
INSTRUMENTATION_SCOPE = "agenttrace"
# Spans the trace file's queue may hold (the SDK default is 2048): a burst of a few thousand
# spans between two writes must not be dropped from the file, the record that is always complete.
LOCAL_QUEUE_SIZE = 65_536


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agenttrace")
    except PackageNotFoundError:
        return "0+unknown"


def _left_s(start_ns: int, bound_s: float) -> float:
    """What is left of `bound_s` seconds from `start_ns` (negative once it has passed), both on
    the real clock (`default_clock`): exit and flush waits are real ones."""
    return bound_s - elapsed_s(default_clock(), start_ns)


@dataclass(frozen=True)
class ExportSummary:
    """What each exporter delivered, after `shutdown`, by exporter name.

    submitted: spans that ended and were handed to the exporter's processor; exported: accepted;
    failed: in batches the exporter gave up on; the rest of `submitted` was dropped (the SDK
    queue was full, or still held when exit stopped waiting). batches_failed: how many batches
    those failed spans were in; lost_to: why the last one failed ("No space left on device").
    """

    exported: dict[str, int]
    failed: dict[str, int]
    failures: dict[str, int]
    submitted: dict[str, int] = field(default_factory=dict)
    batches_failed: dict[str, int] = field(default_factory=dict)
    lost_to: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def undelivered(self) -> dict[str, int]:
        """Spans that did not reach each destination, failed and dropped together (nonzero only)."""
        gaps = {name: n - self.exported.get(name, 0) for name, n in self.submitted.items()}
        return {name: gap for name, gap in gaps.items() if gap > 0}

    def dropped(self, name: str) -> int:
        return max(0, self.submitted.get(name, 0) - self.exported.get(name, 0) - self.failed.get(name, 0))

    def undelivered_line(self, trace_file: Path | None = None) -> str | None:
        """One line naming every span that did not reach its destination, or None if all did."""
        gaps = self.undelivered()
        if not gaps:
            return None
        parts = [
            f"{gap:,} of {self.submitted[name]:,} spans did not reach {name} "
            f"({self._failed_part(name)}, {self.dropped(name):,} dropped by the queue or left at exit)"
            for name, gap in gaps.items()
        ]
        where = f"; the trace file {trace_file} holds them" if trace_file is not None and not any(
            name.startswith("file ") for name in gaps
        ) else ""
        return "agenttrace: " + "; ".join(parts) + where

    def _failed_part(self, name: str) -> str:
        failed = self.failed.get(name, 0)
        if failed and name in self.lost_to:
            return lost_line(self.batches_failed.get(name, 0), failed, self.lost_to[name])
        return f"{failed:,} failed to export"


class Telemetry:
    """Spans for one run (or one bench arm): resource, exporters, clock and detail level.

    trace_file: append OTLP/JSON lines there. otlp_endpoint: also export to a collector ("" for
    Jaeger's default port; None reads OTEL_EXPORTER_OTLP_ENDPOINT). exporters: any more SDK
    exporters (tests pass an in-memory one). synchronous: export each span as it ends (tests);
    otherwise a background batch processor per exporter keeps export off the agent's path.
    max_attribute_length: string attribute values longer than this reach every exporter cut,
    with a visible `...[truncated from N chars]` marker (None: OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT,
    else 4096; 0: no limit).
    content: opt-in capture of prompts, outputs and tool arguments (default: off unless
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT says otherwise; see agenttrace.telemetry.content).
    metrics: also record the GenAI client metrics (`gen_ai.client.operation.duration`,
    `gen_ai.client.token.usage`; telemetry/metrics.py), exported beside the trace file
    (`<trace>.metrics.jsonl`) and to the OTLP endpoint.
    shutdown_timeout_s: the most `shutdown` (and so the process's exit) waits for OTLP
    collectors once the local exporters are done (None: AGENTTRACE_SHUTDOWN_TIMEOUT, else 3 s;
    telemetry/exit.py); what they did not get by then is counted and named in one warning.
    flush_on_sigterm: on SIGTERM write ended spans to the trace file first, then run the host
    program's SIGTERM handler (installed from the main thread only).
    """

    def __init__(
        self,
        *,
        service_name: str = "agenttrace",
        run_label: str | None = None,
        run_id: str | None = None,
        clock: Clock | None = None,
        detail: Detail = "default",
        trace_file: str | os.PathLike[str] | None = None,
        otlp_endpoint: str | None = None,
        otlp_protocol: str | None = None,
        otlp_timeout_s: float = 5.0,
        exporters: Sequence[SpanExporter] = (),
        synchronous: bool = False,
        resource_attributes: Mapping[str, AttributeValue] | None = None,
        max_attribute_length: int | None = None,
        content: ContentPolicy | None = None,
        metrics: bool = False,
        shutdown_timeout_s: float | None = None,
        flush_on_sigterm: bool = True,
    ) -> None:
        self.clock = clock or default_clock()
        self.content = content if content is not None else ContentPolicy()
        self.detail: Detail = detail
        self.run_id = run_id or uuid.uuid4().hex
        self.run_label = run_label
        self.trace_file = Path(trace_file) if trace_file is not None else None
        self.failures = FailureCounter()
        self.max_attribute_length = max_value_length(max_attribute_length)
        self.shutdown_timeout_s = exit_.shutdown_timeout_s(shutdown_timeout_s)
        self._summary: ExportSummary | None = None
        self._shutdown_lock = threading.Lock()  # a second caller waits for the first's summary

        attrs: dict[str, AttributeValue] = {
            sc.SERVICE_NAME: service_name,
            sc.SERVICE_VERSION: _version(),
            sc.HOST_NAME: socket.gethostname(),
            sc.PROCESS_PID: os.getpid(),
            sc.RUN_ID: self.run_id,
        }
        if run_label:
            attrs[sc.RUN_LABEL] = run_label
        attrs.update(resource_attributes or {})
        # The SDK would cut long values silently (from the same OTEL_ variables); we cut them at
        # export instead, with a marker (telemetry/truncation.py). Other SDK limits stay as they are.
        limits = SpanLimits(max_attribute_length=SpanLimits.UNSET, max_span_attribute_length=SpanLimits.UNSET)
        # Our own exit hook (below) replaces the SDK's, which would wait for a dead collector.
        self.provider = TracerProvider(resource=Resource.create(attrs), span_limits=limits, shutdown_on_exit=False)
        self._exporters: list[GuardedExporter] = []
        self._processors: list[tuple[GuardedExporter, SpanProcessor]] = []
        file_ok = False
        if self.trace_file is not None:
            file_exporter = trace_file_exporter(self.trace_file)
            name = f"file {self.trace_file}"
            if file_exporter.open_error is not None:
                # said now, in one line, under the kind its failed batches will count under (so
                # they stay quiet); the agent runs, and each batch tries the file again
                self.failures.record(f"export to {name}", f"cannot open it: {file_exporter.open_error}")
            file_ok = file_exporter.open_error is None
            self._add(file_exporter, name, synchronous)
        endpoint = resolve_otlp_endpoint(otlp_endpoint, otlp_protocol)
        if endpoint is not None:
            url, protocol = endpoint
            otlp = otlp_exporter(url, protocol, timeout_s=otlp_timeout_s)
            self._add(otlp, f"OTLP {protocol} {url}", synchronous, remote=True)
        for i, exporter in enumerate(exporters):
            self._add(exporter, f"{type(exporter).__name__}#{i}", synchronous)
        self.meter_provider: MeterProvider | None = None
        if metrics:
            from agenttrace.telemetry.metrics import GenAIMetricsProcessor, meter_provider, metric_exporters

            self.meter_provider = meter_provider(self.provider.resource, metric_exporters(self.trace_file if file_ok else None, endpoint, otlp_timeout_s))
            # its own exit hook would wait on a dead collector unbounded: ours shuts it down instead
            atexit.unregister(self.meter_provider.shutdown)
            self.provider.add_span_processor(GenAIMetricsProcessor(self.meter_provider, INSTRUMENTATION_SCOPE, _version()))
        self.tracer: Tracer = self.provider.get_tracer(INSTRUMENTATION_SCOPE, _version(), schema_url=sc.SCHEMA_URL)
        exit_.track(self, sigterm=flush_on_sigterm)

    def _add(self, exporter: SpanExporter, name: str, synchronous: bool, *, remote: bool = False) -> None:
        truncating = TruncatingExporter(exporter, self.max_attribute_length)
        guarded_exporter = GuardedExporter(truncating, self.failures, name, remote=remote)
        self._exporters.append(guarded_exporter)
        # One processor per exporter: a slow or dead collector never delays the trace file.
        processor: SpanProcessor
        if synchronous:
            processor = CountedSimpleProcessor(guarded_exporter)
        elif remote:
            processor = CountedBatchProcessor(guarded_exporter)
        else:
            processor = CountedBatchProcessor(guarded_exporter, max_queue_size=LOCAL_QUEUE_SIZE)
        self._processors.append((guarded_exporter, processor))
        self.provider.add_span_processor(processor)

    def span(
        self,
        segment: str,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> AbstractContextManager[Span]:
        """A span that is current inside the block, timed on this telemetry's clock."""
        return open_span(self.tracer, self.clock, segment, name, attributes, kind=kind, content=self.content)

    def start_span(
        self,
        segment: str,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        parent: Context | None = None,
        links: Sequence[Link] = (),
    ) -> Span:
        """A started span (not made current) at this telemetry's clock; end it with `end_span`."""
        return start_span(self.tracer, self.clock, segment, name, attributes, kind=kind, parent=parent, links=links)

    def end_span(self, span: Span, exc: BaseException | None = None) -> None:
        """End `span` on this telemetry's clock, marked failed (or cancelled) when `exc` is given;
        the status message goes through this telemetry's content policy."""
        end_span(span, self.clock, exc, self.content)

    def guard(self, kind: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        """Run a recording step; a failure is counted, never raised into the agent."""
        return guarded(self.failures, kind, fn, *args, **kwargs)

    def flush(self, timeout_millis: int = 30_000) -> bool:
        """Export every ended span: the local exporters fully, collectors for at most
        `timeout_millis` (a batch in flight may go on in the background). True if all finished."""
        done = self.flush_local()
        # a real wait, so the real clock: a fake `self.clock` must never leave it unbounded
        started, bound = default_clock().now_ns(), timeout_millis / 1000
        for exporter, processor in self._processors:
            if exporter.remote:
                flushed = call_within(processor.force_flush, _left_s(started, bound), f"agenttrace-flush {exporter.name}")
                done = flushed and done
        return done

    def flush_local(self) -> bool:
        """Write every ended span to the local exporters (the trace file); collectors are left alone."""
        ok = True
        for exporter, processor in self._processors:
            if not exporter.remote:
                ok = bool(self.guard(f"flush of {exporter.name}", processor.force_flush)) and ok
        return ok

    def shutdown(self, timeout_s: float | None = None) -> ExportSummary:
        """Flush and close every exporter; returns what each delivered (the same summary if called again).

        The local exporters (the trace file) get every ended span, however long the collectors
        take. The OTLP ones get at most `timeout_s` more (None: `shutdown_timeout_s`); then what
        they hold is abandoned. Spans that did not reach any exporter are named in one warning.
        """
        with self._shutdown_lock:
            if self._summary is None:
                self._summary = self._shut(timeout_s)
            return self._summary

    def _shut(self, timeout_s: float | None) -> ExportSummary:
        exit_.untrack(self)
        bound = self.shutdown_timeout_s if timeout_s is None else timeout_s
        started = default_clock().now_ns()  # the real clock, as in `flush`
        # the trace file first and in full: it is the record a dead collector cannot spoil
        for exporter, processor in self._processors:
            if not exporter.remote:
                self.guard(f"shutdown of {exporter.name}", processor.shutdown)
        closing = [
            (exporter, self._closer(exporter, processor)) for exporter, processor in self._processors if exporter.remote
        ]
        # Metrics alongside (every point was recorded as its span ended): their file is written
        # first, then the collector gets what is left of the bound.
        metrics = None
        if self.meter_provider is not None:
            metrics = threading.Thread(
                target=self.guard, args=("shutting the metrics down", self.meter_provider.shutdown),
                name="agenttrace-metrics-shutdown", daemon=True,
            )
            metrics.start()
        for exporter, thread in closing:
            thread.join(max(0.0, _left_s(started, bound)))
            if thread.is_alive():
                exporter.abandon()
        if metrics is not None:
            metrics.join(max(0.0, _left_s(started, bound)))
        # every batch processor is shut by now (or abandoned): this returns at once
        self.guard("shutting the tracer provider down", self.provider.shutdown)
        summary = self.summary()
        line = summary.undelivered_line(self.trace_file)
        if line is not None:
            _log.warning("%s", line)
        return summary

    def _closer(self, exporter: GuardedExporter, processor: SpanProcessor) -> threading.Thread:
        thread = threading.Thread(
            target=self.guard,
            args=(f"shutdown of {exporter.name}", processor.shutdown),
            name=f"agenttrace-shutdown {exporter.name}",
            daemon=True,  # one still waiting on a collector does not hold the process
        )
        thread.start()
        return thread

    def summary(self) -> ExportSummary:
        return ExportSummary(
            exported={e.name: e.spans_exported for e in self._exporters},
            failed={e.name: e.spans_failed for e in self._exporters},
            failures=self.failures.counts(),
            submitted={e.name: e.spans_submitted for e in self._exporters},
            batches_failed={e.name: e.batches_failed for e in self._exporters},
            lost_to={e.name: e.lost_to for e in self._exporters if e.lost_to is not None},
        )

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def exporters(self) -> Iterator[GuardedExporter]:
        return iter(self._exporters)
