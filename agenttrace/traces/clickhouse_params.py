"""Query parameters for ClickHouse, typed and bounded: each `{name:Type}` placeholder of a query
gets a value of that type, inside its range, written as the server reads it.

ClickHouse parses a query parameter (HTTP `param_name=`, chdb's `params`) from its *escaped*
text form, the TabSeparated one: a raw tab or newline ends the value (BAD_QUERY_PARAMETER) and a
backslash starts an escape (`a\\Nb` would be read as `aNb`); an integer past its type's range
wraps without a word (2**63 as Int64 is -2**63, 2**32 as UInt32 is 0). So every value is checked
against its placeholder's type before it leaves, and strings are escaped here (chdb) or by the
official client, which escapes the same characters (clickhouse-connect 0.7.6 and later).

    INT64                          the range of Int64 (and of DateTime64(9)'s ticks, nanoseconds)
    UINT32                         the range of UInt32
    typed_parameters(sql, params)  `params` after checking each against its placeholder's type
    parameter_texts(sql, params)   the same, each in the escaped text form the server parses
No torch import on this path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agenttrace.errors import ClickHouseError

__all__ = ["INT64", "UINT32", "parameter_texts", "quoted", "typed_parameters"]

INT64 = (-(2**63), 2**63 - 1)
UINT32 = (0, 2**32 - 1)
_INT_TYPES = {"Int64": INT64, "UInt32": UINT32}
_PLACEHOLDER = re.compile(r"\{(\w+):([^{}]+)\}")
# The escaped form of a top-level string: the three characters TabSeparated gives a meaning.
_ESCAPED = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n"})
# An array's elements are read as quoted literals: quote and backslash are the special ones.
_QUOTED = str.maketrans({"\\": "\\\\", "'": "\\'"})


def _types(sql: str) -> dict[str, str]:
    return {name: kind.strip() for name, kind in _PLACEHOLDER.findall(sql)}


def _check(name: str, kind: str, value: Any) -> None:
    if kind in _INT_TYPES:
        lo, hi = _INT_TYPES[kind]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise ClickHouseError(f"query parameter {name}: {value!r} is not an {kind} ({lo} to {hi}); not sent, "
                                  "as ClickHouse would wrap it")
    elif kind == "String":
        if not isinstance(value, str):
            raise ClickHouseError(f"query parameter {name}: {type(value).__name__}, not a String")
    elif kind == "Array(String)":
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ClickHouseError(f"query parameter {name}: not a list of strings (Array(String))")
    else:  # a placeholder of a type this module cannot check: a query written here without its rule
        raise ClickHouseError(f"query parameter {name}: type {kind} has no rule in clickhouse_params")


def typed_parameters(sql: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """`params` as a dict, once each value is of its `{name:Type}` placeholder's type and inside
    its range; ClickHouseError naming the parameter for one that is not, or that has no
    placeholder, or a placeholder without a value (nothing is sent: the server would wrap an
    integer and read a string otherwise than meant)."""
    params = dict(params or {})
    types = _types(sql)
    if set(types) != set(params):
        raise ClickHouseError(f"query parameters {sorted(params)} do not match the query's placeholders "
                              f"{sorted(types)}")
    for name, value in params.items():
        _check(name, types[name], value)
    return params


def quoted(text: str) -> str:
    """`text` as a quoted string literal: for an array parameter's elements, and where SQL takes
    no parameter (a table function's path, INFILE)."""
    return "'" + text.translate(_QUOTED) + "'"


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value.translate(_ESCAPED)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(quoted(v) for v in value) + "]"
    return str(value)


def parameter_texts(sql: str, params: Mapping[str, Any] | None) -> dict[str, str]:
    """`typed_parameters(sql, params)`, each value in the escaped text form ClickHouse parses a
    query parameter from: a string with backslash, tab and newline escaped, an array of strings as
    quoted literals, an integer in decimal."""
    return {name: _text(value) for name, value in typed_parameters(sql, params).items()}
