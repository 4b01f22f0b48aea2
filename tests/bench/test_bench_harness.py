"""The evaluation harness without a model: planning, records, the resumable output folder, the
figures against the baseline, the renderings and the command line. Traces come from scripted
models on a fake clock, so every figure is exact."""

from __future__ import annotations

import json

import pytest
from agenttrace.examples.agents.function_calling import EXAMPLES
from agenttrace.examples.agents.suites import load_suite
from agenttrace.examples.tools import default_tools

from agenttrace.bench.harness import options_from
from agenttrace.bench.harness.arm_figures import ALL, MIN_SAMPLES, compute, judged
from agenttrace.bench.harness.options import HarnessOptions, quick
from agenttrace.bench.harness.records import Manifest, read_records
from agenttrace.bench.harness.render import all_tables, report_markdown, update_section
from agenttrace.bench.harness.runner import (
    Chunk,
    append_records,
    arm_order,
    drop_unfinished,
    open_output,
    plan,
    save_manifest,
    task_record,
    trace_path,
)
from agenttrace.bench.harness.sensors import ResourceMeter, ResourceUse
from agenttrace.cli import build_parser
from agenttrace.report.stats import bootstrap_ratio_of_medians
from agenttrace.runtime.agent import Agent
from agenttrace.telemetry import Telemetry
from agenttrace.testing import FakeClock, ScriptedModel, ScriptedReply

WEATHER = [t for t in load_suite("tool_calls").tasks if t.id.startswith("weather-") and t.expected_answer][:6]


def test_plan_walks_through_each_suite_and_is_deterministic():
    suites = {"tool_calls": load_suite("tool_calls"), "code": load_suite("code")}
    opts = HarnessOptions(suites=tuple(suites), tasks_per_suite=5, repeats=4)
    chunks = plan(opts, suites)
    assert [c.key for c in chunks[:3]] == ["r0-tool_calls", "r0-code", "r1-tool_calls"]
    tool_chunks = [c for c in chunks if c.suite == "tool_calls"]
    ids = [t.id for c in tool_chunks for t in c.tasks]
    assert len(ids) == 20 and len(set(ids)) == 20  # 4 repeats x 5 tasks: 20 different tasks of 32
    assert [c.key for c in plan(opts, suites)] == [c.key for c in chunks]
    assert [t.id for t in plan(opts, suites)[0].tasks] == [t.id for t in chunks[0].tasks]
    # every arm on every task, in an order that varies between tasks but not between runs
    orders = {tuple(arm_order(opts, chunks[0], t)) for t in chunks[0].tasks}
    assert all(sorted(o) == sorted(opts.arms) for o in orders) and len(orders) > 1
    assert arm_order(opts, chunks[0], chunks[0].tasks[0]) == arm_order(opts, chunks[0], chunks[0].tasks[0])


def _run(out, arm: str, repeat: int, clock: FakeClock, *, decode_s: float, wrong: bool = False):
    """Run the weather tasks under a scripted arm, writing its trace and returning its records."""
    tel = Telemetry(clock=clock, run_label=arm, trace_file=trace_path(out, f"r{repeat}-tool_calls", arm),
                    synchronous=True)
    records = []
    for task in WEATHER:
        city = task.expected_call.arguments["city"]
        spec = {"method": "prompt_lookup", "num_speculative_tokens": 4} if arm != "baseline" else {}
        rounds = ((4, 3, 0.001, 0.05),) if spec else ()
        call = ScriptedReply(json.dumps({"tool": "weather", "arguments": {"city": "Oslo" if wrong else city}}),
                             prefill_s=0.2, decode_s=decode_s, rounds=rounds, output_tokens=12)
        answer = ScriptedReply(json.dumps({"answer": f"It is {task.expected_answer} there."}), prefill_s=0.1,
                               decode_s=decode_s, rounds=rounds, output_tokens=8)
        model = ScriptedModel([call, answer], clock, **spec)
        agent = Agent(model, default_tools(), telemetry=tel, examples=EXAMPLES)
        result = agent.run(task)
        records.append(task_record(task, result, repeat=repeat, suite="tool_calls", arm=arm, position=0,
                                   use=ResourceUse(100 * 2**20, None, None), wall_s=1.0))
    tel.shutdown()
    return records


def test_task_record_keeps_correctness_ttft_and_time_per_token(tmp_path):
    rec = _run(tmp_path, "baseline", 0, FakeClock(), decode_s=0.44)[0]
    assert rec.outcome == "completed" and rec.correct is True and rec.first_call_correct is True
    assert rec.steps == 2 and rec.tool_calls == 1 and rec.output_tokens == 20
    assert rec.ttft_s == pytest.approx([0.2, 0.1])
    assert rec.tpot_s == pytest.approx([0.44 / 11, 0.44 / 7])
    wrong = _run(tmp_path, "baseline", 1, FakeClock(), decode_s=0.44, wrong=True)[0]
    assert wrong.first_call_correct is False and wrong.correct is True  # the answer still holds the value


def test_figures_judge_a_faster_arm_a_gain_with_the_same_outputs(tmp_path):
    clock = FakeClock()
    records = []
    for repeat in range(2):
        records += _run(tmp_path, "baseline", repeat, clock, decode_s=0.6)
        records += _run(tmp_path, "prompt_lookup", repeat, clock, decode_s=0.2)
    figs = compute(tmp_path, records, ("tool_calls",), ("baseline", "prompt_lookup"))
    assert figs.problems == []
    base, spec = figs.arm("tool_calls", "baseline"), figs.arm("tool_calls", "prompt_lookup")
    assert base.tasks == spec.tasks == 12 and base.completion_rate == 1.0 and base.correctness_rate == 1.0
    assert spec.same_output == (12, 12) and base.same_output is None
    assert spec.acceptance_rate == pytest.approx(0.75) and spec.mean_acceptance_length == pytest.approx(4.0)
    assert base.peak_rss_bytes == 100 * 2**20 and base.energy_j_per_task is None and base.peak_gpu_bytes is None
    assert base.ttft.p50 == pytest.approx(0.15) and base.correct_action.count == 12
    verdicts = {v.figure: v.estimate for v in figs.versus if v.suite == "tool_calls"}
    assert verdicts["task time"].verdict == "gain" and verdicts["task time"].ratio < 1
    assert verdicts["task time"].paired and verdicts["task time"].n_a == 12  # task run against task run
    assert verdicts["time to correct action"].verdict == "gain"
    assert verdicts["TTFT"].verdict == "noise"  # prefill is the same in both arms
    assert figs.arm(ALL, "baseline") is None  # one suite: no pooled row


def test_too_few_samples_get_no_verdict():
    est = bootstrap_ratio_of_medians([1.0] * (MIN_SAMPLES - 1), [2.0] * 10)
    assert est.verdict == "regression" and judged(est).verdict == "too few"
    assert judged(bootstrap_ratio_of_medians([1.0] * MIN_SAMPLES, [2.0] * 10)).verdict == "regression"


def test_the_output_folder_resumes_and_refuses_other_settings(tmp_path):
    opts = HarnessOptions(suites=("tool_calls",), out=tmp_path / "out")
    manifest = open_output(opts, fresh=False, machine="m", command="agenttrace bench")
    done = _run(opts.out, "baseline", 0, FakeClock(), decode_s=0.1)
    append_records(opts.out / "records.jsonl", done)
    manifest.chunks_done.append("r0-tool_calls")
    save_manifest(opts.out, manifest)
    # a session stopped mid-chunk: its trace and records got written, the manifest never named it
    partial = _run(opts.out, "baseline", 1, FakeClock(), decode_s=0.1)
    append_records(opts.out / "records.jsonl", partial)
    (opts.out / "mine.txt").write_text("not the harness's")

    again = open_output(opts, fresh=False, machine="m", command="agenttrace bench --repeats 3")
    assert again.chunks_done == ["r0-tool_calls"] and len(again.sessions) == 2
    drop_unfinished(opts.out, again)
    assert {r.repeat for r in read_records(opts.out / "records.jsonl")} == {0}
    assert [p.name for p in (opts.out / "traces").iterdir()] == ["r0-tool_calls-baseline.jsonl"]
    # scenario settings may change; measurement settings may not
    open_output(HarnessOptions(suites=("tool_calls",), out=opts.out, concurrency=(1, 2)), fresh=False, machine="m",
                command="c")
    with pytest.raises(SystemExit, match=r"other settings \(repeats: 3 -> 5\).*--fresh"):
        open_output(HarnessOptions(suites=("tool_calls",), repeats=5, out=opts.out), fresh=False, machine="m", command="c")
    fresh = open_output(HarnessOptions(suites=("tool_calls",), repeats=5, out=opts.out), fresh=True, machine="m",
                        command="c")
    assert fresh.chunks_done == [] and not (opts.out / "traces").exists() and (opts.out / "mine.txt").exists()


def test_markdown_report_and_the_benchmarks_section(tmp_path):
    clock = FakeClock()
    records = _run(tmp_path, "baseline", 0, clock, decode_s=0.6) + _run(tmp_path, "prompt_lookup", 0, clock, decode_s=0.2)
    opts = HarnessOptions(suites=("tool_calls",), arms=("baseline", "prompt_lookup"), out=tmp_path)
    figs = compute(tmp_path, records, opts.suites, opts.arms)
    manifest = Manifest(options=opts.to_json(), machine="test machine", command="agenttrace bench", started="today",
                        sensors=ResourceMeter("cpu").sensors, run_s=90)
    md = report_markdown(figs, [], opts, manifest)
    assert md.startswith("# agenttrace bench on cpu") and "test machine" in md and "1.5 min" in md
    assert "| tool_calls | prompt_lookup | 100% -> 100% |" in md and "energy: no sensor" in md
    assert [t.title.split(":")[0] for t in all_tables(figs, [], opts)][:2] == ["Headline", "Latency per suite and arm (p50 / p95)"]
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\nwritten by hand\n")
    update_section(doc, "cpu", "first")
    update_section(doc, "cuda", "gpu figures")
    update_section(doc, "cpu", "second")
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nwritten by hand\n") and "first" not in text
    assert text.index("second") < text.index("gpu figures")


def test_cpu_sensors_say_what_they_cannot_measure():
    meter = ResourceMeter("cpu")
    meter.start()
    blob = bytearray(64 * 2**20)  # touch 64 MiB so the peak moves
    use = meter.stop()
    del blob
    assert use.peak_rss_bytes > 64 * 2**20 and use.peak_gpu_bytes is None and use.energy_j is None
    assert meter.sensors["energy"] == "no sensor" and "no sensor" in meter.sensors["GPU memory"]


def test_bare_bench_runs_the_harness_and_named_benches_still_work():
    parser = build_parser()
    bare = parser.parse_args(["bench", "--repeats", "7", "--arms", "baseline,prompt_lookup"])
    assert bare.func.__module__ == "agenttrace.bench.harness"
    opts = options_from(bare)
    assert opts.repeats == 7 and opts.arms == ("baseline", "prompt_lookup") and opts.suites == HarnessOptions().suites
    run = parser.parse_args(["bench", "--quick", "run", "--scenarios", "none", "--concurrency", "1,4"])
    opts = options_from(run)
    assert opts.scenarios == () and opts.concurrency == (1, 4) and opts.repeats == 1  # given options win over --quick
    assert options_from(parser.parse_args(["bench", "run", "--concurrency", "1,4"])).concurrency == (1, 4)
    assert parser.parse_args(["bench", "generation"]).func.__module__ == "agenttrace.bench.generation"
    assert parser.parse_args(["bench", "report"]).func.__module__ == "agenttrace.bench.report"
    assert quick(HarnessOptions()).cold_cache is False


def test_unknown_arms_and_scenarios_are_refused_with_the_choices(tmp_path):
    from agenttrace.bench.harness.arms import check_arms
    from agenttrace.bench.harness.session import run_session
    from agenttrace.report.terminal import make_console

    with pytest.raises(ValueError, match="unknown arm.*choose from baseline, prompt_lookup"):
        check_arms(("baseline", "hydra"))
    with pytest.raises(SystemExit, match="unknown scenario.*cold_start"):
        run_session(HarnessOptions(scenarios=("nope",), out=tmp_path), fresh=False, command="c", console=make_console())
    with pytest.raises(SystemExit, match="nothing to render"):
        run_session(HarnessOptions(out=tmp_path), fresh=False, command="c", console=make_console(), render_only=True)


def test_a_chunk_key_names_repeat_and_suite():
    assert Chunk(2, "code", ()).key == "r2-code"


def test_generation_tables_render_to_a_markdown_section(tmp_path):
    from agenttrace.bench.generation_records import Row, StepRow
    from agenttrace.bench.generation_tables import markdown
    from agenttrace.bench.harness.render import update_section

    rows = [Row("ours_prompt_lookup_k8", "tool_call", 5, 10.2, 1.27, 32.4, 1.91, 0.62, 5.13, 2.17, True),
            Row("hf_generate", "free_text", 5, 17.1, 1.0, 18.1, 1.02, None, None, None, False),
            Row("ours_plain", "tool_call", 5, 9.0, 0.9, 20.5, 1.5, None, None, 4.2, True, weights="int4",
                ceiling_tok_s=150.0, ceiling_share=0.137, peak_rss_mb=612.4)]
    steps = [StepRow("retry", 5, 2.82, 1.53, 1.84, 448, True)]
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text("# Benchmarks\n\nkept\n")
    update_section(doc, "generation-cpu-t1", markdown(rows, steps, "SmolLM2, batch 1", "agenttrace bench generation"))
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\nkept\n") and "<!-- bench:generation-cpu-t1:begin -->" in text
    assert "| fp32 | ours_prompt_lookup_k8 | tool_call | 10.2 | 1.27x | 32.4 | 1.91x | 62% | 5.13 | 2.17 | yes | - | - | - |" in text
    assert "| fp32 | hf_generate | free_text | 17.1 | 1.00x | 18.1 | 1.02x | - | - | - | NO | - | - | - |" in text
    assert "| int4 | ours_plain | tool_call | 9.0 | 0.90x | 20.5 | 1.50x | - | - | 4.20 | yes | 150 | 14% | 612 |" in text
    assert "| retry | 2.82 | 1.53 | 1.84x | 448 | yes |" in text


def test_the_concurrency_crossover_is_the_first_n_where_fixed_k_stops_beating_plain():
    from agenttrace.bench.harness.scenarios.concurrency import _crossover

    assert "stops paying at N = 8" in _crossover({1: (0.6, "gain"), 4: (0.8, "gain"), 8: (1.0, "noise"),
                                                  16: (1.3, "regression")})
    assert "pays at every N" in _crossover({1: (0.6, "gain"), 2: (0.7, "gain")})
    assert _crossover({}) == ""


def test_a_chunk_reads_one_injected_clock_for_its_wall_times_and_spans(tmp_path):
    from agenttrace.bench.harness.runner import SuiteRunner
    from agenttrace.report import report_from_files

    opts = HarnessOptions(suites=("tool_calls",), arms=("baseline",), out=tmp_path)
    suites = {"tool_calls": load_suite("tool_calls")}
    task = WEATHER[0]
    clock = FakeClock()
    call = ScriptedReply(json.dumps({"tool": "weather", "arguments": task.expected_call.arguments}),
                         prefill_s=0.25, decode_s=0.5, output_tokens=12)
    answer = ScriptedReply(json.dumps({"answer": f"It is {task.expected_answer} there."}), prefill_s=0.125,
                           decode_s=0.5, output_tokens=8)
    models = {"baseline": ScriptedModel([call, answer], clock)}
    manifest = open_output(opts, fresh=False, machine="m", command="c")
    runner = SuiteRunner(opts, None, suites, manifest, ResourceMeter("cpu"), models, clock)
    [record] = runner.run_chunk(Chunk(0, "tool_calls", (task,)), lambda _: None)
    # only the scripted model moves the fake clock: the task took exactly its two generations
    assert record.outcome == "completed" and record.wall_s == 1.375
    [traced] = report_from_files([str(trace_path(tmp_path, "r0-tool_calls", "baseline"))]).tasks
    assert traced.wall_s == 1.375  # its spans were timed on the same clock


def test_constrained_arms_decode_like_their_base_arm_and_are_checked_against_the_plain_constrained_arm():
    from agenttrace.bench.harness.arm_figures import reference_arm
    from agenttrace.bench.harness.arms import arm_config, check_arms, decoding
    from agenttrace.runtime.agent import AgentConfig

    assert decoding("constrained") == ("baseline", True)
    assert decoding("prompt_lookup_constrained") == ("prompt_lookup", True)
    assert decoding("early_exit_fixed") == ("early_exit_fixed", False)
    assert arm_config("prompt_lookup_constrained", AgentConfig()).constrained is True
    assert arm_config("prompt_lookup", AgentConfig(constrained=True)).constrained is False
    check_arms(("baseline", "constrained", "prompt_lookup_constrained", "early_exit_fixed_constrained"))
    for bad in ("baseline_constrained", "nope_constrained", "nope"):
        with pytest.raises(ValueError, match="unknown arm"):
            check_arms((bad,))
    arms = ("baseline", "prompt_lookup", "constrained", "prompt_lookup_constrained")
    assert [reference_arm(a, arms) for a in arms] == [None, "baseline", None, "constrained"]
    assert reference_arm("prompt_lookup_constrained", ("constrained", "prompt_lookup_constrained")) == "constrained"


def test_the_grammar_bench_table_says_which_engine_was_not_measured():
    from agenttrace.bench.grammar import EngineRuns, table

    runs = {"llguidance": EngineRuns([0.5, 0.6], [0.003, 0.004], [2e-4, 3e-4, 2.5e-4])}
    out = table(runs, ["xgrammar"], 10, 2)
    assert "| llguidance | 0.55 | 3.5 | 250 |" in out and "1.00x" in out
    assert "Not installed, not measured: xgrammar" in out
