"""The loopback OTLP/HTTP receiver of `agenttrace run`: what the program's processes export,
written as our trace file (one OTLP/JSON `ExportTraceServiceRequest` per line, SPANS.md "Files").

The conversion (`otlp_json_line`) is protobuf's own JSON mapping with the OTLP/JSON rules on
top: trace and span ids as hex, not base64; enums as integers. Each request is written and
flushed before it is answered, so once the program has exited (its exit flush waits for the
answers) the file holds every span it sent. A request the disk refuses (full, read-only) is
left out whole (telemetry/files.py), answered as a partial success that rejected its spans (the
program goes on, no retry storm), and said in one line, the recovery in another.
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from agenttrace.telemetry.exporters import lost_line
from agenttrace.telemetry.files import LineFile, reason

__all__ = ["Receiver", "otlp_json_line", "otlp_json_lines", "receiving"]

TRACES_PATH = "/v1/traces"
_IDS = ("traceId", "spanId", "parentSpanId")
MAX_BODY = 64 * 1024 * 1024  # one export request; the SDK's batches are far smaller


def _hex_ids(node: Any) -> Any:
    """Protobuf's JSON mapping writes bytes as base64; OTLP/JSON writes trace and span ids (of
    spans and of links) as hex."""
    if isinstance(node, dict):
        return {k: base64.b64decode(v).hex() if k in _IDS and isinstance(v, str) else _hex_ids(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def otlp_json_line(request: ExportTraceServiceRequest) -> str:
    """One ExportTraceServiceRequest as one OTLP/JSON line (no newline)."""
    from google.protobuf.json_format import MessageToDict

    return json.dumps(_hex_ids(MessageToDict(request, use_integers_for_enums=True)), separators=(",", ":"))


def otlp_json_lines(requests: Iterable[ExportTraceServiceRequest]) -> list[str]:
    """Each request as one OTLP/JSON line: the lines of our trace files."""
    return [otlp_json_line(r) for r in requests]


def span_count(request: ExportTraceServiceRequest) -> int:
    return sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)


@dataclass
class Receiver:
    """A running receiver: where to send (`endpoint`), where it writes (`path`, created with the
    first request that holds spans), and what came so far."""

    endpoint: str
    path: Path
    requests: int = 0
    spans: int = 0
    rejected: int = 0  # requests that were not OTLP protobuf (answered 400 or 415)
    services: set[str] = field(default_factory=set)  # service.name of every process that sent spans
    lost_requests: int = 0  # requests the disk refused (full, read-only): not in the file
    lost_spans: int = 0
    _file: LineFile | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _failing: bool = False
    _said: int = 0  # lines said about the disk: the first failure, the first recovery
    _why: str = ""  # why the last request was refused

    def write(self, request: ExportTraceServiceRequest) -> int:
        """Append the request's spans as one line; the count the disk refused (0, or all)."""
        n = span_count(request)
        if not n:
            return 0
        line = otlp_json_line(request)
        names = {a.value.string_value for rs in request.resource_spans for a in rs.resource.attributes
                 if a.key == "service.name"}
        with self._lock:
            if self._file is None:
                self._file = LineFile(self.path)  # created with the first request that holds spans
            try:
                self._file.append((line + "\n").encode("utf-8"))
            except OSError as exc:
                self.lost_requests += 1
                self.lost_spans += n
                self._say(f"could not write {self.path}: {reason(exc)}; the program goes on, and its spans are "
                          "lost until the disk takes them again", failing=True)
                self._why = reason(exc)
                return n
            if self._failing:
                self._say(f"{self.path} is written again; "
                          f"{lost_line(self.lost_requests, self.lost_spans, self._why)}", failing=False)
            self.requests += 1
            self.spans += n
            self.services |= names
            return 0

    def _say(self, text: str, *, failing: bool) -> None:
        """One line for the first failure and one for the first recovery; later ones are counted."""
        if failing != self._failing and self._said < 2:
            self._said += 1
            print(f"agenttrace run: {text}", file=sys.stderr, flush=True)
        self._failing = failing

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # the exporter keeps its connection alive
        disable_nagle_algorithm = True  # headers and body go apart: no 40 ms wait for a delayed ACK

        def do_POST(self) -> None:  # noqa: N802 (the http.server hook)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, MAX_BODY))
            if self.path.rstrip("/") != TRACES_PATH:
                return self._answer(404, b"only POST /v1/traces")
            if "json" in (self.headers.get("Content-Type") or ""):
                receiver.rejected += 1
                return self._answer(415, b"OTLP/HTTP protobuf only")
            try:
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
            except Exception:  # a malformed body is the sender's problem, answered, never raised
                receiver.rejected += 1
                return self._answer(400, b"not an ExportTraceServiceRequest")
            answer = ExportTraceServiceResponse()
            refused = receiver.write(request)
            if refused:  # OTLP's partial success: the sender logs nothing and does not retry
                answer.partial_success.rejected_spans = refused
                answer.partial_success.error_message = "the trace file could not be written"
            self._answer(200, answer.SerializeToString())

        def _answer(self, status: int, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/x-protobuf" if status == 200 else "text/plain")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:  # the program's terminal is not our log
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a connection the program left open does not hold our exit


@contextmanager
def receiving(path: Path) -> Iterator[Receiver]:
    """An OTLP/HTTP receiver on 127.0.0.1 (a free port) writing to `path` while the block runs."""
    server = _Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
    receiver = Receiver(endpoint=f"http://127.0.0.1:{server.server_address[1]}{TRACES_PATH}", path=path)
    server.RequestHandlerClass = _handler(receiver)
    thread = threading.Thread(target=server.serve_forever, name="agenttrace-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        receiver.close()
