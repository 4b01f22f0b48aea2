"""ClickHouse as a trace source: the OpenTelemetry Collector's ClickHouse exporter's table
(`otel_traces`), read where the data is.

    connect(url)            a store: `http(s)://user:password@host:8123/database` through the
                            official clickhouse-connect client, or `chdb:FOLDER` (`chdb:` alone:
                            in memory), ClickHouse's engine in-process (chdb)
    check_table(store, t)   the columns the reader needs, or an error naming the missing ones
    read_traces(query)      batches of whole traces as SpanRecords, oldest first

The filters run in SQL: the time window and the service pick the traces (any span in them), and
the traces are then fetched whole, `batch_traces` at a time (keyset pages over (first span's
time, trace id), so a page costs the same late in a day as early). Each span's attributes are cut
down in SQL to those a report reads (prefixes of the conventions it knows; message and tool
content left out), and times come as integer nanoseconds.

The exporter keeps every attribute value as text (pdata's AsString). The reader gives values
their types back: by key where the report knows the key's type (records.ATTRIBUTE_TYPES), else
by form (an integer, a decimal or exponent number, true/false, a JSON array). A text attribute
whose value looks like a number comes back as a number: the schema cannot tell them apart.
No torch import on this path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from agenttrace import semconv as sc
from agenttrace.errors import ClickHouseError, JSONError
from agenttrace.traces.clickhouse_params import INT64, UINT32, parameter_texts, typed_parameters
from agenttrace.traces.jsontext import parse_json
from agenttrace.traces.otlp_json import MAX_DEPTH
from agenttrace.traces.span_records import (
    ATTRIBUTE_TYPES,
    ROUND_TYPES,
    SPAN_KINDS,
    STATUS_CODES,
    EventRecord,
    SpanRecord,
    checked,
)

__all__ = ["ClickHouseQuery", "Store", "TRACES_DDL", "check_table", "connect", "read_traces",
           "typed_value"]

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

# What the reader selects: the columns and their source, in SQL.
_NEEDED = ("Timestamp", "TraceId", "SpanId", "ParentSpanId", "SpanName", "SpanKind", "ServiceName",
           "ResourceAttributes", "ScopeName", "SpanAttributes", "Duration", "StatusCode", "StatusMessage",
           "Events.Timestamp", "Events.Name", "Events.Attributes", "Links.TraceId", "Links.SpanId")
# Attribute keys the reports read: ours and those of the conventions they map (traces/conventions).
_PREFIXES = ("agenttrace.", "gen_ai.", "openinference.", "llm.", "tool.", "tool_call.", "traceloop.", "http.",
             "db.", "rpc.", "server.", "error.", "session.", "agent.", "pydantic_ai.", "logfire.")
_KEYS = ("agent_name", "final_result", "otel.status_code", "otel.status_description", "span.kind")
# ... but not content (prompts, replies, tool arguments and results): large, and no figure reads them
_CONTENT = (sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES, sc.GEN_AI_TOOL_CALL_ARGUMENTS, sc.GEN_AI_TOOL_CALL_RESULT,
            "gen_ai.system_instructions", "llm.input_messages", "llm.output_messages", "tool.parameters")


def _attribute_filter(column: str) -> str:
    starts = " OR ".join(f"startsWith(k, '{p}')" for p in _PREFIXES)
    keys = ", ".join(f"'{k}'" for k in _KEYS)
    content = ", ".join(f"'{k}'" for k in _CONTENT)
    return f"mapFilter((k, v) -> ({starts} OR k IN ({keys})) AND k NOT IN ({content}), {column})"


_SPAN_SQL = f"""SELECT
    toUnixTimestamp64Nano(Timestamp) AS start_ns, Duration, TraceId, SpanId, ParentSpanId, SpanName, SpanKind,
    ResourceAttributes, ScopeName, {_attribute_filter('SpanAttributes')} AS attrs, StatusCode, StatusMessage,
    arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp) AS event_ns, Events.Name AS event_names,
    Events.Attributes AS event_attrs, Links.TraceId AS link_traces, Links.SpanId AS link_spans
FROM {{table}}
WHERE TraceId IN {{ids:Array(String)}}
ORDER BY Timestamp, SpanId"""


class Store(Protocol):
    """Where the SQL runs: rows of plain values (strings, ints, lists, dicts), or ClickHouseError."""

    name: str

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[list[Any]]: ...

    def command(self, sql: str) -> None: ...

    def insert_json_rows(self, table: str, lines: Sequence[bytes]) -> None: ...


class _Chdb:
    """ClickHouse's engine in this process (chdb), over a data folder or in memory."""

    def __init__(self, folder: str) -> None:
        try:
            from chdb import session
        except ImportError as exc:
            raise ClickHouseError("chdb: URLs need the chdb package (pip install chdb)") from exc
        self.name = f"chdb:{folder}"
        self._session = session.Session(folder) if folder else session.Session()

    def _query(self, sql: str, fmt: str, params: Mapping[str, str] | None = None):
        try:
            return self._session.query(sql, fmt, params=params or None)
        except Exception as exc:  # chdb raises its own error types: say what ClickHouse said
            raise ClickHouseError(f"{self.name}: {str(exc).strip()[:500]}") from exc

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[list[Any]]:
        import msgspec

        out = self._query(sql + " SETTINGS output_format_json_quote_64bit_integers = 0", "JSONCompact",
                          parameter_texts(sql, params))
        data = out.bytes()
        return msgspec.json.decode(data)["data"] if data else []

    def command(self, sql: str) -> None:
        self._query(sql, "CSV")

    def insert_json_rows(self, table: str, lines: Sequence[bytes]) -> None:
        if lines:
            self._query(f"INSERT INTO {table} FORMAT JSONEachRow\n" + b"\n".join(lines).decode(), "CSV")


class _Http:
    """A ClickHouse server through the official client (clickhouse-connect, HTTP interface)."""

    def __init__(self, url: str) -> None:
        try:
            import clickhouse_connect
        except ImportError as exc:
            raise ClickHouseError("ClickHouse URLs need clickhouse-connect (pip install 'agenttrace[clickhouse]')") from exc
        parts = urlsplit(url)
        port = parts.port or (8443 if parts.scheme == "https" else 8123)
        self.name = f"{parts.scheme}://{parts.hostname}:{port}{parts.path or ''}"
        try:
            self._client = clickhouse_connect.get_client(
                host=parts.hostname or "localhost", port=port,
                username=unquote(parts.username or "default"), password=unquote(parts.password or ""),
                database=parts.path.strip("/") or None, secure=parts.scheme == "https", connect_timeout=10)
        except Exception as exc:
            raise ClickHouseError(f"{self.name}: cannot connect ({str(exc).strip()[:300]}); is a ClickHouse server "
                                  "listening there?") from exc

    @contextmanager
    def _said(self) -> Iterator[None]:
        """The client's errors (of its own types) as ClickHouseError saying what the server said."""
        try:
            yield
        except Exception as exc:
            raise ClickHouseError(f"{self.name}: {str(exc).strip()[:500]}") from exc

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[list[Any]]:
        with self._said():  # typed and bounded here; the client writes them in the escaped form itself
            return [list(r) for r in self._client.query(sql, parameters=typed_parameters(sql, params)).result_rows]

    def command(self, sql: str) -> None:
        with self._said():
            self._client.command(sql)

    def insert_json_rows(self, table: str, lines: Sequence[bytes]) -> None:
        if lines:
            with self._said():
                self._client.raw_insert(table, insert_block=b"\n".join(lines), fmt="JSONEachRow")


def connect(url: str) -> Store:
    """A store for `url`: `chdb:FOLDER` / `chdb:` (in-process), else a server's HTTP URL."""
    if url.startswith("chdb:"):
        return _Chdb(url[len("chdb:"):].removeprefix("//"))
    if not re.match(r"^https?://", url):
        raise ClickHouseError(f"{url!r}: a ClickHouse URL is http(s)://[user:password@]host[:port][/database], or "
                              "chdb:FOLDER for ClickHouse's engine in this process")
    return _Http(url)


def _identifier(table: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", table):
        raise ClickHouseError(f"table {table!r}: expected a name like otel_traces or otel.otel_traces")
    return table


def check_table(store: Store, table: str) -> None:
    """ClickHouseError naming the table and what it lacks, unless it has the exporter's columns."""
    table = _identifier(table)
    db, _, name = table.rpartition(".")
    where = "table = {t:String}" + (" AND database = {d:String}" if db else " AND database = currentDatabase()")
    found = {r[0] for r in store.rows(f"SELECT name FROM system.columns WHERE {where}", {"t": name, "d": db} if db else
                                      {"t": name})}
    if not found:
        raise ClickHouseError(f"{store.name}: no table {table}; create it with the OpenTelemetry Collector's ClickHouse "
                              "exporter (or `agenttrace export --clickhouse`)")
    missing = [c for c in _NEEDED if c not in found]
    if missing:
        raise ClickHouseError(f"{store.name}: table {table} is not the OpenTelemetry exporter's traces table: it has no "
                              f"{', '.join(missing)}")


@dataclass(frozen=True)
class ClickHouseQuery:
    """What to read: the traces of `table` with a span at or after `since_ns` (and before
    `until_ns`), of `service` when given, `batch_traces` traces at a time (at least 1; any
    number past what one query's LIMIT holds reads as that many)."""

    url: str
    table: str = "otel_traces"
    since_ns: int | None = None
    until_ns: int | None = None
    service: str | None = None
    batch_traces: int = 500

    def __post_init__(self) -> None:
        if type(self.batch_traces) is not int or self.batch_traces < 1:
            raise ClickHouseError(f"batch_traces must be a whole number from 1 up, not {self.batch_traces!r}")

    def describe(self) -> str:
        parts = [f"{self.url} {self.table}"]
        if self.service:
            parts.append(f"service {self.service}")
        return ", ".join(parts)


def _filters(q: ClickHouseQuery) -> tuple[str, dict[str, Any]]:
    # A DateTime64(9) holds Int64 nanoseconds (1677-09-21 to 2262-04-11): a bound past that range
    # is decided here, as the server would wrap it (--since 2300 would pick every trace).
    where, params = [], {}
    lo, hi = INT64
    if q.since_ns is not None and q.since_ns > lo:  # at or after the first instant: every span
        if q.since_ns > hi:
            where.append("false")  # after the last instant a span can have: none
        else:
            where.append("Timestamp >= fromUnixTimestamp64Nano({since:Int64})")
            params["since"] = q.since_ns
    if q.until_ns is not None and q.until_ns <= hi:  # past the last instant: every span is before it
        where.append("Timestamp < fromUnixTimestamp64Nano({until:Int64})")
        params["until"] = max(q.until_ns, lo)  # no span is before the first instant
    if q.service:
        where.append("ServiceName = {service:String}")
        params["service"] = q.service
    return (" WHERE " + " AND ".join(where)) if where else "", params


def trace_pages(store: Store, q: ClickHouseQuery) -> Iterator[list[str]]:
    """The ids of the traces the filters pick, oldest first, `batch_traces` at a time."""
    where, params = _filters(q)
    n = min(q.batch_traces, UINT32[1])  # LIMIT's type; a batch that large is every trace anyway
    last: tuple[int, str] | None = None
    while True:
        page_params = dict(params, n=n)
        having = ""
        if last is not None:
            having = " HAVING (t0, TraceId) > ({t:Int64}, {id:String})"
            page_params.update(t=last[0], id=last[1])
        sql = (f"SELECT toUnixTimestamp64Nano(min(Timestamp)) AS t0, TraceId FROM {q.table}{where} GROUP BY TraceId"
               f"{having} ORDER BY t0, TraceId LIMIT {{n:UInt32}}")
        rows = store.rows(sql, page_params)
        if not rows:
            return
        yield [r[1] for r in rows]
        if len(rows) < n:
            return
        last = (int(rows[-1][0]), rows[-1][1])


def read_traces(store: Store, q: ClickHouseQuery, problems: list[str]) -> Iterator[list[SpanRecord]]:
    """Batches of whole traces (checked as every reader's are); a row that cannot be read is a
    problem naming its trace and span, and the rest is read."""
    check_table(store, q.table)
    sql = _SPAN_SQL.replace("{table}", q.table)
    for ids in trace_pages(store, q):
        spans = []
        for row in store.rows(sql, {"ids": ids}):
            try:
                spans.append(_span(row, store.name, q.table))
            except (TypeError, ValueError, IndexError, KeyError) as exc:
                problems.append(f"{store.name} {q.table}: trace {row[2] if len(row) > 2 else '?'} span "
                                f"{row[3] if len(row) > 3 else '?'}: unreadable row ({type(exc).__name__}: {exc}); "
                                "span skipped")
        yield checked(spans, problems)


# The exporter writes pdata's names (SPAN_KIND_SERVER, STATUS_CODE_OK); older ones wrote Server, Ok.
_KINDS = {f"SPAN_KIND_{k}": k for k in SPAN_KINDS.values()}
_STATUS = {f"STATUS_CODE_{c}": c for c in STATUS_CODES.values()}
_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?|-?\.[0-9]+")
# What decides JSON nesting: brackets, and strings (whose brackets do not count), escapes and all.
_NESTING = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _nested_within(text: str, depth: int) -> bool:
    """Whether JSON `text` nests at most `depth` arrays/objects deep: one pass, no recursion,
    stopping at the first bracket too deep."""
    level = 0
    for m in _NESTING.finditer(text):
        level += _STEP.get(m.group(), 0)
        if level > depth:
            return False
    return True


def _enum(text: str, table: dict[str, str], default: str) -> str:
    return table.get(text) or (text.upper() if text.upper() in table.values() else default)


def typed_value(key: str, text: str, types: Mapping[str, str] = ATTRIBUTE_TYPES) -> Any:
    """An attribute's value back from the exporter's text: by the key's known type, else by form;
    never raises, whatever the text (what cannot be read as its form stays text)."""
    kind = types.get(key)
    if kind == "a string":
        return text
    if text in ("true", "false"):
        return text == "true"
    if kind == "a boolean":
        return text
    if kind in ("an integer", "a number") or kind is None:
        if _INT.fullmatch(text) and len(text) <= 20:  # 64 bits at most; longer is text (int() refuses 4,300)
            return int(text)
        if _FLOAT.fullmatch(text) and ("." in text or "e" in text or "E" in text):
            return float(text)
    # An array as deep as the file reader keeps (MAX_DEPTH); deeper is damage, kept as the text
    # (parsing it would exhaust the stack: 100k nested `[` are a RecursionError).
    if text.startswith("[") and text.endswith("]") and _nested_within(text, MAX_DEPTH):
        try:
            return parse_json(text)
        except JSONError:
            return text
    return text


def _attributes(raw: Mapping[str, str] | None, types: Mapping[str, str] = ATTRIBUTE_TYPES) -> dict[str, Any]:
    return {k: typed_value(k, v, types) for k, v in (raw or {}).items()}


def _span(row: list[Any], store: str, table: str) -> SpanRecord:
    (start_ns, duration, trace_id, span_id, parent_id, name, kind, resource, scope, attrs, status, message, event_ns,
     event_names, event_attrs, link_traces, link_spans) = row
    start = int(start_ns)
    events = [EventRecord(str(n), int(t), _attributes(a, ROUND_TYPES if n == sc.EVENT_SPECULATE_ROUND else ATTRIBUTE_TYPES))
              for t, n, a in zip(event_ns or (), event_names or (), event_attrs or (), strict=True)]
    return SpanRecord(
        trace_id=str(trace_id).lower(),
        span_id=str(span_id).lower(),
        parent_id=str(parent_id).lower() or None,
        name=str(name),
        kind=_enum(str(kind), _KINDS, "UNSPECIFIED"),
        start_ns=start,
        end_ns=start + int(duration),
        attributes=_attributes(attrs),
        events=events or (),
        status=_enum(str(status), _STATUS, "UNSET"),
        status_message=str(message or ""),
        resource=_attributes(resource),
        links=[(str(t).lower(), str(s).lower()) for t, s in zip(link_traces or (), link_spans or (), strict=True)] or (),
        source=f"{store} {table}",  # one input (problems about a span name its trace or span id)
        scope=str(scope or ""),
    )
