"""A seeded corpus of malformed and adversarial trace files (issue 19), for tests/traces/test_fuzz_traces.py.

`build_corpus(folder, seed)` writes the files and returns them with the kind of damage each
carries. Every file starts from a real recorded task (traces/samples/) or a small Jaeger trace and
breaks one thing: nesting depth, a number's range or finiteness, an `agenttrace.*` attribute's
type, the parent links, span ids, timestamps, the text encoding or the file itself. Raw JSON
tokens that `json.dumps` cannot write (1e400, 10k-deep nesting, lone surrogate escapes) go in
through placeholders replaced after dumping.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAMPLES = Path(__file__).resolve().parent.parent / "traces" / "samples"

# Number tokens, as they appear in the JSON text: non-finite, out of every range, or too long for
# Python's int() (over 4300 digits).
BAD_NUMBERS = ["Infinity", "-Infinity", "NaN", "1e400", "-1e400", "1e300", "9" * 40, "-" + "9" * 40,
               str(2**64), str(-(2**63) - 1), "9" * 5000, "1.5", "-1", "0"]
# Wrong types for an attribute value (OTLP AnyValue) whose key is agenttrace.*.
WRONG_VALUES: list[dict[str, Any]] = [
    {"stringValue": "three"}, {"stringValue": ""}, {"intValue": "7"}, {"intValue": "-5"}, {"doubleValue": 2.5},
    {"boolValue": True}, {"arrayValue": {"values": [{"intValue": "1"}, {"stringValue": "x"}]}},
    {"kvlistValue": {"values": [{"key": "a", "value": {"intValue": "1"}}]}}, {"bytesValue": "AAEC"}, {},
    {"intValue": "__RAW__"}, {"doubleValue": "__RAW__"},
]


@dataclass(frozen=True)
class Case:
    path: Path
    kind: str  # what is wrong with it, for failure messages


def _base_requests() -> list[dict[str, Any]]:
    lines = []
    for f in sorted(SAMPLES.glob("*.jsonl")):
        lines += [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines()[:2] if line.strip()]
    return lines


def _spans(req: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in req["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def _agent(spans: list[dict[str, Any]]) -> int:
    """The index of the agent span (the task), else of the first span."""
    return next((i for i, s in enumerate(spans) if any(a["value"].get("stringValue") == "agent" for a in s["attributes"])), 0)


def _attr_keys(reqs: list[dict[str, Any]]) -> list[str]:
    keys = {a["key"] for r in reqs for s in _spans(r) for a in s.get("attributes", ())}
    keys |= {a["key"] for r in reqs for rs in r["resourceSpans"] for a in rs["resource"]["attributes"]}
    return sorted(k for k in keys if k.startswith("agenttrace.") or k.startswith("gen_ai."))


def _nested(depth: int, kind: str) -> str:
    """An AnyValue nested `depth` deep, as JSON text (json.dumps would recurse that deep)."""
    if kind == "kvlist":
        head, tail = '{"kvlistValue":{"values":[{"key":"k","value":', "}]}}"
    else:
        head, tail = '{"arrayValue":{"values":[', "]}}"
    return head * depth + '{"intValue":"1"}' + tail * depth


def _jaeger_base(n: int = 6) -> dict[str, Any]:
    trace = "a1" * 16
    spans = []
    for i in range(n):
        segment = ["agent", "step", "attempt", "generation", "tool", "parse"][i % 6]
        spans.append({
            "traceID": trace, "spanID": f"{i + 1:016x}", "operationName": f"{segment} {i}",
            "references": [{"refType": "CHILD_OF", "traceID": trace, "spanID": f"{i:016x}"}] if i else [],
            "startTime": 1_700_000_000_000_000 + i * 10, "duration": 1000 - i * 100, "processID": "p1",
            "tags": [{"key": "agenttrace.segment", "type": "string", "value": segment},
                     {"key": "agenttrace.step.index", "type": "int64", "value": 1},
                     {"key": "span.kind", "type": "string", "value": "internal"}],
            "logs": [{"timestamp": 1_700_000_000_000_000 + i * 10 + 5,
                      "fields": [{"key": "event", "type": "string", "value": "e"}]}],
        })
    return {"data": [{"traceID": trace, "spans": spans, "processes": {"p1": {"serviceName": "svc", "tags": []}}}]}


class _Writer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cases: list[Case] = []

    def text(self, kind: str, text: str | bytes, suffix: str = ".jsonl") -> None:
        path = self.folder / f"{len(self.cases):04d}-{kind.split(':')[0].replace(' ', '_')}{suffix}"
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8", errors="surrogatepass")
        self.cases.append(Case(path, kind))

    def doc(self, kind: str, doc: Any, raw: str = "") -> None:
        """`doc` as one JSON line; every "__RAW__" string in it becomes the raw token `raw`."""
        self.text(kind, json.dumps(doc).replace('"__RAW__"', raw))


def build_corpus(folder: Path, seed: int = 19) -> list[Case]:
    """Write the corpus into `folder`; at least 500 files, the same ones for the same seed."""
    rng = random.Random(seed)
    reqs = _base_requests()
    keys = _attr_keys(reqs)
    w = _Writer(folder)

    def mutate(kind: str, fn: Callable[[dict[str, Any], list[dict[str, Any]]], None], raw: str = "") -> None:
        req = copy.deepcopy(rng.choice(reqs))
        fn(req, _spans(req))
        w.doc(kind, req, raw)

    # Deep nesting of attribute values (RecursionError in the decoders or in json itself).
    for depth in (50, 999, 1500, 10_000, 30_000):
        for kind in ("kvlist", "array"):
            req = copy.deepcopy(reqs[0])
            _spans(req)[0]["attributes"].append({"key": "deep", "value": "__RAW__"})
            w.doc(f"deep {kind} {depth}", req, _nested(depth, kind))
    req = copy.deepcopy(reqs[0])
    _spans(req)[0]["events"] = [{"name": "e", "timeUnixNano": "1", "attributes": [{"key": "d", "value": "__RAW__"}]}]
    w.doc("deep event attribute", req, _nested(10_000, "kvlist"))
    w.text("deep plain json", "[" * 100_000 + "]" * 100_000)

    # Bad numbers in times, kinds, flags, status codes, attribute values and event times.
    fields = ["startTimeUnixNano", "endTimeUnixNano", "kind", "flags"]
    for number in BAD_NUMBERS:
        for field in fields:
            mutate(f"number {field}={number[:12]}", lambda r, ss, f=field: ss[rng.randrange(len(ss))].__setitem__(f, "__RAW__"),
                   number)
            mutate(f"number-string {field}={number[:12]}",
                   lambda r, ss, f=field, n=number: ss[rng.randrange(len(ss))].__setitem__(f, n))
        mutate(f"number status={number[:12]}", lambda r, ss: ss[0].__setitem__("status", {"code": "__RAW__"}), number)
        mutate(f"number event time={number[:12]}", lambda r, ss: ss[0].__setitem__(
            "events", [{"name": "e", "timeUnixNano": "__RAW__"}]), number)
        for vtype in ("intValue", "doubleValue"):
            key = rng.choice(keys)
            mutate(f"number {key} {vtype}={number[:12]}", lambda r, ss, k=key, t=vtype: [
                s["attributes"].append({"key": k, "value": {t: "__RAW__"}}) for s in ss], number)
        mutate(f"number id={number[:12]}", lambda r, ss: ss[1].__setitem__("spanId", "__RAW__"), number)
        mutate(f"number parent id={number[:12]}", lambda r, ss: ss[1].__setitem__("parentSpanId", "__RAW__"), number)

    # Wrong-typed agenttrace.* (and gen_ai.*) attributes, on every span that has them.
    for key in keys:
        for value in rng.sample(WRONG_VALUES, 5):
            def put(r: dict[str, Any], ss: list[dict[str, Any]], k: str = key, v: dict[str, Any] = value) -> None:
                for attrs in [s["attributes"] for s in ss] + [rs["resource"]["attributes"] for rs in r["resourceSpans"]]:
                    for a in attrs:
                        if a["key"] == k:
                            a["value"] = v
            mutate(f"wrong type {key}={json.dumps(value)[:30]}", put, rng.choice(BAD_NUMBERS))
    for label in ({"intValue": "7"}, {"doubleValue": 1.5}, {"boolValue": False}, {"arrayValue": {"values": []}}):
        def relabel(r: dict[str, Any], ss: list[dict[str, Any]], v: dict[str, Any] = label) -> None:
            for a in r["resourceSpans"][0]["resource"]["attributes"]:
                if a["key"] == "agenttrace.run.label":
                    a["value"] = v
        mutate(f"run label {label}", relabel)

    # Parent cycles and self-parents.
    for n in range(12):
        def cycle(r: dict[str, Any], ss: list[dict[str, Any]], n: int = n) -> None:
            picks = rng.sample(range(len(ss)), min(len(ss), 2 + n % 4))
            if n % 3 == 0:  # the agent span itself in the cycle
                picks[0] = _agent(ss)
            for a, b in zip(picks, picks[1:] + picks[:1], strict=True):
                ss[a]["parentSpanId"] = ss[b]["spanId"]
        mutate(f"parent cycle {n}", cycle)

        def self_parent(r: dict[str, Any], ss: list[dict[str, Any]], n: int = n) -> None:
            i = rng.randrange(len(ss)) if n % 2 else _agent(ss)
            ss[i]["parentSpanId"] = ss[i]["spanId"]
        mutate(f"self parent {n}", self_parent)

    # Spans sharing one id (the renaming was quadratic).
    for count in (2, 500, 20_000):
        req = copy.deepcopy(reqs[0])
        template = _spans(req)[0]
        req["resourceSpans"][0]["scopeSpans"][0]["spans"] = [
            {**template, "spanId": "00000000000000aa", "name": f"dup {i}"} for i in range(count)]
        w.doc(f"shared id x{count}", req)
    mutate("all ids equal", lambda r, ss: [s.__setitem__("spanId", "00000000000000bb") for s in ss])

    # Zero, negative, reversed timestamps.
    for value in ("0", "-1", "-1700000000000000000", 0, -5, "", None):
        for field in ("startTimeUnixNano", "endTimeUnixNano"):
            mutate(f"timestamp {field}={value!r}", lambda r, ss, f=field, v=value: [s.__setitem__(f, v) for s in ss])
    mutate("reversed times", lambda r, ss: [s.update(startTimeUnixNano=s["endTimeUnixNano"],
                                                     endTimeUnixNano=s["startTimeUnixNano"]) for s in ss])

    # Lone surrogates (as JSON escapes), null and numeric names, odd ids and keys.
    for where in ("name", "attribute", "key", "resource", "event", "status", "scope", "id"):
        def surrogate(r: dict[str, Any], ss: list[dict[str, Any]], where: str = where) -> None:
            s = ss[rng.randrange(len(ss))]
            if where == "name":
                s["name"] = "__SURR__"
            elif where == "attribute":
                for a in s["attributes"]:
                    if "stringValue" in a["value"]:
                        a["value"]["stringValue"] = "__SURR__"
            elif where == "key":
                s["attributes"].append({"key": "__SURR__", "value": {"stringValue": "x"}})
            elif where == "resource":
                for a in r["resourceSpans"][0]["resource"]["attributes"]:
                    a["value"] = {"stringValue": "__SURR__"}
            elif where == "event":
                s["events"] = [{"name": "__SURR__", "timeUnixNano": s["startTimeUnixNano"],
                                "attributes": [{"key": "m", "value": {"stringValue": "__SURR__"}}]}]
            elif where == "status":
                s["status"] = {"code": 2, "message": "__SURR__"}
            elif where == "scope":
                r["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] = "__SURR__"
            else:
                s["spanId"] = "__SURR__"
        for escape in ("\\ud800", "\\udfff", "a\\udc00b", "\\ud83d"):
            req = copy.deepcopy(rng.choice(reqs))
            surrogate(req, _spans(req))
            w.text(f"surrogate {where} {escape}", json.dumps(req).replace("__SURR__", escape))
    for name in (None, 7, 1.5, True, [], {}, "", "x" * 10_000):
        mutate(f"name {str(name)[:10]}", lambda r, ss, v=name: [s.__setitem__("name", v) for s in ss])

    # Wrong shapes of the containers themselves.
    shapes: list[tuple[str, Callable[[dict[str, Any], list[dict[str, Any]]], None]]] = [
        ("attributes a dict", lambda r, ss: ss[0].__setitem__("attributes", {"a": 1})),
        ("attributes a string", lambda r, ss: ss[0].__setitem__("attributes", "abc")),
        ("attribute a number", lambda r, ss: ss[0]["attributes"].append(5)),
        ("attribute key a number", lambda r, ss: ss[0]["attributes"].append({"key": 5, "value": {"intValue": 1}})),
        ("attribute value a list", lambda r, ss: ss[0]["attributes"].append({"key": "k", "value": [1]})),
        ("string value a dict", lambda r, ss: ss[0]["attributes"].append({"key": "k", "value": {"stringValue": {}}})),
        ("events a dict", lambda r, ss: ss[0].__setitem__("events", {"a": 1})),
        ("event a string", lambda r, ss: ss[0].__setitem__("events", ["e"])),
        ("links a string", lambda r, ss: ss[0].__setitem__("links", "abc")),
        ("link ids bad", lambda r, ss: ss[0].__setitem__("links", [{"traceId": 5, "spanId": []}])),
        ("status a string", lambda r, ss: ss[0].__setitem__("status", "ERROR")),
        ("status code unknown", lambda r, ss: ss[0].__setitem__("status", {"code": "STATUS_CODE_WHAT"})),
        ("kind unknown", lambda r, ss: ss[0].__setitem__("kind", "SPAN_KIND_WHAT")),
        ("kind a list", lambda r, ss: ss[0].__setitem__("kind", [1])),
        ("span a list", lambda r, ss: r["resourceSpans"][0]["scopeSpans"][0]["spans"].append([1, 2])),
        ("spans a dict", lambda r, ss: r["resourceSpans"][0]["scopeSpans"][0].__setitem__("spans", {"a": 1})),
        ("scope a string", lambda r, ss: r["resourceSpans"][0]["scopeSpans"][0].__setitem__("scope", "x")),
        ("resource a list", lambda r, ss: r["resourceSpans"][0].__setitem__("resource", [1])),
        ("trace id short", lambda r, ss: [s.__setitem__("traceId", "abc") for s in ss]),
        ("trace id missing", lambda r, ss: [s.pop("traceId") for s in ss]),
        ("span id missing", lambda r, ss: ss[0].pop("spanId")),
        ("trace id number", lambda r, ss: [s.__setitem__("traceId", 12345) for s in ss]),
        ("trace state bad", lambda r, ss: ss[0].__setitem__("traceState", 5)),
        ("bytes value bad", lambda r, ss: ss[0]["attributes"].append({"key": "b", "value": {"bytesValue": "!!"}})),
        ("bool value a string", lambda r, ss: ss[0]["attributes"].append({"key": "b", "value": {"boolValue": "no"}})),
        ("dropped count bad", lambda r, ss: ss[0].__setitem__("droppedAttributesCount", "x")),
    ]
    for kind, fn in shapes:
        mutate(kind, fn)

    # Files that are not traces at all.
    w.text("empty", "")
    w.text("blank lines", "\n\n  \n")
    w.text("json null", "null\n")
    w.text("json number", "5\n")
    w.text("json string", '"x"\n')
    w.text("json list of numbers", "[1, 2, 3]\n")
    w.text("empty object", "{}\n")
    w.text("empty request", '{"resourceSpans": []}\n')
    w.text("request null", '{"resourceSpans": null}\n')
    w.text("request a string", '{"resourceSpans": "x"}\n')
    for n in range(20):
        w.text(f"random bytes {n}", rng.randbytes(rng.choice((1, 17, 300, 5000))))
    whole = json.dumps(reqs[0])
    for cut in sorted(rng.sample(range(1, len(whole)), 20)):
        w.text(f"truncated at {cut}", whole[:cut])
    w.text("truncated pretty", json.dumps(reqs[0], indent=2)[: len(whole) // 2], suffix=".json")
    w.text("utf-16", whole.encode("utf-16"))
    w.text("latin-1 bytes", whole.replace("prefill", "pr\xe9fill").encode("latin-1"))
    w.text("nul bytes", whole[:100] + "\x00" * 50 + whole[100:])

    # Jaeger JSON with the same kinds of damage.
    jfields = ["startTime", "duration"]
    for number in BAD_NUMBERS:
        for field in jfields:
            doc = _jaeger_base()
            doc["data"][0]["spans"][rng.randrange(6)][field] = "__RAW__"
            w.doc(f"jaeger {field}={number[:12]}", doc, number)
            doc = _jaeger_base()
            doc["data"][0]["spans"][rng.randrange(6)][field] = number
            w.doc(f"jaeger string {field}={number[:12]}", doc)
        for tag_type in ("int64", "float64"):
            doc = _jaeger_base()
            doc["data"][0]["spans"][2]["tags"].append({"key": "agenttrace.attempt.index", "type": tag_type, "value": "__RAW__"})
            w.doc(f"jaeger tag {tag_type}={number[:12]}", doc, number)
        doc = _jaeger_base()
        doc["data"][0]["spans"][1]["logs"][0]["timestamp"] = "__RAW__"
        w.doc(f"jaeger log time={number[:12]}", doc, number)
    for value in ("three", [1, 2], {"a": 1}, None, "", True):
        doc = _jaeger_base()
        for s in doc["data"][0]["spans"]:
            s["tags"][1] = {"key": "agenttrace.step.index", "type": "int64", "value": value}
        w.doc(f"jaeger bad int64 tag {value!r}"[:40], doc)
        doc = _jaeger_base()
        for s in doc["data"][0]["spans"]:
            s["tags"][1] = {"key": "agenttrace.step.index", "type": "string", "value": value}
        w.doc(f"jaeger string step index {value!r}"[:40], doc)
    for kind, fn in [
        ("jaeger cycle", lambda d: d["data"][0]["spans"][0].__setitem__(
            "references", [{"refType": "CHILD_OF", "traceID": "a1" * 16, "spanID": f"{6:016x}"}])),
        ("jaeger self parent", lambda d: d["data"][0]["spans"][0].__setitem__(
            "references", [{"refType": "CHILD_OF", "traceID": "a1" * 16, "spanID": f"{1:016x}"}])),
        ("jaeger span id missing", lambda d: d["data"][0]["spans"][0].pop("spanID")),
        ("jaeger trace id missing", lambda d: d["data"][0]["spans"][0].pop("traceID")),
        ("jaeger spans a dict", lambda d: d["data"][0].__setitem__("spans", {"a": 1})),
        ("jaeger span a number", lambda d: d["data"][0]["spans"].append(5)),
        ("jaeger tags a dict", lambda d: d["data"][0]["spans"][0].__setitem__("tags", {"a": 1})),
        ("jaeger tag a string", lambda d: d["data"][0]["spans"][0].__setitem__("tags", ["a"])),
        ("jaeger references a string", lambda d: d["data"][0]["spans"][1].__setitem__("references", "x")),
        ("jaeger processes a list", lambda d: d["data"][0].__setitem__("processes", [1])),
        ("jaeger process a string", lambda d: d["data"][0].__setitem__("processes", {"p1": "x"})),
        ("jaeger binary bad", lambda d: d["data"][0]["spans"][0]["tags"].append({"key": "b", "type": "binary", "value": "!"})),
        ("jaeger name null", lambda d: [s.__setitem__("operationName", None) for s in d["data"][0]["spans"]]),
        ("jaeger logs a string", lambda d: d["data"][0]["spans"][0].__setitem__("logs", "x")),
        ("jaeger data of numbers", lambda d: d.__setitem__("data", [1, 2])),
        ("jaeger warnings a number", lambda d: d["data"][0].__setitem__("warnings", 5)),
        ("jaeger errors a number", lambda d: d.__setitem__("errors", 5)),
        ("jaeger shared id", lambda d: [s.__setitem__("spanID", "00000000000000cc") for s in d["data"][0]["spans"]]),
        ("jaeger deep value", lambda d: d["data"][0]["spans"][0]["tags"].append({"key": "x", "type": "string",
                                                                                  "value": "__RAW__"})),
    ]:
        doc = _jaeger_base()
        fn(doc)
        w.doc(kind, doc, "[" * 20_000 + "]" * 20_000)
    doc = _jaeger_base()
    w.text("jaeger surrogate", json.dumps(doc).replace("agent 0", "\\ud800").replace('"svc"', '"\\udfff"'))
    doc = _jaeger_base(20_000)
    for i, s in enumerate(doc["data"][0]["spans"]):
        s["spanID"] = "00000000000000dd"
        if i:  # one task of 20k spans (thousands of tasks would time the terminal renderer instead)
            s["tags"][0]["value"] = "generation"
    w.doc("jaeger shared id x20000", doc)
    return w.cases
