"""Reports on the traces the ecosystem's instrumentations write, against the same agent loop
traced with our API: the real `openai` client against a loopback fake server, instrumented in
turn by opentelemetry-instrumentation-openai-v2 + opentelemetry-util-genai (both attribute sets),
openinference-instrumentation-openai and traceloop's instrumentation, each in its own cached
environment (tests/foreign_envs.py); a pydantic-ai agent with its native instrumentation; and a
mixed trace (our agent and step spans around OpenLLMetry's chat spans).

The reports must agree with ours on tasks, steps, attempts and retries exactly, and on time to
valid tool call, tool time and retry cost within 10 ms: medians over the loop's tasks, our runs
made just before and after each foreign one, so the machine's drift over minutes (±30% here)
moves both alike; a comparison that is off is measured again (up to three rounds, pooled). The
environments are built on first use (PyPI must be reachable); marked e2e like the Phoenix test.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import foreign_envs
import pytest
from fake_openai import base_url, fake_openai

from agenttrace.report import report_from_files
from agenttrace.report.model import Report

pytestmark = pytest.mark.e2e

TESTS = Path(__file__).resolve().parents[1]
LOOP, PYDANTIC_AI = TESTS / "foreign_loop.py", TESTS / "foreign_pydantic_ai.py"
DELAY_S = 0.04  # the fake server's time per request
TASKS = 5  # foreign_loop.TASKS
CACHED_ENVIRONMENTS = tuple(f"foreign:{n}" for n in ("genai", "genai-legacy", "openinference", "openllmetry", "pydantic-ai"))
# The instrumentations' own cost differs: on this machine OpenInference's and OpenLLMetry's loops
# take 4-5 ms longer per task to their valid tool call than ours or the official GenAI one (median
# TTVTC 101.4 and 101.6 ms against 96.7 and ~97 ms on the same fake server, the same trace read by
# the old and the new report giving the same figures), so 5 ms failed on noise about every other run.
TOLERANCE_S = 0.010


def _run(python: Path | str, *args: str, pythonpath: bool = False) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTTRACE_STRICT"))}
    if pythonpath:  # agenttrace from this checkout, in an environment that has its dependencies
        env["PYTHONPATH"] = str(TESTS.parent)
    done = subprocess.run([str(python), *args], capture_output=True, text=True, env=env, timeout=300, cwd=TESTS)
    assert done.returncode == 0, f"{args[0]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def _median(values) -> float:
    values = [v for v in values if v is not None]
    assert values, "no values"
    return statistics.median(values)


@pytest.fixture(scope="module")
def server():
    with fake_openai(DELAY_S) as srv:
        yield srv


def _ours(server, folder: Path, name: str = "agenttrace") -> Report:
    """The loop traced with our API (turn_span, wrap_openai, validate_tool_call, tool_span)."""
    out = folder / f"{name}.jsonl"
    _run(sys.executable, str(LOOP), "agenttrace", base_url(server), str(out))
    return report_from_files([str(out)])


@pytest.fixture(scope="module")
def ours(server, tmp_path_factory) -> Report:
    return _ours(server, tmp_path_factory.mktemp("ours"))


def _structure(report: Report) -> list[tuple]:
    return [(t.outcome, [(s.outcome, s.attempts) for s in t.steps], t.attempts, t.valid_attempts) for t in report.tasks]


EXPECTED = [("completed", [("tool_call", 2), ("final_answer", 1)], 3, 2)] * TASKS


def test_our_api_records_one_step_with_two_attempts_and_counts_validated_calls_as_valid(ours):
    # The loop's retry is its next turn: turn_span keeps the step open across it. The attempt
    # whose OpenAI tool call validated counts as valid although no parse span exists.
    assert _structure(ours) == EXPECTED
    assert (ours.run.steps_with_retry, ours.run.valid_attempts, ours.run.attempts) == (TASKS, 2 * TASKS, 3 * TASKS)
    assert [c.name for i in ours.inputs for c in i.conventions] == ["agenttrace"]
    assert all(t.inferred == [] for t in ours.tasks)


@pytest.mark.parametrize(("mode", "env", "convention", "variant"), [
    ("genai", "genai", "OpenTelemetry GenAI", "gen_ai.provider.name (v1.37+, gen_ai_latest_experimental)"),
    ("genai-latest", "genai", "OpenTelemetry GenAI", "gen_ai.provider.name (v1.37+, gen_ai_latest_experimental)"),
    ("genai-legacy", "genai-legacy", "OpenTelemetry GenAI", "gen_ai.system (before v1.37)"),
    ("openinference", "openinference", "OpenInference", None),
    ("openllmetry", "openllmetry", "OpenLLMetry", None),
])
def test_a_foreign_instrumentation_gives_the_report_our_api_gives(mode, env, convention, variant, server, tmp_path):
    python = foreign_envs.python(env)  # built before the timed runs
    theirs: list[Report] = []
    ours: list[Report] = [_ours(server, tmp_path, "ours-0")]
    for round_ in range(3):  # more rounds only while the pooled medians are off: a real difference persists
        out = tmp_path / f"{mode}-{round_}.jsonl"
        _run(python, str(LOOP), mode, base_url(server), str(out))
        theirs.append(report_from_files([str(out)]))
        ours.append(_ours(server, tmp_path, f"ours-{round_ + 1}"))
        gaps = _gaps(theirs, ours)
        if all(abs(gap) <= TOLERANCE_S for gap in gaps.values()):
            break
    report = theirs[0]

    (seen,) = report.inputs  # the report says what it recognised, mapped and inferred
    (conv,) = seen.conventions
    assert conv.name == convention
    assert conv.segments == {"agent": TASKS, "generation": 3 * TASKS, "tool": 2 * TASKS}
    assert variant is None or variant in conv.variants
    assert seen.left_out == []
    assert {"steps and attempts", "retries", "decision moments (TTVTC)"} <= set(seen.inferred)

    assert all(_structure(r) == EXPECTED for r in theirs + ours)
    assert all(r.run.steps_with_retry == TASKS for r in theirs + ours)
    assert all(s.inferred for t in report.tasks for s in t.steps)
    for name, gap in gaps.items():
        assert abs(gap) <= TOLERANCE_S, f"{name}: {gap * 1e3:+.1f} ms from ours ({_gaps_text(theirs, ours)})"
    # the failed attempt held a model call and the failed tool call
    for t in report.tasks:
        assert DELAY_S <= t.retry_s < t.steps[0].wall_s
        assert t.retry_segments.generation >= DELAY_S
    assert all(t.absent == ["prefill", "draft", "verify", "constrain", "parse", "validation"] for t in report.tasks)


FIGURES = {"TTVTC": lambda t: t.ttvtc_s, "tool time": lambda t: t.segments.tool, "retry cost": lambda t: t.retry_s}


def _gaps(theirs: list[Report], ours: list[Report]) -> dict[str, float]:
    """Median over their tasks less median over ours, per figure."""
    return {name: _median(f(t) for r in theirs for t in r.tasks) - _median(f(t) for r in ours for t in r.tasks)
            for name, f in FIGURES.items()}


def _gaps_text(theirs: list[Report], ours: list[Report]) -> str:
    return ", ".join(f"{name} {_median(f(t) for r in theirs for t in r.tasks) * 1e3:.1f} against "
                     f"{_median(f(t) for r in ours for t in r.tasks) * 1e3:.1f} ms" for name, f in FIGURES.items())


def test_a_mixed_trace_puts_the_foreign_generation_in_its_attempt(server, tmp_path):
    # Our agent_span / step_span / validate_tool_call around OpenLLMetry's chat spans: the chat
    # span opens no attempt of ours, yet the failed attempt's cost must hold its model call.
    out = tmp_path / "mixed.jsonl"
    _run(foreign_envs.python("openllmetry"), str(LOOP), "mixed", base_url(server), str(out), pythonpath=True)
    report = report_from_files([str(out)])
    (seen,) = report.inputs
    assert {c.name: c.segments.get("generation", 0) for c in seen.conventions} == {"agenttrace": 0, "OpenLLMetry": 3 * TASKS}
    assert "attempt boundaries" in seen.inferred
    for t in report.tasks:
        assert [(s.outcome, s.attempts) for s in t.steps] == [("tool_call", 2), ("final_answer", 1)]
        assert [g.attempt for s in t.steps for g in s.generations] == [1, 2, 1]
        assert DELAY_S <= t.retry_s and t.retry_segments.generation >= DELAY_S
        assert (t.attempts, t.valid_attempts) == (3, 2)
        assert t.ttvtc_s is not None and t.ttvtc_s >= 2 * DELAY_S


def test_a_pydantic_ai_agent_with_its_native_instrumentation(tmp_path):
    out = tmp_path / "pydantic-ai.jsonl"
    _run(foreign_envs.python("pydantic-ai"), str(PYDANTIC_AI), str(out))
    report = report_from_files([str(out)])
    (seen,) = report.inputs
    assert [(c.name, c.segments) for c in seen.conventions] == [("pydantic-ai", {"agent": 1, "generation": 3, "tool": 2})]
    (task,) = report.tasks
    # pydantic-ai refused the first call's arguments at validation: an invalid decision, retried
    assert [(s.outcome, s.attempts) for s in task.steps] == [("tool_call", 2), ("final_answer", 1)]
    assert (task.outcome, task.attempts, task.valid_attempts, task.decisions_invalid) == ("completed", 3, 2, 1)
    assert report.run.steps_with_retry == 1
    model_s, tool_s = 0.03, 0.015  # foreign_pydantic_ai.py
    assert task.segments.tool >= tool_s
    assert 2 * model_s <= task.ttvtc_s < task.wall_s
    assert task.steps[1].ttvtc_s == pytest.approx(task.steps[1].wall_s, abs=1e-9)  # the answer ends its step
