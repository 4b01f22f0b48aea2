"""Trace files into the OpenTelemetry Collector ClickHouse exporter's table, row for row as the
exporter writes them (its insert's columns; values as pdata's AsString renders them: integers in
decimal, doubles in the shortest positional form, booleans as true/false, arrays as compact
JSON), so `agenttrace report --clickhouse` reads back what `export --clickhouse` wrote.

Rows go in JSONEachRow batches; times as decimal seconds with nine places, which ClickHouse
parses into DateTime64(9) exactly. No torch import on this path.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec
import numpy as np
from opentelemetry.sdk.trace import ReadableSpan

from agenttrace import semconv as sc
from agenttrace.traces.clickhouse import Store, _identifier

# The exporter's table (opentelemetry-collector-contrib, exporter/clickhouseexporter, the
# traces table without full-text indexes), for `export --clickhouse` and the tests.
TRACES_DDL = """CREATE TABLE IF NOT EXISTS {table} (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = MergeTree
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1"""

# The columns the reader selects (clickhouse_read).

__all__ = ["TRACES_DDL", "as_string", "export_parquet", "export_spans", "row_of"]

ROWS_PER_INSERT = 5000
_ENCODE = msgspec.json.Encoder()


def as_string(value: Any) -> str:
    """An attribute value as the exporter stores it (pdata Value.AsString)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "+Inf" if value > 0 else "-Inf"
        return np.format_float_positional(value, trim="-")  # Go's FormatFloat(f, 'f', -1, 64)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, (list, tuple)):
        return json.dumps([_jsonable(v) for v in value], separators=(",", ":"), ensure_ascii=False)
    return str(value)


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, float) and not math.isfinite(v):
        return as_string(v)
    return v


def _map(attrs: Mapping[str, Any] | None) -> dict[str, str]:
    return {k: as_string(v) for k, v in (attrs or {}).items()}


def _time(ns: int) -> str:
    return f"{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def row_of(span: ReadableSpan) -> dict[str, Any]:
    """One exporter row of a recorded span."""
    ctx = span.context
    parent = span.parent
    start, end = int(span.start_time or 0), int(span.end_time or 0)
    resource = dict(span.resource.attributes) if span.resource is not None else {}
    scope = span.instrumentation_scope
    status = span.status
    links = list(span.links or ())
    return {
        "Timestamp": _time(start),
        "TraceId": f"{ctx.trace_id:032x}",
        "SpanId": f"{ctx.span_id:016x}",
        "ParentSpanId": f"{parent.span_id:016x}" if parent is not None else "",
        "TraceState": ctx.trace_state.to_header() if ctx.trace_state else "",
        "SpanName": span.name,
        "SpanKind": f"SPAN_KIND_{span.kind.name}",
        "ServiceName": str(resource.get(sc.SERVICE_NAME, "")),
        "ResourceAttributes": _map(resource),
        "ScopeName": scope.name if scope is not None else "",
        "ScopeVersion": (scope.version or "") if scope is not None else "",
        "SpanAttributes": _map(span.attributes),
        "Duration": max(0, end - start),
        "StatusCode": f"STATUS_CODE_{status.status_code.name}",
        "StatusMessage": status.description or "",
        "Events.Timestamp": [_time(int(e.timestamp)) for e in span.events],
        "Events.Name": [e.name for e in span.events],
        "Events.Attributes": [_map(e.attributes) for e in span.events],
        "Links.TraceId": [f"{ln.context.trace_id:032x}" for ln in links],
        "Links.SpanId": [f"{ln.context.span_id:016x}" for ln in links],
        "Links.TraceState": [ln.context.trace_state.to_header() if ln.context.trace_state else "" for ln in links],
        "Links.Attributes": [_map(ln.attributes) for ln in links],
    }


def export_spans(store: Store, table: str, spans: Iterable[ReadableSpan], *, create: bool = True) -> int:
    """Insert `spans` into `table` (created with the exporter's schema when `create` and absent);
    returns how many rows went in. ClickHouseError when the store refuses."""
    table = _identifier(table)
    if create:
        store.command(TRACES_DDL.format(table=table))
    batch: list[bytes] = []
    count = 0
    for span in spans:
        batch.append(_ENCODE.encode(row_of(span)))
        if len(batch) >= ROWS_PER_INSERT:
            store.insert_json_rows(table, batch)
            count += len(batch)
            batch = []
    store.insert_json_rows(table, batch)
    return count + len(batch)


def export_parquet(store: Store, table: str, path: str, *, create: bool = True) -> int:
    """Insert the rows of a Parquet file of the exporter's columns (a store dumped with `SELECT *
    ... FORMAT Parquet`) into `table` (created when `create` and absent), columns matched by name;
    returns how many rows went in. ClickHouseError when the store refuses."""
    table = _identifier(table)
    if create:
        store.command(TRACES_DDL.format(table=table))
    return store.insert_parquet(table, path)
