"""A remote generation seen from both ends: the caller's CLIENT generation span with the model
server's SERVER generation span under it (joined through `traceparent`: a vLLM server's
`llm_request`, or `agenttrace serve`'s own span).

The caller waited for the whole client span; the server accounts for its part. So the client
span's time splits into network (the client span outside the server span: connection, request
and response transfer) and the server's span, which a vLLM server splits further by its
`gen_ai.latency.*`: queue, prefill, and the rest (decode, tokenizing, the hops between its
processes) as generation. The parts are synthetic child spans, so the segments still sum to the
client span's time. The two ends read different clocks: a server span that does not fit inside
its client span (clock skew) is moved, with its subtree, to the middle of it, and the move is
listed as a problem.
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.traces.conventions.vllm import latency_s
from agenttrace.traces.index import SpanIndex
from agenttrace.traces.span_records import SpanRecord

__all__ = ["NETWORK_SPLIT", "split_remote_generations"]

NETWORK_SPLIT = "network / server split of remote generations"
_QUEUE, _PREFILL, _NETWORK = "server queue", "server prefill", "network"


def _part(index: SpanIndex, parent: SpanRecord, tag: str, name: str, segment: str, start: int, end: int) -> None:
    index.add_synthetic(parent, f"{parent.span_id}.{tag}", parent.span_id, name, start, end,
                        {sc.SEGMENT: segment, sc.INFERRED: (NETWORK_SPLIT,)})


def _shift(index: SpanIndex, span: SpanRecord, delta: int) -> SpanRecord:
    for d in list(index.walk(span)):
        index.update(d, start_ns=d.start_ns + delta, end_ns=d.end_ns + delta)
    return index.update(span, start_ns=span.start_ns + delta, end_ns=span.end_ns + delta)


def _fit(index: SpanIndex, client: SpanRecord, server: SpanRecord, problems: list[str]) -> SpanRecord:
    if client.start_ns <= server.start_ns and server.end_ns <= client.end_ns:
        return server
    room = client.duration_ns - server.duration_ns
    if room < 0:  # longer than its caller's wait: only the clocks' rates can do that; clip it
        server = index.update(server, start_ns=client.start_ns, end_ns=client.end_ns)
        delta = 0
    else:
        delta = client.start_ns + room // 2 - server.start_ns
        server = _shift(index, server, delta)
    problems.append(f"{server.source}: server span {server.name!r} ({server.span_id}) did not fit inside its client span "
                    f"{client.name!r} (clock skew?); moved by {delta / 1e6:.3f} ms to its middle")
    return server


def _vllm_parts(index: SpanIndex, server: SpanRecord) -> None:
    """Queue and prefill inside vLLM's span, ending where its decode began (e2e after arrival,
    less the decode time); what is left of the span is generation."""
    queue, prefill = latency_s(server, sc.VLLM_TIME_IN_QUEUE), latency_s(server, sc.VLLM_TIME_IN_PREFILL)
    decode, e2e = latency_s(server, sc.VLLM_TIME_IN_DECODE) or 0.0, latency_s(server, sc.VLLM_E2E)
    if queue is None and prefill is None:
        return
    last_token = server.start_ns + round((e2e if e2e is not None else server.duration_ns / 1e9) * 1e9)
    cursor = min(server.end_ns, last_token) - round(decode * 1e9)
    for tag, name, segment, seconds in (("prefill", _PREFILL, sc.Segment.PREFILL, prefill),
                                        ("queue", _QUEUE, sc.Segment.QUEUE, queue)):
        if not seconds:
            continue
        start = max(server.start_ns, cursor - round(seconds * 1e9))
        if start < cursor:
            _part(index, server, tag, name, segment, start, cursor)
        cursor = start


def split_remote_generations(index: SpanIndex, problems: list[str]) -> None:
    """Split every client generation that has a server generation under it."""
    for client in list(index):
        if client.segment != sc.Segment.GENERATION or client.kind != "CLIENT":
            continue
        servers = [c for c in index.children(client) if c.segment == sc.Segment.GENERATION and c.kind == "SERVER"]
        if not servers:
            continue
        server = _fit(index, client, servers[0], problems)
        if server.name == sc.VLLM_SPAN_NAME or any(k.startswith(sc.VLLM_LATENCY_PREFIX) for k in server.attributes):
            _vllm_parts(index, server)
        for tag, start, end in (("net_out", client.start_ns, server.start_ns), ("net_back", server.end_ns, client.end_ns)):
            if end > start:
                _part(index, client, tag, _NETWORK, sc.Segment.NETWORK, start, end)
