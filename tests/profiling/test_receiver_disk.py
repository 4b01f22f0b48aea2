"""`agenttrace run`'s receiver on a disk that refuses its trace file (issue 31, item 7): the
program's requests are answered (a partial success rejecting their spans, so it neither fails nor
retries), the loss is said in one line and the recovery in another, and the file holds whole
lines only."""

from __future__ import annotations

import json
import urllib.request

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from agenttrace.profiling.receiver import Receiver, receiving


def _request(spans: int) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for i in range(spans):
        span = scope.spans.add()
        span.trace_id, span.span_id, span.name = b"\x01" * 16, bytes([0] * 7 + [i + 1]), f"s{i}"
    return request


def test_refused_requests_are_counted_said_once_and_the_file_goes_on_when_the_disk_does(tmp_path, capsys):
    blocker = tmp_path / "out"
    blocker.write_text("")  # a file where the trace folder should be: refused, for root too
    receiver = Receiver(endpoint="unused", path=blocker / "run.jsonl")
    assert [receiver.write(_request(2)) for _ in range(3)] == [2, 2, 2]
    blocker.unlink()  # the disk takes writes again
    assert [receiver.write(_request(3)) for _ in range(2)] == [0, 0]
    receiver.close()
    assert (receiver.lost_requests, receiver.lost_spans, receiver.requests, receiver.spans) == (3, 6, 2, 6)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"agenttrace run: could not write {receiver.path}: ") and "Traceback" not in lines[0]
    assert "is written again; 3 batches / 6 spans lost to: " in lines[1]
    written = [json.loads(line) for line in receiver.path.read_text().splitlines()]
    assert len(written) == 2


def test_a_refused_request_is_answered_as_a_partial_success(tmp_path, capsys):
    blocker = tmp_path / "out"
    blocker.write_text("")
    with receiving(blocker / "run.jsonl") as receiver:
        post = urllib.request.Request(receiver.endpoint, data=_request(4).SerializeToString(),
                                      headers={"Content-Type": "application/x-protobuf"})
        with urllib.request.urlopen(post, timeout=10) as answer:
            assert answer.status == 200
            response = ExportTraceServiceResponse.FromString(answer.read())
    assert response.partial_success.rejected_spans == 4
    assert receiver.lost_spans == 4 and receiver.spans == 0
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
