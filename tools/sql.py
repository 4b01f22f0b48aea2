"""Read-only SQL over a small shop database (customers, products, orders) shipped with the repo:
the code suite's tool, where the argument the model writes is a program.

Each call builds a fresh in-memory SQLite database from `data/shop.json` (a few dozen rows, well
under a millisecond), so calls share no state and a query can never change the data. SQLite's
authorizer admits only reading statements, a progress handler stops a query that runs too long
(a cross join of cross joins) before the tool's timeout kills its worker process, SQLite's length
limit refuses any string or blob over MAX_VALUE_BYTES (`zeroblob(999999999)` would take a GB),
and what comes back is capped: MAX_ROWS rows, MAX_RESULT_BYTES in all, long cells cut.
"""

from __future__ import annotations

import json
import sqlite3
from functools import lru_cache
from pathlib import Path
from typing import Any

from agenttrace import Tool, ToolError

DATA = Path(__file__).parent / "data" / "shop.json"
MAX_ROWS = 20
MAX_QUERY_CHARS = 2000
MAX_VM_STEPS = 2_000_000  # SQLite virtual-machine instructions; ~0.1 s on a slow core
MAX_VALUE_BYTES = 1_000_000  # SQLITE_LIMIT_LENGTH: any string or blob SQLite builds, and the query
MAX_CELL_CHARS = 1000  # a longer text value is cut, with a marker
MAX_RESULT_BYTES = 16_000  # all cells together; the model is shown 2,000 characters anyway
SHORT_BLOB_BYTES = 32  # a blob up to this size comes back as hex, a longer one as its size

# What a query may do: read tables and call functions. Everything else (writes, ATTACH, PRAGMA,
# creating tables) is denied before it runs.
_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}


@lru_cache(maxsize=1)
def _tables() -> dict[str, dict[str, list]]:
    return json.loads(DATA.read_text(encoding="utf-8"))


def schema_text() -> str:
    """The tables and their columns, as the tool description shows them."""
    return "; ".join(f"{name}({', '.join(t['columns'])})" for name, t in _tables().items())


def _database() -> sqlite3.Connection:
    db = sqlite3.connect(":memory:", check_same_thread=False)
    for name, table in _tables().items():
        cols = ", ".join(table["columns"])
        db.execute(f"CREATE TABLE {name} ({cols})")
        marks = ", ".join("?" for _ in table["columns"])
        db.executemany(f"INSERT INTO {name} VALUES ({marks})", table["rows"])
    db.set_authorizer(lambda action, *_: sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY)
    steps = {"n": 0}

    def too_long() -> int:
        steps["n"] += 1000
        return 1 if steps["n"] > MAX_VM_STEPS else 0  # non-zero aborts the query

    db.set_progress_handler(too_long, 1000)
    db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    return db


def _cell(value: Any) -> Any:
    """A value as JSON can carry it, long ones cut: blobs as hex or their size, text capped."""
    if isinstance(value, bytes):
        return f"x'{value.hex()}'" if len(value) <= SHORT_BLOB_BYTES else f"<blob of {len(value)} bytes>"
    if isinstance(value, str) and len(value) > MAX_CELL_CHARS:
        return value[:MAX_CELL_CHARS] + f"... [{len(value) - MAX_CELL_CHARS} more characters]"
    return value


def _capped(rows: list[tuple]) -> tuple[list[list[Any]], bool]:
    """At most MAX_ROWS rows and MAX_RESULT_BYTES of cells, and whether anything was left out."""
    out: list[list[Any]] = []
    size = 0
    for row in rows[:MAX_ROWS]:
        cells = [_cell(v) for v in row]
        size += sum(len(c) if isinstance(c, str) else 8 for c in cells)
        if size > MAX_RESULT_BYTES and out:
            return out, True
        out.append(cells)
    return out, len(rows) > MAX_ROWS


def run_query(query: str) -> dict[str, Any]:
    """Rows of one read-only query (at most MAX_ROWS); ToolError says what was wrong."""
    if len(query) > MAX_QUERY_CHARS:
        raise ToolError(f"query longer than {MAX_QUERY_CHARS} characters")
    db = _database()
    try:
        cursor = db.execute(query)
        rows = cursor.fetchmany(MAX_ROWS + 1)
    except sqlite3.DatabaseError as exc:
        if "interrupted" in str(exc):
            raise ToolError("the query ran too long and was stopped; add a WHERE clause or a LIMIT") from None
        if "not authorized" in str(exc):
            raise ToolError("only reading queries (SELECT) are allowed") from None
        if "too big" in str(exc):
            raise ToolError(f"a value would exceed {MAX_VALUE_BYTES} bytes; select less") from None
        raise ToolError(f"SQL error: {exc}; tables: {schema_text()}") from None
    except sqlite3.Warning as exc:  # e.g. two statements in one call
        raise ToolError(f"SQL error: {exc}") from None
    finally:
        db.close()
    columns = [d[0] for d in cursor.description or ()]
    kept, truncated = _capped(rows)
    return {"columns": columns, "rows": kept, "truncated": truncated}


sql = Tool(
    name="run_sql",
    description=f"Run one read-only SQLite query. Tables: {schema_text()}.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS}},
        "required": ["query"],
        "additionalProperties": False,
    },
    function=run_query,
    timeout_s=2.0,
)
