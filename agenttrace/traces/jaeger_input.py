"""Reading Jaeger's JSON model (the query API's and the UI's format) into `SpanRecord`s.

The reverse of the rules Jaeger applies when it stores OTLP (SPANS.md, "Files"): the process's
`serviceName` and tags become the resource; the `span.kind`, `otel.status_code`,
`otel.status_description` and `error` tags become the span's kind and status (and leave the
attributes); logs become events (the `event` field is the name); the first CHILD_OF reference
*within the same trace* is the parent, as in Jaeger's own model, and every other reference is a
link. Times are microseconds (numbers or strings); int64 tags may be strings, binary tags base64.

Accepted shapes: one trace `{"traceID", "spans", "processes"}`, a list of them, or a query-API
response `{"data": [...]}`; a trace, process or span of another shape is a problem and is
skipped (a trace whose `processes` cannot be read keeps its spans, with an unknown service).
Jaeger's `warnings` are passed on as problems; duplicate span ids are resolved later by the span
tree (as Jaeger's UI does).

Also: `jaeger_pages` and `query_jaeger`, which read traces from a running Jaeger's HTTP query
API (`/api/traces`) in time windows walked back from now, within the bounds of one read
(`bounded_http.ReadLimits`: a deadline, a byte and a request budget, one answer's size); what
was read before a bound or a bad answer stays read, and a problem says what was cut and why.
No torch import on this path.
"""

from __future__ import annotations

import base64
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agenttrace import semconv as sc
from agenttrace.clock import default_clock
from agenttrace.errors import HTTPGetError, JSONError, ReadCut
from agenttrace.traces import bounded_http
from agenttrace.traces.bounded_http import ReadBudget, ReadLimits
from agenttrace.traces.jsontext import parse_json
from agenttrace.traces.span_records import SPAN_KINDS, EventRecord, LoadResult, SpanRecord
from agenttrace.traces.time_window import parse_lookback

__all__ = ["JaegerQuery", "is_jaeger_document", "jaeger_pages", "query_jaeger", "spans_from_jaeger"]

# Jaeger's `span.kind` tag is the OTLP kind's name in lower case.
_KINDS = {name.lower(): name for name in SPAN_KINDS.values()}
# Tags that Jaeger derives from OTLP span fields; they go back into those fields.
_SPAN_FIELD_TAGS = {sc.JAEGER_SPAN_KIND, sc.JAEGER_STATUS_CODE, sc.JAEGER_STATUS_DESCRIPTION, sc.JAEGER_ERROR,
                    sc.JAEGER_SPAN_FORMAT, sc.JAEGER_SCOPE_NAME, sc.JAEGER_SCOPE_VERSION, sc.JAEGER_LIBRARY_NAME,
                    sc.JAEGER_LIBRARY_VERSION}
# OTLP array attributes Jaeger stores as JSON-encoded strings; read back as lists.
_ARRAY_ATTRIBUTES = {sc.GEN_AI_RESPONSE_FINISH_REASONS, sc.SPEC_ACCEPTANCE_PER_POSITION}


def is_jaeger_document(doc: Any) -> bool:
    """Whether a parsed JSON document has the shape of Jaeger JSON."""
    if isinstance(doc, dict):
        return isinstance(doc.get("data"), list) or isinstance(doc.get("spans"), list)
    return isinstance(doc, list) and bool(doc) and all(isinstance(t, dict) and "spans" in t for t in doc)


def _tag_value(tag: dict[str, Any]) -> Any:
    kind = str(tag.get("type", "string")).lower()
    value = tag.get("value")
    if kind == "int64":
        return int(value)
    if kind == "float64":
        return float(value)
    if kind == "bool":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if kind == "binary":
        return base64.b64decode(value) if isinstance(value, str) else bytes(value or b"")
    text = "" if value is None else str(value)
    if tag.get("key") in _ARRAY_ATTRIBUTES and text.startswith("["):
        try:
            return parse_json(text)
        except JSONError:  # not JSON, or nested deeper than the parser goes: the text as it came
            return text
    return sys.intern(text) if len(text) <= 48 else text


def _tags(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {sys.intern(str(t["key"])): _tag_value(t) for t in items or () if "key" in t}


def _us_to_ns(value: Any) -> int:
    return int(value or 0) * 1000


def _span(s: dict[str, Any], resources: dict[str, dict[str, Any]], source: str) -> SpanRecord:
    trace_id = str(s["traceID"]).lower()
    parent: str | None = None
    links: list[tuple[str, str]] = []
    for ref in s.get("references") or ():
        ref_trace = str(ref.get("traceID", trace_id)).lower()
        ref_span = str(ref.get("spanID", "")).lower()
        if parent is None and ref.get("refType", "CHILD_OF") == "CHILD_OF" and ref_trace == trace_id:
            parent = ref_span
        else:
            links.append((ref_trace, ref_span))
    if parent is None and s.get("parentSpanID"):  # older Jaeger JSON carries the parent directly
        parent = str(s["parentSpanID"]).lower()
    tags = _tags(s.get("tags"))
    kind = _KINDS.get(str(tags.get(sc.JAEGER_SPAN_KIND, "")).lower(), "UNSPECIFIED")
    code = str(tags.get(sc.JAEGER_STATUS_CODE, "")).upper()
    status = code if code in ("OK", "ERROR") else ("ERROR" if tags.get(sc.JAEGER_ERROR) is True else "UNSET")
    message = str(tags.get(sc.JAEGER_STATUS_DESCRIPTION, ""))
    scope = str(tags.get(sc.JAEGER_SCOPE_NAME) or tags.get(sc.JAEGER_LIBRARY_NAME) or "")
    for key in _SPAN_FIELD_TAGS & tags.keys():
        del tags[key]
    events = []
    for log in s.get("logs") or ():
        fields = _tags(log.get("fields"))
        name = str(fields.pop(sc.JAEGER_LOG_EVENT, fields.pop(sc.JAEGER_LOG_MESSAGE, "log")))
        events.append(EventRecord(sys.intern(name), _us_to_ns(log.get("timestamp")), fields))
    start = _us_to_ns(s.get("startTime"))
    process = s.get("processID") or ""
    resource = resources.get(process)
    if resource is None:
        resource = resources[process] = {sc.SERVICE_NAME: (s.get("process") or {}).get("serviceName", "unknown-service")}
    return SpanRecord(
        trace_id=trace_id,
        span_id=str(s["spanID"]).lower(),
        parent_id=parent,
        name=sys.intern(str(s.get("operationName") or "")),
        kind=kind,
        start_ns=start,
        end_ns=start + _us_to_ns(s.get("duration")),
        attributes=tags,
        events=events or (),
        status=status,
        status_message=message,
        resource=resource,
        links=links or (),
        source=source,
        scope=sys.intern(scope),
    )


def _trace_spans(trace: dict[str, Any], source: str, problems: list[str], shapes: dict[str, int]) -> list[SpanRecord]:
    trace_id = str(trace.get("traceID", "?"))[:40]
    spans_in = trace.get("spans")
    if not isinstance(spans_in, list):
        if spans_in is not None:
            problems.append(f"{source}: trace {trace_id}: `spans` is a {type(spans_in).__name__}, not a list; "
                            "trace skipped")
        return []
    resources = _resources(trace, trace_id, source, problems, shapes)
    for w in _listed(trace.get("warnings")):
        problems.append(f"{source}: Jaeger warning on trace {trace_id}: {w}")
    spans = []
    for s in spans_in:
        try:
            span = _span(s, resources, source)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as exc:
            sid = s.get("spanID", "?") if isinstance(s, dict) else "?"
            problems.append(f"{source}: span {str(sid)[:40]} of trace {trace_id}: unreadable "
                            f"({type(exc).__name__}: {str(exc)[:200]}); span skipped")
            continue
        for w in _listed(s.get("warnings")):
            problems.append(f"{source}: Jaeger warning on span {span.span_id} ({span.name!r}): {w}")
        spans.append(span)
    return spans


def _listed(value: Any) -> list[Any]:
    """A list field (Jaeger's warnings and errors), or nothing: a string is not a list of lines."""
    return value if isinstance(value, list) else []


def _resources(trace: dict[str, Any], trace_id: str, source: str, problems: list[str],
               shapes: dict[str, int]) -> dict[str, dict[str, Any]]:
    """The trace's processes as resources. One that cannot be read is said and left out: its
    spans are read with an unknown service rather than lost. `processes` of another shape is
    counted in `shapes` by its type (said once per document, not once per trace)."""
    processes = trace.get("processes")
    if processes is None:
        return {}
    if not isinstance(processes, dict):
        kind = type(processes).__name__
        shapes[kind] = shapes.get(kind, 0) + 1
        return {}
    resources: dict[str, dict[str, Any]] = {}
    for pid, proc in processes.items():
        try:
            resources[pid] = {sc.SERVICE_NAME: proc.get("serviceName", "unknown-service"), **_tags(proc.get("tags"))}
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as exc:
            problems.append(f"{source}: trace {trace_id}: process {str(pid)[:40]} unreadable ({type(exc).__name__}: "
                            f"{str(exc)[:200]}); its spans are read without it (service unknown-service)")
    return resources


def spans_from_jaeger(doc: Any, source: str, problems: list[str]) -> list[SpanRecord]:
    """The spans of a Jaeger JSON document (see the module docstring for the shapes). What cannot
    be read (a trace, process or span of the wrong shape) is a problem and is skipped, never an
    exception; a document that is none of the shapes raises TypeError."""
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        traces = doc["data"]
        for err in _listed(doc.get("errors")):
            problems.append(f"{source}: Jaeger reported an error: {err.get('msg', err) if isinstance(err, dict) else err}")
    elif isinstance(doc, dict):
        traces = [doc]
    elif isinstance(doc, list):
        traces = doc
    else:
        raise TypeError(f"a JSON {type(doc).__name__}, not a Jaeger trace, a list of them or a query answer")
    spans: list[SpanRecord] = []
    not_traces = 0
    shapes: dict[str, int] = {}  # `processes` of another shape, by type: how many traces
    for trace in traces:
        if isinstance(trace, dict):
            spans.extend(_trace_spans(trace, source, problems, shapes))
        else:
            not_traces += 1
    if not_traces:
        problems.append(f"{source}: {not_traces} item(s) in place of traces are not JSON objects; skipped")
    for kind, n in shapes.items():
        problems.append(f"{source}: {n} trace(s) whose `processes` is a {kind}, not an object: their spans are read "
                        "without their process (service unknown-service)")
    return spans


class JaegerQuery:
    """What to ask a Jaeger query service for: the traces of `service` that started within the
    last `lookback` (e.g. `30m`, `2h`, `1d`), at most `limit` of them (0: all), the whole read
    within `limits` (deadline, bytes, requests, one answer's size) and each request within
    `timeout_s` (None: whatever is left of the read's deadline; one slow answer is not a
    failure while the read has time)."""

    def __init__(self, url: str, service: str, *, lookback: str = "1h", limit: int = 20,
                 operation: str | None = None, timeout_s: float | None = None,
                 limits: ReadLimits | None = None) -> None:
        self.url = url.rstrip("/")
        self.service = service
        self.lookback = lookback
        self.limit = limit
        self.operation = operation
        self.timeout_s = timeout_s
        self.limits = limits or ReadLimits()

    def window_start_us(self, end_us: int) -> int:
        """The start of the lookback ending at `end_us`; no earlier than the epoch (no span is)."""
        return max(0, end_us - round(parse_lookback(self.lookback) * 1e6))

    def request_url(self, now_s: float | None = None) -> str:
        end_us = _now_us(now_s)
        return self.window_url(self.window_start_us(end_us), end_us, self.limit)

    def window_url(self, start_us: int, end_us: int, limit: int) -> str:
        """The search for at most `limit` traces with a span in [start_us, end_us]."""
        params = {"service": self.service, "lookback": self.lookback, "limit": str(limit), "start": str(start_us),
                  "end": str(end_us)}
        if self.operation:
            params["operation"] = self.operation
        return f"{self.url}/api/traces?{urllib.parse.urlencode(params)}"


def _now_us(now_s: float | None) -> int:
    """Epoch microseconds: `now_s` (seconds) when given, else the clock's wall-clock now."""
    return default_clock().now_ns() // 1000 if now_s is None else int(now_s * 1e6)


@dataclass
class _Page:
    """One search request's outcome."""

    spans: list[SpanRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    failure: str | None = None  # no usable answer: why (the paging stops)
    cut: bool = False  # a bound of the read stopped it (ReadCut), not the server
    too_large: bool = False  # over one answer's size bound: fewer traces a request may fit


def _fetch(url: str, query: JaegerQuery, budget: ReadBudget) -> _Page:
    """One search request, within the read's budget: its spans, or why there are none (never an
    exception)."""
    try:
        answer = bounded_http.get(url, timeout_s=query.timeout_s or query.limits.deadline_s, budget=budget)
    except ReadCut as exc:
        return _Page(failure=str(exc), cut=True, too_large=exc.answer_too_large)
    except HTTPGetError as exc:
        return _Page(failure=f"no usable answer from Jaeger: {exc}")
    if answer.status != 200:
        detail = answer.body[:500].decode("utf-8", "replace").strip()
        return _Page(failure=f"Jaeger answered HTTP {answer.status} {answer.reason}: {detail}")
    try:
        doc = parse_json(answer.body)
    except JSONError as exc:
        return _Page(failure=f"not a Jaeger /api/traces answer ({exc})")
    del answer  # the body: only the parsed answer is held from here
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        return _Page(failure=f"not a Jaeger /api/traces answer (a JSON {type(doc).__name__} without a `data` list)")
    page = _Page()
    page.spans = spans_from_jaeger(doc, url, page.problems)
    return page


def query_jaeger(query: JaegerQuery) -> LoadResult:
    """Every trace `query` asks for, read with `jaeger_pages` (within its deadline and budgets)
    and held together. An unreachable endpoint or a bad answer is a problem naming the URL,
    never an exception; what was read before it stays read."""
    problems: list[str] = []
    spans = [s for page in jaeger_pages(query, problems) for s in page]
    return LoadResult(spans, problems)


def jaeger_pages(query: JaegerQuery, problems: list[str], *, page_traces: int = 100, now_s: float | None = None,
                 progress: Callable[[int, int], None] | None = None) -> Iterator[list[SpanRecord]]:
    """Whole traces from Jaeger's query API, `page_traces` at a time, up to `query.limit` (0: all
    in the lookback), newest first. Each request asks for the traces of a time window ending
    where the last page's oldest trace started; a trace two windows both return is read once.
    Only one page of spans is held at a time (and the ids of the traces read). `progress(traces,
    end_us)` after each page.

    The read ends, with a problem naming the URL and saying what the report covers, at the
    first of: an unreachable server or a bad answer; a bound of `query.limits` (the deadline of
    the whole read, the byte or request budget); a server that does not page (it answers with
    traces that all started after the window, or new traces for the same window again and
    again). An answer over one answer's size bound is asked again for half as many traces,
    down to one. What was read stays read."""
    budget = ReadBudget(query.limits)
    end_us = _now_us(now_s)
    start_us = query.window_start_us(end_us)
    seen: set[str] = set()
    wanted = query.limit if query.limit > 0 else None
    page_size = max(1, page_traces)
    too_large = 0  # the most traces a request asked for whose answer was over the bound
    same_window = 0  # requests in a row for the same window

    def stop(url: str, why: str, *, cut: bool = True, even_one_too_large: bool = False) -> None:
        covers = f"the report covers the {len(seen)} trace(s) read before" if seen else "no traces read"
        spent = f" ({budget.summary()})" if cut else ""
        problems.append(f"{url}: {why}; {covers}{spent}")
        if not even_one_too_large:
            _say_smaller_pages(query, too_large, page_size, problems)

    while wanted is None or len(seen) < wanted:
        ask = page_size if wanted is None else min(page_size, wanted - len(seen))
        url = query.window_url(start_us, end_us, ask)
        page = _fetch(url, query, budget)
        if page.too_large and ask > 1:
            too_large, page_size = max(too_large, ask), ask // 2  # the same window again, fewer traces a request
            continue
        problems += page.problems
        if page.failure is not None:
            stop(url, page.failure, cut=page.cut, even_one_too_large=page.too_large)
            return
        by_trace: dict[str, list[SpanRecord]] = {}
        for s in page.spans:
            by_trace.setdefault(s.trace_id, []).append(s)
        fresh = {t: spans for t, spans in by_trace.items() if t not in seen}
        if wanted is not None:
            fresh = dict(list(fresh.items())[: wanted - len(seen)])
        seen.update(fresh)
        had_fresh = bool(fresh)
        if fresh:
            yield [s for spans in fresh.values() for s in spans]
        del page, fresh
        if progress is not None:
            progress(len(seen), end_us)
        if len(by_trace) < ask:
            break  # the window held fewer than asked: nothing older is left in the lookback
        oldest = min(min(s.start_ns for s in spans) for spans in by_trace.values()) // 1000
        if oldest > end_us:  # every trace found has a span in the window, so one starts in it or before
            stop(url, "Jaeger answered with traces that all started after the window asked for: it does not "
                      "honour the search's start and end, so paging cannot go on")
            return
        next_end = oldest if had_fresh else oldest - 1  # a page of only repeats: step past their start
        same_window = same_window + 1 if next_end == end_us else 0
        if same_window >= 2:  # Jaeger answers a window alike each time; new traces each time is no paging
            stop(url, "Jaeger answered the same window with new traces again and again: the window does not "
                      "move, so paging cannot go on")
            return
        end_us = next_end
        if end_us <= start_us:
            break
    _say_smaller_pages(query, too_large, page_size, problems)
    if not seen:
        problems.append(f"{query.window_url(start_us, end_us, page_traces)}: Jaeger returned no traces for service "
                        f"{query.service!r} in the last {query.lookback}")


def _say_smaller_pages(query: JaegerQuery, too_large: int, page_size: int, problems: list[str]) -> None:
    if too_large:
        problems.append(f"{query.url}: answers of {too_large} traces were over the bound of one answer "
                        f"({query.limits.max_answer_bytes / 2**20:g} MiB): read {page_size} trace(s) a request")
