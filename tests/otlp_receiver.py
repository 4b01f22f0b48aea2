"""In-process OTLP receivers (HTTP/protobuf and gRPC) on loopback, for replay and export tests.

Each keeps the ExportTraceServiceRequests it accepted; the HTTP one can be told to answer the
next requests with given status codes (to exercise the exporter's retry and failure paths).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span


@dataclass
class Received:
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answers to give next (HTTP), then 200
    attempts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spans(self) -> list[tuple[bytes, bytes, Span]]:
        """(resource attributes, scope name, span) for every span received, in order."""
        out = []
        for request in self.requests:
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        out.append((rs.resource.SerializeToString(), ss.scope.name.encode(), span))
        return out


@contextmanager
def http_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/HTTP protobuf receiver at http://127.0.0.1:<port> (POST /v1/traces)."""
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the http.server API)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with received.lock:
                received.attempts += 1
                status = received.statuses.pop(0) if received.statuses else 200
            if self.path != "/v1/traces":
                status = 404
            if status == 200:
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with received.lock:
                    received.requests.append(request)
            payload = ExportTraceServiceResponse().SerializeToString() if status == 200 else b"refused"
            self.send_response(status)
            if status in (429, 503):
                self.send_header("Retry-After", "0")  # retry at once: keeps the test fast
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def grpc_receiver() -> Iterator[tuple[str, Received]]:
    """An OTLP/gRPC receiver at http://127.0.0.1:<port> (insecure)."""
    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    received = Received()

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: N802 (the generated gRPC API)
            with received.lock:
                received.attempts += 1
                received.requests.append(request)
            return ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", received
    finally:
        server.stop(grace=None)
