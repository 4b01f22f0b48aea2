"""Other instrumentations' traces mapped onto ours (agenttrace.traces), on hand-built traces with
exact times: the vLLM split, mixed traces, files mixing conventions, what is left out and said."""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from trace_builder import S, foreign, write_trace

from agenttrace.report import report_from_files
from agenttrace.report.html import report_html
from agenttrace.report.markdown import report_markdown
from agenttrace.report.terminal import render_report

approx = lambda x: pytest.approx(x, abs=1e-9)  # noqa: E731
CLIENT, SERVER = 3, 2


def genai_chat(start, end, *, children=(), kind=CLIENT, **attrs):
    a = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "m",
         "gen_ai.usage.input_tokens": 20, "gen_ai.usage.output_tokens": 7} | attrs
    return foreign("chat m", start, end, a, list(children), kind=kind)


def genai_tool(start, end, *, error=None):
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather"}
    if error:
        attrs["error.type"] = "TypeError"
    return foreign("execute_tool weather", start, end, attrs, error=error)


def genai_agent(start, end, children):
    return foreign("invoke_agent bot", start, end, {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bot"},
                   children)


def report_of(tmp_path, *roots, name="t.jsonl"):
    path = tmp_path / name
    write_trace(path, *roots)
    return report_from_files([str(path)])


def test_genai_loop_becomes_steps_with_a_retry_and_exact_figures(tmp_path):
    root = genai_agent(0.0, 1.0, [
        genai_chat(0.0, 0.3), genai_tool(0.3, 0.35, error="bad argument town"),  # failed: retried
        genai_chat(0.4, 0.6), genai_tool(0.6, 0.7),
        genai_chat(0.75, 0.95),
    ])
    report = report_of(tmp_path, root)
    assert report.problems == []
    (task,) = report.tasks
    s1, s2 = task.steps
    assert (s1.outcome, s1.attempts, s2.outcome, s2.attempts) == ("tool_call", 2, "final_answer", 1)
    assert (s1.start_s, s1.wall_s, s2.start_s, s2.wall_s) == (approx(0.0), approx(0.7), approx(0.75), approx(0.2))
    assert s1.ttvtc_s == approx(0.6)  # the end of the generation whose call then ran without error
    assert task.ttvtc_s == approx(0.6) and s2.ttvtc_s == approx(0.2)
    assert s1.retry_s == approx(0.35) and s1.retry_segments.generation == approx(0.3)
    assert (s1.segments.generation, s1.segments.tool, s1.segments.other) == (approx(0.5), approx(0.15), approx(0.05))
    assert task.segments.total() == approx(task.wall_s)
    assert (task.outcome, task.attempts, task.valid_attempts, task.decisions_valid, task.decisions_invalid) == (
        "completed", 3, 2, 2, 1)
    assert [g.attempt for s in task.steps for g in s.generations] == [1, 2, 1]
    assert task.steps[0].generations[0].input_tokens == 20
    assert set(task.inferred) == {"steps and attempts", "retries", "decision moments (TTVTC)", "attempt validity",
                                  "task outcome"}
    assert task.absent == ["prefill", "draft", "verify", "constrain", "parse", "validation"]


def test_a_vllm_server_span_splits_the_client_call_into_network_queue_prefill_and_decode(tmp_path):
    # vLLM's own names (vllm/tracing: SpanAttributes), as its `llm_request` span carries them.
    server = foreign("llm_request", 0.1, 0.9, {
        "gen_ai.latency.time_in_queue": 0.1, "gen_ai.latency.time_in_model_prefill": 0.2,
        "gen_ai.latency.time_in_model_decode": 0.4, "gen_ai.latency.e2e": 0.75,
        "gen_ai.latency.time_to_first_token": 0.35, "gen_ai.usage.prompt_tokens": 120,
        "gen_ai.usage.completion_tokens": 30, "gen_ai.request.id": "cmpl-1",
        "gen_ai.response.finish_reasons": '["stop"]'}, kind=SERVER)
    root = genai_agent(0.0, 1.0, [genai_chat(0.0, 1.0, children=[server])])
    report = report_of(tmp_path, root)
    (task,) = report.tasks
    (step,) = task.steps
    seg = step.segments
    # network = the client's wait outside the server span; queue and prefill from vLLM; the rest
    # of the server span (decode, tokenizing, hops between its processes) is generation
    assert (seg.network, seg.queue, seg.prefill, seg.generation) == (approx(0.2), approx(0.1), approx(0.2), approx(0.5))
    assert seg.network + seg.queue + seg.prefill + seg.generation == approx(1.0)  # the chat span's time
    (gen,) = step.generations  # one call, not one per end
    assert (gen.prefill_s, gen.input_tokens, gen.output_tokens) == (approx(0.2), 20, 7)
    (seen,) = report.inputs
    assert {c.name for c in seen.conventions} == {"OpenTelemetry GenAI", "vLLM server"}
    assert "network / server split of remote generations" in seen.inferred


def test_a_server_span_outside_its_client_span_is_moved_into_it_and_said(tmp_path):
    server = foreign("llm_request", 5.0, 5.4, {"gen_ai.latency.e2e": 0.4}, kind=SERVER)  # another host's clock
    report = report_of(tmp_path, genai_agent(0.0, 1.0, [genai_chat(0.0, 1.0, children=[server])]))
    assert any("did not fit inside its client span" in p for p in report.problems)
    (step,) = report.tasks[0].steps
    assert step.segments.network == approx(0.6) and step.segments.generation == approx(0.4)


def test_a_remote_generation_of_ours_counts_once_and_its_server_parse_is_not_the_agents_decision(tmp_path):
    # wrap_openai's client span with `agenttrace serve`'s span under it, joined by traceparent
    served = S("chat m", "generation", 0.1, 0.8, {"agenttrace.spec.method": "prompt_lookup", "agenttrace.spec.rounds": 2,
                                                    "agenttrace.spec.draft_tokens": 6, "agenttrace.spec.accepted_tokens": 4},
               [S("prefill", "prefill", 0.1, 0.3), S("parse_tool_call", "parse", 0.75, 0.8,
                                                      {"agenttrace.parse.ok": True, "agenttrace.parse.result": "final_answer"})],
               kind=SERVER)
    client = S("chat m", "generation", 0.0, 1.0, {"gen_ai.usage.output_tokens": 10}, [served], kind=CLIENT)
    attempt = S("attempt 1", "attempt", 0.0, 1.1, {"agenttrace.attempt.outcome": "ok"}, [
        client, S("parse_tool_call", "parse", 1.0, 1.1, {"agenttrace.parse.ok": True, "agenttrace.parse.result": "final_answer"})])
    step = S("agent_step 1", "step", 0.0, 1.1, {"agenttrace.step.index": 1, "agenttrace.step.outcome": "final_answer"}, [attempt])
    root = S("invoke_agent a", "agent", 0.0, 1.2, {"agenttrace.task.id": "t"}, [step])
    # split whatever else the input holds: alone, and beside an HTTP client span of the user's
    alone = report_of(tmp_path, root)
    report = report_of(tmp_path, root, foreign("GET", 1.1, 1.2, {"http.request.method": "GET"}, kind=CLIENT))
    assert alone.tasks[0].model_dump() == next(t for t in report.tasks if t.task_id == "t").model_dump()
    task = next(t for t in report.tasks if t.task_id == "t")
    (s,) = task.steps
    (gen,) = s.generations
    assert (gen.prefill_s, gen.method, gen.rounds, gen.accepted_tokens) == (approx(0.2), "prompt_lookup", 2, 4)
    assert task.decisions_valid == 1 and s.ttvtc_s == approx(1.1)
    assert s.segments.network == approx(0.3) and s.segments.total() == approx(1.1)


def test_a_mixed_trace_moves_the_foreign_chat_into_the_attempt_that_follows_it(tmp_path):
    # agent_span / step_span of ours; the chat spans are OpenLLMetry's, children of our step,
    # and our attempts opened only when our validation span came.
    def attempt(i, start, end, ok):
        validation = S("validate_arguments weather", "validation", start, start + 0.005,
                       {"agenttrace.validation.ok": ok})
        kids = [validation] + ([S("execute_tool weather", "tool", start + 0.005, end)] if ok else [])
        return S(f"attempt {i}", "attempt", start, end, {"agenttrace.attempt.index": i,
                                                         "agenttrace.attempt.outcome": "ok" if ok else "validation_error"}, kids)

    def openllmetry_chat(start, end):
        return foreign("openai.chat", start, end, {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                                                   "gen_ai.is_streaming": False, "gen_ai.usage.input_tokens": 9}, kind=CLIENT)

    step = S("agent_step 1", "step", 0.0, 0.2, {"agenttrace.step.index": 1, "agenttrace.step.outcome": "tool_call",
                                                "agenttrace.step.attempts": 2}, [
        openllmetry_chat(0.0, 0.05), attempt(1, 0.05, 0.055, False),
        openllmetry_chat(0.06, 0.11), attempt(2, 0.11, 0.2, True)])
    root = S("invoke_agent a", "agent", 0.0, 0.2, {"agenttrace.task.id": "mixed"}, [step])
    report = report_of(tmp_path, root)
    (task,) = report.tasks
    (s,) = task.steps
    assert s.retry_s == approx(0.055)  # the failed attempt's model call is part of its cost
    assert s.retry_segments.generation == approx(0.05)
    assert [g.attempt for g in s.generations] == [1, 2]
    assert s.ttvtc_s == approx(0.115)
    assert "attempt boundaries" in task.inferred
    assert {c.name for c in report.inputs[0].conventions} == {"agenttrace", "OpenLLMetry"}
    assert s.segments.total() == approx(s.wall_s)


def test_a_file_mixing_two_conventions_and_a_user_root_span(tmp_path):
    # OpenInference LLM spans, GenAI tool spans, under a span of the user's own (no convention)
    def oi_llm(start, end):
        return foreign("ChatCompletion", start, end, {"openinference.span.kind": "LLM", "llm.model_name": "m",
                                                      "llm.token_count.prompt": 11, "llm.token_count.completion": 3})

    root = foreign("handle_request", 0.0, 1.0, {}, [oi_llm(0.1, 0.3), genai_tool(0.3, 0.4), oi_llm(0.5, 0.7)], kind=SERVER)
    report = report_of(tmp_path, root)
    (task,) = report.tasks  # the root above the first generation is the task
    assert [(s.outcome, s.attempts) for s in task.steps] == [("tool_call", 1), ("final_answer", 1)]
    assert task.steps[0].generations[0].input_tokens == 11 and task.steps[0].generations[0].model == "m"
    assert task.ttvtc_s == approx(0.3) and task.wall_s == approx(1.0)
    (seen,) = report.inputs
    assert {c.name: c.spans for c in seen.conventions} == {"OpenInference": 2, "OpenTelemetry GenAI": 1}
    assert "task boundary" in seen.inferred
    assert [(lo.reason.split(":")[0], lo.names) for lo in seen.left_out] == [("no known convention", ["handle_request"])]


def test_spans_of_unknown_convention_versions_are_left_out_by_name_not_dropped(tmp_path):
    root = genai_agent(0.0, 1.0, [
        foreign("reason bot", 0.0, 0.1, {"gen_ai.operation.name": "reason"}),
        foreign("Guard", 0.1, 0.2, {"openinference.span.kind": "PLANNER"}),
        foreign("odd", 0.2, 0.3, {"gen_ai.foo": 1}),
        foreign("workflow", 0.3, 0.4, {"openinference.span.kind": "CHAIN"}),
        genai_chat(0.4, 0.9),
    ])
    report = report_of(tmp_path, root)
    left = {(lo.convention, lo.reason): lo.names for lo in report.inputs[0].left_out}
    assert left == {
        ("OpenTelemetry GenAI", "unknown GenAI operation 'reason' (a newer convention version?)"): ["reason bot"],
        ("OpenInference", "unknown OpenInference span kind 'PLANNER'"): ["Guard"],
        ("OpenTelemetry GenAI", "GenAI attributes but no gen_ai.operation.name"): ["odd"],
        ("OpenInference", "CHAIN: a grouping span; its children are mapped, its own time counts as other"): ["workflow"],
    }
    (task,) = report.tasks
    assert task.wall_s == approx(1.0) and task.segments.total() == approx(1.0)  # their time is still there


def test_a_lone_model_call_is_a_task_of_its_own(tmp_path):
    report = report_of(tmp_path, foreign("openai.chat", 0.0, 0.4, {"llm.request.type": "chat", "gen_ai.system": "openai",
                                                                   "gen_ai.usage.prompt_tokens": 5,
                                                                   "gen_ai.usage.completion_tokens": 2}, kind=CLIENT))
    (task,) = report.tasks
    assert task.agent == "openai.chat" and task.outcome == "completed"
    assert task.ttvtc_s == approx(0.4) and task.steps[0].generations[0].output_tokens == 2
    assert [c.name for c in report.inputs[0].conventions] == ["OpenLLMetry"]


def test_a_parent_cycle_among_foreign_spans_ends(tmp_path):
    path = tmp_path / "cycle.jsonl"
    spans = [{"traceId": "ab" * 16, "spanId": f"{i:016x}", "parentSpanId": f"{1 - i:016x}", "name": "chat m", "kind": 3,
              "startTimeUnixNano": "1000", "endTimeUnixNano": "2000",
              "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]} for i in range(2)]
    path.write_text(json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": spans}]}]}) + "\n")
    report = report_from_files([str(path)])  # returns: the cycle is not followed forever
    assert report.inputs[0].spans == 2


def test_every_format_says_what_was_recognised_left_out_and_inferred(tmp_path):
    root = genai_agent(0.0, 1.0, [genai_chat(0.0, 0.3), foreign("x", 0.3, 0.4, {"openinference.span.kind": "CHAIN"}),
                                  genai_tool(0.4, 0.5), genai_chat(0.5, 0.9)])
    report = report_of(tmp_path, root)
    console = Console(record=True, width=400)
    render_report(report, console)
    outputs = {"terminal": console.export_text(), "markdown": report_markdown(report), "html": report_html(report),
               "json": report.model_dump_json()}
    for fmt, text in outputs.items():
        assert "OpenTelemetry GenAI" in text and "OpenInference" in text, fmt
        assert "CHAIN: a grouping span" in text, fmt
        assert "steps and attempts" in text and "decision moments (TTVTC)" in text, fmt
    assert "1*" in outputs["terminal"] and "| 1* |" in outputs["markdown"]  # inferred steps are starred
    assert "n/a" in outputs["terminal"] and "n/a" in outputs["markdown"]  # absent segments are not 0


def test_a_trace_without_tasks_says_what_it_holds(tmp_path):
    report = report_of(tmp_path, foreign("SELECT", 0.0, 0.1, {"db.system": "sqlite"}, kind=CLIENT), foreign("misc", 0, 1))
    console = Console(record=True, width=400)
    render_report(report, console)
    text = console.export_text()
    assert "No agent spans found" not in text
    assert "No tasks found in 2 spans (recognised: OpenTelemetry HTTP/DB client)" in text
    assert "no known convention" in text
