"""Spans into one table, `spans`, with no Python object per span: OTLP/JSON files (our exporter's
lines, read by ClickHouse's JSON parser), or the OpenTelemetry Collector exporter's `otel_traces`
table where it is (a ClickHouse server or a chdb folder: the mapping runs there). The columns:

    i        UInt64   input order (line and position), the tie-break wherever the per-span path
                      uses input order
    h, ph    UInt64   cityHash64 of (trace, span) and (trace, parent): the tree joins on integers
    trace_id, span_id, name, kind ('PRODUCER', 'CONSUMER', 'SERVER', 'CLIENT' or 'OTHER'), status
    start_ns, end_ns  Int64
    run_label, run_id (resource), segment (agenttrace.segment, '' when absent), scope (its name)
    attrs    Map(String, String)  every attribute, its value as text behind a one-letter type:
             s text, i integer, d double, b1 / b0 boolean, a array (its text kept only for ARRAYS)
    rounds   Array(Tuple(drafted, accepted, draft_s, verify_s, k, tree_depth)): the span's
             speculate.round events (SPANS.md), in order

Attribute values keep their type because the figures test it as the per-span path does: a
validation "held" only when `agenttrace.validation.ok` is the boolean true, a number counts only
when it is one.
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.traces.span_records import ATTRIBUTE_TYPES, MAX_SECONDS, ROUND_TYPES

_ANY = ("Tuple(stringValue Nullable(String), intValue Nullable(String), doubleValue Nullable(Float64), "
        "boolValue Nullable(Bool), arrayValue Nullable(String), kvlistValue Nullable(String))")
_KV = f"Array(Tuple(key String, value {_ANY}))"
_EVENT = f"Tuple(name String, timeUnixNano Nullable(String), attributes {_KV})"
_SPAN = (f"Tuple(traceId String, spanId String, parentSpanId String, name String, kind String, "
         f"startTimeUnixNano String, endTimeUnixNano String, attributes {_KV}, events Array({_EVENT}), "
         "status Tuple(code Nullable(String)))")
# One OTLP/JSON ExportTraceServiceRequest per line (the exporter's file format).
FILE_SCHEMA = (f"resourceSpans Array(Tuple(resource Tuple(attributes {_KV}), "
               f"scopeSpans Array(Tuple(scope Nullable(String), spans Array({_SPAN})))))")


# The arrays a figure reads (the roofline's phases, acceptance by position): their text is kept
# behind the 'a' (OTLP/JSON's {"values": [...]} from a file, a JSON array from the exporter's
# table); any other array is kept as 'a' alone.
ARRAYS = (sc.ROOFLINE_PHASE, sc.ROOFLINE_PASSES, sc.ROOFLINE_ROWS, sc.ROOFLINE_FLOPS, sc.ROOFLINE_BYTES,
          sc.ROOFLINE_SECONDS, sc.SPEC_ACCEPTANCE_PER_POSITION)
_ARRAY_KEYS = ", ".join(f"'{k}'" for k in ARRAYS)


def _typed(kv: str) -> str:
    """An OTLP attribute list as Map(key, typed text)."""
    v = "a.value"
    text = (f"multiIf({v}.stringValue IS NOT NULL, concat('s', {v}.stringValue), "
            f"{v}.boolValue IS NOT NULL, if({v}.boolValue, 'b1', 'b0'), "
            f"{v}.intValue IS NOT NULL, concat('i', {v}.intValue), "
            f"{v}.doubleValue IS NOT NULL, concat('d', toString({v}.doubleValue)), "
            f"{v}.arrayValue IS NOT NULL AND a.key IN ({_ARRAY_KEYS}), concat('a', {v}.arrayValue), 'a')")
    pairs, keys = f"arrayMap(a -> (a.key, {text}), {kv})", f"arrayMap(a -> a.key, {kv})"
    # a key given twice (a writer's slip) holds its last value at its first place, as a Python
    # dict does: a map's lookup would find the first
    last = f"arrayMap(k -> (k, arrayLast(p -> p.1 = k, {pairs}).2), arrayDistinct({keys}))"
    return f"CAST(if(length(arrayDistinct({keys})) = length({kv}), {pairs}, {last}), 'Map(String, String)')"


def _resource(kv: str, key: str) -> str:
    return f"arrayFirst(a -> a.key = '{key}', {kv}).value.stringValue"


def _rounds(events: str) -> str:
    """The speculate.round events of a span (`events`: its OTLP events) as an array of tuples, the
    per-span path's RoundRecord. Each value is read where its type puts it: a span holding one of
    another type is odd (`_file_odd`) and never reaches the queries; a key given twice holds its
    last value, as the attributes' map does."""
    def value(key: str, typ: str) -> str:
        v = f"arrayLast(a -> a.key = '{key}', e.attributes).value"
        if typ == "Int64":
            return f"ifNull(toInt64OrNull({v}.intValue), 0)"
        return f"ifNull({v}.doubleValue, ifNull(toFloat64OrNull({v}.intValue), 0))"

    fields = ", ".join([value(sc.ROUND_DRAFTED, "Int64"), value(sc.ROUND_ACCEPTED, "Int64"),
                        value(sc.ROUND_DRAFT_S, "Float64"), value(sc.ROUND_VERIFY_S, "Float64"),
                        value(sc.ROUND_K, "Int64"), value(sc.ROUND_TREE_DEPTH, "Int64")])
    return f"arrayMap(e -> tuple({fields}), arrayFilter(e -> e.name = '{sc.EVENT_SPECULATE_ROUND}', {events}))"


_KIND = ("multiIf({k} IN ('4', 'SPAN_KIND_PRODUCER', 'Producer'), 'PRODUCER', {k} IN ('5', 'SPAN_KIND_CONSUMER', 'Consumer'), "
         "'CONSUMER', {k} IN ('2', 'SPAN_KIND_SERVER', 'Server'), 'SERVER', {client}, 'CLIENT', 'OTHER')")
# CLIENT as each per-span reader reads it (only a convention's role tests it: roles.py): a file's
# kind as otlp_json._kind does, a store's as clickhouse_read._enum does
_FILE_CLIENT = "{k} IN ('3', '3.0', 'SPAN_KIND_CLIENT', 'CLIENT')"
_STORE_CLIENT = "({k} = 'SPAN_KIND_CLIENT' OR upper({k}) = 'CLIENT')"
_STATUS = ("multiIf({c} IN ('2', 'STATUS_CODE_ERROR', 'Error'), 'ERROR', {c} IN ('1', 'STATUS_CODE_OK', 'Ok'), 'OK', "
           "'UNSET')")
# A temporary table: it lives as long as the session (a server's, or chdb's in this process) and
# never lands in the store's database, whatever that holds (a table of its own named spans).
_TABLE = """CREATE TEMPORARY TABLE {name} (
  i UInt64, h UInt64, ph UInt64, trace_id String, span_id String, name LowCardinality(String),
  kind LowCardinality(String), status LowCardinality(String), start_ns Int64, end_ns Int64,
  run_label LowCardinality(String), run_id LowCardinality(String), segment LowCardinality(String),
  scope LowCardinality(String), attrs Map(LowCardinality(String), String),
  rounds Array(Tuple(Int64, Int64, Float64, Float64, Int64, Int64)), odd Bool
) ENGINE = Memory"""
STAGED = "spans_in"  # a file's spans before they join `spans` (engine.load_files)


def table(name: str = "spans") -> str:
    """SQL creating the span table (or another table of its columns: `STAGED`)."""
    return _TABLE.format(name=name)


def _keys(types: dict[str, str], kind: str) -> str:
    return ", ".join(f"'{k}'" for k, t in types.items() if t == kind) or "''"


_KIND_CODES = {"a string": 1, "an integer": 2, "a number": 3, "a boolean": 4, "a list": 5}


def _kind(types: dict[str, str], key: str) -> str:
    """SQL: the `_KIND_CODES` code of the attribute key `key` (an SQL expression) by `types`, 0
    for a key of no known type."""
    keys = ", ".join(f"'{k}'" for k in types)
    codes = ", ".join(str(_KIND_CODES[t]) for t in types.values())
    return f"transform({key}, [{keys}], [{codes}], 0)"


def _file_value_odd(types: dict[str, str]) -> str:
    """SQL over one OTLP attribute `a`: true where span_records.checked would word a problem about
    it: a known key's value of the wrong type, or out of range. (What the reader itself would
    read otherwise, nesting and text, line_check finds in the raw line.) Errs on the side of true."""
    v = "a.value"
    kind = _kind(types, "a.key")
    number = f"ifNull(abs(toFloat64OrNull({v}.intValue)), abs({v}.doubleValue)) <= {MAX_SECONDS}"
    return (f"multiIf({kind} AS kind = 0, false, kind = 1, {v}.stringValue IS NULL, "
            f"kind = 2, {v}.intValue IS NULL OR toInt64OrNull({v}.intValue) IS NULL, kind = 3, NOT ifNull({number}, false), "
            f"kind = 4, {v}.boolValue IS NULL, "
            f"{v}.arrayValue IS NULL OR match({v}.arrayValue, 'stringValue|boolValue|Infinity|NaN|e[0-9+]'))")


_TIME = "(NOT match({t}, '^[0-9]{{1,19}}$') OR toInt64OrNull({t}) IS NULL)"


def _ids_odd(trace: str, span: str, parent: str) -> str:
    """SQL: ids that are not hex of their length (a parent may be empty), or a span its own
    parent. One match over the three joined by a colon, which none holds: a third of the cost of
    a match each."""
    return (f"NOT match(concat({trace}, ':', {span}, ':', {parent}), '^[0-9a-fA-F]{{32}}:[0-9a-fA-F]{{16}}:([0-9a-fA-F]{{16}})?$') "
            f"OR lower({parent}) = lower({span})")


_FILE_STATUS = _STATUS.format(c="ifNull(sp.status.code, '0')")


def _file_odd(resource: str) -> str:
    """SQL over one span `sp` of a file (`resource`: its resource's check, `_resource_odd`): true where the per-span reader
    would word a problem about it or read it otherwise (span_records.checked, otlp_json): a time
    that is not nanoseconds, an end before the start, ids that are not hex, a span its own
    parent, an odd attribute, resource attribute or event. (A name that is not a JSON string, or
    text that is not UTF-8, line_check finds in the raw line.)"""
    ev_odd = (f"e.timeUnixNano IS NULL OR {_TIME.format(t='e.timeUnixNano')} OR (e.name = '{sc.EVENT_SPECULATE_ROUND}' "
              f"AND arrayExists(a -> {_file_value_odd(ROUND_TYPES)}, e.attributes))")
    # one match over the times joined by a colon, which neither holds (as _ids_odd)
    start, end = "sp.startTimeUnixNano", "sp.endTimeUnixNano"
    return " OR ".join([
        f"NOT match(concat({start}, ':', {end}), '^[0-9]{{1,19}}:[0-9]{{1,19}}$')",
        f"toInt64OrNull({start}) IS NULL", f"toInt64OrNull({end}) IS NULL", f"toInt64OrZero({end}) < toInt64OrZero({start})",
        _ids_odd("sp.traceId", "sp.spanId", "sp.parentSpanId"),
        f"arrayExists(a -> {_file_value_odd(ATTRIBUTE_TYPES)}, sp.attributes)", resource,
        f"arrayExists(e -> {ev_odd}, sp.events)",
    ])


# line_check's regular expressions, as SQL string literals (each backslash doubled for the literal)
_LINE_ODD = (
    r"[\\x00-\\x1f]", "kvlistValue", r"\\\\u[dD][89a-fA-F]", r'"intValue":\\s*"?-?[0-9]{19}',
    r'"arrayValue"\\s*:\\s*\\{\\s*"values"\\s*:\\s*\\[\\s*\\{\\s*"arrayValue',
    r"\\[\\s*\\[\\s*\\[\\s*\\[", r'(\\{\\s*"[^"]*"\\s*:\\s*){6}',
    r'"(stringValue|key|name|traceId|spanId|parentSpanId)":\\s*[^"\\s]',
)


# A line is one export request (up to 512 spans from our exporter, ~0.4 MB; a few spans from a
# writer flushing often): the parser holds a block of lines, nested, before ARRAY JOIN explodes
# it, so a block is bounded by its bytes. The default block (65k lines: a whole file) held 2.9 GB
# at 1M spans. Each block costs the statement's expressions a fixed ~14 ms, so a bound in lines
# (8, before) made small lines slow: the long-horizon demo's 68,000 spans in 7,000 lines of ~20 KB
# loaded in 14.8 s, 1.1 s with this bound; 1M synthetic spans in 6.87 s, now 4.75 s, peaking at
# 624 MB against 952 MB (this machine, the load alone, measured).
BLOCK_BYTES = 2 << 20
_BLOCK = f"max_block_size = 65536, input_format_max_block_size_bytes = {BLOCK_BYTES}"


def line_check(path_sql: str) -> str:
    """SQL: the lines of a file the span table would read otherwise than the per-span reader (which
    skips them or words a problem), in one pass over the raw text: not an OTLP/JSON request
    (Jaeger's JSON, an empty object), text that is not UTF-8 or a lone surrogate's escape, a raw
    control character (invalid JSON the engine's parser lets through), nesting (a kvlist, an
    array in an array, runs of brackets), an integer value of 19 digits or more (near int64's end), a key,
    name, id or string value that is not a JSON string (the engine reads numbers and objects as
    their text). Errs on the side of counting a line."""
    odd = "|".join(_LINE_ODD)
    return (f"SELECT count() FROM file({path_sql}, 'LineAsString') WHERE trimBoth(line) != '' AND ("
            f"NOT isValidUTF8(line) OR position(line, '\"resourceSpans\"') = 0 OR match(line, '{odd}')) "
            f"SETTINGS {_BLOCK}")


# A span's input order: its line's number in the file times this, plus its place in the line.
LINE_STRIDE = 1 << 32


def _resource_odd(r: str) -> str:
    """SQL over one OTLP resource `r`: true where an attribute of it is odd (`_file_odd`)."""
    return f"arrayExists(a -> {_file_value_odd(ATTRIBUTE_TYPES)}, {r}.resource.attributes)"


def _per_span(values: str, counts: str) -> str:
    """SQL: `values` (an array, one per resource or scope of a line) repeated for each of its
    spans (`counts`), so that they line up with the line's spans."""
    return f"arrayFlatten(arrayMap((v, n) -> arrayWithConstant(n, v), {values}, {counts}))"


def file_insert(path_sql: str, first: int, into: str = "spans") -> str:
    """Spans of one OTLP/JSON lines file (`path_sql`: a quoted SQL string) into `into`; `first`:
    the input order of its first span, and each next one's above it (not contiguous: the file's
    line number and the span's place in its line, so the order never depends on which thread
    parsed which line: a row number over the blocks did, on files of many blocks). Hex ids are
    lower-cased (the per-span path does).

    A line's spans are exploded by one ARRAY JOIN of arrays made per line, one element a span:
    the span, and what it reads of its resource and scope. An ARRAY JOIN of the resources, then
    their scopes, then the spans copied each resource's whole tuple, its spans in it, once per
    span (1M spans: the explosion alone 4.4 s against 0.15 s, measured)."""
    per_resource = "arrayMap(r -> arraySum(arrayMap(x -> length(x.spans), r.scopeSpans)), resourceSpans)"
    label, run = (_per_span(f"arrayMap(r -> ifNull({_resource('r.resource.attributes', key)}, ''), resourceSpans)", "n_r")
                  for key in (sc.RUN_LABEL, sc.RUN_ID))
    scopes = "arrayFlatten(arrayMap(r -> arrayMap(x -> ifNull(JSONExtractString(x.scope, 'name'), ''), r.scopeSpans), resourceSpans))"
    return f"""INSERT INTO {into} SELECT
  {first} + line_no * {LINE_STRIDE} + pn - 1 AS i,
  cityHash64(trace_id, span_id) AS h, cityHash64(trace_id, lower(sp.parentSpanId)) AS ph,
  lower(sp.traceId) AS trace_id, lower(sp.spanId) AS span_id, sp.name AS name,
  {_KIND.format(k='sp.kind', client=_FILE_CLIENT.format(k='sp.kind'))} AS kind, {_FILE_STATUS} AS status,
  toInt64(sp.startTimeUnixNano) AS start_ns, toInt64(sp.endTimeUnixNano) AS end_ns,
  sp_label AS run_label, sp_run AS run_id,
  ifNull(arrayFirst(a -> a.key = '{sc.SEGMENT}', sp.attributes).value.stringValue, '') AS segment,
  sp_scope AS scope, {_typed('sp.attributes')} AS attrs,
  {_rounds('sp.events')} AS rounds,
  {_file_odd('sp_resource_odd')} AS odd
FROM (
  SELECT toUInt64(_row_number) AS line_no, {per_resource} AS n_r,
         arrayFlatten(arrayMap(r -> arrayMap(x -> length(x.spans), r.scopeSpans), resourceSpans)) AS n_s,
         arrayFlatten(arrayMap(r -> arrayMap(x -> x.spans, r.scopeSpans), resourceSpans)) AS spans,
         {label} AS labels, {run} AS runs, {_per_span(scopes, 'n_s')} AS scopes,
         {_per_span(f"arrayMap(r -> {_resource_odd('r')}, resourceSpans)", 'n_r')} AS resources_odd
  FROM file({path_sql}, 'JSONEachRow', '{FILE_SCHEMA}'))
ARRAY JOIN spans AS sp, labels AS sp_label, runs AS sp_run, scopes AS sp_scope, resources_odd AS sp_resource_odd,
           arrayEnumerate(spans) AS pn
SETTINGS precise_float_parsing = 1, input_format_json_read_numbers_as_strings = 1,
         input_format_json_read_objects_as_strings = 1, input_format_parallel_parsing = 0,
         {_BLOCK}"""


def _store_typed(column: str) -> str:
    """The exporter's attribute texts (pdata's AsString) as typed text, the way the per-span reader
    types them back (clickhouse_read.typed_value): by the key's known type, else by form."""
    def keys(kind: str) -> str:
        return _keys(ATTRIBUTE_TYPES, kind)

    numeric = f"(k IN ({keys('an integer')}, {keys('a number')}) OR k NOT IN ({keys('a string')}, {keys('a boolean')}, " \
              f"{keys('a list')}))"
    text = (f"multiIf(k IN ({keys('a string')}), concat('s', v), v IN ('true', 'false'), if(v = 'true', 'b1', 'b0'), "
            f"{numeric} AND match(v, '^-?(0|[1-9][0-9]*)$') AND length(v) <= 20, concat('i', v), "
            f"{numeric} AND match(v, '^(-?[0-9]+(\\\\.[0-9]+)?([eE][-+]?[0-9]+)?|-?\\\\.[0-9]+)$') "
            "AND match(v, '[.eE]'), concat('d', v), "
            f"startsWith(v, '[') AND endsWith(v, ']'), if(k IN ({_ARRAY_KEYS}), concat('a', v), 'a'), concat('s', v))")
    return f"mapApply((k, v) -> (k, {text}), {column})"


def _store_rounds() -> str:
    """A span's speculate.round events (Events.Name, Events.Attributes) as load.py's tuples."""
    m = "m"
    fields = ", ".join([f"toInt64OrZero({m}['{sc.ROUND_DRAFTED}'])", f"toInt64OrZero({m}['{sc.ROUND_ACCEPTED}'])",
                        f"toFloat64OrZero({m}['{sc.ROUND_DRAFT_S}'])", f"toFloat64OrZero({m}['{sc.ROUND_VERIFY_S}'])",
                        f"toInt64OrZero({m}['{sc.ROUND_K}'])", f"toInt64OrZero({m}['{sc.ROUND_TREE_DEPTH}'])"])
    return f"arrayMap(m -> tuple({fields}), {_ROUND_MAPS})"


# the round events' attribute maps, in order (each map taken once: `Events.Attributes[x]` per
# field cut a map out of the column's array each time)
_ROUND_MAPS = f"arrayFilter((m, n) -> n = '{sc.EVENT_SPECULATE_ROUND}', Events.Attributes, Events.Name)"


def _store_value_odd(types: dict[str, str]) -> str:
    """SQL over one exporter attribute (k, v): true where the per-span reader would word a problem
    about it (clickhouse_read.typed_value, then span_records.checked: a known key whose text is
    not of its type, or out of range). Errs on the side of true. The key's type is looked up once
    and only its test runs (a test per type over every attribute: the row check of 1M spans took
    0.80-1.25 s, now 0.73-0.93 s, measured)."""
    kind = _kind(types, "k")
    # an integer's text is its value's: no sign on 0, no leading zeros, within int64 ("-0" is
    # counted, erring safe; the regex and a parse before: 0.75-0.92 s against 0.70-0.76 s, 1M spans)
    integer = "(toString(toInt64OrZero(v)) = v)"
    number = f"(match(v, '^-?([0-9]+(\\\\.[0-9]+)?([eE][-+]?[0-9]+)?|\\\\.[0-9]+)$') AND abs(toFloat64OrZero(v)) <= {MAX_SECONDS})"
    return (f"(multiIf({kind} = 2, NOT {integer}, {kind} = 3, NOT {number}, {kind} = 4, v NOT IN ('true', 'false'), "
            f"{kind} = 5, NOT match(v, '^\\\\[[-0-9.,eE ]*\\\\]$'), false) OR NOT isValidUTF8(v))")


def _store_odd() -> str:
    """SQL over one row `o` of the exporter's table: true where the per-span reader would word a
    problem about it or read it otherwise (ids that are not hex, a span its own parent, a name
    that may not be text, an odd attribute or round event)."""
    rounds = (f"arrayExists(m -> arrayExists((k, v) -> {_store_value_odd(ROUND_TYPES)}, mapKeys(m), mapValues(m)), "
              f"{_ROUND_MAPS})")
    return " OR ".join([
        _ids_odd("o.TraceId", "o.SpanId", "o.ParentSpanId"),
        "o.SpanName = '' OR match(o.SpanName, '^[-+0-9.eE]+$') OR NOT isValidUTF8(o.SpanName)",
        *(f"arrayExists((k, v) -> {_store_value_odd(ATTRIBUTE_TYPES)}, mapKeys({m}), mapValues({m}))"
          for m in ("o.SpanAttributes", "o.ResourceAttributes")),
        rounds,
    ])


# A span's input order in a store: its trace's first time, the trace, then its own time and id.
_STORE_ORDER = "ORDER BY p.t0, o.TraceId, o.Timestamp, o.SpanId"
UNPLACED = (1 << 64) - 1  # the input order of a row the row-keyed order did not place
STORE_TRACES = "store_traces"  # the picked traces of a store read in batches (`store_traces`)


def store_traces(table: str, where: str, spans_per_batch: int) -> str:
    """SQL making STORE_TRACES: the traces `where` picks (as store_insert), each with `offset`, the
    input order of its first span (the spans of the traces before it in store_insert's order),
    and `batch`: traces in that order, a batch of about `spans_per_batch` spans, a trace never
    split."""
    if where:  # the picked traces' spans, those outside the window too
        picked = f"(SELECT TraceId, min(Timestamp) AS t0 FROM {table}{where} GROUP BY TraceId)"
        traces = (f"SELECT p.TraceId AS TraceId, any(p.t0) AS t0, count() AS n, min(o.Timestamp) AS lo, max(o.Timestamp) AS hi "
                  f"FROM {table} AS o JOIN {picked} AS p ON p.TraceId = o.TraceId GROUP BY p.TraceId")
    else:  # every trace picked: one pass, no join
        traces = f"SELECT TraceId, min(Timestamp) AS t0, count() AS n, t0 AS lo, max(Timestamp) AS hi FROM {table} GROUP BY TraceId"
    return f"""CREATE TEMPORARY TABLE {STORE_TRACES} ENGINE = Memory AS
SELECT TraceId, toUInt64(sum(n) OVER w - n) AS offset, intDiv(offset, {spans_per_batch}) AS batch, lo, hi
FROM ({traces})
WINDOW w AS (ORDER BY t0, TraceId ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"""


def _in_batch(batch: int) -> str:
    """SQL: the rows `o` of a batch's traces. Its traces begin in one stretch of time, so the time
    range lets a MergeTree table (ordered by service, name, then time) skip the granules of other
    batches before their columns are read (10M spans: a batch of 1M read in 3.1-3.3 s, against
    2.1 s for a table of 1M spans, without it)."""
    mine = f"FROM {STORE_TRACES} WHERE batch = {int(batch)}"
    return (f" WHERE o.TraceId IN (SELECT TraceId {mine}) "
            f"AND o.Timestamp BETWEEN (SELECT min(lo) {mine}) AND (SELECT max(hi) {mine})")


# The columns naming a row of the store's table, by its engine (check_source): a MergeTree part
# and offset, or a Parquet file's place and row (clickhouse.PARQUET_ROW_KEYS).
MERGE_TREE_ROWS = ("_part", "_part_offset")


def store_insert(table: str, where: str, by_row: tuple[str, str] | None = None, batch: int | None = None) -> str:
    """Spans of the exporter's `table` into `spans`: the whole traces with a span `where` says
    (its filters: time window, service), as the per-span reader takes them (clickhouse_read):
    traces oldest first (their first span's time, then id), a trace's spans by time and id: the
    input order `i`. The attributes are those a report reads (clickhouse_read.attribute_filter).
    `batch`: that batch's traces of STORE_TRACES alone, each span's order its trace's offset
    plus its place in the trace (the same order as the whole input's).

    `by_row` (the columns naming a row: MERGE_TREE_ROWS, or a Parquet file's place and row): the
    order is sorted on the keys and each row's name alone, then joined back, rather than sorted
    with every column (1M spans: 2.1-2.7 s against 3.6 s for the statement; from Parquet, a peak
    of 1.5 GB against 2.1-2.2 GB). A row the order did not see (a merge that moved it between the
    statement's two reads of the table) gets UNPLACED: the caller reads again without `by_row`."""
    from agenttrace.traces.clickhouse_read import attribute_filter

    if batch is None:
        traces = f"(SELECT TraceId, min(Timestamp) AS t0 FROM {table}{where} GROUP BY TraceId) AS p ON p.TraceId = o.TraceId"
        rank, rows = f"row_number() OVER ({_STORE_ORDER})", ""
    else:
        traces = f"(SELECT TraceId, offset FROM {STORE_TRACES} WHERE batch = {int(batch)}) AS p ON p.TraceId = o.TraceId"
        rank, rows = "p.offset + row_number() OVER (PARTITION BY o.TraceId ORDER BY o.Timestamp, o.SpanId)", _in_batch(batch)
    if by_row:
        i = f"if(ifNull(ord.n, 0) = 0, {UNPLACED}, toUInt64(ord.n - 1))"
        part, off = by_row
        order = (f"LEFT JOIN (SELECT o.{part} AS part, o.{off} AS off, toUInt64({rank}) AS n "
                 f"FROM {table} AS o JOIN {traces}{rows}) AS ord ON ord.part = o.{part} AND ord.off = o.{off}\n")
    else:
        i, order = f"toUInt64({rank} - 1)", ""
    return f"""INSERT INTO spans SELECT
  {i} AS i,
  cityHash64(trace_id, span_id) AS h, cityHash64(trace_id, lower(o.ParentSpanId)) AS ph,
  lower(o.TraceId) AS trace_id, lower(o.SpanId) AS span_id, o.SpanName AS name,
  {_KIND.format(k='o.SpanKind', client=_STORE_CLIENT.format(k='o.SpanKind'))} AS kind, {_STATUS.format(c='o.StatusCode')} AS status,
  toUnixTimestamp64Nano(o.Timestamp) AS start_ns, start_ns + toInt64(o.Duration) AS end_ns,
  o.ResourceAttributes['{sc.RUN_LABEL}'] AS run_label, o.ResourceAttributes['{sc.RUN_ID}'] AS run_id,
  o.SpanAttributes['{sc.SEGMENT}'] AS segment, o.ScopeName AS scope,
  {_store_typed(attribute_filter('o.SpanAttributes'))} AS attrs, {_store_rounds()} AS rounds, {_store_odd()} AS odd
FROM {table} AS o
{order}JOIN {traces}{rows}"""
