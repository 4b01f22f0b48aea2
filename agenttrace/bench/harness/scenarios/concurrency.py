"""N agents sharing one model: throughput and p95 latency against N, with and without speculation.

At each level N, the same tasks are served by N agent threads pulling from one queue: the first
`concurrency_tasks` of the tool-call suite's weather and file-search tasks (seeded order). Those are
the short calls the 135M model completes; its calculator and unit tasks often retry until the step
budget runs out, which would measure retries rather than load. The weights are shared (one loaded torch model); each thread has
its own `LocalChatModel`, so its prefix cache and k controller are its own and no state is shared
between threads but the read-only weights. Levels and arms alternate in a seeded order.

The baseline arm and the first speculative arm run at every level. Per level: throughput (tasks
and output tokens per second of the level's wall time), p50/p95 task time and p95 time to valid
tool call (from the level's trace), and the speculative arm's task time against the baseline's,
task by task (the median of per-task ratios with its bootstrap interval), which shows whether the
gain from speculation shrinks under load.
Greedy decoding gives every thread the same outputs at every N, which is checked: a difference
would mean the threads disturb each other.
"""

from __future__ import annotations

import queue
import random
import threading
from dataclasses import dataclass

from agenttrace.bench.harness.arms import build_model
from agenttrace.bench.harness.figures import paired_estimate
from agenttrace.bench.harness.records import Check, ScenarioResult
from agenttrace.bench.harness.runner import output_digest
from agenttrace.bench.harness.scenarios.common import ScenarioContext
from agenttrace.clock import elapsed_s
from agenttrace.report import report_from_files
from agenttrace.report.stats import distribution
from agenttrace.runtime.agent import TaskResult
from agenttrace.telemetry import Telemetry

WORKLOAD_TOOLS = ("weather", "search_files")


@dataclass
class Level:
    n: int
    arm: str
    wall_s: float
    results: dict[str, TaskResult]
    errors: list[str]
    task_s: dict[str, float]  # by task id
    ttvtc_s: list[float]
    tokens: int


def _serve(ctx: ScenarioContext, n: int, arm: str, tasks) -> Level:
    suite = ctx.suites["tool_calls"]
    path = ctx.out / f"n{n}-{arm}.jsonl"
    tel = Telemetry(service_name="agenttrace-bench", run_label=f"n{n}-{arm}", trace_file=path)
    agents = [suite.build_agent(build_model(arm, ctx.loaded, ctx.opts), tel, config=ctx.config(suite, arm)) for _ in range(n)]
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
    t0 = ctx.clock.now_ns()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = elapsed_s(ctx.clock, t0)
    tel.shutdown()
    figures = report_from_files([str(path)]).tasks
    tokens = sum(g.output_tokens for r in results.values() for g in r.generations)
    return Level(n, arm, wall, results, errors, {t.task_id: t.wall_s for t in figures},
                 [t.ttvtc_s for t in figures if t.ttvtc_s is not None], tokens)


def _versus(base: dict[str, float], arm: dict[str, float], seed: int):
    """The same tasks at the same N: paired by task (unpaired when too few line up)."""
    return paired_estimate({t: [x] for t, x in base.items()}, {t: [x] for t, x in arm.items()}, seed)


def _trend(first: tuple, last: tuple) -> str:
    """Whether the ratio moved between the lowest and the highest N by more than the noise: only
    when their intervals do not overlap is a change claimed."""
    (n0, r0, _, lo0, hi0), (n1, r1, _, lo1, hi1) = first, last
    if lo1 > hi0:
        return f"The gain from speculation shrinks from N={n0} to N={n1} ({r0:.2f} -> {r1:.2f}, intervals apart)."
    if hi1 < lo0:
        return f"The gain from speculation grows from N={n0} to N={n1} ({r0:.2f} -> {r1:.2f}, intervals apart)."
    return (f"From N={n0} to N={n1} the ratio moves {r0:.2f} -> {r1:.2f}, within the intervals: no change in the gain "
            "from speculation is claimed.")


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def run_concurrency(ctx: ScenarioContext) -> ScenarioResult:
    t0 = ctx.clock.now_ns()
    opts = ctx.opts
    spec = next((a for a in opts.arms[1:]), None)
    arms = [opts.baseline] + ([spec] if spec else [])
    tasks = [t for t in ctx.suites["tool_calls"].tasks
             if t.expected_call is not None and t.expected_call.tool in WORKLOAD_TOOLS]
    random.Random(f"{opts.seed}-concurrency").shuffle(tasks)
    tasks = tasks[: opts.concurrency_tasks]
    rng = random.Random(f"{opts.seed}-concurrency-order")
    levels: dict[tuple[int, str], Level] = {}
    for n in opts.concurrency:
        order = list(arms)
        rng.shuffle(order)
        for arm in order:
            ctx.tick(f"concurrency: N={n} [{arm}]")
            levels[(n, arm)] = _serve(ctx, n, arm, tasks)

    columns = ["N", "arm", "tasks", "wall s", "tasks/s", "tokens/s", "p50 task s", "p95 task s", "p95 TTVTC s",
               "task time vs baseline", "verdict"]
    rows = []
    gains = []
    for n in opts.concurrency:
        for arm in arms:
            lv = levels[(n, arm)]
            d, v = distribution(lv.task_s.values()), distribution(lv.ttvtc_s)
            ratio, verdict = "-", "-"
            if arm != opts.baseline:
                est = _versus(levels[(n, opts.baseline)].task_s, lv.task_s, opts.seed)
                if est.ratio is not None:
                    ratio = f"{est.ratio:.2f} [{est.low:.2f}-{est.high:.2f}]"
                    gains.append((n, est.ratio, est.verdict, est.low, est.high))
                verdict = est.verdict
            rows.append([str(n), arm, str(len(lv.results)), f"{lv.wall_s:.1f}", f"{len(lv.results) / lv.wall_s:.3f}",
                         f"{lv.tokens / lv.wall_s:.1f}", _s(d.p50), _s(d.p95), _s(v.p95), ratio, verdict])

    errors = [e for lv in levels.values() for e in lv.errors]
    finished = all(len(lv.results) == len(tasks) for lv in levels.values())
    first = opts.concurrency[0]
    mismatched = [f"N={lv.n} [{lv.arm}] {tid}" for lv in levels.values() for tid, r in lv.results.items()
                  if tid in levels[(first, lv.arm)].results and output_digest(r) != output_digest(levels[(first, lv.arm)].results[tid])]
    checks = [
        Check(name="every task finished", passed=finished and not errors,
              detail=f"{sum(len(lv.results) for lv in levels.values())} task runs, {len(errors)} raised"
                     + (f": {'; '.join(errors[:3])}" if errors else "")),
        Check(name="outputs independent of N", passed=not mismatched,
              detail="every task's text equals its text at N=" + str(first) if not mismatched
              else "differs: " + ", ".join(mismatched[:5])),
    ]
    notes = []
    if gains:
        trend = ", ".join(f"N={n}: {r:.2f} ({v})" for n, r, v, _, _ in gains)
        notes.append(f"{spec} task time over the baseline's, task by task (median of per-task ratios, 95% bootstrap "
                     f"interval; below 1 is a gain), by N: {trend}.")
        if len(gains) > 1:
            notes.append(_trend(gains[0], gains[-1]))
    base_tp = [len(levels[(n, opts.baseline)].results) / levels[(n, opts.baseline)].wall_s for n in opts.concurrency]
    notes.append("Baseline throughput by N (tasks/s): " + ", ".join(f"{n}: {tp:.3f}" for n, tp in zip(opts.concurrency, base_tp)))
    return ScenarioResult.from_checks(
        "concurrency", "Concurrent agents sharing one model", checks,
        f"N = {', '.join(map(str, opts.concurrency))}: {len(tasks)} tasks per level and arm; "
        f"throughput and latency in the table",
        columns=columns, rows=rows, notes=notes, wall_s=elapsed_s(ctx.clock, t0),
    )
