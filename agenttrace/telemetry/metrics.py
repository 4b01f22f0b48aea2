"""The GenAI client metrics, opt-in: `gen_ai.client.operation.duration` and
`gen_ai.client.token.usage`, as the GenAI semantic conventions define them.

They are recorded in one place for every writer (our loop, the wrapping API, the adapters): a
span processor that reads each generation span as it ends, so a metric can never disagree with
the span it summarises. Server-side generation spans (`agenttrace serve`) are not client
operations and are left out. Export goes where the spans go: OTLP/JSON lines in a file beside the
trace file (`<trace>.metrics.jsonl`) and the same OTLP endpoint, through the SDK's own readers.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.telemetry.exporters import otlp_metric_exporter

__all__ = ["GenAIMetricsProcessor", "metric_exporters", "metrics_file_for", "meter_provider"]

# The bucket boundaries the conventions advise for each histogram.
DURATION_BUCKETS_S = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
_KEYS = (sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_PROVIDER_NAME, sc.GEN_AI_REQUEST_MODEL, sc.GEN_AI_RESPONSE_MODEL,
         sc.SERVER_ADDRESS, sc.SERVER_PORT, sc.ERROR_TYPE)


def metrics_file_for(trace_file: Path) -> Path:
    """`traces/run.jsonl` -> `traces/run.metrics.jsonl` (the report skips metric lines)."""
    return trace_file.with_name(trace_file.stem + ".metrics.jsonl")


def metric_exporters(trace_file: Path | None, otlp: tuple[str, str] | None, timeout_s: float) -> list[MetricExporter]:
    out: list[MetricExporter] = []
    if trace_file is not None:
        from opentelemetry.exporter.otlp.json.file import FileMetricExporter

        out.append(FileMetricExporter(metrics_file_for(trace_file)))
    if otlp is not None:
        out.append(otlp_metric_exporter(*otlp, timeout_s=timeout_s))
    return out


def meter_provider(resource: Resource, exporters: Sequence[MetricExporter]) -> MeterProvider:
    """A meter provider that exports to each exporter (every minute, and at shutdown)."""
    return MeterProvider(resource=resource, metric_readers=[PeriodicExportingMetricReader(e) for e in exporters])


class GenAIMetricsProcessor(SpanProcessor):
    """Records the two GenAI client histograms from every client generation span that ends.
    Called on the thread that ends the span; recording a histogram point does not block."""

    def __init__(self, provider: MeterProvider, scope: str, version: str) -> None:
        meter = provider.get_meter(scope, version, schema_url=sc.SCHEMA_URL)
        self._duration = meter.create_histogram(
            sc.METRIC_OPERATION_DURATION, unit="s", description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS_S))
        self._tokens = meter.create_histogram(
            sc.METRIC_TOKEN_USAGE, unit="{token}", description="Number of input and output tokens used.",
            explicit_bucket_boundaries_advisory=list(TOKEN_BUCKETS))

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        a = span.attributes or {}
        if a.get(sc.SEGMENT) != sc.Segment.GENERATION or span.kind is SpanKind.SERVER:
            return
        if span.start_time is None or span.end_time is None:
            return
        attrs: dict[str, AttributeValue] = {k: a[k] for k in _KEYS if k in a}
        self._duration.record(max(0, span.end_time - span.start_time) / 1e9, attrs)
        for token_type, key in ((sc.TOKEN_TYPE_INPUT, sc.GEN_AI_USAGE_INPUT_TOKENS),
                                (sc.TOKEN_TYPE_OUTPUT, sc.GEN_AI_USAGE_OUTPUT_TOKENS)):
            value = a.get(key)
            if isinstance(value, int):
                self._tokens.record(value, {**attrs, sc.GEN_AI_TOKEN_TYPE: token_type})

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
