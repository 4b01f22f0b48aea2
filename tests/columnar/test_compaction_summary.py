"""Sub-agents' runs and compactions in the engine (columnar/runs_sql.py): a compaction's stage (its
run whole, the summary's generation included), what it cost the cache (the tokens it said, their
share of the next generation's prefill), a delegating task's stages and sub-agent count, and a
sub-agent's attempts judged by their own parse, come out of the summary's aggregates and the full
report's rows, bit for bit the per-span report's, from files and from a store, sub-agents running
side by side in a step too (read in the per-span walk's order). A compaction nested with a
sub-agent's run goes to the per-span code."""

from __future__ import annotations

import pytest
from trace_builder import S, write_trace

pytest.importorskip("chdb")

from agenttrace.cli import main
from agenttrace.columnar import summary
from agenttrace.columnar.engine import report_files, report_store
from agenttrace.report.build import report_clickhouse, report_streamed
from agenttrace.traces.clickhouse import ClickHouseQuery

RESOURCE = {"service.name": "t", "agenttrace.run.label": "long"}
A, B, C = 0.1, 0.2, 0.3  # draft seconds whose sum depends on the order they are added in


def _gen(start: float, end: float, prefill_end: float, tokens: int | None = None) -> S:
    prefill = S("prefill", "prefill", start, prefill_end, {"agenttrace.tokens": tokens} if tokens is not None else {})
    return S("chat m", "generation", start, end, {"gen_ai.usage.output_tokens": 20, "agenttrace.spec.method": "none"},
             [prefill])


def _step(index: int, start: float, end: float, tokens: int | None = None, final: bool = False, kids=()) -> S:
    mid = start + (end - start) * 0.6
    result = "final_answer" if final else "tool_call"
    attempt = S("attempt 1", "attempt", start, end, {"agenttrace.attempt.index": 1, "agenttrace.attempt.outcome": "ok"}, [
        _gen(start, mid, start + (mid - start) / 3, tokens),
        S("parse_tool_call", "parse", mid, mid + 0.05, {"agenttrace.parse.ok": True, "agenttrace.parse.result": result}),
        *kids,
    ])
    return S(f"agent_step {index}", "step", start, end, {"agenttrace.step.index": index, "agenttrace.step.outcome": result,
                                                        "agenttrace.step.attempts": 1}, [attempt])


def _compaction(start: float, end: float, reprefill) -> S:
    attrs = {"agenttrace.compaction.tokens_before": 900, "agenttrace.compaction.tokens_after": 100}
    if reprefill is not None:
        attrs["agenttrace.compaction.reprefill_tokens"] = reprefill
    return S("compact_context", "compaction", start, end, attrs, [_gen(start + 0.1, end - 0.1, start + 0.3)])


def _agent(task: str, kids: list[S], end: float) -> S:
    return S(f"invoke_agent {task}", "agent", 0.0, end, {"agenttrace.task.id": task, "agenttrace.task.outcome": "completed",
                                                       "gen_ai.agent.name": task}, kids)


def compacting() -> list[S]:
    """Three tasks: one compacting three times (the next prefill's tokens known, unknown, no step
    after it), one that delegates and compacts (its stages split both ways), one whose compaction
    runs beside a step (off the critical path: its time is overlap, its stage none)."""
    reader = _agent("reader", [
        _step(1, 0.0, 2.0, tokens=300),
        _compaction(2.0, 3.0, 250),  # more than the next prefill holds: all of it
        _step(2, 3.0, 5.0, tokens=200),
        _compaction(5.0, 5.5, 50),
        _step(3, 5.5, 7.0),
        _step(4, 7.0, 7.8, tokens=80, final=True),
        _compaction(7.8, 8.4, 30),
    ], 8.5)
    # the sub-agent's attempts: valid by their own parse (figures._attempt_valid), whatever the
    # outcome says (rows.attempt_rows)
    ok = {"agenttrace.attempt.outcome": "ok"}
    tries = [S("attempt 1", "attempt", 1.35, 1.6, {"agenttrace.attempt.index": 1, **ok}, [
                 _gen(1.35, 1.5, 1.4, 30), S("parse_tool_call", "parse", 1.5, 1.55, {"agenttrace.parse.ok": False})]),
             S("attempt 2", "attempt", 1.6, 1.9, {"agenttrace.attempt.index": 2, **ok}, [
                 _gen(1.6, 1.8, 1.65, 40), S("parse_tool_call", "parse", 1.8, 1.85, {"agenttrace.parse.ok": True})])]
    sub = S("invoke_agent helper", "delegation", 1.35, 1.95, {"gen_ai.agent.name": "helper"}, [
        S("agent_step 1", "step", 1.35, 1.9, {"agenttrace.step.index": 1, "agenttrace.step.outcome": "final_answer"}, tries)])
    tool = S("execute_tool delegate", "tool", 1.3, 2.0, {}, [sub])
    coordinator = _agent("coordinator", [
        _step(1, 0.0, 2.0, tokens=100, kids=[tool]),
        _compaction(2.0, 2.6, 2.5),  # a double: no token count known
        _step(2, 2.6, 4.0, tokens=90, final=True),
    ], 4.1)
    beside = _agent("beside", [
        _step(1, 0.0, 3.0, tokens=60),
        _compaction(0.5, 1.5, 40),  # runs during the step, which ends later: off the path
        _step(2, 3.0, 4.0, tokens=70, final=True),
    ], 4.2)
    return [reader, coordinator, beside]


def _figures(report) -> dict:
    doc = report.model_dump(mode="json")
    return {k: doc[k] for k in ("run", "by_label", "whatif", "roofline", "inputs")}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("compaction") / "compacting.jsonl"
    write_trace(path, *compacting(), resource=RESOURCE)
    return path


def test_a_summary_of_compacting_tasks_is_made_in_the_engine(trace, monkeypatch):
    made = []
    monkeypatch.setattr(summary, "run_folds", lambda engine, p, f=summary.run_folds: made.append(1) or f(engine, p))
    full = report_streamed([str(trace)])
    run = full.run
    assert full.problems == [] and run.compactions == 5 and run.reprefill_tokens == 370 and run.sub_agents == 1
    assert run.reprefill_s > 0 and run.stages.compaction > 0 and run.stages.delegation_overhead > 0
    by_task = {t.task_id: t for t in full.tasks}
    assert by_task["beside"].stages.compaction == 0 and by_task["coordinator"].reprefill_tokens is None
    assert (by_task["coordinator"].attempts, by_task["coordinator"].valid_attempts) == (4, 3)
    outcome = report_files([trace], threads=1, summary_only=True)
    assert outcome.reason is None and outcome.per_span_tasks == 0 and outcome.report.tasks == [] and made == [1]
    assert _figures(outcome.report) == _figures(full)
    # and the full report's rows: every task's figures from the queries (runs_sql.task_runs), the
    # sub-agent's generations under their own attempt's index, byte for byte the per-span report
    assert [g.attempt for g in by_task["coordinator"].steps[0].generations] == [1, 1, 2]
    outcome = report_files([trace], threads=1)
    assert outcome.reason is None and outcome.per_span_tasks == 0
    assert outcome.report.model_dump_json() == full.model_dump_json()


def test_a_stores_summary_of_compacting_tasks_is_made_in_it(trace, tmp_path, capsys):
    url = f"chdb:{tmp_path / 'ch'}"
    assert main(["export", str(trace), "--clickhouse", url]) == 0
    capsys.readouterr()
    query = ClickHouseQuery(url)
    outcome = report_store(query, threads=1, summary_only=True)
    assert outcome.reason is None and outcome.report.tasks == []
    full = report_clickhouse(query)
    assert _figures(outcome.report) == _figures(full)
    outcome = report_store(query, threads=1)
    assert outcome.per_span_tasks == 0 and outcome.report.model_dump_json() == full.model_dump_json()


def test_a_compaction_inside_a_sub_agents_run_goes_to_the_rows(tmp_path):
    # its stage nests in the sub-agent's (stages.stage_times): the summary is made from the rows,
    # where the per-span code makes that task
    nested = _compaction(1.3, 1.8, 10)
    sub = S("invoke_agent helper", "delegation", 1.2, 1.9, {"gen_ai.agent.name": "helper"}, [
        S("agent_step 1", "step", 1.2, 1.29, {"agenttrace.step.index": 1, "agenttrace.step.outcome": "tool_call"},
          [_gen(1.2, 1.28, 1.21, 40)]),
        nested,
        S("agent_step 2", "step", 1.8, 1.9, {"agenttrace.step.index": 2, "agenttrace.step.outcome": "final_answer"},
          [_gen(1.8, 1.88, 1.81, 40)])])
    coordinator = _agent("coordinator", [
        _step(1, 0.0, 2.0, tokens=100, kids=[S("execute_tool delegate", "tool", 1.1, 2.0, {}, [sub])]),
        _step(2, 2.0, 3.0, tokens=90, final=True),
    ], 3.1)
    path = tmp_path / "nested.jsonl"
    write_trace(path, coordinator, *compacting(), resource=RESOURCE)
    outcome = report_files([path], threads=1, summary_only=True)
    full = report_streamed([str(path)])
    assert full.run.compactions == 6 and outcome.reason is None
    assert outcome.per_span_tasks == 1 and _figures(outcome.report) == _figures(full)


def test_sub_agents_running_side_by_side_are_read_in_the_per_span_walks_order(tmp_path):
    # the per-span code walks a step depth first: the attempt is valid by its last parse in that
    # order (the run that started later), not in time (the earlier run's late failed parse), and
    # its generations tell the what-if in that order (tree.py's `{p}dk`, tree.dfs_key)
    def run(name: str, start: float, end: float, parsed: bool, draft_s: float, late: float = 0.0) -> S:
        # a speculative generation `late` into the run (draft times whose sum depends on the order)
        spec = {"gen_ai.usage.output_tokens": 20, "agenttrace.spec.method": "prompt_lookup", "agenttrace.spec.draft_s": draft_s,
                "agenttrace.spec.verify_s": 0.01, "agenttrace.spec.rounds": 2, "agenttrace.spec.draft_tokens": 12,
                "agenttrace.spec.accepted_tokens": 6, "agenttrace.spec.num_speculative_tokens": 6}
        g0 = start + late
        rounds = [("speculate.round", g0 + 0.02 * (r + 1), {"drafted": 6, "accepted": 3, "draft_s": draft_s / 2,
                                                           "verify_s": 0.005, "k": 6}) for r in range(2)]
        tried = S("attempt 1", "attempt", start, end, {"agenttrace.attempt.index": 1, "agenttrace.attempt.outcome": "ok"}, [
            S("chat m", "generation", g0, end - 0.06, spec, [S("prefill", "prefill", g0, g0 + 0.01)], events=rounds),
            S("parse_tool_call", "parse", end - 0.06, end - 0.01, {"agenttrace.parse.ok": parsed})])
        return S(f"invoke_agent {name}", "delegation", start, end, {"gen_ai.agent.name": name}, [
            S("agent_step 1", "step", start, end, {"agenttrace.step.index": 1, "agenttrace.step.outcome": "final_answer"},
              [tried])])

    # walked: slow, quick, third; in time their generations start quick, third, slow
    tool = S("execute_tool delegate_parallel", "tool", 1.3, 2.0, {}, [run("slow", 1.3, 1.95, False, A, late=0.4),
                                                                       run("quick", 1.35, 1.7, True, B),
                                                                       run("third", 1.4, 1.9, True, C)])
    coordinator = _agent("coordinator", [_step(1, 0.0, 2.0, tokens=100, kids=[tool]),
                                         _step(2, 2.0, 3.0, tokens=90, final=True)], 3.1)
    path = tmp_path / "parallel.jsonl"
    write_trace(path, coordinator, resource=RESOURCE)
    full = report_streamed([str(path)])
    assert (full.run.sub_agents, full.tasks[0].valid_attempts, full.tasks[0].attempts) == (3, 4, 5)
    assert (A + B) + C != (B + C) + A  # the what-if's sums tell the two orders apart
    outcome = report_files([path], threads=1, summary_only=True)
    assert outcome.reason is None and outcome.per_span_tasks == 0 and outcome.report.tasks == []
    assert _figures(outcome.report) == _figures(full)
    outcome = report_files([path], threads=1)
    assert outcome.per_span_tasks == 0 and outcome.report.model_dump_json() == full.model_dump_json()
