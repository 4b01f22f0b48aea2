"""Trace files from real agent runs on a scripted model and a fake clock, with everything a
replay or conversion must carry: errors, speculation events, a remote parent, trace state, a link."""

from __future__ import annotations

from pathlib import Path

from opentelemetry import trace
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
)

from agenttrace import Agent, FakeClock, Task, Telemetry
from agenttrace.testing import ScriptedModel, ScriptedReply
from agenttrace.examples.tools import default_tools

CALL = '{"tool": "calculator", "arguments": {"expression": "2+2"}}'
ANSWER = '{"answer": "4"}'
REMOTE_TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
REMOTE_SPAN_ID = 0xB7AD6B7169203331
LINKED = SpanContext(0x11111111111111112222222222222222, 0x3333333333333333, is_remote=True)


def record_agent_run(path: Path, *, detail: str = "default", extra_exporters=()) -> Telemetry:
    """Run a 2-step task (a parse error, a speculated tool call, an answer) and record it to
    `path`; then one more span as a server would record it: a remote parent with trace state,
    kind SERVER, a link with attributes, status OK. Returns the shut-down telemetry."""
    clock = FakeClock()
    tel = Telemetry(
        clock=clock, trace_file=path, synchronous=True, service_name="replay-test", run_label="baseline",
        detail=detail, exporters=list(extra_exporters),  # type: ignore[arg-type]
    )
    replies = [
        ScriptedReply("no json here"),
        ScriptedReply(CALL, rounds=((3, 2, 0.01, 0.02), (3, 3, 0.01, 0.02))),
        ScriptedReply(ANSWER),
    ]
    model = ScriptedModel(replies, clock, method="prompt_lookup", num_speculative_tokens=3)
    Agent(model, default_tools(), telemetry=tel).run(Task(id="t1", prompt="What is 2+2?"))

    remote = SpanContext(
        REMOTE_TRACE_ID, REMOTE_SPAN_ID, is_remote=True, trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "v1")]),
    )
    start = clock.now_ns()
    span = tel.tracer.start_span(
        "handle request", context=trace.set_span_in_context(NonRecordingSpan(remote)), kind=SpanKind.SERVER,
        links=[Link(LINKED, {"link.reason": "batch"})], start_time=start,
        attributes={"agenttrace.segment": "network", "http.request.method": "POST", "big.number": 2**60},
    )
    span.set_status(trace.Status(trace.StatusCode.OK))
    span.end(end_time=clock.advance_s(0.25))
    tel.shutdown()
    return tel
