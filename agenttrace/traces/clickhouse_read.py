"""Reading traces from ClickHouse (a store of traces/clickhouse.py), within the bounds of one
remote read (bounded_http.ReadLimits: `--deadline`, `--max-mb`, `--max-requests`,
`--max-answer-mb`).

    trace_pages(store, q)               the ids of the traces the filters pick, oldest first
    read_traces(store, q, problems)     batches of whole traces as SpanRecords, oldest first
    typed_value(key, text)              an attribute's value back from the exporter's text

The filters run in SQL: the time window and the service pick the traces (any span in them), and
the traces are then fetched whole, `batch_traces` at a time (keyset pages over (first span's
time, trace id), so a page costs the same late in a day as early). Each span's attributes are cut
down in SQL to those a report reads (prefixes of the conventions it knows; message and tool
content left out), and times come as integer nanoseconds.

Each query (a page of ids, a page of spans) is a request of the read's ReadBudget: it is made
only while no bound is spent, it is given what is left of the deadline (the server's
`max_execution_time`, the HTTP client's timeouts) and at most one answer's bound of bytes, and
its answer's bytes count against the byte budget. The first bound met ends the read with a
problem saying what was cut, which option raises it and what the report covers; the batches
already given stay given. A page of spans over one answer's bound is asked again for half as
many traces, down to one; a trace whose spans alone are over it is skipped, with a problem
naming it.

The exporter keeps every attribute value as text (pdata's AsString). The reader gives values
their types back: by key where the report knows the key's type (records.ATTRIBUTE_TYPES), else
by form (an integer, a decimal or exponent number, true/false, a JSON array). A text attribute
whose value looks like a number comes back as a number: the schema cannot tell them apart.
No torch import on this path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agenttrace import semconv as sc
from agenttrace.clock import Clock
from agenttrace.errors import ClickHouseError, JSONError, ReadCut
from agenttrace.traces.bounded_http import ReadBudget, deadline_line
from agenttrace.traces.clickhouse import ClickHouseQuery, QueryAnswer, QueryBounds, Store, check_source
from agenttrace.traces.clickhouse_params import INT64, UINT32
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

__all__ = ["attribute_filter", "filters", "read_traces", "trace_pages", "typed_value"]

_MiB = 1 << 20

# Attribute keys the reports read: ours and those of the conventions they map (traces/conventions).
_PREFIXES = ("agenttrace.", "gen_ai.", "openinference.", "llm.", "tool.", "tool_call.", "traceloop.", "http.",
             "db.", "rpc.", "server.", "error.", "session.", "agent.", "pydantic_ai.", "logfire.")
_KEYS = ("agent_name", "final_result", "otel.status_code", "otel.status_description", "span.kind")
# ... but not content (prompts, replies, tool arguments and results): large, and no figure reads them
_CONTENT = (sc.GEN_AI_INPUT_MESSAGES, sc.GEN_AI_OUTPUT_MESSAGES, sc.GEN_AI_TOOL_CALL_ARGUMENTS, sc.GEN_AI_TOOL_CALL_RESULT,
            "gen_ai.system_instructions", "llm.input_messages", "llm.output_messages", "tool.parameters")


def attribute_filter(column: str) -> str:
    """SQL: the attributes a report reads of the Map `column` (this reader's and the columnar
    engine's pushdown, agenttrace/columnar/load.py)."""
    starts = " OR ".join(f"startsWith(k, '{p}')" for p in _PREFIXES)
    keys = ", ".join(f"'{k}'" for k in _KEYS)
    content = ", ".join(f"'{k}'" for k in _CONTENT)
    return f"mapFilter((k, v) -> ({starts} OR k IN ({keys})) AND k NOT IN ({content}), {column})"


_SPAN_SQL = f"""SELECT
    toUnixTimestamp64Nano(Timestamp) AS start_ns, Duration, TraceId, SpanId, ParentSpanId, SpanName, SpanKind,
    ResourceAttributes, ScopeName, {attribute_filter('SpanAttributes')} AS attrs, StatusCode, StatusMessage,
    arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp) AS event_ns, Events.Name AS event_names,
    Events.Attributes AS event_attrs, Links.TraceId AS link_traces, Links.SpanId AS link_spans
FROM {{table}}
WHERE TraceId IN {{ids:Array(String)}}
ORDER BY Timestamp, SpanId"""


def filters(q: ClickHouseQuery) -> tuple[str, dict[str, Any]]:
    """The WHERE clause picking `q`'s spans (time window, service) and its parameters."""
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


class _Read:
    """The queries of one read: each within what is left of its budget."""

    def __init__(self, store: Store, q: ClickHouseQuery, budget: ReadBudget) -> None:
        self.store, self.budget = store, budget
        self.where = q.input_name(store.name)  # as every problem about this source starts

    def ask(self, sql: str, params: Mapping[str, Any]) -> QueryAnswer:
        """`sql`'s answer, counted against the budget; ReadCut saying which bound is spent
        (before the query, or the deadline passing during it), or that the answer is over what
        is left of the byte budget. An answer over one answer's bound comes back `too_large`."""
        why = self.budget.why_stop()
        if why is not None:
            raise ReadCut(why)
        limits = self.budget.limits
        room = min(limits.max_answer_bytes, self.budget.bytes_left())
        try:
            # never 0 s: the deadline may pass between why_stop and here (the store then says so)
            answer = self.store.answer(sql, params, QueryBounds(max(self.budget.left_s(), 1e-3), room))
        except ClickHouseError as exc:
            self.budget.spend(0)
            if self.budget.left_s() <= 0:  # the server's max_execution_time, or the client's wait
                raise ReadCut(deadline_line(limits.deadline_s)) from exc
            raise
        self.budget.spend(answer.nbytes)
        if answer.too_large and room < limits.max_answer_bytes:  # what is left of the bytes, not one answer's bound
            raise ReadCut(f"an answer over the {room} bytes left of the byte budget of {limits.max_bytes / _MiB:g} "
                          "MiB for the whole read (raise it with --max-mb)")
        return answer


def trace_pages(store: Store, q: ClickHouseQuery, budget: ReadBudget | None = None) -> Iterator[list[str]]:
    """The ids of the traces the filters pick, oldest first, `batch_traces` at a time (fewer
    while a page of ids is over one answer's bound). Each page is a request of `budget`
    (default: a new one of `q.limits`); ReadCut when a bound of it stops the paging."""
    read = _Read(store, q, budget or ReadBudget(q.limits))
    where, params = filters(q)
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
        answer = read.ask(sql, page_params)
        if answer.too_large:
            if n == 1:  # an id is 32 characters: an answer bound of at least 1 MiB holds thousands
                raise ReadCut(f"a page of one trace id is over the bound of {q.limits.max_answer_bytes / _MiB:g} MiB "
                              "for one answer (raise it with --max-answer-mb)")
            n //= 2  # the same page again, fewer ids
            continue
        rows = answer.rows
        if not rows:
            return
        yield [r[1] for r in rows]
        if len(rows) < n:
            return
        last = (int(rows[-1][0]), rows[-1][1])


def read_traces(store: Store, q: ClickHouseQuery, problems: list[str], *, clock: Clock | None = None,
                ids: Sequence[str] | None = None) -> Iterator[list[SpanRecord]]:
    """Batches of whole traces (checked as every reader's are), within `q.limits` (the deadline
    timed by `clock`, default the real one). A row that cannot be read is a problem naming its
    trace and span, and the rest is read; a bound of the read that stops it is a problem saying
    what was cut, which option raises it and what the report covers (no exception); a trace over
    one answer's bound is a problem naming it, and the rest is read. Raises ClickHouseError for
    a store that fails (unreachable, another schema). `ids`: these traces, in this order, rather
    than those the filters pick (the columnar engine's traces it does not state, columnar/per_trace)."""
    check_source(store, q)
    budget = ReadBudget(q.limits, clock)
    read = _Read(store, q, budget)
    sql = _SPAN_SQL.replace("{table}", q.table)
    size = q.batch_traces  # traces a page of spans asks for: halved while an answer is over the bound
    too_large = 0  # the most traces a page asked for whose answer was over the bound
    done = 0
    try:
        pages = trace_pages(store, q, budget) if ids is None else [list(ids)]
        for page in pages:
            i = 0
            while i < len(page):
                part = page[i:i + size]
                answer = read.ask(sql, {"ids": part})
                if answer.too_large and len(part) > 1:
                    too_large, size = max(too_large, len(part)), len(part) // 2  # the same traces, fewer a page
                    continue
                i += len(part)
                if answer.too_large:
                    problems.append(f"{read.where}: trace {part[0]}: its spans are over the bound of "
                                    f"{q.limits.max_answer_bytes / _MiB:g} MiB for one answer (raise it with "
                                    "--max-answer-mb); trace skipped")
                    continue
                done += len(part)
                yield checked(_spans(answer.rows, read.where, problems), problems)
    except ReadCut as exc:
        covers = f"the report covers the {done} trace(s) read before" if done else "no traces read"
        problems.append(f"{read.where}: {exc}; {covers} ({budget.summary()})")
    if too_large:
        problems.append(f"{read.where}: answers of {too_large} traces were over the bound of one answer "
                        f"({q.limits.max_answer_bytes / _MiB:g} MiB): read {size} trace(s) a request")


def _spans(rows: list[list[Any]], source: str, problems: list[str]) -> list[SpanRecord]:
    spans = []
    for row in rows:
        try:
            spans.append(_span(row, source))
        except (TypeError, ValueError, IndexError, KeyError) as exc:
            problems.append(f"{source}: trace {row[2] if len(row) > 2 else '?'} span "
                            f"{row[3] if len(row) > 3 else '?'}: unreadable row ({type(exc).__name__}: {exc}); "
                            "span skipped")
    return spans


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


def _span(row: list[Any], source: str) -> SpanRecord:
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
        source=source,  # one input (problems about a span name its trace or span id)
        scope=str(scope or ""),
    )
