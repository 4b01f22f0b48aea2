"""The scenarios: what must hold besides speed before speculation is turned on. Each is a
module with `run(ctx) -> ScenarioResult`, whose checks decide its pass/fail line.

    cold_start       a fresh process to its first valid tool call, model cache warm and cold
    cancellation     cancelled mid-generation and mid-tool: spans closed, memory back, no threads left
    concurrency      N agents sharing one model: throughput and p95 against N, with and without speculation
    drafter_failure  a drafter that breaks mid-run: plain decoding takes over, outputs unchanged
    hanging_tool     a tool that never returns: timeout and retry recorded, the run goes on
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from agenttrace.bench.harness.records import ScenarioResult
from agenttrace.bench.harness.scenarios.common import ScenarioContext

MODULES = {
    "cold_start": "agenttrace.bench.harness.scenarios.cold_start",
    "cancellation": "agenttrace.bench.harness.scenarios.cancellation",
    "concurrency": "agenttrace.bench.harness.scenarios.concurrency",
    "drafter_failure": "agenttrace.bench.harness.scenarios.faults",
    "hanging_tool": "agenttrace.bench.harness.scenarios.faults",
}


def runner(name: str) -> Callable[[ScenarioContext], ScenarioResult]:
    """The `run` function of scenario `name` (ValueError naming the scenarios there are)."""
    if name not in MODULES:
        raise ValueError(f"unknown scenario {name!r}; the scenarios are {', '.join(MODULES)}")
    module = importlib.import_module(MODULES[name])
    return getattr(module, f"run_{name}")


__all__ = ["MODULES", "ScenarioContext", "runner"]


def expected_ticks(name: str, opts) -> int:
    """How many units of work scenario `name` reports to the progress display."""
    spec = 1 if len(opts.arms) > 1 else 0
    return {
        "cold_start": opts.cold_start_repeats * len(opts.arms) + (1 if opts.cold_cache and opts.model is None else 0),
        "cancellation": len(opts.arms) + 1,
        "concurrency": len(opts.concurrency) * 4,  # its four arms (concurrency.ARMS)
        "drafter_failure": opts.drafter_failure_tasks,
        "hanging_tool": 2,
    }[name]
