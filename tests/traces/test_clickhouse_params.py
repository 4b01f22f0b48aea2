"""Query parameters are typed and bounded (issue 31): a value outside its placeholder's type is
refused before it leaves (the server would wrap it), and a string reaches ClickHouse as written,
whatever it holds, through chdb's path (our escaping) and the official client's (its escaping),
both parsed by ClickHouse's own engine."""

from __future__ import annotations

import json

import pytest

from agenttrace.errors import ClickHouseError
from agenttrace.traces.clickhouse_params import INT64, UINT32, parameter_texts, typed_parameters

HOSTILE = ["a\tb", "a\\Nb", "\\N", "a\\tb", "a\\b", "a'b", 'a"b', "a\nb", "a\\", "\\", "a\rb", "a\\\\b", "a`b", "",
           "{x:String}", "ü\x00x", "\\'", "a\\'b"]


def test_integers_outside_their_type_are_refused_not_wrapped():
    sql = "SELECT {t:Int64}, {n:UInt32}"
    assert parameter_texts(sql, {"t": INT64[0], "n": UINT32[1]}) == {"t": str(-(2**63)), "n": "4294967295"}
    for t, n in ((2**63, 1), (-(2**63) - 1, 1), (0, 2**32), (0, -1), (0, True), (1.5, 1), ("1", 1)):
        with pytest.raises(ClickHouseError, match="query parameter"):
            typed_parameters(sql, {"t": t, "n": n})
    with pytest.raises(ClickHouseError, match="do not match"):
        typed_parameters(sql, {"t": 1})
    with pytest.raises(ClickHouseError, match="no rule"):
        typed_parameters("SELECT {x:Float64}", {"x": 1.0})
    with pytest.raises(ClickHouseError, match="not a String"):
        typed_parameters("SELECT {s:String}", {"s": 3})


def test_strings_are_written_in_the_escaped_form():
    texts = parameter_texts("SELECT {s:String}, {ids:Array(String)}", {"s": "a\tb\\N\nc", "ids": ["x'y", "z\\"]})
    assert texts == {"s": "a\\tb\\\\N\\nc", "ids": "['x\\'y','z\\\\']"}


@pytest.fixture(scope="module")
def chdb_store():
    pytest.importorskip("chdb")
    from agenttrace.traces.clickhouse import connect

    return connect("chdb:")


def test_every_string_reaches_clickhouse_as_written_through_chdb(chdb_store):
    for s in HOSTILE:
        (row,) = chdb_store.rows("SELECT {s:String}, {ids:Array(String)}", {"s": s, "ids": [s, "b"]})
        assert row == [s, [s, "b"]], repr(s)


def test_every_string_reaches_clickhouse_as_written_through_the_official_client(chdb_store):
    """What clickhouse-connect sends (`param_NAME=TEXT` over HTTP) is what chdb's params take:
    the same escaped form, parsed by the same engine."""
    pytest.importorskip("clickhouse_connect")
    try:
        from clickhouse_connect.driver.binding import bind_query
    except ImportError:  # before 0.8 it lived in driver.query
        from clickhouse_connect.driver.query import bind_query
    sql = "SELECT {s:String}, {ids:Array(String)}"
    for s in HOSTILE:
        final, bound = bind_query(sql, typed_parameters(sql, {"s": s, "ids": [s, "b"]}))
        params = {k.removeprefix("param_"): v for k, v in bound.items()}
        out = chdb_store._query(final + " SETTINGS output_format_json_quote_64bit_integers = 0", "JSONCompact", params)
        assert json.loads(out.bytes())["data"] == [[s, [s, "b"]]], repr(s)
