"""A loopback fake of the part of Phoenix's REST API that `agenttrace report --phoenix` reads
(`GET /v1/projects`, `/v1/projects/{p}/traces`, `/v1/projects/{p}/spans`), serving spans in
the shape Phoenix 20 gives them (`as_phoenix`), with switches for the ways a server goes wrong:
slow, dripping, oversized, not JSON, a cursor that never moves, a filter it ignores, a key it
wants. Every request is recorded (path, query, headers) for the tests to read.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from agenttrace.traces.phoenix import phoenix_kind
from agenttrace.traces.span_records import SpanRecord


def with_fresh_ids(src: Path, dst: Path, salt: str) -> Path:
    """A copy of an OTLP/JSON trace file with every trace and span id (parents and links too)
    replaced by one derived from it and `salt`: Phoenix keeps a span id once across all projects,
    so a file sent to a second project must come with ids of its own."""
    def new(hex_id: str) -> str:
        return hashlib.sha256(f"{salt}:{hex_id}".encode()).hexdigest()[: len(hex_id)] if hex_id else hex_id

    lines = []
    for line in src.read_text().splitlines():
        doc = json.loads(line)
        for rs in doc.get("resourceSpans", ()):
            for ss in rs.get("scopeSpans", ()):
                for span in ss.get("spans", ()):
                    for holder in (span, *span.get("links", ())):
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if key in holder:
                                holder[key] = new(holder[key])
        lines.append(json.dumps(doc))
    dst.write_text("\n".join(lines) + "\n")
    return dst


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two report documents (`--format json`) differ beyond the microsecond Phoenix keeps
    (20 us of slack, for sums over several spans), leaving out what a Phoenix read cannot have:
    the run label and id (Phoenix keeps no resource), the source, problems, and the order of the
    span names listed as left out (the order spans arrived in)."""
    if isinstance(a, dict) and isinstance(b, dict):
        skip = ("run_label", "run_id", "label", "source", "sources", "problems", "names")
        return [d for k in sorted(set(a) | set(b)) if k not in skip for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return [] if abs(a - b) <= 20e-6 + 1e-5 * abs(a) else [f"{path}: {a} vs {b}"]
    return [] if a == b else [f"{path}: {a!r} vs {b!r}"]


def iso(ns: int) -> str:
    """Phoenix's time: a datetime of microseconds, rounded from the float ns / 1e9 as it ingests."""
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat()


def as_phoenix(s: SpanRecord) -> dict[str, Any]:
    """A span as Phoenix 20's `GET /v1/projects/{p}/spans` gives it back: no kind, resource, scope
    or links; the OpenInference kind it derives from gen_ai.* added, then moved to `span_kind`."""
    attrs = dict(s.attributes)
    kind = attrs.pop("openinference.span.kind", None) or phoenix_kind(attrs) or "UNKNOWN"
    return {
        "id": f"Span:{s.span_id}", "name": s.name, "context": {"trace_id": s.trace_id, "span_id": s.span_id},
        "span_kind": kind, "parent_id": s.parent_id, "start_time": iso(s.start_ns), "end_time": iso(s.end_ns),
        "status_code": s.status, "status_message": s.status_message, "attributes": attrs,
        "events": [{"name": e.name, "timestamp": iso(e.time_ns), "attributes": e.attributes} for e in s.events],
    }


@dataclass
class FakePhoenix:
    """What the fake serves and how it misbehaves (set the switches before the request)."""

    projects: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # name -> Phoenix spans
    requests: list[tuple[str, dict[str, list[str]], dict[str, str]]] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)  # the size of each answer's body
    api_key: str | None = None  # answer 401 unless this bearer token comes
    delay_s: float = 0.0  # wait this long before answering
    drip_s: float = 0.0  # send the body a byte at a time, this far apart
    oversize: int = 0  # answer this many bytes of JSON padding instead
    chunked: bool = False  # no Content-Length (the size bound must hold while reading)
    not_json: bool = False
    stuck_cursor: bool = False  # every page names the same next cursor
    ignore_trace_filter: bool = False
    old_server: bool = False  # no traces route: FastAPI's own 404
    fail_after: int | None = None  # answer HTTP 500 to every request after this many
    url: str = ""

    def add(self, project: str, spans: list[SpanRecord]) -> None:
        self.projects.setdefault(project, []).extend(as_phoenix(s) for s in spans)

    def traces(self, project: str) -> list[tuple[str, str]]:
        """(start time, trace id) of the project's traces, oldest first, as Phoenix orders them."""
        first: dict[str, str] = {}
        for s in self.projects[project]:
            t = s["context"]["trace_id"]
            first[t] = min(first.get(t, s["start_time"]), s["start_time"])
        return sorted((start, t) for t, start in first.items())

    def answer(self, path: str, q: dict[str, list[str]], headers: dict[str, str]) -> tuple[int, str, str]:
        """(status, content type, body) for one GET."""
        if self.fail_after is not None and len(self.requests) > self.fail_after:
            return 500, "text/plain", "Internal Server Error"
        if self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            return 401, "application/json", json.dumps({"detail": "Invalid token"})
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts == ["v1", "projects"]:
            return 200, "application/json", json.dumps({"data": [{"name": n} for n in self.projects],
                                                        "next_cursor": None})
        if len(parts) != 4 or parts[:2] != ["v1", "projects"] or (self.old_server and parts[3] == "traces"):
            return 404, "application/json", json.dumps({"detail": "Not Found"})
        project = parts[2]
        if project not in self.projects:
            return 404, "text/plain", f"Project with name {project} not found"
        limit, offset = int(q.get("limit", ["100"])[0]), int(q.get("cursor", ["0"])[0])
        if parts[3] == "traces":
            since, until = q.get("start_time", [None])[0], q.get("end_time", [None])[0]
            rows = [{"trace_id": t, "start_time": start} for start, t in self.traces(project)
                    if (since is None or _time(start) >= _time(since)) and (until is None or _time(start) < _time(until))]
        else:
            wanted = set(q.get("trace_id", []))
            rows = [s for s in self.projects[project]
                    if self.ignore_trace_filter or not wanted or s["context"]["trace_id"] in wanted]
        page = rows[offset: offset + limit]
        more = offset + limit < len(rows)
        cursor = "1" if self.stuck_cursor else str(offset + limit)
        return 200, "application/json", json.dumps({"data": page, "next_cursor": cursor if more else None})


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _handler(fake: FakePhoenix) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            q = parse_qs(parts.query)
            headers = {k.lower(): v for k, v in self.headers.items()}
            fake.requests.append((parts.path, q, headers))
            status, ctype, body = fake.answer(parts.path, q, headers)
            data = body.encode()
            if fake.not_json:
                data = b"<html>a proxy's error page</html>"
            if fake.oversize:
                data = b'{"data": [], "pad": "' + b"x" * fake.oversize + b'"}'
            fake.sent.append(len(data))
            time.sleep(fake.delay_s)
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("x-phoenix-server-version", "20.26.1")
                if not fake.chunked and not fake.drip_s:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if fake.drip_s:
                    for i in range(len(data)):
                        self.wfile.write(data[i: i + 1])
                        self.wfile.flush()
                        time.sleep(fake.drip_s)
                else:
                    self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the reader gave up, as it should

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def fake_phoenix() -> Iterator[FakePhoenix]:
    """A FakePhoenix listening on a free loopback port (its `url`), stopped on exit."""
    fake = FakePhoenix()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    server.daemon_threads = True
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
