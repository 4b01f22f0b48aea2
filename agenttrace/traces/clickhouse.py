"""ClickHouse as a trace source: the OpenTelemetry Collector's ClickHouse exporter's table
(`otel_traces`), read where the data is. The store and what to read; the reading itself (the
filters, the pages, the budget of a read, the values typed back) is clickhouse_read.py.

    connect(url)            a store: `http(s)://user:password@host:8123/database` through the
                            official clickhouse-connect client, or `chdb:FOLDER` (`chdb:` alone:
                            in memory), ClickHouse's engine in-process (chdb)
    check_table(store, t)   the columns the reader needs, or an error naming the missing ones; its engine
                            (check_source: or of Parquet files, `parquet_rows`, read where they lie)
    store.answer(sql, params, bounds)
                            a query within one read's bounds (QueryBounds): the server stops it
                            at what is left of the deadline, an answer over the size bound is
                            not held (QueryAnswer.too_large); its size is its JSONCompact bytes
    ClickHouseQuery         what to read: the table (or Parquet files), the window, the service,
                            the batch, the bounds of the read (bounded_http.ReadLimits)

No torch import on this path.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from agenttrace.clock import default_clock, elapsed_s
from agenttrace.errors import ClickHouseError
from agenttrace.traces.bounded_http import ReadLimits
from agenttrace.traces.clickhouse_params import parameter_texts, quoted, typed_parameters

__all__ = ["PARQUET_ROW_KEYS", "ClickHouseQuery", "QueryAnswer", "QueryBounds", "Store", "check_source", "check_table",
           "connect", "parquet_rows"]

# The columns the reader selects (clickhouse_read).
_NEEDED = ("Timestamp", "TraceId", "SpanId", "ParentSpanId", "SpanName", "SpanKind", "ServiceName",
           "ResourceAttributes", "ScopeName", "SpanAttributes", "Duration", "StatusCode", "StatusMessage",
           "Events.Timestamp", "Events.Name", "Events.Attributes", "Links.TraceId", "Links.SpanId")
@dataclass(frozen=True)
class QueryBounds:
    """One query's share of a read's bounds."""

    seconds: float  # what is left of the read's deadline (> 0)
    max_bytes: int  # the largest answer held (JSONCompact bytes)


@dataclass(frozen=True)
class QueryAnswer:
    """A bounded query's rows and its answer's size in bytes; `too_large`: over the bound, the
    rows not read (`nbytes` is what was read of it)."""

    rows: list[list[Any]]
    nbytes: int
    too_large: bool = False


_CHUNK = 1 << 16


def _settings(bounds: QueryBounds) -> dict[str, int | str]:
    # The server ends the query at what is left of the deadline (whole seconds: 0 would be no
    # limit), and refuses a result over the bound before sending it (counted in its own uncompressed
    # bytes, fewer than the JSON's: the JSON is checked too); `throw`, as a profile's `break` would
    # cut a page of spans short without a word. No statistics in the answer: its size is its rows'.
    return {"max_execution_time": max(1, math.ceil(bounds.seconds)), "max_result_bytes": bounds.max_bytes,
            "result_overflow_mode": "throw", "output_format_json_quote_64bit_integers": 0,
            "output_format_write_statistics": 0}


def _over_bound(message: str) -> bool:
    return "TOO_MANY_ROWS_OR_BYTES" in message or "Code: 396." in message


def _json_rows(data: bytes | bytearray, name: str) -> list[list[Any]]:
    """The rows of a JSONCompact answer; ClickHouseError for an error the server wrote into it
    (mid-answer, after the 200)."""
    import msgspec

    if not data:
        return []
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        tail = data[-300:].decode("utf-8", "replace").strip()
        raise ClickHouseError(f"{name}: not a whole JSONCompact answer (it ends: {tail})") from exc
    if not isinstance(doc, dict) or "exception" in doc or not isinstance(doc.get("data"), list):
        said = str(doc.get("exception", "")).strip()[:500] if isinstance(doc, dict) else ""
        raise ClickHouseError(f"{name}: {said or 'not a JSONCompact answer (no data list)'}")
    return doc["data"]


class Store(Protocol):
    """Where the SQL runs: rows of plain values (strings, ints, lists, dicts), or ClickHouseError."""

    name: str

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[list[Any]]: ...

    def answer(self, sql: str, params: Mapping[str, Any] | None, bounds: QueryBounds) -> QueryAnswer:
        """`sql`'s rows within `bounds`: the server stops the query at `bounds.seconds`
        (ClickHouseError), an answer over `bounds.max_bytes` comes back `too_large`."""
        ...

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None: ...

    def arrow(self, sql: str) -> Any:
        """`sql`'s answer as a pyarrow Table, in this store's session (earlier temporary tables there)."""
        ...

    def insert_json_rows(self, table: str, lines: Sequence[bytes]) -> None: ...

    def release_memory(self) -> None:
        """Memory the engine freed given back to the system, where the engine runs in this process
        (its allocator keeps freed pages for reuse); nothing for a server."""
        ...

    def insert_parquet(self, table: str, path: str) -> int:
        """The rows of the Parquet file at `path` (on this machine) into `table` by column name (one
        the file lacks takes its default, one the table lacks is skipped); how many went in."""
        ...


_PARQUET_BLOCKS = ("max_insert_block_size = 131072, min_insert_block_size_rows = 131072, "
                   "min_insert_block_size_bytes = 0, max_block_size = 65536")


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
            self._flush()
            raise ClickHouseError(f"{self.name}: {str(exc).strip()[:500]}") from exc

    def _flush(self) -> None:
        # A query that fails mid-answer (max_result_bytes, max_execution_time) leaves what it had
        # written in the session's output, and chdb (4.4) puts it before the next query's answer:
        # a throwaway query takes it.
        with suppress(Exception):  # the session itself is broken: the next query will say so
            self._session.query("SELECT 1", "CSV")

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[list[Any]]:
        import msgspec

        out = self._query(sql + " SETTINGS output_format_json_quote_64bit_integers = 0", "JSONCompact",
                          parameter_texts(sql, params))
        data = out.bytes()
        return msgspec.json.decode(data)["data"] if data else []

    def answer(self, sql: str, params: Mapping[str, Any] | None, bounds: QueryBounds) -> QueryAnswer:
        settings = ", ".join(f"{k} = {v!r}" for k, v in _settings(bounds).items())
        try:  # in this process: the answer is whole once chdb returns (its size is checked then)
            data = self._query(f"{sql} SETTINGS {settings}", "JSONCompact", parameter_texts(sql, params)).bytes()
        except ClickHouseError as exc:
            if _over_bound(str(exc)):
                return QueryAnswer([], 0, too_large=True)
            raise
        if len(data) > bounds.max_bytes:
            return QueryAnswer([], len(data), too_large=True)
        return QueryAnswer(_json_rows(data, self.name), len(data))

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._query(sql, "CSV", parameter_texts(sql, params))

    def arrow(self, sql: str) -> Any:
        import pyarrow as pa

        # the Arrow file's bytes, read here: chdb's own "ArrowTable" imports pandas first (0.5 s)
        res = self._query(sql, "Arrow")
        if len(res) == 0:
            return pa.table({})
        return pa.RecordBatchFileReader(res.get_memview().view()).read_all()

    def insert_json_rows(self, table: str, lines: Sequence[bytes]) -> None:
        if lines:
            self._query(f"INSERT INTO {table} FORMAT JSONEachRow\n" + b"\n".join(lines).decode(), "CSV")

    def release_memory(self) -> None:
        with suppress(ClickHouseError):  # a build without jemalloc: its pages stay, nothing else changes
            self._query("SYSTEM JEMALLOC PURGE", "CSV")

    def insert_parquet(self, table: str, path: str) -> int:
        # by name, a block of rows a part: sorted whole, 1M spans took 6.0 s and 2.1 GB, so 4.0 s and 1.5 GB
        source, count = f"file({quoted(path)}, Parquet)", f"SELECT count() FROM {table}"
        have = {r[0] for r in self.rows(f"DESCRIBE TABLE {source}")}
        named = ", ".join(f"`{r[0]}`" for r in self.rows(f"DESCRIBE TABLE {table}") if r[0] in have)
        before = int(self.rows(count)[0][0])
        self._query(f"INSERT INTO {table} ({named}) SELECT {named} FROM {source} SETTINGS {_PARQUET_BLOCKS}", "CSV")
        return int(self.rows(count)[0][0]) - before


class _Http:
    """A ClickHouse server through the official client (clickhouse-connect, HTTP interface)."""

    def __init__(self, name: str, client: Any) -> None:
        self.name = name
        self._client = client

    @contextmanager
    def _said(self) -> Iterator[None]:
        """The client's errors (of its own types) as ClickHouseError saying what the server said."""
        try:
            yield
        except ClickHouseError:  # ours, naming the store already
            raise
        except Exception as exc:
            raise ClickHouseError(f"{self.name}: {str(exc).strip()[:500]}") from exc

    def rows(self, sql: str, params: Mapping[str, Any] | None = None) -> list[list[Any]]:
        with self._said():  # typed and bounded here; the client writes them in the escaped form itself
            return [list(r) for r in self._client.query(sql, parameters=typed_parameters(sql, params)).result_rows]

    def answer(self, sql: str, params: Mapping[str, Any] | None, bounds: QueryBounds) -> QueryAnswer:
        from urllib3 import Timeout

        # No socket wait outlives what is left of the deadline (the client's send_receive_timeout
        # would be 300 s), and the body is read a chunk at a time: never more than the bound + 1.
        before = getattr(self._client, "timeout", None)
        self._client.timeout = Timeout(connect=min(10.0, bounds.seconds), read=bounds.seconds)
        clock = default_clock()  # the real clock: this times a real socket wait
        started, body = clock.now_ns(), bytearray()
        try:
            with self._said():
                stream = self._client.raw_stream(sql, parameters=typed_parameters(sql, params),
                                                 settings=_settings(bounds), fmt="JSONCompact")
                try:
                    while len(body) <= bounds.max_bytes:
                        chunk = stream.read(min(_CHUNK, bounds.max_bytes + 1 - len(body)))
                        if not chunk:
                            break
                        body += chunk
                        if elapsed_s(clock, started) > bounds.seconds:  # a server dripping bytes
                            raise ClickHouseError(f"{self.name}: no complete answer within {bounds.seconds:.1f} s")
                finally:
                    stream.close()
                if len(body) > bounds.max_bytes:
                    return QueryAnswer([], len(body), too_large=True)
                return QueryAnswer(_json_rows(body, self.name), len(body))
        except ClickHouseError as exc:
            if _over_bound(str(exc)):  # the server refused it (max_result_bytes), before or mid-answer
                return QueryAnswer([], len(body), too_large=True)
            raise
        finally:
            if before is not None:  # the store's other queries keep the connection's timeouts
                self._client.timeout = before

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        with self._said():
            self._client.command(sql, parameters=typed_parameters(sql, params) or None)

    def arrow(self, sql: str) -> Any:
        # the client keeps one session id (clickhouse-connect's autogenerate_session_id), so the
        # server keeps the temporary tables of the earlier statements for this one
        with self._said():
            return self._client.query_arrow(sql, use_strings=True)

    def insert_json_rows(self, table: str, lines: Sequence[bytes]) -> None:
        if lines:
            with self._said():
                self._client.raw_insert(table, insert_block=b"\n".join(lines), fmt="JSONEachRow")

    def insert_parquet(self, table: str, path: str) -> int:
        with open(path, "rb") as f, self._said():  # sent as it is read; the server parses it
            return int(self._client.raw_insert(table, insert_block=f, fmt="Parquet").written_rows)

    def release_memory(self) -> None:
        pass  # the server's memory is the server's


def connect(url: str, *, timeout_s: float | None = None) -> Store:
    """A store for `url`: `chdb:FOLDER` / `chdb:` (in-process), else a server's HTTP URL, whose
    requests (the client's own at connection among them) wait at most `timeout_s` (default: the
    client's 300 s; a read's queries are given what is left of its deadline, Store.answer)."""
    if url.startswith("chdb:"):
        return _Chdb(url[len("chdb:"):].removeprefix("//"))
    if not re.match(r"^https?://", url):
        raise ClickHouseError(f"{url!r}: a ClickHouse URL is http(s)://[user:password@]host[:port][/database], or "
                              "chdb:FOLDER for ClickHouse's engine in this process")
    try:
        import clickhouse_connect
    except ImportError as exc:
        raise ClickHouseError("ClickHouse URLs need clickhouse-connect (pip install 'agenttrace[clickhouse]')") from exc
    parts = urlsplit(url)
    port = parts.port or (8443 if parts.scheme == "https" else 8123)
    name = f"{parts.scheme}://{parts.hostname}:{port}{parts.path or ''}"
    wait = {} if timeout_s is None else {"send_receive_timeout": max(1, math.ceil(timeout_s))}
    try:
        client = clickhouse_connect.get_client(
            host=parts.hostname or "localhost", port=port,
            username=unquote(parts.username or "default"), password=unquote(parts.password or ""),
            database=parts.path.strip("/") or None, secure=parts.scheme == "https",
            connect_timeout=min(10, max(1, math.ceil(timeout_s or 10))), **wait)
    except Exception as exc:
        raise ClickHouseError(f"{name}: cannot connect ({str(exc).strip()[:300]}); is a ClickHouse server "
                              "listening there?") from exc
    return _Http(name, client)


def _identifier(table: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?", table):
        raise ClickHouseError(f"table {table!r}: expected a name like otel_traces or otel.otel_traces")
    return table


def missing_columns(found) -> list[str]:
    """The exporter's columns the report reads that `found` (column names) lacks."""
    return [c for c in _NEEDED if c not in found]


# A row of `parquet_rows` by its file's place and its row there, as a MergeTree's by part and offset.
PARQUET_ROW_KEYS = ("_file_n", "_file_row")


def parquet_rows(files: Sequence[str]) -> str:
    """SQL: the rows of Parquet files (each read by ClickHouse's file(), where the engine runs) as
    one table, their columns as the file names them (a dump of the exporter's table: its own),
    with PARQUET_ROW_KEYS."""
    from pathlib import Path

    n, row = PARQUET_ROW_KEYS
    return "(" + " UNION ALL ".join(f"SELECT *, {i} AS {n}, _row_number AS {row} FROM "
                                    f"file({quoted(str(Path(f).resolve()))}, Parquet)" for i, f in enumerate(files)) + ")"


def check_source(store: Store, q: ClickHouseQuery) -> str:
    """check_table of the query's table, or for its Parquet `files` their columns ('File')."""
    if not q.files:
        return check_table(store, q.table)
    missing = missing_columns({r[0] for r in store.rows(f"DESCRIBE TABLE {q.table}")})
    if missing:
        raise ClickHouseError(f"{q.source}: not the ClickHouse exporter's traces (no {', '.join(missing)})")
    return "File"


def check_table(store: Store, table: str) -> str:
    """The table's engine (MergeTree, Distributed, ...); ClickHouseError naming the table and
    what it lacks, unless it has the exporter's columns."""
    table = _identifier(table)
    db, _, name = table.rpartition(".")
    database = "database = {d:String}" if db else "database = currentDatabase()"
    params = {"t": name, "d": db} if db else {"t": name}
    found = {r[0] for r in store.rows(f"SELECT name FROM system.columns WHERE table = {{t:String}} AND {database}", params)}
    if not found:
        raise ClickHouseError(f"{store.name}: no table {table}; create it with the OpenTelemetry Collector's ClickHouse "
                              "exporter (or `agenttrace export --clickhouse`)")
    missing = missing_columns(found)
    if missing:
        raise ClickHouseError(f"{store.name}: table {table} is not the OpenTelemetry exporter's traces table: it has no "
                              f"{', '.join(missing)}")
    engine = store.rows(f"SELECT engine FROM system.tables WHERE name = {{t:String}} AND {database}", params)
    return str(engine[0][0]) if engine else ""


@dataclass(frozen=True)
class ClickHouseQuery:
    """What to read: the traces of `table` with a span at or after `since_ns` (and before
    `until_ns`), of `service` when given, `batch_traces` traces at a time (at least 1; any
    number past what one query's LIMIT holds reads as that many), within `limits` (the
    deadline, byte and request budgets and one answer's bound of the whole read)."""

    url: str
    table: str = "otel_traces"
    since_ns: int | None = None
    until_ns: int | None = None
    service: str | None = None
    batch_traces: int = 500
    limits: ReadLimits = field(default_factory=ReadLimits)  # the whole read: deadline, bytes, requests, one answer
    source: str | None = None  # the input's name in the report (default: store and table)
    # Parquet files of the exporter's columns, read where they lie (chdb, this process): `table`
    # is then their rows as one table (`parquet_rows`), `source` their names
    files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if type(self.batch_traces) is not int or self.batch_traces < 1:
            raise ClickHouseError(f"batch_traces must be a whole number from 1 up, not {self.batch_traces!r}")
        if self.files:
            object.__setattr__(self, "table", parquet_rows(self.files))
            object.__setattr__(self, "source", self.source or ", ".join(self.files))

    def input_name(self, store_name: str) -> str:  # as the report's sources and problems name it
        return self.source or f"{store_name} {self.table}"

    def describe(self) -> str:
        parts = [self.source or f"{self.url} {self.table}"]
        if self.service:
            parts.append(f"service {self.service}")
        return ", ".join(parts)
