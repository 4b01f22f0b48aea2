"""`Telemetry`: one run's tracer provider, resource, exporters and failure counts."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, ParamSpec, TypeVar

from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.clock import Clock, default_clock
from agenttrace.telemetry.content import ContentPolicy
from agenttrace.telemetry.exporters import (
    GuardedExporter,
    otlp_exporter,
    resolve_otlp_endpoint,
    trace_file_exporter,
)
from agenttrace.telemetry.guard import FailureCounter, guarded
from agenttrace.telemetry.limits import TruncatingExporter, max_value_length
from agenttrace.telemetry.spans import end_span, open_span, start_span

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider

__all__ = ["Detail", "ExportSummary", "Telemetry"]

_log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")

Detail = Literal["default", "fine"]
INSTRUMENTATION_SCOPE = "agenttrace"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agenttrace")
    except PackageNotFoundError:
        return "0+unknown"


@dataclass(frozen=True)
class ExportSummary:
    """What each exporter delivered, after `shutdown`."""

    exported: dict[str, int]
    failed: dict[str, int]
    failures: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.failures


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
    ) -> None:
        self.clock = clock or default_clock()
        self.content = content if content is not None else ContentPolicy()
        self.detail: Detail = detail
        self.run_id = run_id or uuid.uuid4().hex
        self.run_label = run_label
        self.trace_file = Path(trace_file) if trace_file is not None else None
        self.failures = FailureCounter()
        self.max_attribute_length = max_value_length(max_attribute_length)

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
        # export instead, with a marker (telemetry/limits.py). Other SDK limits stay as they are.
        limits = SpanLimits(max_attribute_length=SpanLimits.UNSET, max_span_attribute_length=SpanLimits.UNSET)
        self.provider = TracerProvider(resource=Resource.create(attrs), span_limits=limits)
        self._exporters: list[GuardedExporter] = []
        if self.trace_file is not None:
            self._add(trace_file_exporter(self.trace_file), f"file {self.trace_file}", synchronous)
        endpoint = resolve_otlp_endpoint(otlp_endpoint, otlp_protocol)
        if endpoint is not None:
            url, protocol = endpoint
            self._add(otlp_exporter(url, protocol, timeout_s=otlp_timeout_s), f"OTLP {protocol} {url}", synchronous)
        for i, exporter in enumerate(exporters):
            self._add(exporter, f"{type(exporter).__name__}#{i}", synchronous)
        self.meter_provider: MeterProvider | None = None
        if metrics:
            from agenttrace.telemetry.metrics import (
                GenAIMetricsProcessor,
                meter_provider,
                metric_exporters,
            )

            self.meter_provider = meter_provider(self.provider.resource, metric_exporters(self.trace_file, endpoint, otlp_timeout_s))
            self.provider.add_span_processor(GenAIMetricsProcessor(self.meter_provider, INSTRUMENTATION_SCOPE, _version()))
        self.tracer: Tracer = self.provider.get_tracer(INSTRUMENTATION_SCOPE, _version(), schema_url=sc.SCHEMA_URL)

    def _add(self, exporter: SpanExporter, name: str, synchronous: bool) -> None:
        truncating = TruncatingExporter(exporter, self.max_attribute_length)
        guarded_exporter = GuardedExporter(truncating, self.failures, name)
        self._exporters.append(guarded_exporter)
        # One processor per exporter: a slow or dead collector never delays the trace file.
        processor = SimpleSpanProcessor if synchronous else BatchSpanProcessor
        self.provider.add_span_processor(processor(guarded_exporter))

    def span(
        self,
        segment: str,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> AbstractContextManager[Span]:
        """A span that is current inside the block, timed on this telemetry's clock."""
        return open_span(self.tracer, self.clock, segment, name, attributes, kind=kind)

    def start_span(
        self,
        segment: str,
        name: str,
        attributes: Mapping[str, AttributeValue] | None = None,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        parent: Context | None = None,
    ) -> Span:
        """A started span (not made current) at this telemetry's clock; end it with `end_span`."""
        return start_span(self.tracer, self.clock, segment, name, attributes, kind=kind, parent=parent)

    def end_span(self, span: Span, exc: BaseException | None = None) -> None:
        """End `span` on this telemetry's clock, marked failed (or cancelled) when `exc` is given."""
        end_span(span, self.clock, exc)

    def guard(self, kind: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R | None:
        """Run a recording step; a failure is counted, never raised into the agent."""
        return guarded(self.failures, kind, fn, *args, **kwargs)

    def flush(self, timeout_millis: int = 30_000) -> bool:
        return self.provider.force_flush(timeout_millis)

    def shutdown(self) -> ExportSummary:
        """Flush and close every exporter; returns what each delivered."""
        self.provider.shutdown()
        if self.meter_provider is not None:  # after the spans: the last generation's points are in
            self.guard("shutting the metrics down", self.meter_provider.shutdown)
        return self.summary()

    def summary(self) -> ExportSummary:
        return ExportSummary(
            exported={e.name: e.spans_exported for e in self._exporters},
            failed={e.name: e.spans_failed for e in self._exporters},
            failures=self.failures.counts(),
        )

    def __enter__(self) -> Telemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def exporters(self) -> Iterator[GuardedExporter]:
        return iter(self._exporters)
