"""Synthetic traces with spans the columnar queries do not state, or state apart (`agenttrace bench
report --foreign N --own-spans SHARE --client-spans SHARE --chat-spans SHARE --long-horizon N`, issue 32's seventh,
eleventh and fifteenth parts):
other instrumentations' traces beside ours, a user's own spans of no known convention around ours,
and our own long-horizon agents' (compactions, sub-agents).

- `append_foreign`: the recorded framework traces (traces/frameworks/*.jsonl: OpenInference,
  OpenLLMetry, GenAI, ADK, ...; 1,027 spans, their messages included; `--no-delegations`: 687
  spans, without the traces that delegate to a sub-agent) appended `copies` times, each copy with
  fresh trace ids;
- `add_own_spans`: under a `share` of the spans, one child span named as a user's helper would be
  (no agenttrace.segment, no convention's marks), covering a part of its parent;
- `add_client_spans`: under a `share` of the generation and tool spans, an HTTP or database client
  span (OpenTelemetry's client conventions), as an agent's HTTP and database instrumentations add
  beside ours; `add_chat_spans`: under a `share` of the generations, the model client's own GenAI
  `chat` span; the table maps both itself (columnar/roles.py, issue 32's fifteenth part);
- `long_horizon_lines` with `append_copies`: the long-horizon demo's recording (3 tasks, 68 spans)
  appended `copies` times.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

FRAMEWORKS = Path(__file__).resolve().parents[2] / "traces" / "frameworks"
LONG_HORIZON = FRAMEWORKS.parent / "long_horizon"
OWN_NAMES = ("load_config", "db lookup", "cache.get")


def _spans(doc: dict):
    return (s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"])


def _files(path: Path) -> list[Path]:
    return sorted(path.glob("*.jsonl")) if path.is_dir() else [path]


def framework_lines(delegations: bool = True) -> list[str]:
    """The framework traces' lines, file by file; without `delegations`, only the traces whose
    task delegates to no sub-agent (each framework's recording has one that does)."""
    files = sorted(FRAMEWORKS.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"the framework traces in {FRAMEWORKS} (a checkout of the repository has them)")
    if delegations:
        return [line for f in files for line in f.read_text().splitlines() if line.strip()]
    from agenttrace.report.build import report_streamed

    out = []
    for f in files:
        keep = {t.trace_id for t in report_streamed([str(f)]).tasks if not (t.sub_agents or t.segments.delegation)}
        for line in f.read_text().splitlines():
            if line.strip():
                doc = json.loads(line)
                for rs in doc["resourceSpans"]:
                    for ss in rs["scopeSpans"]:
                        ss["spans"] = [s for s in ss["spans"] if s["traceId"] in keep]
                out.append(json.dumps(doc))
    return out


def long_horizon_lines() -> list[str]:
    """Our long-horizon demo's recording (traces/long_horizon: memory, a compaction, a coordinator
    with sub-agents), line by line."""
    files = sorted(LONG_HORIZON.glob("*.jsonl"))
    if not files:
        raise FileNotFoundError(f"the long-horizon demo's trace in {LONG_HORIZON} (a checkout of the repository has it)")
    return [line for f in files for line in f.read_text().splitlines() if line.strip()]


def append_foreign(path: Path, copies: int, seed: int = 7, delegations: bool = True) -> int:
    """The framework traces (framework_lines), `copies` times, after the trace file `path` (into a
    file of their own in a folder); the spans added."""
    return append_copies(path, framework_lines(delegations), copies, seed)


def append_copies(path: Path, lines: list[str], copies: int, seed: int = 7, name: str = "foreign.jsonl") -> int:
    """OTLP/JSON `lines`, `copies` times with fresh trace ids each, after the trace file `path`
    (into a file `name` of their own in a folder); the spans added."""
    rng = random.Random(seed)
    added = 0
    with (path / name if path.is_dir() else path).open("a") as out:
        for _ in range(copies):
            ids: dict[str, str] = {}
            for line in lines:
                doc = json.loads(line)
                for s in _spans(doc):
                    if s["traceId"] not in ids:
                        ids[s["traceId"]] = f"{rng.getrandbits(128):032x}"
                    s["traceId"] = ids[s["traceId"]]
                    added += 1
                out.write(json.dumps(doc) + "\n")
    return added


def add_children(path: Path, make, seed: int) -> int:
    """The trace file(s) at `path` rewritten in place with the child spans `make(rng, span)` gives
    each span (a list, empty for none), after the spans of its scope; the spans added."""
    rng = random.Random(seed)
    added = 0
    for f in _files(path):
        tmp = f.with_suffix(".tmp")
        with f.open() as src, tmp.open("w") as out:
            for line in src:
                if not line.strip():
                    continue
                doc = json.loads(line)
                for ss in (ss for rs in doc["resourceSpans"] for ss in rs["scopeSpans"]):
                    extra = [c for s in ss["spans"] for c in make(rng, s)]
                    ss["spans"] += extra
                    added += len(extra)
                out.write(json.dumps(doc, separators=(",", ":")) + "\n")
        os.replace(tmp, f)
    return added


def _child(rng: random.Random, parent: dict, name: str, kind: int, attributes: dict[str, str]) -> dict:
    """A span under `parent` covering the second quarter of it."""
    start, end = int(parent["startTimeUnixNano"]), int(parent["endTimeUnixNano"])
    return {"traceId": parent["traceId"], "spanId": f"{rng.getrandbits(64):016x}", "parentSpanId": parent["spanId"],
            "name": name, "kind": kind, "startTimeUnixNano": str(start + (end - start) // 4),
            "endTimeUnixNano": str(start + (end - start) // 2),
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]}


def add_own_spans(path: Path, share: float, seed: int = 1) -> int:
    """A child span of no convention under `share` of the spans of the trace file(s) at `path`,
    rewritten in place; the spans added."""
    return add_children(path, lambda rng, s: [_child(rng, s, rng.choice(OWN_NAMES), 1, {})] if rng.random() < share else [],
                         seed)


def _segment(span: dict) -> str | None:
    return next((a["value"].get("stringValue") for a in span.get("attributes", ()) if a["key"] == "agenttrace.segment"), None)


# What an HTTP or database client instrumentation (httpx, requests, a database driver's) writes
# under a model call (the request to the model server) and under a tool (its own requests).
_MODEL_REQUEST = ("POST", {"http.request.method": "POST", "url.full": "http://localhost:8000/v1/chat/completions",
                           "server.address": "localhost"})
_TOOL_CALLS = (("GET", {"http.request.method": "GET", "url.full": "https://api.example.com/v1/weather",
                        "server.address": "api.example.com"}),
               ("SELECT", {"db.system.name": "postgresql", "db.query.text": "SELECT * FROM notes WHERE id = $1"}))


# What the model client's own instrumentation writes under a model call of ours (the OpenAI
# client's, opentelemetry-instrumentation-openai-v2: GenAI before v1.37).
_CHAT = ("chat gpt-4o-mini", {"gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                              "gen_ai.request.model": "gpt-4o-mini", "server.address": "localhost"})


def add_chat_spans(path: Path, share: float, seed: int = 3) -> int:
    """The model client instrumentation's `chat` span (GenAI, kind CLIENT) under `share` of the
    generation spans of the trace file(s) at `path`, rewritten in place; the spans added."""
    def make(rng: random.Random, s: dict) -> list[dict]:
        if _segment(s) != "generation" or rng.random() >= share:
            return []
        return [_child(rng, s, _CHAT[0], 3, _CHAT[1])]

    return add_children(path, make, seed)


def add_client_spans(path: Path, share: float, seed: int = 2) -> int:
    """An HTTP or database client span (OpenTelemetry's client conventions, kind CLIENT: what an
    agent's HTTP and database instrumentations add beside ours) under `share` of the generation
    and tool spans of the trace file(s) at `path`, rewritten in place; the spans added."""
    def make(rng: random.Random, s: dict) -> list[dict]:
        segment = _segment(s)
        if segment not in ("generation", "tool") or rng.random() >= share:
            return []
        name, attributes = _MODEL_REQUEST if segment == "generation" else rng.choice(_TOOL_CALLS)
        return [_child(rng, s, name, 3, attributes)]

    return add_children(path, make, seed)
