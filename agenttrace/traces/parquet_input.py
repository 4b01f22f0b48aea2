"""Parquet files of the ClickHouse exporter's columns (a store dumped with `SELECT * ... FORMAT
Parquet`, a data lake's copy of `otel_traces`) reported as they are: `agenttrace report
spans.parquet`. Their rows go into a store of their own, the exporter's table in a temporary
folder of ClickHouse's engine in this process (chdb, a block of rows at a time:
`_Chdb.insert_parquet`), and the report reads that store as any other (its figures computed
there by the columnar engine, or by the per-span reader), naming the files as its input; the
folder is removed after, whatever happens.
"""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from agenttrace.errors import ClickHouseError

TABLE = "otel_traces"


def problem(path: str) -> str | None:
    """Why `path` cannot be read as the exporter's traces (not Parquet, or without a column the
    report reads), before anything is inserted; None when it can, or when pyarrow is not
    installed to tell (the store's insert then says what it refuses)."""
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


@contextmanager
def parquet_store(files: Sequence[str]) -> Iterator[str]:
    """The chdb URL of a temporary store whose exporter's table (TABLE) holds the rows of
    `files`, removed on leaving. ClickHouseError when a file is refused (`problem`) or the
    insert fails."""
    from agenttrace.traces.clickhouse import connect
    from agenttrace.traces.clickhouse_export import export_parquet

    for f in files:
        why = problem(f)
        if why is not None:
            raise ClickHouseError(f"{why}; nothing to report")
    with tempfile.TemporaryDirectory(prefix="agenttrace-parquet-") as folder:
        url = f"chdb:{folder}"
        store = connect(url)
        for f in files:
            try:
                export_parquet(store, TABLE, str(Path(f).resolve()))
            except ClickHouseError as exc:  # said of the file: the temporary store is nothing to the user
                said = str(exc).removeprefix(f"{store.name}: ")
                raise ClickHouseError(f"{f}: its rows do not fit the exporter's table ({said[:300]}); "
                                      "nothing to report") from exc
        del store
        gc.collect()  # chdb holds one session of a folder a process: this one goes before the report's
        yield url
