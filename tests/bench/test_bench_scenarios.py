"""The scenarios' own machinery (no model): the failing drafter, the span counter, the memory and
thread checks; and the whole harness in its smoke configuration on the bundled model (what CI
runs: every suite, two arms, every scenario, small sizes)."""

from __future__ import annotations

import threading

import pytest

from agenttrace.bench.harness.records import read_records
from agenttrace.bench.harness.scenarios.common import MemorySnapshot, SpanCounter, memory_back, new_threads
from agenttrace.bench.harness.scenarios.faults import FailingDrafter
from agenttrace.core.chat import GenerationParams
from agenttrace.generation.drafters import PromptLookupDrafter
from agenttrace.testing import FakeClock, capture_telemetry


def test_the_failing_drafter_breaks_after_its_good_drafts_and_stays_broken():
    drafter = FailingDrafter(PromptLookupDrafter(), fail_after=2)
    context = [1, 2, 3, 4, 1, 2, 3]
    params = GenerationParams()
    assert drafter.propose([5, 6], 3, params).tokens == []  # nothing drafted: does not count
    assert drafter.propose(context, 3, params).tokens == [4, 1, 2]
    assert drafter.propose(context, 3, params).tokens == [4, 1, 2]
    for _ in range(2):
        with pytest.raises(RuntimeError, match="injected"):
            drafter.propose(context, 3, params)
    assert drafter.failures == 2 and drafter.method == "prompt_lookup"


def test_the_span_counter_sees_a_span_left_open():
    tel, _ = capture_telemetry(FakeClock())
    counter = SpanCounter()
    tel.provider.add_span_processor(counter)
    with tel.span("agent", "invoke_agent a"):
        with tel.span("step", "agent_step 1"):
            pass
    assert counter.started == 2 and counter.open == 0
    left = tel.span("step", "agent_step 2")
    left.__enter__()
    assert counter.open == 1
    left.__exit__(None, None, None)
    assert counter.open == 0 and [s.name for s in counter.since(2)] == ["agent_step 2"]


def test_memory_back_allows_less_and_allocator_slack_but_not_more_tensors():
    before = MemorySnapshot(1000 * 2**20, 300, 500 * 2**20, None)
    assert memory_back(before, MemorySnapshot(1010 * 2**20, 290, 490 * 2**20, None))[0]  # a drafter dropped its cache
    assert not memory_back(before, MemorySnapshot(1000 * 2**20, 360, 520 * 2**20, None))[0]  # a KV cache kept alive
    assert not memory_back(before, MemorySnapshot(1200 * 2**20, 300, 500 * 2**20, None))[0]  # RSS far above
    ok, detail = memory_back(before, before)
    assert ok and "300 tensors" in detail


def test_the_memory_snapshot_counts_prefix_cache_tensors_apart(tiny_model):
    from agenttrace.bench.harness.scenarios.common import memory_snapshot
    from agenttrace.generation.loop import StopCriteria, generate
    from agenttrace.generation.prefix_cache import PrefixCache

    cache = PrefixCache()
    generate(tiny_model, list(range(3, 23)), GenerationParams(max_tokens=4), StopCriteria(frozenset(), 4), FakeClock(),
             prefix_cache=cache)
    kept = memory_snapshot("cpu", [cache, None])  # None: an arm with prefix caching off
    counted = memory_snapshot("cpu")
    assert kept.cached_bytes == cache.nbytes > 0
    assert kept.tensors == counted.tensors - len(cache.tensors())


def test_new_threads_names_what_is_still_alive():
    before = set(threading.enumerate())
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="lingering", daemon=True)
    t.start()
    assert new_threads(before) == ["lingering"]
    stop.set()
    t.join()
    assert new_threads(before) == []


@pytest.mark.model
def test_smoke_every_suite_and_scenario_on_the_bundled_model(tmp_path, bundled, capsys):
    """CI's smoke run of `agenttrace bench --quick`: one task per suite, baseline and prompt lookup,
    every scenario at its smallest; then a second session finds everything measured."""
    from agenttrace.bench.harness.options import HarnessOptions, quick
    from agenttrace.bench.harness.session import run_session
    from agenttrace.report.terminal import make_console

    # prompt lookup at a fixed k: its rounds depend on the tokens alone, so its text is the same on
    # a busy machine as on a quiet one (an adaptive k follows measured costs; a verify pass of
    # another width rounds differently, and greedy text can then flip at a near-tie)
    opts = quick(HarnessOptions(arms=("baseline", "prompt_lookup_fixed"), out=tmp_path / "bench"))
    # one task a suite, and one concurrent task run per agent at each N (N = 2 still runs the N = 1
    # task beside another, so "outputs independent of N" is checked): a quarter of CI's time was here
    # (and one drafter-failure task: its check, every output equal to the baseline's, holds per task)
    opts = type(opts)(**{**opts.__dict__, "tasks_per_suite": 1, "concurrency_tasks": 1, "drafter_failure_tasks": 1})
    doc = tmp_path / "BENCHMARKS.md"
    outcome = run_session(opts, fresh=False, command="agenttrace bench --quick", console=make_console(), update_doc=doc)
    out = capsys.readouterr().out
    failed = [f"{s.name}: {c.name}: {c.detail}" for s in outcome.scenarios for c in s.checks if not c.passed]
    assert not failed, failed
    assert {s.name for s in outcome.scenarios} == set(opts.scenarios)
    records = read_records(opts.out / "records.jsonl")
    assert len(records) == len(opts.suites) * len(opts.arms)
    assert {r.suite for r in records} == set(opts.suites)
    assert all(r.output_digest for r in records)
    # greedy decoding: speculation never changes the text
    spec = [a for a in outcome.figures.arms if a.arm == "prompt_lookup_fixed" and a.same_output]
    assert spec and all(a.same_output[0] == a.same_output[1] for a in spec)
    assert "Headline" in out and "cancellation: PASS" in out
    report = (opts.out / "report.md").read_text()
    for title in ("Headline", "Latency per suite and arm", "Quality, speculation and resources",
                  "Concurrent agents sharing one model", "Cold start: process start to first valid tool call"):
        assert title in report, title
    assert "<!-- bench:cpu:begin -->" in doc.read_text()
    # the concurrency scenario's records: every level and arm, the batched arms batching
    import json

    levels = json.loads((opts.out / "scenarios" / "concurrency.json").read_text())
    assert {(r["n"], r["arm"]) for r in levels} == {(n, a) for n in opts.concurrency
                                                      for a in ("plain_unbatched", "plain", "fixed_k", "load_aware")}
    assert all(set(r) == {"n", "arm", "tokens_per_s", "tasks_per_s", "ttvtc_p50_s", "ttvtc_p95_s", "task_p95_s",
                          "mean_batch_size"} and r["tokens_per_s"] > 0 for r in levels)
    # resuming a finished folder measures nothing
    again = run_session(opts, fresh=False, command="agenttrace bench --quick", console=make_console())
    assert "measured already" in capsys.readouterr().out
    assert len(read_records(opts.out / "records.jsonl")) == len(records) and again.passed
