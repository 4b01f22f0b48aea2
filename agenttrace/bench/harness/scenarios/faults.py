"""Faults the agent must survive: a drafter that breaks mid-run, and a tool that hangs.

Drafter failure: prompt lookup wrapped so that, after its first `FAIL_AFTER` proposals, every
proposal raises. The decoding loop must catch it, finish the generation plainly and say so on the
span (`agenttrace.spec.fallback=true`, reason `drafter_error: RuntimeError`); since decoding is
greedy, every output must equal the baseline's, task by task.

Hanging tool: the weather tool replaced by one that blocks until the scenario releases it, with a
1 s timeout. The agent must record the timeout (`execute_tool` span with `error.type=timeout`,
attempt outcome `timeout`), retry or fail the step, and go on to the next task. The abandoned tool
threads are daemons that live until their tool returns (Python cannot stop a thread); the
scenario counts them while the tool hangs, releases the tool, and checks that they are all gone.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Sequence
from dataclasses import replace

from agenttrace import semconv as sc
from agenttrace.bench.harness.arms import build_model
from agenttrace.bench.harness.records import Check, ScenarioResult
from agenttrace.bench.harness.runner import output_digest
from agenttrace.bench.harness.scenarios.common import ScenarioContext, SpanCounter, new_threads, segment_spans
from agenttrace.clock import elapsed_s
from agenttrace.core.chat import GenerationParams
from agenttrace.report import report_from_files
from agenttrace.runtime.agent import Agent, TaskResult
from agenttrace.telemetry import Telemetry

FAIL_AFTER = 3
HANG_TIMEOUT_S = 1.0
HANGING_TASK = "weather-paris"
NEXT_TASK = "files-pancakes"  # another tool; the 135M model completes it


class FailingDrafter:
    """Proposes like `inner` until it has drafted tokens `fail_after` times, then raises on every
    call (a drafter that broke mid-run and stays broken)."""

    def __init__(self, inner, fail_after: int) -> None:
        self.inner = inner
        self.method = inner.method
        self.fail_after = fail_after
        self.drafted = 0
        self.failures = 0

    def propose(self, context: Sequence[int], k: int, params: GenerationParams):
        if self.drafted >= self.fail_after:
            self.failures += 1
            raise RuntimeError("injected drafter failure")
        draft = self.inner.propose(context, k, params)
        self.drafted += bool(draft.tokens)
        return draft

    def reset(self) -> None:
        self.inner.reset()


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run_drafter_failure(ctx: ScenarioContext) -> ScenarioResult:
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel

    t0 = ctx.clock.now_ns()
    suite = ctx.suites["tool_calls"]
    tasks = list(suite.tasks)
    random.Random(f"{ctx.opts.seed}-drafter-failure").shuffle(tasks)
    tasks = tasks[: ctx.opts.drafter_failure_tasks]
    cfg = ctx.config(suite)
    drafter = FailingDrafter(PromptLookupDrafter(), FAIL_AFTER)
    loaded = ctx.loaded
    # A fixed k and no cost-model fallback: which rounds run, and how wide, then depends on the
    # tokens alone, not on timings (an adaptive k follows the measured costs, and a verify pass of
    # another width rounds the logits differently, ~6e-5 here: on a busy machine a near-tie could
    # flip and the comparison with the baseline would measure the machine's load). The drafter's
    # failure falls back to plain decoding whatever `fallback` says.
    failing = LocalChatModel(loaded.model, loaded.tokenizer, name=loaded.name, drafter=drafter,
                             num_speculative_tokens=ctx.opts.prompt_lookup_k, adaptive=False, fallback=False)
    base_tel = Telemetry(service_name="agenttrace-bench", run_label="baseline", trace_file=ctx.out / "baseline.jsonl")
    fail_tel = Telemetry(service_name="agenttrace-bench", run_label="failing-drafter",
                         trace_file=ctx.out / "failing-drafter.jsonl")
    base_agent = suite.build_agent(build_model("baseline", loaded, ctx.opts), base_tel, config=cfg)
    fail_agent = suite.build_agent(failing, fail_tel, config=cfg)
    # The loop logs each drafter failure as a warning; here they are expected, so they are
    # counted rather than printed over the progress display.
    logger = logging.getLogger("agenttrace.generation.loop")
    handler = _Collect()
    warnings = handler.messages
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    pairs: list[tuple[TaskResult, TaskResult]] = []
    try:
        for task in tasks:
            ctx.tick(f"drafter failure: {task.id}")
            pairs.append((base_agent.run(task), fail_agent.run(task)))
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        base_tel.shutdown()
        fail_tel.shutdown()

    gens = [g for _, r in pairs for g in r.generations]
    after_failure = [g for g in gens if g.fallback_reason and g.fallback_reason.startswith("drafter_error")]
    mid = [g for g in after_failure if g.rounds]  # had verified rounds, then the drafter broke
    traced = [g for t in report_from_files([str(ctx.out / "failing-drafter.jsonl")]).tasks
              for s in t.steps for g in s.generations if g.fallback and (g.fallback_reason or "").startswith("drafter_error")]
    same = sum(output_digest(a) == output_digest(b) for a, b in pairs)
    same_outcome = sum(a.outcome == b.outcome and a.first_decision_correct == b.first_decision_correct for a, b in pairs)
    checks = [
        Check(name="failure injected mid-run", passed=drafter.failures > 0 and bool(mid),
              detail=f"the drafter raised {drafter.failures} time(s) after {FAIL_AFTER} drafts; "
                     f"{len(mid)} generation(s) had verified rounds before it broke"),
        Check(name="fell back to plain decoding", passed=len(after_failure) == drafter.failures and len(traced) == len(after_failure),
              detail=f"{len(after_failure)} generation(s) finished plainly with reason drafter_error "
                     f"({len(traced)} so marked in the trace); {len(warnings)} warning(s) logged"),
        Check(name="outputs unchanged", passed=same == len(pairs),
              detail=f"{same}/{len(pairs)} tasks produced exactly the baseline's text (greedy decoding)"),
        Check(name="same outcomes", passed=same_outcome == len(pairs),
              detail=f"{same_outcome}/{len(pairs)} tasks ended the same way, with the same correctness"),
    ]
    return ScenarioResult.from_checks(
        "drafter_failure", "Drafter failure injected mid-run", checks,
        f"{drafter.failures} drafter failures over {len(pairs)} tasks: plain decoding took over, "
        f"{same}/{len(pairs)} outputs identical to the baseline", wall_s=elapsed_s(ctx.clock, t0),
    )


def run_hanging_tool(ctx: ScenarioContext) -> ScenarioResult:
    t0 = ctx.clock.now_ns()
    suite = ctx.suites["tool_calls"]
    release = threading.Event()
    hung: list[threading.Thread] = []

    def hang(*args, **kwargs):
        hung.append(threading.current_thread())
        release.wait(600)
        raise RuntimeError("released by the scenario")

    tools = [replace(t, function=hang, timeout_s=HANG_TIMEOUT_S) if t.name == "weather" else t for t in suite.tools()]
    counter = SpanCounter()
    tel = Telemetry(service_name="agenttrace-bench", run_label="hanging-tool", trace_file=ctx.out / "hanging-tool.jsonl")
    tel.provider.add_span_processor(counter)
    cfg = ctx.config(suite)
    agent = Agent(build_model(ctx.opts.baseline, ctx.loaded, ctx.opts), tools, telemetry=tel,
                  examples=suite.examples, config=cfg)
    before = set(threading.enumerate())
    try:
        ctx.tick("hanging tool: the hanging task")
        s0 = ctx.clock.now_ns()
        first = agent.run(ctx.task("tool_calls", HANGING_TASK))
        hang_wall = elapsed_s(ctx.clock, s0)
        lingering = [t for t in hung if t.is_alive()]
        ctx.tick("hanging tool: the next task")
        second = agent.run(ctx.task("tool_calls", NEXT_TASK))
    finally:
        release.set()
        for t in hung:
            t.join(5)
        tel.shutdown()
    leaked = new_threads(before)
    spans = counter.ended
    timeouts = [s for s in segment_spans(spans, sc.Segment.TOOL)
                if (s.attributes or {}).get(sc.ERROR_TYPE) == sc.AttemptOutcome.TIMEOUT.value]
    attempts = [a for s in first.steps for a in s.attempts]
    timed_out = [a for a in attempts if a.outcome is sc.AttemptOutcome.TIMEOUT]
    retried = any(len(s.attempts) > 1 for s in first.steps)
    bound = cfg.deadline_s + HANG_TIMEOUT_S + 30 if cfg.deadline_s else 600.0
    checks = [
        Check(name="timeout recorded", passed=bool(timeouts) and len(timeouts) == len(timed_out),
              detail=f"{len(timeouts)} execute_tool span(s) with error.type=timeout, "
                     f"{len(timed_out)} attempt(s) with outcome timeout"),
        Check(name="retry or failure recorded", passed=retried or first.outcome is not sc.TaskOutcome.COMPLETED,
              detail=f"the hanging task took {len(attempts)} attempt(s) over {len(first.steps)} step(s) and ended "
                     f"{first.outcome.value}"),
        Check(name="the hanging task ended", passed=hang_wall < bound,
              detail=f"in {hang_wall:.1f} s (each hang costs the {HANG_TIMEOUT_S:g} s timeout)"),
        Check(name="the run went on", passed=second.outcome is sc.TaskOutcome.COMPLETED,
              detail=f"the next task ({second.task_id}) ended {second.outcome.value}"),
        Check(name="abandoned threads accounted for", passed=len(lingering) == len(timed_out) and not leaked,
              detail=f"{len(lingering)} tool thread(s) still blocked after the task (one per timeout, daemons, "
                     f"expected); after the tool was released: {', '.join(leaked) or 'none left'}"),
    ]
    return ScenarioResult.from_checks(
        "hanging_tool", "A tool that hangs", checks,
        f"{len(timeouts)} timeout(s) recorded, task ended {first.outcome.value} in {hang_wall:.1f} s, "
        f"the next task {second.outcome.value}", wall_s=elapsed_s(ctx.clock, t0),
    )
