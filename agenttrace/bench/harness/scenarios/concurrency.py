"""N agents sharing one model: turn-taking against continuous batching, with and without
speculation, at each N.

At each level N the same task runs are served by N agent threads pulling from one queue: the
tool-call suite's weather and file-search tasks (seeded order), cycled to at least N runs so every
agent has work (`concurrency_tasks` at least). Those are the short calls the 135M model completes;
its calculator and unit tasks often retry until the step budget runs out. Each agent has its own
`LocalChatModel` over the shared weights (its prefix cache and k controller are its own). Arms:

    plain_unbatched  each agent generates alone, as before batching (the threads take turns on
                     the cores): the reference the issue keeps
    plain            one BatchEngine for the level's agents, no drafter; the engine's one prefix
                     cache serves them all (the system prompt and tools prefill once for all)
    fixed_k          the engine, prompt lookup drafting k = prompt_lookup_k every pass
    load_aware       the engine, prompt lookup with k chosen per pass by the load-aware policy

Levels and arms alternate in a seeded order. Per level and arm: throughput (tasks and output
tokens per second of the level's wall time), p50/p95 time to valid tool call and p95 task time
(from the level's trace), the engine's mean batch size, peak RSS, and each arm's task time over
`plain`'s at the same N, task by task (median of per-task ratios, bootstrap interval). Greedy
decoding makes each arm's outputs the same at every N, which is checked: a difference would mean
requests disturb each other in the batch. `scenarios/concurrency.json` holds the records.
"""

from __future__ import annotations

import gc
import queue
import random
import threading
from dataclasses import dataclass

from agenttrace.bench.harness.arm_figures import paired_estimate
from agenttrace.bench.harness.arms import build_model
from agenttrace.bench.harness.records import Check, ConcurrencyRecord, ScenarioResult, write_json_atomic
from agenttrace.bench.harness.runner import output_digest
from agenttrace.bench.harness.scenarios.common import ScenarioContext
from agenttrace.bench.harness.sensors import ResourceMeter, release_free_memory
from agenttrace.clock import elapsed_s
from agenttrace.report import report_from_files
from agenttrace.report.stats import distribution
from agenttrace.runtime.agent import TaskResult
from agenttrace.telemetry import Telemetry

WORKLOAD_TOOLS = ("weather", "search_files")
ARMS = ("plain_unbatched", "plain", "fixed_k", "load_aware")
REFERENCE = "plain"
# what each arm builds: (harness arm of its LocalChatModels, batching policy or None: alone)
_BUILD = {"plain_unbatched": ("baseline", None), "plain": ("baseline", "fixed"),
          "fixed_k": ("prompt_lookup_fixed", "fixed"), "load_aware": ("prompt_lookup", "load_aware")}


@dataclass
class Level:
    n: int
    arm: str
    wall_s: float
    results: dict[str, TaskResult]
    errors: list[str]
    task_s: dict[str, float]  # by task run id
    ttvtc_s: list[float]
    tokens: int
    mean_batch: float
    peak_rss: int | None


def _serve(ctx: ScenarioContext, n: int, arm: str, tasks) -> Level:
    from agenttrace.generation.batching.engine import BatchEngine

    suite = ctx.suites["tool_calls"]
    path = ctx.out / f"n{n}-{arm}.jsonl"
    tel = Telemetry(service_name="agenttrace-bench", run_label=f"n{n}-{arm}", trace_file=path)
    model_arm, policy = _BUILD[arm]
    engine = None
    if policy:
        from agenttrace.generation.prefix_cache import PrefixCache

        # one intra-op thread for decode passes on a CPU (BatchEngine's `narrow_threads` says
        # why); one prefix cache for the level's agents, as large as up to 8 of theirs
        mb = ctx.opts.prefix_cache_mb * min(n, 8)
        shared = PrefixCache(max_bytes=mb * 2**20) if mb > 0 else None
        engine = BatchEngine(ctx.loaded.model, policy=policy, max_batch=max(n, 1), prefix_cache=shared,
                             narrow_threads=1 if ctx.opts.device == "cpu" else None)
    agents = [suite.build_agent(build_model(model_arm, ctx.loaded, ctx.opts, engine=engine), tel,
                                config=ctx.config(suite, model_arm)) for _ in range(n)]
    work: queue.Queue = queue.Queue()
    for t in tasks:
        work.put(t)
    results: dict[str, TaskResult] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def worker(agent) -> None:
        while True:
            try:
                task = work.get_nowait()
            except queue.Empty:
                return
            try:
                result = agent.run(task)
                with lock:
                    results[task.id] = result
            except Exception as exc:  # a bug under concurrency: recorded, fails the scenario
                with lock:
                    errors.append(f"{task.id}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(a,), name=f"bench-agent-{i}") for i, a in enumerate(agents)]
    gc.collect()
    release_free_memory()  # what earlier levels freed: this level's peak is its own
    meter = ResourceMeter(ctx.opts.device)
    meter.start()
    t0 = ctx.clock.now_ns()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = elapsed_s(ctx.clock, t0)
    use = meter.stop()
    mean_batch = engine.mean_batch_size if engine is not None else 1.0
    if engine is not None:
        engine.close()
    tel.shutdown()
    figures = report_from_files([str(path)]).tasks
    tokens = sum(g.output_tokens for r in results.values() for g in r.generations)
    return Level(n, arm, wall, results, errors, {t.task_id: t.wall_s for t in figures},
                 [t.ttvtc_s for t in figures if t.ttvtc_s is not None], tokens, mean_batch, use.peak_rss_bytes)


def _task_runs(ctx: ScenarioContext, count: int) -> list:
    """`count` task runs cycling through the workload's tasks, each with its own id."""
    base = [t for t in ctx.suites["tool_calls"].tasks
            if t.expected_call is not None and t.expected_call.tool in WORKLOAD_TOOLS]
    random.Random(f"{ctx.opts.seed}-concurrency").shuffle(base)
    runs = []
    for i in range(count):
        task = base[i % len(base)]
        runs.append(task if i < len(base) else task.model_copy(update={"id": f"{task.id}#{i // len(base)}"}))
    return runs


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _record(lv: Level) -> ConcurrencyRecord:
    d, v = distribution(lv.task_s.values()), distribution(lv.ttvtc_s)
    return ConcurrencyRecord(n=lv.n, arm=lv.arm, tokens_per_s=lv.tokens / lv.wall_s, tasks_per_s=len(lv.results) / lv.wall_s,
                             ttvtc_p50_s=v.p50, ttvtc_p95_s=v.p95, task_p95_s=d.p95, mean_batch_size=lv.mean_batch)


def _crossover(gains: dict[int, tuple[float, str]]) -> str:
    """The first N at which fixed-k speculation no longer beats plain batching: its task-time
    ratio's verdict is not a gain (the interval reaches 1, or a regression; "too few" pairs
    cannot show a gain either)."""
    losing = [n for n, (_, verdict) in sorted(gains.items()) if verdict != "gain"]
    if not gains:
        return ""
    if not losing:
        return f"fixed-k speculation pays at every N measured ({', '.join(map(str, sorted(gains)))})."
    return f"fixed-k speculation stops paying at N = {losing[0]} on this machine (its task time is no longer below plain's)."


def run_concurrency(ctx: ScenarioContext) -> ScenarioResult:
    t0 = ctx.clock.now_ns()
    opts = ctx.opts
    rng = random.Random(f"{opts.seed}-concurrency-order")
    levels: dict[tuple[int, str], Level] = {}
    runs: dict[int, list] = {}
    for n in opts.concurrency:
        runs[n] = _task_runs(ctx, max(opts.concurrency_tasks, n))
        order = list(ARMS)
        rng.shuffle(order)
        for arm in order:
            ctx.tick(f"concurrency: N={n} [{arm}]")
            levels[(n, arm)] = _serve(ctx, n, arm, runs[n])

    records = [_record(levels[(n, arm)]) for n in opts.concurrency for arm in ARMS]
    write_json_atomic(ctx.out.parent / "concurrency.json",
                      "[\n" + ",\n".join(r.model_dump_json() for r in records) + "\n]\n")

    columns = ["N", "arm", "tasks", "tasks/s", "tokens/s", "p50 TTVTC s", "p95 TTVTC s", "p95 task s",
               "mean batch", "peak RSS MiB", f"task time vs {REFERENCE}", "verdict"]
    rows, gains, speedups = [], {}, {}
    by_level = {(r.n, r.arm): r for r in records}
    for n in opts.concurrency:
        for arm in ARMS:
            lv, rec = levels[(n, arm)], by_level[(n, arm)]
            ratio, verdict = "-", "-"
            if arm != REFERENCE:
                est = paired_estimate({t: [x] for t, x in levels[(n, REFERENCE)].task_s.items()},
                                      {t: [x] for t, x in lv.task_s.items()}, opts.seed)
                if est.ratio is not None:
                    ratio = f"{est.ratio:.2f} [{est.low:.2f}-{est.high:.2f}]"
                    if arm == "fixed_k":
                        gains[n] = (est.ratio, est.verdict)
                verdict = est.verdict
            rss = f"{lv.peak_rss / 2**20:.0f}" if lv.peak_rss else "-"
            rows.append([str(n), arm, str(len(lv.results)), f"{rec.tasks_per_s:.3f}", f"{rec.tokens_per_s:.1f}",
                         _s(rec.ttvtc_p50_s), _s(rec.ttvtc_p95_s), _s(rec.task_p95_s), f"{rec.mean_batch_size:.1f}",
                         rss, ratio, verdict])
        plain, alone = levels[(n, "plain")], levels[(n, "plain_unbatched")]
        if alone.tokens and plain.wall_s:
            speedups[n] = (plain.tokens / plain.wall_s) / (alone.tokens / alone.wall_s)

    errors = [e for lv in levels.values() for e in lv.errors]
    finished = all(len(lv.results) == len(runs[lv.n]) for lv in levels.values())
    first = opts.concurrency[0]
    mismatched = [f"N={lv.n} [{lv.arm}] {tid}" for lv in levels.values() for tid, r in lv.results.items()
                  if tid in levels[(first, lv.arm)].results
                  and output_digest(r) != output_digest(levels[(first, lv.arm)].results[tid])]
    checks = [
        Check(name="every task finished", passed=finished and not errors,
              detail=f"{sum(len(lv.results) for lv in levels.values())} task runs, {len(errors)} raised"
                     + (f": {'; '.join(errors[:3])}" if errors else "")),
        Check(name="outputs independent of N", passed=not mismatched,
              detail=f"every arm's text at every N equals its text at N={first}" if not mismatched
              else "differs: " + ", ".join(mismatched[:5])),
    ]
    notes = ["Batched plain over turn-taking (plain_unbatched), tokens/s at the same N: "
             + ", ".join(f"N={n}: {r:.2f}x" for n, r in speedups.items()) + "."]
    crossing = _crossover(gains)
    if crossing:
        notes.append(crossing)
    notes.append("Records: scenarios/concurrency.json.")
    return ScenarioResult.from_checks(
        "concurrency", "Concurrent agents sharing one model: turn-taking, batching, speculation under load", checks,
        f"N = {', '.join(map(str, opts.concurrency))}; arms {', '.join(ARMS)}; throughput and latency in the table",
        columns=columns, rows=rows, notes=notes, wall_s=elapsed_s(ctx.clock, t0),
    )
