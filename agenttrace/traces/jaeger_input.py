"""Reading Jaeger's JSON model (the query API's and the UI's format) into `SpanRecord`s.

The reverse of the rules Jaeger applies when it stores OTLP (SPANS.md, "Files"): the process's
`serviceName` and tags become the resource; the `span.kind`, `otel.status_code`,
`otel.status_description` and `error` tags become the span's kind and status (and leave the
attributes); logs become events (the `event` field is the name); the first CHILD_OF reference
*within the same trace* is the parent, as in Jaeger's own model, and every other reference is a
link. Times are microseconds (numbers or strings); int64 tags may be strings, binary tags base64.

Accepted shapes: one trace `{"traceID", "spans", "processes"}`, a list of them, or a query-API
response `{"data": [...]}`. Jaeger's `warnings` are passed on as problems; duplicate span ids are
resolved later by the span tree (as Jaeger's UI does). Also: `query_jaeger`, which reads traces
from a running Jaeger's HTTP query API (`/api/traces`). No torch import on this path.
"""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from agenttrace import semconv as sc
from agenttrace.clock import default_clock
from agenttrace.traces.jsontext import parse_json
from agenttrace.traces.span_records import SPAN_KINDS, EventRecord, LoadResult, SpanRecord

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
            return json.loads(text)
        except json.JSONDecodeError:
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


def _trace_spans(trace: dict[str, Any], source: str, problems: list[str]) -> list[SpanRecord]:
    resources: dict[str, dict[str, Any]] = {}
    for pid, proc in (trace.get("processes") or {}).items():
        resources[pid] = {sc.SERVICE_NAME: proc.get("serviceName", "unknown-service"), **_tags(proc.get("tags"))}
    trace_id = trace.get("traceID", "?")
    for w in trace.get("warnings") or ():
        problems.append(f"{source}: Jaeger warning on trace {trace_id}: {w}")
    spans = []
    for s in trace.get("spans") or ():
        try:
            span = _span(s, resources, source)
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
            sid = s.get("spanID", "?") if isinstance(s, dict) else "?"
            problems.append(f"{source}: span {str(sid)[:40]} of trace {str(trace_id)[:40]}: unreadable "
                            f"({type(exc).__name__}: {str(exc)[:200]}); span skipped")
            continue
        for w in s.get("warnings") or ():
            problems.append(f"{source}: Jaeger warning on span {span.span_id} ({span.name!r}): {w}")
        spans.append(span)
    return spans


def spans_from_jaeger(doc: Any, source: str, problems: list[str]) -> list[SpanRecord]:
    """The spans of a Jaeger JSON document (see the module docstring for the shapes). Raises
    KeyError / ValueError / TypeError on a span missing its ids or with unreadable values."""
    if isinstance(doc, dict) and isinstance(doc.get("data"), list):
        traces = doc["data"]
        for err in doc.get("errors") or ():
            problems.append(f"{source}: Jaeger reported an error: {err.get('msg', err) if isinstance(err, dict) else err}")
    elif isinstance(doc, dict):
        traces = [doc]
    else:
        traces = doc
    spans: list[SpanRecord] = []
    for trace in traces:
        spans.extend(_trace_spans(trace, source, problems))
    return spans


class JaegerQuery:
    """What to ask a Jaeger query service for: the traces of `service` that started within the
    last `lookback` (e.g. `30m`, `2h`, `1d`), at most `limit` of them."""

    def __init__(self, url: str, service: str, *, lookback: str = "1h", limit: int = 20,
                 operation: str | None = None, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.service = service
        self.lookback = lookback
        self.limit = limit
        self.operation = operation
        self.timeout_s = timeout_s

    def request_url(self, now_s: float | None = None) -> str:
        end_us = _now_us(now_s)
        return self.window_url(end_us - int(parse_lookback(self.lookback) * 1e6), end_us, self.limit)

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


def parse_lookback(text: str) -> float:
    """Seconds in a lookback like `90s`, `30m`, `2h`, `1d` or `1w`. Raises ValueError."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower()
    if len(text) < 2 or text[-1] not in units:
        raise ValueError(f"lookback {text!r}: expected a number and a unit (s, m, h, d, w), e.g. 1h")
    return float(text[:-1]) * units[text[-1]]


def _fetch(url: str, query: JaegerQuery) -> LoadResult:
    """One search request: its spans, or a problem naming the URL (never an exception)."""
    problems: list[str] = []
    try:
        with urllib.request.urlopen(url, timeout=query.timeout_s) as resp:  # noqa: S310 (the user's URL)
            body = resp.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read(500).decode("utf-8", "replace").strip()
        return LoadResult([], [f"{url}: Jaeger answered HTTP {exc.code} {exc.reason}: {detail}; no traces read"])
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return LoadResult([], [f"{url}: cannot reach Jaeger ({reason}); is the query service running there? no traces read"])
    try:
        doc = parse_json(body)
        spans = spans_from_jaeger(doc, url, problems)
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError) as exc:
        return LoadResult([], [f"{url}: not a Jaeger /api/traces answer ({type(exc).__name__}: {exc}); no traces read"])
    return LoadResult(spans, problems)


def query_jaeger(query: JaegerQuery) -> LoadResult:
    """Traces from Jaeger's HTTP query API, in one request (at most `query.limit` traces). An
    unreachable endpoint or a bad answer is a problem naming the URL (the result is then empty),
    never an exception. `jaeger_pages` reads larger results page by page."""
    url = query.request_url()
    result = _fetch(url, query)
    if not result.spans and not result.problems:
        result.problems.append(f"{url}: Jaeger returned no traces for service {query.service!r} in the last "
                               f"{query.lookback}")
    return result


def jaeger_pages(query: JaegerQuery, problems: list[str], *, page_traces: int = 100, now_s: float | None = None,
                 progress: Callable[[int, int], None] | None = None) -> Iterator[list[SpanRecord]]:
    """Whole traces from Jaeger's query API, `page_traces` at a time, up to `query.limit` (0: all
    in the lookback), newest first. Each request asks for the traces of a time window ending
    where the last page's oldest trace started; a trace two windows both return is read once.
    Only one page of spans is held at a time (and the ids of the traces read). `progress(traces,
    end_us)` after each page. Problems (unreachable, bad answers) name the URL and stop the
    paging; what was read stays read."""
    end_us = _now_us(now_s)
    start_us = end_us - int(parse_lookback(query.lookback) * 1e6)
    seen: set[str] = set()
    wanted = query.limit if query.limit > 0 else None
    while wanted is None or len(seen) < wanted:
        ask = page_traces if wanted is None else min(page_traces, wanted - len(seen))
        url = query.window_url(start_us, end_us, ask)
        page = _fetch(url, query)
        problems += page.problems
        if page.problems and not page.spans:
            return  # unreachable, refused, not Jaeger: said; what was read stays read
        by_trace: dict[str, list[SpanRecord]] = {}
        for s in page.spans:
            by_trace.setdefault(s.trace_id, []).append(s)
        fresh = {t: spans for t, spans in by_trace.items() if t not in seen}
        if wanted is not None:
            fresh = dict(list(fresh.items())[: wanted - len(seen)])
        seen.update(fresh)
        if fresh:
            yield [s for spans in fresh.values() for s in spans]
        if progress is not None:
            progress(len(seen), end_us)
        if len(by_trace) < ask:
            break  # the window held fewer than asked: nothing older is left in the lookback
        oldest = min(min(s.start_ns for s in spans) for spans in by_trace.values()) // 1000
        end_us = oldest if fresh else oldest - 1  # a page of only repeats: step past their start
        if end_us <= start_us:
            break
    if not seen:
        problems.append(f"{query.window_url(start_us, end_us, page_traces)}: Jaeger returned no traces for service "
                        f"{query.service!r} in the last {query.lookback}")
