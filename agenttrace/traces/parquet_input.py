"""Parquet files of the ClickHouse exporter's columns (a store dumped with `SELECT * ... FORMAT
Parquet`, a data lake's copy of `otel_traces`), read as they are: `agenttrace report
spans.parquet` reads them where they lie, through ClickHouse's `file()` in this process (chdb:
`ClickHouseQuery.files`, `clickhouse.parquet_rows`), as a store's table, by the columnar engine or
the per-span reader; `agenttrace export spans.parquet --clickhouse URL` puts the rows back into a
store. Both first ask `problem` of each file, so a file of other columns is refused whole.
"""

from __future__ import annotations


def problem(path: str) -> str | None:
    """Why `path` cannot be read as the exporter's traces (not Parquet, or without a column the
    report reads), before anything is read or inserted; None when it can, or when pyarrow is not
    installed to tell (ClickHouse then says what it refuses)."""
    from agenttrace.traces.clickhouse import missing_columns

    try:
        import pyarrow.parquet as pq
    except ImportError:
        return None
    try:
        lacks = missing_columns(set(pq.read_schema(path).names))
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        return f"{path}: not a Parquet file ({str(exc)[:200]})"
    if lacks:
        return f"{path}: not the ClickHouse exporter's traces (no {', '.join(lacks)})"
    return None
