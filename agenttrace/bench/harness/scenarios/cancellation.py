"""Cancellation: an agent task cancelled through asyncio mid-generation (each arm) and mid-tool.

The agent is warmed up first (one full run of the same task), so the memory snapshot before the
cancelled run is the steady state a served agent would be in. Then `Agent.arun` is cancelled at a
known moment: once the generation has produced a few tokens (the model wrapper signals it), or
once the tool has started (the tool signals it). Checks, per case: the task ended `cancelled`;
every span that opened also closed, the cancelled ones marked `error.type=cancelled`; live tensors
and resident memory are back to where they were (within the allocator's slack); no thread started
during the run is still alive once the event loop has shut down.

A running tool is not interrupted (Python cannot stop a thread): cancelling mid-tool takes effect
when the tool returns, before the next step. The scenario reports how long that took.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

from agenttrace import semconv as sc
from agenttrace.bench.harness.arms import build_model
from agenttrace.bench.harness.records import Check, ScenarioResult
from agenttrace.bench.harness.scenarios.common import (
    ScenarioContext,
    SpanCounter,
    WatchedModel,
    memory_back,
    memory_snapshot,
    new_threads,
    segment_spans,
)
from agenttrace.clock import Clock, elapsed_s
from agenttrace.runtime.agent import Agent
from agenttrace.telemetry import Telemetry

TASK_ID = "weather-paris"  # the 135M model calls the weather tool for it at the first attempt
TOOL_DELAY_S = 1.5


async def _cancel_when(agent: Agent, task, signal: threading.Event, clock: Clock) -> tuple[bool, bool, float]:
    """Run the task, cancel it once `signal` is set: (signal reached, cancelled, cancel latency s)."""
    signal.clear()
    run = asyncio.ensure_future(agent.arun(task))
    waiter = asyncio.ensure_future(asyncio.to_thread(signal.wait, 120))
    await asyncio.wait([run, waiter], return_when=asyncio.FIRST_COMPLETED)
    reached = signal.is_set() and not run.done()
    t0 = clock.now_ns()
    run.cancel()
    try:
        await run
        cancelled = False
    except asyncio.CancelledError:
        cancelled = True
    latency = elapsed_s(clock, t0)
    signal.set()  # release the waiter thread if the run ended on its own
    await waiter
    return reached, cancelled, latency


def _case(ctx: ScenarioContext, label: str, agent: Agent, counter: SpanCounter, tel: Telemetry, task,
          signal: threading.Event, where: str, caches: list) -> tuple[list[Check], float]:
    asyncio.run(agent.arun(task))  # warm-up: caches and lazy allocations in place before the snapshot
    tel.flush()
    before_mem = memory_snapshot(ctx.opts.device, caches)
    before_threads = set(threading.enumerate())
    n0 = len(counter.ended)
    started0 = counter.started
    reached, cancelled, latency = asyncio.run(_cancel_when(agent, task, signal, ctx.clock))
    tel.flush()
    after_mem = memory_snapshot(ctx.opts.device, caches)
    leaked = new_threads(before_threads)
    spans = counter.since(n0)
    opened = counter.started - started0
    agent_spans = segment_spans(spans, sc.Segment.AGENT)
    outcome = (agent_spans[-1].attributes or {}).get(sc.TASK_OUTCOME) if agent_spans else None
    marked = [s for s in spans if (s.attributes or {}).get(sc.ERROR_TYPE) == sc.ERROR_CANCELLED]
    where_span = segment_spans(spans, sc.Segment.GENERATION if where == "generation" else sc.Segment.TOOL)
    mem_ok, mem_detail = memory_back(before_mem, after_mem)
    checks = [
        Check(name=f"{label}: cancelled mid-{where}", passed=reached and cancelled,
              detail=f"{where} under way when cancelled: {'yes' if reached else 'no (the run ended first)'}; "
                     f"awaiting the task raised CancelledError: {'yes' if cancelled else 'no'}; "
                     f"took effect after {latency:.2f} s"),
        Check(name=f"{label}: spans closed", passed=opened == len(spans) and outcome == sc.TaskOutcome.CANCELLED.value
              and bool(marked) and bool(where_span),
              detail=f"{opened} opened, {len(spans)} closed; task outcome {outcome}; "
                     f"{len(marked)} span(s) marked error.type=cancelled"),
        Check(name=f"{label}: memory back", passed=mem_ok, detail=mem_detail),
        Check(name=f"{label}: no leaked threads", passed=not leaked,
              detail="none" if not leaked else "still alive: " + ", ".join(leaked)),
    ]
    return checks, latency


def run_cancellation(ctx: ScenarioContext) -> ScenarioResult:
    suite = ctx.suites["tool_calls"]
    task = ctx.task("tool_calls", TASK_ID)
    cfg = ctx.config(suite)
    checks: list[Check] = []
    notes = []
    t0 = ctx.clock.now_ns()
    for arm in ctx.opts.arms:
        ctx.tick(f"cancellation: mid-generation [{arm}]")
        watched = WatchedModel(build_model(arm, ctx.loaded, ctx.opts))
        counter = SpanCounter()
        tel = Telemetry(service_name="agenttrace-bench", run_label=f"cancel-generation-{arm}",
                        trace_file=ctx.out / f"generation-{arm}.jsonl")
        tel.provider.add_span_processor(counter)
        agent = suite.build_agent(watched, tel, config=cfg)
        case, _ = _case(ctx, f"mid-generation [{arm}]", agent, counter, tel, task, watched.reached, "generation",
                        [watched.inner.prefix_cache])
        checks += case
        tel.shutdown()

    ctx.tick("cancellation: mid-tool")
    started = threading.Event()
    tools = []
    for tool in suite.tools():
        if tool.name == "weather":
            inner = tool.function

            def slow(*args, _inner=inner, **kwargs):
                started.set()
                time.sleep(TOOL_DELAY_S)
                return _inner(*args, **kwargs)

            tool = replace(tool, function=slow, timeout_s=TOOL_DELAY_S + 5)
        tools.append(tool)
    counter = SpanCounter()
    tel = Telemetry(service_name="agenttrace-bench", run_label="cancel-tool", trace_file=ctx.out / "tool.jsonl")
    tel.provider.add_span_processor(counter)
    model = build_model(ctx.opts.baseline, ctx.loaded, ctx.opts)
    agent = Agent(model, tools, telemetry=tel, examples=suite.examples, config=cfg)
    case, latency = _case(ctx, "mid-tool", agent, counter, tel, task, started, "tool", [model.prefix_cache])
    checks += case
    tel.shutdown()
    notes.append(f"Mid-tool, the cancel took effect {latency:.2f} s after it was requested: the running tool "
                 f"(sleeping {TOOL_DELAY_S} s) is not interrupted, the task stops before its next step.")
    passed = sum(c.passed for c in checks)
    return ScenarioResult.from_checks(
        "cancellation", "Cancellation mid-generation and mid-tool", checks,
        f"{passed}/{len(checks)} checks: spans closed, memory back, no leaked threads "
        f"({len(ctx.opts.arms)} arm(s) mid-generation, one run mid-tool)",
        notes=notes, wall_s=elapsed_s(ctx.clock, t0),
    )
