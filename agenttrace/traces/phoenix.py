"""Arize Phoenix as a trace source: the spans of one project, read through Phoenix's REST API
(Phoenix 13.15 or later), whole traces at a time.

    GET /v1/projects/{project}/traces?start_time=&end_time=&sort=start_time&order=asc&limit=&cursor=
        the traces that started in the window, oldest first (keyset cursor pages)
    GET /v1/projects/{project}/spans?trace_id=...&limit=1000&cursor=
        every span of up to `batch_traces` of those traces (cursor pages)

so a trace's spans are all read before it is analysed, and one batch of traces is held at a time.
`--since`/`--until` go to Phoenix's trace filter: a trace is picked by its start (its first
span's), not by any span in the window as the ClickHouse reader picks it.

What Phoenix keeps of a span, and what it does not (said once per report, `LOST`):
- kept: trace, span and parent ids; the name; start and end (as datetimes: microseconds, not
  nanoseconds); status code and message; the attributes, typed as JSON types (ints, floats,
  booleans, strings, lists of them); the events with their times and attributes.
- changed: Phoenix adds OpenInference attributes it derives from `gen_ai.*` ones at ingestion
  (`llm.*`, and `openinference.span.kind` where the span had none), then moves
  `openinference.span.kind` out of the attributes into the span's `span_kind`. It goes back into
  the attributes unless it is the kind Phoenix derives from the span's `gen_ai.*` attributes
  (`phoenix_kind`): such a span is read by its GenAI attributes, as it was recorded (read as
  OpenInference, a GenAI agent's sub-agents would become tasks of their own), and the report
  counts them. Attributes Phoenix parses as JSON (`tool.parameters`, `metadata`, ...) come back
  as their flattened keys.
- lost: the OTel span kind (every span reads UNSPECIFIED: an HTTP client span is not network
  time, a client/server pair of generations is not split into network and server time), the
  resource (`service.name`, `agenttrace.run.label` and `run.id`: no per-label figures), the
  instrumentation scope (the conventions that need it, Google ADK's failures returned as
  results above all, are not recognised) and links.

Bounds: every request has a deadline (`timeout_s`); the whole read has the bounds of `limits`
(bounded_http.ReadLimits: a deadline, a byte and a request budget, one answer's size); the spans
of one batch are at most `max_batch_bytes`. Errors before the first batch raise `PhoenixError`
(one line: unreachable, no such project, not a Phoenix answer, refused without a key, a bound
spent); later ones stop the read with a problem saying what was cut and why, and what was read
is reported. No torch import on this path.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from agenttrace.errors import JSONError, PhoenixError, ReadCut
from agenttrace.traces import bounded_http
from agenttrace.traces.bounded_http import ReadBudget, ReadLimits
from agenttrace.traces.jsontext import parse_json
from agenttrace.traces.span_records import EventRecord, SpanRecord, break_cycles, checked

__all__ = ["LOST", "MAX_IDS_PER_REQUEST", "PhoenixQuery", "phoenix_kind", "read_traces",
           "span_from_phoenix"]

OI_SPAN_KIND = "openinference.span.kind"
MAX_IDS_PER_REQUEST = 100  # trace ids go in the URL (42 bytes each); servers refuse lines over 8-16 KB
LOST = ("Phoenix keeps no OTel span kind, resource, instrumentation scope or links: every span is read with "
        "kind UNSPECIFIED and no resource, so HTTP client spans count as other, not network, remote generations "
        "are not split into network and server time, there are no per-run-label figures (agenttrace.run.label "
        "is a resource attribute), and what only a span's scope tells is not seen (Google ADK's tool failures "
        "returned as results, so their retries; pydantic-ai's and OpenLLMetry's own spans are read by their "
        "GenAI attributes); times are kept to the microsecond")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class PhoenixQuery:
    """What to read: the traces of `project` that started at or after `since_ns` (and before
    `until_ns`), `batch_traces` at a time (at most MAX_IDS_PER_REQUEST), within `limits`."""

    url: str
    project: str = "default"
    since_ns: int | None = None
    until_ns: int | None = None
    api_key: str | None = None
    batch_traces: int = MAX_IDS_PER_REQUEST
    page_spans: int = 1000  # Phoenix's largest page
    timeout_s: float = 30.0  # the deadline of one request, connecting to the last byte
    max_batch_bytes: int = 256 << 20  # the spans of one batch of traces, as JSON
    limits: ReadLimits = field(default_factory=ReadLimits)  # the whole read: deadline, bytes, requests, one answer

    def describe(self) -> str:
        return f"{self.url.rstrip('/')} project {self.project}"


def _iso(ns: int) -> str:
    return (_EPOCH + timedelta(microseconds=ns // 1000)).isoformat()


def _ns(text: Any) -> int:
    """Nanoseconds since the epoch of Phoenix's ISO time (a zone-less one is UTC)."""
    t = datetime.fromisoformat(str(text))
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return (t - _EPOCH) // timedelta(microseconds=1) * 1000


def _short(text: Any) -> str:
    text = str(text)
    return sys.intern(text) if len(text) <= 48 else text


# What Phoenix (trace/gen_ai/conversion.py, _infer_span_kind) derives an OpenInference kind from.
_OI_OF_OPERATION = {"chat": "LLM", "text_completion": "LLM", "generate_content": "LLM", "embeddings": "EMBEDDING",
                    "execute_tool": "TOOL", "retrieval": "RETRIEVER", "invoke_agent": "AGENT", "create_agent": "AGENT"}


def phoenix_kind(attributes: dict[str, Any]) -> str | None:
    """The OpenInference span kind Phoenix adds at ingestion to a span with these `gen_ai.*`
    attributes and no kind of its own (None: it adds none)."""
    op = attributes.get("gen_ai.operation.name")
    if isinstance(op, str):
        return _OI_OF_OPERATION.get(op)
    if attributes.get("gen_ai.tool.call.id") or attributes.get("gen_ai.tool.name"):
        return "TOOL"
    if attributes.get("gen_ai.retrieval.documents") or attributes.get("gen_ai.retrieval.query.text"):
        return "RETRIEVER"
    if attributes.get("gen_ai.embeddings.dimension.count") is not None:
        return "EMBEDDING"
    if any(attributes.get(k) for k in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.request.model")):
        return "LLM"
    return None


def span_from_phoenix(s: dict[str, Any], source: str) -> SpanRecord:
    """One span of Phoenix's `GET /v1/projects/{p}/spans` answer as a SpanRecord (see the module
    docstring for what it lacks). Phoenix's `span_kind` (the OpenInference kind, moved out of the
    attributes) goes back into them, unless it is the kind Phoenix itself derives from the span's
    `gen_ai.*` attributes: then it may be Phoenix's, not the instrumentation's, and the span is
    read by its GenAI attributes (`read_traces` counts them in a problem). Raises KeyError /
    TypeError / ValueError on a span without its ids or with unreadable times."""
    ctx = s["context"]
    attributes = dict(s.get("attributes") or {})
    oi_kind = s.get("span_kind")
    if isinstance(oi_kind, str) and oi_kind and oi_kind != "UNKNOWN" and oi_kind != phoenix_kind(attributes):
        attributes.setdefault(OI_SPAN_KIND, _short(oi_kind))
    events = [EventRecord(_short(e.get("name") or ""), _ns(e["timestamp"]), dict(e.get("attributes") or {}))
              for e in s.get("events") or ()]
    status = str(s.get("status_code") or "UNSET").upper()
    parent = s.get("parent_id")
    return SpanRecord(
        trace_id=str(ctx["trace_id"]).lower(),
        span_id=str(ctx["span_id"]).lower(),
        parent_id=str(parent).lower() if parent else None,
        name=_short(s.get("name") or ""),
        kind="UNSPECIFIED",
        start_ns=_ns(s["start_time"]),
        end_ns=_ns(s["end_time"]),
        attributes={_short(k): v for k, v in attributes.items()},
        events=events or (),
        status=status if status in ("OK", "ERROR") else "UNSET",
        status_message=str(s.get("status_message") or ""),
        source=source,
    )


class _Reader:
    """The requests of one read: headers, and what the read has spent of its limits."""

    def __init__(self, q: PhoenixQuery) -> None:
        self.q = q
        self.base = q.url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {q.api_key}"} if q.api_key else {}
        self.budget = ReadBudget(q.limits)
        self.version = ""
        self._listing = False  # listing the projects (for a message): never from inside that
        self.kinds_left_out = 0  # spans whose OpenInference kind may be Phoenix's (span_from_phoenix)

    def get(self, path: str, params: list[tuple[str, Any]]) -> tuple[dict[str, Any], int]:
        """The JSON object at `path`, and its size; PhoenixError saying what went wrong."""
        url = f"{self.base}{path}?{urlencode(params)}"
        where = f"{self.base}{path}"
        try:
            answer = bounded_http.get(url, self.headers, timeout_s=self.q.timeout_s, budget=self.budget)
        except ReadCut as exc:
            raise PhoenixError(f"{where}: {exc} ({self.budget.summary()})") from exc
        except bounded_http.HTTPGetError as exc:
            raise PhoenixError(f"{where}: {exc}; is Phoenix running there (`phoenix serve`)?") from exc
        self.version = answer.headers.get("x-phoenix-server-version", self.version)
        if answer.status != 200:
            raise PhoenixError(self._refusal(where, answer))
        try:
            doc = parse_json(answer.body)
        except JSONError as exc:
            raise PhoenixError(f"{where}: not a Phoenix API answer (not JSON: {exc})") from exc
        if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
            raise PhoenixError(f"{where}: not a Phoenix API answer (no `data` list)")
        return doc, len(answer.body)

    def _refusal(self, where: str, answer: bounded_http.Answer) -> str:
        detail = answer.body[:300].decode("utf-8", "replace").strip()
        try:
            detail = str(json.loads(detail).get("detail", detail))
        except (ValueError, AttributeError):
            pass
        said = f"Phoenix answered HTTP {answer.status} {answer.reason}: {detail}"
        if answer.status in (401, 403):
            return f"{where}: {said}; give an API key (--phoenix-api-key, or PHOENIX_API_KEY)"
        if answer.status == 404 and "not found" in detail.lower() and detail != "Not Found":
            return f"{where}: no project {self.q.project!r} in this Phoenix{self._projects()}"
        if answer.status == 404:
            version = f" {self.version}" if self.version else ""
            return f"{where}: {said}; this Phoenix{version} lacks the API agenttrace reads (Phoenix 13.15 or later)"
        return f"{where}: {said}"

    def _projects(self) -> str:
        """`; its projects: a, b` when Phoenix lists them (best effort: one bounded request)."""
        if self._listing:
            return ""
        self._listing = True
        try:
            doc, _ = self.get("/v1/projects", [("limit", 50)])
            names = [str(p.get("name")) for p in doc["data"] if isinstance(p, dict)]
        except PhoenixError:
            return ""
        finally:
            self._listing = False
        return f"; its projects: {', '.join(names[:20])}" if names else "; it has no project"


def _trace_pages(r: _Reader) -> Iterator[list[str]]:
    """The ids of the traces that started in the window, oldest first, `batch_traces` at a time."""
    q = r.q
    path = f"/v1/projects/{quote(q.project, safe='')}/traces"
    params: list[tuple[str, Any]] = [("sort", "start_time"), ("order", "asc"),
                                     ("limit", max(1, min(q.batch_traces, MAX_IDS_PER_REQUEST)))]
    if q.since_ns is not None:
        params.append(("start_time", _iso(q.since_ns)))
    if q.until_ns is not None:
        params.append(("end_time", _iso(q.until_ns)))
    cursor, last = None, set()
    while True:
        doc, _ = r.get(path, params + ([("cursor", cursor)] if cursor else []))
        ids = [str(t["trace_id"]).lower() for t in doc["data"] if isinstance(t, dict) and "trace_id" in t]
        fresh = [t for t in dict.fromkeys(ids) if t not in last]  # a page boundary read twice: once
        if fresh:
            yield fresh
        nxt = doc.get("next_cursor")
        if not nxt or not ids:
            return
        if nxt == cursor:
            raise PhoenixError(f"{r.base}{path}: Phoenix gave the same cursor twice; stopped paging")
        cursor, last = str(nxt), set(ids)


def _batch(r: _Reader, ids: list[str], problems: list[str]) -> list[SpanRecord]:
    """Every span of the traces `ids` (all their pages), checked."""
    q = r.q
    path = f"/v1/projects/{quote(q.project, safe='')}/spans"
    params: list[tuple[str, Any]] = [("limit", q.page_spans), ("sort", "start_time"), ("order", "asc"),
                                     *(("trace_id", t) for t in ids)]
    wanted, source = set(ids), q.describe()
    spans: list[SpanRecord] = []
    cursor, held = None, 0
    while True:
        doc, size = r.get(path, params + ([("cursor", cursor)] if cursor else []))
        held += size
        if held > q.max_batch_bytes:
            raise PhoenixError(f"{r.base}{path}: the spans of traces {ids[0]}.. are over "
                               f"{q.max_batch_bytes / 2**20:.0f} MiB; read fewer at a time (--batch-traces)")
        for s in doc["data"]:
            try:
                span = span_from_phoenix(s, source)
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
                ctx = s.get("context") if isinstance(s, dict) else None
                sid = ctx.get("span_id", "?") if isinstance(ctx, dict) else "?"
                problems.append(f"{source}: span {str(sid)[:40]}: unreadable ({type(exc).__name__}: "
                                f"{str(exc)[:200]}); span skipped")
                continue
            if OI_SPAN_KIND not in span.attributes and s.get("span_kind") not in (None, "", "UNKNOWN"):
                r.kinds_left_out += 1
            if span.trace_id not in wanted:
                raise PhoenixError(f"{r.base}{path}: Phoenix answered with spans of traces not asked for: it "
                                   "ignores the trace_id filter (Phoenix before 13.9?)")
            spans.append(span)
        nxt = doc.get("next_cursor")
        if not nxt or not doc["data"]:
            break
        if nxt == cursor:
            raise PhoenixError(f"{r.base}{path}: Phoenix gave the same cursor twice; stopped paging")
        cursor = str(nxt)
    spans = checked(spans, problems)
    break_cycles(spans, problems)
    return spans


def read_traces(q: PhoenixQuery, problems: list[str]) -> Iterator[list[SpanRecord]]:
    """Batches of whole traces from Phoenix, oldest first. Raises PhoenixError when nothing could
    be read (the first request failed); a later failure ends the read with a problem, and the
    batches already given stay given. `LOST` is added to `problems` once spans were read."""
    r = _Reader(q)
    read = 0
    try:
        for ids in _trace_pages(r):
            spans = _batch(r, ids, problems)
            read += len(ids)
            if spans:
                yield spans
    except PhoenixError as exc:
        if not read:
            raise
        problems.append(f"{exc}; the report covers the {read} trace(s) read before")
    if read:
        version = f" ({r.version})" if r.version else ""
        problems.append(f"{q.describe()}{version}: {LOST}")
    if r.kinds_left_out:
        problems.append(f"{q.describe()}: {r.kinds_left_out} span(s) with gen_ai.* attributes carry the "
                        "openinference.span.kind Phoenix derives from them at ingestion: read by their GenAI "
                        "attributes, that kind left out (Phoenix cannot say whether the instrumentation wrote it)")
