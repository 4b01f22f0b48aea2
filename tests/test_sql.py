"""The read-only SQL tool of the code suite: answers from the shop data, refuses writes, stops
runaway queries, says what is wrong with a bad one."""

from __future__ import annotations

import pytest

from agenttrace.errors import ToolFailed
from agenttrace.runtime.tools import run_tool
from agenttrace.examples.tools.sql import MAX_ROWS, run_query, schema_text, sql


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
