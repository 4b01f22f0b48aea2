"""Other instrumentations' spans mapped in the query (columnar/roles.py): the SQL gives every span
the role `classify` gives it, from files and from a store; traces whose foreign spans are all
leaves (client calls, retrievals, left-out spans) stay with the queries and give the per-span
path's report byte for byte; the rest are routed to the per-span code."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

pytest.importorskip("chdb")

from trace_builder import any_value

from agenttrace.bench.mixed import add_children, add_client_spans
from agenttrace.cli import main
from agenttrace.columnar import roles
from agenttrace.columnar.engine import Engine, report_files, report_store
from agenttrace.report.build import report_clickhouse, report_streamed
from agenttrace.traces.clickhouse import ClickHouseQuery, connect
from agenttrace.traces.clickhouse_read import read_traces
from agenttrace.traces.conventions import classify
from agenttrace.traces.load import load_spans

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "traces" / "samples"
FRAMEWORKS = ROOT / "traces" / "frameworks"

# Attribute sets that reach each branch of each convention's role, and its neighbours.
_KINDS_OI = ["LLM", "llm", "CHAIN", "RETRIEVER", "retriever", "EMBEDDING", "reranker", "GUARDRAIL", "EVALUATOR", "PROMPT",
             "AGENT", "TOOL", "WEIRD", "it's", "straße", "ß", "", 5, True]
_OPS = ["chat", "text_completion", "generate_content", "execute_tool", "invoke_agent", "invoke_workflow", "search_memory",
        "create_memory", "retrieval", "embeddings", "create_agent", "plan", "new_op", "o'p", "sé", 7, False]
_SETS = [
    {}, {"user.helper": "x"},
    *({"openinference.span.kind": k} for k in _KINDS_OI),
    *({"traceloop.span.kind": k} for k in ["workflow", "agent", "task", "tool", "other", 'a"b', "q'", 1]),
    {"llm.request.type": "embedding"}, {"llm.request.type": "chat"}, {"llm.request.type": 3}, {"gen_ai.is_streaming": True},
    {"llm.usage.total_tokens": 3}, {"llm.is_streaming": False}, {"gen_ai.openai.api_base": "http://x"},
    *({"gen_ai.operation.name": op} for op in _OPS),
    {"gen_ai.provider.name": "openai"}, {"gen_ai.system": "openai"}, {"gen_ai.request.model": "m"},
    {"logfire.msg": "x", "agent_name": "a"}, {"logfire.msg": "x", "pydantic_ai.tool.failure_stage": "validation"},
    {"logfire.msg": "x"},
    {"gcp.vertex.agent.llm_request": "{}"}, {"gen_ai.tool.name": "(merged tools)"}, {"gen_ai.tool.name": "get_weather"},
    {"http.request.method": "GET"}, {"http.method": "GET"}, {"db.system": "redis"}, {"db.system.name": "postgresql"},
    {"rpc.system": "grpc"}, {"gen_ai.latency.e2e": 0.5}, {"gen_ai.latency.time_in_queue": 0.1},
]
_NAMES = ["x", "it's", 'say "hi"', "ünï", "back\\slash", "openai.chat", "openai.embeddings", "vendor.completions", ".chat",
          "llm_request", "call_llm", "running tools", "running tool", "agent run", "chat gpt-4o", "execute_tool search"]
_SCOPES = ["", "gcp.vertex.agent", "openinference.instrumentation.google_adk", "pydantic-ai",
           "opentelemetry.instrumentation.openai.v1", "openinference.instrumentation.langchain", "my.app"]
_SPAN_KINDS = [1, 2, 3, "SPAN_KIND_CLIENT", "SPAN_KIND_INTERNAL"]


def _crafted(path: Path, n: int, seed: int = 3) -> Path:
    """`n` root spans, each with the attributes of one to three of the sets above, a name, a
    scope and a kind drawn at random: every branch of every role, and sets meeting each other."""
    rng = random.Random(seed)
    lines = []
    for t in range(n // 50):
        by_scope: dict[str, list] = {}
        for k in range(50):
            attrs: dict = {}
            for s in rng.sample(_SETS, rng.choice((1, 1, 2, 3))):
                attrs.update(s)
            start = 1_700_000_000_000_000_000 + (t * 50 + k) * 1000
            by_scope.setdefault(rng.choice(_SCOPES), []).append({
                "traceId": f"{t + 1:032x}", "spanId": f"{t * 50 + k + 1:016x}", "name": rng.choice(_NAMES),
                "kind": rng.choice(_SPAN_KINDS), "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 500),
                "attributes": [{"key": key, "value": any_value(v)} for key, v in attrs.items()]})
        lines.append(json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [
            {"scope": {"name": scope} if scope else {}, "spans": spans} for scope, spans in by_scope.items()]}]}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _sql_roles(engine: Engine) -> dict[tuple[str, str], tuple]:
    """The roles the engine found as it loaded its spans."""
    got, _ = engine.table("SELECT s.trace_id AS t, s.span_id AS s, r.convention AS c, r.segment AS g, r.reason AS r, "
                          "r.variant AS v, r.route AS route FROM roles AS r JOIN spans AS s ON s.i = r.i")
    return {(t, s): (c, g, r, v, route) for t, s, c, g, r, v, route in zip(*got.values(), strict=True)}


def _differences(spans, sql: dict) -> list[str]:
    """Where the SQL's role is not classify's: a member is routed, any other role is the same unless
    routed (the SQL routes what it does not state exactly); a span no convention recognises has none."""
    out = []
    for s in spans:
        if s.segment is not None:
            continue
        role, got = classify(s), sql.get((s.trace_id, s.span_id))
        want = None if role is None else (role.convention, role.segment or "", role.reason, role.variant)
        where = f"{s.name!r} {dict(s.attributes)} scope {s.scope!r} kind {s.kind}"
        if want is None or got is None:
            if want != got:
                out.append(f"{where}: classify {want}, SQL {got}")
        elif want[1] in roles.MEMBERS:
            if not got[4]:
                out.append(f"{where}: a member ({want}) not routed: {got}")
        elif not got[4] and got[:4] != want:
            out.append(f"{where}: classify {want}, SQL {got}")
    return out


@pytest.fixture(scope="module")
def crafted(tmp_path_factory) -> Path:
    return _crafted(tmp_path_factory.mktemp("crafted") / "crafted.jsonl", 3000)


def test_the_sql_gives_every_recorded_framework_span_the_role_classify_gives(tmp_path):
    files = sorted(FRAMEWORKS.glob("*.jsonl"))
    engine = Engine(threads=1)
    engine.load_files(files)
    spans = load_spans([str(f) for f in files]).spans
    sql = _sql_roles(engine)
    assert len(sql) > 500 and _differences(spans, sql) == []


def test_the_sql_gives_spans_made_to_reach_every_branch_the_role_classify_gives(crafted):
    engine = Engine(threads=1)
    engine.load_files([crafted])
    spans = load_spans([str(crafted)]).spans
    sql = _sql_roles(engine)
    assert _differences(spans, sql) == []
    # every convention, every outcome, and roles the SQL routes for not stating them exactly
    assert {c for c, *_ in sql.values()} == {"vLLM server", "Google ADK", "OpenInference", "OpenLLMetry", "pydantic-ai",
                                             "OpenTelemetry GenAI", "OpenTelemetry HTTP/DB client"}
    assert {g for _, g, *_ in sql.values()} == {"", "agent", "generation", "tool", "memory", "network"}
    unsure = [r for r in sql.values() if r[4] and r[1] not in roles.MEMBERS]
    assert unsure and any(r[1] == "" and not r[4] for r in sql.values())


def test_the_sql_gives_a_stores_spans_the_role_the_per_span_store_reader_gives(crafted, tmp_path, capsys):
    # a store's values come back typed from their text and its kinds from pdata's names
    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(crafted), "--clickhouse", url]) == 0
    capsys.readouterr()
    query = ClickHouseQuery(url)
    engine = Engine(threads=1, store=connect(url))
    engine.load_store(query)
    sql = _sql_roles(engine)
    problems: list[str] = []
    spans = [s for batch in read_traces(connect(url), query, problems) for s in batch]
    assert problems == [] and len(spans) == 3000 and _differences(spans, sql) == []


def _segment(span: dict) -> str | None:
    return next((a["value"].get("stringValue") for a in span["attributes"] if a["key"] == "agenttrace.segment"), None)


def _leaf_spans(rng: random.Random, s: dict) -> list[dict]:
    """An OpenInference retriever and a GenAI embeddings call under a step; a framework's grouping
    span around a trace's root agent."""
    start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
    seg = _segment(s)
    if seg == "step":
        child = {"traceId": s["traceId"], "parentSpanId": s["spanId"], "kind": 1,
                 "startTimeUnixNano": str(start + 1), "endTimeUnixNano": str(start + max(2, (end - start) // 10))}
        return [{**child, "spanId": f"{rng.getrandbits(64):016x}", "name": "retrieve",
                 "attributes": [{"key": "openinference.span.kind", "value": any_value("RETRIEVER")}]},
                {**child, "spanId": f"{rng.getrandbits(64):016x}", "name": "embeddings text-embedding-3-small",
                 "attributes": [{"key": "gen_ai.operation.name", "value": any_value("embeddings")},
                                {"key": "gen_ai.provider.name", "value": any_value("openai")}]}]
    if seg == "agent" and not s.get("parentSpanId"):
        s["parentSpanId"] = f"{rng.getrandbits(64):016x}"
        return [{"traceId": s["traceId"], "spanId": s["parentSpanId"], "name": "RunnableSequence", "kind": 1,
                 "startTimeUnixNano": str(start - 10), "endTimeUnixNano": str(end + 10),
                 "attributes": [{"key": "openinference.span.kind", "value": any_value("CHAIN")}]}]
    return []


def _leaves(folder: Path, share: float = 0.6) -> Path:
    """Our samples with client calls under their generations and tools, the spans of `_leaf_spans`
    in one of them, and a trace of a lone HTTP request: every foreign span a leaf the table maps
    itself."""
    for f in SAMPLES.glob("*.jsonl"):
        shutil.copy(f, folder / f.name)
    add_client_spans(folder, share)
    add_children(folder / "demo-speculative.jsonl", _leaf_spans, seed=4)
    with (folder / "demo-speculative.jsonl").open("a") as out:
        out.write(json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {}, "spans": [
            {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "GET", "kind": 3, "startTimeUnixNano": "1700000000000000000",
             "endTimeUnixNano": "1700000000100000000",
             "attributes": [{"key": "http.request.method", "value": any_value("GET")}]}]}]}]}) + "\n")
    return folder


@pytest.fixture(scope="module")
def leaves(tmp_path_factory) -> Path:
    return _leaves(tmp_path_factory.mktemp("leaves"))


def _summary(report) -> dict:
    doc = report.model_dump(mode="json")
    return {k: doc[k] for k in ("run", "by_label", "whatif", "roofline", "inputs", "problems")}


def test_traces_whose_foreign_spans_are_leaves_stay_with_the_queries(leaves):
    ref = report_streamed([str(leaves)])
    names = {c.name for i in ref.inputs for c in i.conventions}
    assert {"OpenTelemetry HTTP/DB client", "OpenInference", "OpenTelemetry GenAI"} <= names
    assert any(lo.convention == "OpenInference" for i in ref.inputs for lo in i.left_out)
    outcome = report_files([leaves], threads=2)
    assert outcome.reason is None and outcome.per_trace_spans == 0
    assert outcome.report.model_dump_json() == ref.model_dump_json()
    summary = report_files([leaves], threads=2, summary_only=True)
    assert summary.reason is None and summary.per_trace_spans == 0 and _summary(summary.report) == _summary(ref)


def test_a_store_of_traces_with_foreign_leaves_gives_the_per_span_report(leaves, tmp_path, capsys, monkeypatch):
    from agenttrace.columnar import batches

    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(leaves), "--clickhouse", url]) == 0
    capsys.readouterr()
    query = ClickHouseQuery(url)
    ref = report_clickhouse(query)
    outcome = report_store(query, threads=1)
    assert outcome.reason is None and outcome.per_trace_spans == 0
    assert outcome.report.model_dump_json() == ref.model_dump_json()
    summary = report_store(query, threads=1, summary_only=True)
    assert summary.reason is None and summary.per_trace_spans == 0 and _summary(summary.report) == _summary(ref)
    # a batch of traces at a time: each batch's mapped spans counted where they came first
    monkeypatch.setattr(batches, "BATCH_SPANS", 40)
    kept = []
    monkeypatch.setattr(batches, "_keep", lambda engine, n, f=batches._keep: kept.append(n) or f(engine, n))
    summary = report_store(query, threads=1, summary_only=True)
    assert summary.reason is None and len(kept) >= 3 and _summary(summary.report) == _summary(ref)


def test_leaves_beside_framework_traces_list_each_entry_where_it_came_first(leaves, tmp_path):
    # the table's mapped spans and the per-span code's routed traces meet in one input's reading:
    # OpenInference and GenAI in both parts, CHAIN left out in both, in the per-span path's order
    folder = tmp_path / "both"
    shutil.copytree(leaves, folder)
    for name in ("langgraph-react-openinference.jsonl", "google-adk-native.jsonl"):
        lines = (FRAMEWORKS / name).read_text()
        with (folder / "demo-speculative.jsonl").open("a") as out:
            out.write(lines if lines.endswith("\n") else lines + "\n")
    ref = report_streamed([str(folder)])
    outcome = report_files([folder], threads=2)
    assert outcome.reason is None and 0 < outcome.per_trace_spans
    assert outcome.report.model_dump_json() == ref.model_dump_json()
    summary = report_files([folder], threads=2, summary_only=True)
    assert _summary(summary.report) == _summary(ref)


# Other instrumentations' model calls and tool executions inside ours: the client library's span
# under our generation (openai-v2, util-genai, OpenLLMetry, OpenInference's LangChain), a
# framework's tool span under our tool execution.
_CALLS = [
    ("chat gpt-4o-mini", 3, "opentelemetry.instrumentation.openai_v2",
     {"gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
      "gen_ai.usage.input_tokens": 120, "gen_ai.usage.output_tokens": 17}),
    ("chat", 3, "opentelemetry.util.genai", {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                                             "gen_ai.response.model": "gpt-4o", "gen_ai.usage.prompt_tokens": 99.7}),
    ("openai.chat", 3, "opentelemetry.instrumentation.openai.v1",
     {"llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.usage.completion_tokens": 5}),
    ("ChatOpenAI", 1, "openinference.instrumentation.langchain",
     {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o", "llm.provider": "openai",
      "llm.token_count.prompt": 10, "llm.token_count.completion": 3}),
]
_TOOLS = [
    ("execute_tool get_weather", 1, "opentelemetry.util.genai", {"gen_ai.operation.name": "execute_tool"}),
    ("search", 1, "openinference.instrumentation.langchain", {"openinference.span.kind": "TOOL", "tool.name": "search"}),
    ("get_weather.tool", 1, "traceloop", {"traceloop.span.kind": "tool"}),
]


def _nested(folder: Path, seed: int = 5) -> Path:
    """Our samples with another instrumentation's model call under most of our generations and
    its tool span under most of our tool executions (each in a scope of its own)."""
    rng = random.Random(seed)
    for f in SAMPLES.glob("*.jsonl"):
        lines = []
        for line in f.read_text().splitlines():
            doc = json.loads(line)
            for rs in doc["resourceSpans"]:
                added = []
                for s in (s for ss in rs["scopeSpans"] for s in ss["spans"]):
                    seg = _segment(s)
                    if seg not in ("generation", "tool") or rng.random() >= 0.8:
                        continue
                    name, kind, scope, attrs = rng.choice(_CALLS if seg == "generation" else _TOOLS)
                    start, end = int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])
                    added.append({"scope": {"name": scope}, "spans": [{
                        "traceId": s["traceId"], "spanId": f"{rng.getrandbits(64):016x}", "parentSpanId": s["spanId"],
                        "name": name, "kind": kind, "startTimeUnixNano": str(start + (end - start) // 5),
                        "endTimeUnixNano": str(end - (end - start) // 5),
                        "attributes": [{"key": k, "value": any_value(v)} for k, v in attrs.items()]}]})
                rs["scopeSpans"] += added
            lines.append(json.dumps(doc))
        (folder / f.name).write_text("\n".join(lines) + "\n")
    return folder


def test_their_model_calls_and_tools_inside_ours_stay_with_the_queries(tmp_path, capsys):
    # normalise only maps them (our steps hold them): the table maps them with what their roles
    # give (model, provider, token counts, tool name), and the queries make every task's figures
    # (a generation inside ours is no call of its own: no figure reads it, as _scan_step)
    folder = _nested(tmp_path)
    ref = report_streamed([str(folder)])
    assert {c.name for i in ref.inputs for c in i.conventions} >= {"OpenTelemetry GenAI", "OpenInference", "OpenLLMetry"}
    outcome = report_files([folder], threads=2)
    assert outcome.reason is None and outcome.per_trace_spans == 0 and outcome.per_span_tasks == 0
    assert outcome.report.model_dump_json() == ref.model_dump_json()
    summary = report_files([folder], threads=2, summary_only=True)
    assert summary.reason is None and _summary(summary.report) == _summary(ref)
    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(folder), "--clickhouse", url]) == 0
    capsys.readouterr()
    query = ClickHouseQuery(url)
    outcome = report_store(query, threads=1)
    assert outcome.reason is None and outcome.per_trace_spans == 0
    assert outcome.report.model_dump_json() == report_clickhouse(query).model_dump_json()


def test_what_a_mapped_span_gains_is_what_normalise_gives_it(tmp_path):
    # the attributes of ours each role derives (first text, first finite number, int()), as the
    # tasks the per-span code makes read them back from the table (rows.task_spans), equal
    # normalise's copies
    from agenttrace.columnar.assemble import typed
    from agenttrace.traces.normalise import normalise

    folder = _nested(tmp_path)
    engine = Engine(threads=1)
    engine.load_files(sorted(folder.glob("*.jsonl")))
    got, _ = engine.table("SELECT trace_id, span_id, attrs FROM spans WHERE i IN (SELECT i FROM roles WHERE NOT route)")
    table = {(t, s): {k: typed(v) for k, v in a} for t, s, a in zip(*got.values(), strict=True)}
    mapped = {(s.trace_id, s.span_id): dict(s.attributes) for s in normalise(load_spans([str(folder)]).spans).spans}
    assert len(table) > 5 and all(table[k] == mapped[k] for k in table), [(table[k], mapped[k]) for k in table if table[k] != mapped[k]]


def test_a_model_servers_span_inside_a_call_still_goes_to_the_per_span_code(tmp_path):
    # our call with the model server's own generation span under it (`agenttrace serve` joined
    # through traceparent: normalise splits the call into network and the server's part, and
    # its figures are the call's, report/spec.server_side), beside a call with the client
    # library's span under it (no figure reads that one: it stays with the queries)
    from trace_builder import S, foreign, write_trace

    def task(inner: S) -> S:
        gen = S("generate", "generation", 0.1, 0.9, {"gen_ai.usage.output_tokens": 40}, [inner], kind=3)
        return S("invoke_agent demo", "agent", 0, 1, {}, [S("step 1", "step", 0, 1, {"agenttrace.step.index": 1}, [
            S("attempt 1", "attempt", 0, 1, {"agenttrace.attempt.index": 1}, [gen])])])

    served = S("chat smollm2", "generation", 0.2, 0.8, {"agenttrace.spec.rounds": 5, "agenttrace.spec.draft_tokens": 20,
                                                       "agenttrace.spec.accepted_tokens": 15}, kind=2)
    client = foreign("chat gpt-4o-mini", 0.2, 0.8, {"gen_ai.operation.name": "chat", "gen_ai.system": "openai"}, kind=3)
    path = tmp_path / "remote.jsonl"
    write_trace(path, task(served), task(client))
    ref = report_streamed([str(path)])
    outcome = report_files([path], threads=1)
    assert outcome.reason is None and outcome.per_trace_spans == 5 and outcome.per_span_tasks == 0
    assert outcome.report.model_dump_json() == ref.model_dump_json()
    assert ref.tasks[0].segments.network > 0 and ref.inputs[0].inferred == ["network / server split of remote generations"]
