"""The process `agenttrace bench` starts to measure cold start: import, load the model, run one
task's first step (where its first valid tool call is), and write when each of those happened, on `agenttrace.clock`'s real clock (epoch-aligned
nanoseconds, the time base every process's spans share, so the parent can subtract the moment it
started this one).

    python -m agenttrace.bench.harness.coldstart_child --options JSON --arm ARM --task ID --result FILE
"""

from __future__ import annotations

from agenttrace.clock import default_clock  # standard library only: nothing heavy before _T_MAIN

_T_MAIN = default_clock().now_ns()  # the interpreter is up and this module is being imported

import argparse
import json
import sys
from dataclasses import replace

from agenttrace.bench.harness.options import HarnessOptions


def _first_valid_call_s(trace: str) -> tuple[float | None, str | None]:
    """(the task's time to valid tool call, its outcome) as the report computes them from the
    trace, so the cold start's first valid call is SPANS.md's TTVTC, defined in one place."""
    from agenttrace.report.build import report_from_files

    tasks = report_from_files([trace]).tasks
    return (tasks[0].ttvtc_s, tasks[0].outcome) if tasks else (None, None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="coldstart_child")
    p.add_argument("--options", required=True)
    p.add_argument("--arm", required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--result", required=True)
    args = p.parse_args(argv)

    opts = HarnessOptions.from_json(json.loads(args.options))
    import torch  # (what every start pays: torch, the backend's library, the package)

    if opts.backend == "torch":
        import transformers  # noqa: F401  (imported for its cost, as every start on this backend pays it)
    else:
        from agenttrace.generation import llama_backend  # noqa: F401  (the library it opens)

    from agenttrace.bench.harness.arms import build_model, load_for
    from agenttrace.bench.workloads import load_suite
    from agenttrace.testing import capture_telemetry

    clock = default_clock()
    t_imports = clock.now_ns()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    loaded = load_for(opts)
    t_loaded = clock.now_ns()
    suite = load_suite("tool_calls")
    task = next(t for t in suite.tasks if t.id == args.task)
    trace = args.result + ".trace.jsonl"
    tel, _ = capture_telemetry(clock, trace_file=trace)  # real clock; the report reads the file after
    # One step: the first valid tool call is in it, and what the task does after it is no part of
    # a cold start (the rest of the task took longer than the start itself).
    agent = suite.build_agent(build_model(args.arm, loaded, opts), tel, config=replace(suite.config, max_steps=1))
    t_agent = clock.now_ns()
    agent.run(task)
    t_end = clock.now_ns()
    tel.shutdown()
    ttvtc, outcome = _first_valid_call_s(trace)
    result = {
        "main_ns": _T_MAIN, "imports_ns": t_imports, "loaded_ns": t_loaded, "agent_ns": t_agent, "end_ns": t_end,
        "first_valid_ns": None if ttvtc is None else t_agent + int(ttvtc * 1e9),
        "converted": loaded.converted, "outcome": outcome, "load_phases_s": loaded.phases_s,
    }
    with open(args.result, "w", encoding="utf-8") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
