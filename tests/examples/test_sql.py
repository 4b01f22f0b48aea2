"""The read-only SQL tool of the code suite: answers from the shop data, refuses writes, stops
runaway queries, says what is wrong with a bad one."""

from __future__ import annotations

import pytest
from agenttrace.examples.tools.sql import (
    MAX_CELL_CHARS,
    MAX_RESULT_BYTES,
    MAX_ROWS,
    MAX_VALUE_BYTES,
    run_query,
    schema_text,
    sql,
)

from agenttrace.errors import ToolFailed
from agenttrace.runtime.execution import run_tool


def test_reads_the_shop_tables():
    assert run_query("SELECT COUNT(*) FROM customers")["rows"] == [[8]]
    rows = run_query("SELECT SUM(o.quantity * p.price) FROM orders o JOIN products p ON p.id = o.product_id")["rows"]
    assert rows == [[1107.5]]
    out = run_query("SELECT name FROM customers WHERE city = 'Paris' ORDER BY id")
    assert out["columns"] == ["name"] and out["rows"] == [["Chloe Martin"], ["Farah Khan"]] and not out["truncated"]


def test_rows_are_capped():
    out = run_query("SELECT a.id FROM orders a, orders b")
    assert len(out["rows"]) == MAX_ROWS and out["truncated"]


@pytest.mark.parametrize("query", [
    "DELETE FROM orders", "INSERT INTO orders VALUES (99, 1, 1, 1, '2025-06')", "DROP TABLE customers",
    "ATTACH DATABASE 'x.db' AS x", "PRAGMA writable_schema = 1", "CREATE TABLE t (x)",
])
def test_anything_but_reading_is_refused(query):
    with pytest.raises(ToolFailed, match="only reading queries"):
        run_tool(sql, {"query": query})
    assert run_query("SELECT COUNT(*) FROM orders")["rows"] == [[12]]  # each call has its own fresh copy


def test_a_runaway_query_is_stopped_with_advice():
    with pytest.raises(ToolFailed, match="ran too long"):
        run_tool(sql, {"query": "SELECT COUNT(*) FROM orders a, orders b, orders c, orders d, orders e, orders f, orders g"})


def test_a_bad_query_names_the_tables():
    with pytest.raises(ToolFailed) as err:
        run_tool(sql, {"query": "SELECT order_id FROM orders"})
    assert "no such column: order_id" in str(err.value) and schema_text() in str(err.value)


@pytest.mark.parametrize("query", ["SELECT zeroblob(999999999)", "SELECT length(zeroblob(100000000))",
                                   "SELECT randomblob(2000000)"])
def test_huge_values_are_refused_before_sqlite_builds_them(query):
    with pytest.raises(ToolFailed, match=f"exceed {MAX_VALUE_BYTES} bytes"):
        run_tool(sql, {"query": query})


def test_what_comes_back_is_capped_in_bytes():
    assert run_query("SELECT zeroblob(900000)")["rows"] == [["<blob of 900000 bytes>"]]
    assert run_query("SELECT x'4142'")["rows"] == [["x'4142'"]]
    long = run_query("SELECT printf('%.*c', 5000, 'x')")["rows"][0][0]
    assert long.startswith("x" * MAX_CELL_CHARS) and long.endswith(f"[{5000 - MAX_CELL_CHARS} more characters]")
    out = run_query("SELECT printf('%.*c', 999, 'x') FROM orders a, orders b")
    assert out["truncated"] and 0 < len(out["rows"]) < MAX_ROWS
    assert sum(len(r[0]) for r in out["rows"]) <= MAX_RESULT_BYTES
