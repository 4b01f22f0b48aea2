"""Cold start: a fresh process, from its start to the first valid tool call.

Each start is `python -m agenttrace.bench.harness.coldstart_child` (imports, model load, one
tool-call task), timed from just before the parent starts it, on `default_clock()` in both
processes (epoch-aligned nanoseconds: one time base across processes, as spans are). Warm: the
converted model is in the cache (the usual case), `cold_start_repeats` times per arm. Cold: a
fresh, empty AGENTTRACE_CACHE_DIR, so the bundled GGUF is converted first (about 30 s); once, with
the baseline arm, since the conversion does not depend on the arm. The operating system's page
cache is not dropped (that needs root and disturbs the other users of the machine): "cold" is the
model cache, not the disk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agenttrace.bench.harness.records import Check, ScenarioResult
from agenttrace.bench.harness.scenarios.common import ScenarioContext
from agenttrace.clock import default_clock, elapsed_s
from agenttrace.report.stats import distribution

TASK_ID = "weather-paris"
START_TIMEOUT_S = 600


@dataclass
class Start:
    arm: str
    cache: str  # "warm" or "cold"
    ok: bool
    total_s: float | None  # process start -> first valid tool call
    python_s: float | None  # process start -> our module running
    imports_s: float | None
    load_s: float | None
    first_call_s: float | None  # agent start -> first valid tool call
    converted: bool
    error: str = ""
    tokenizer_s: float | None = None  # of load_s: the tokenizer
    weights_s: float | None = None  # of load_s: reading (and converting, quantizing, caching) the weights
    agent_s: float | None = None  # model loaded -> agent built (its tools, its constraint)
    unaccounted_s: float | None = None  # total - every part above (the child's exit is not in the total)


def _start(ctx: ScenarioContext, arm: str, cache_dir: str | None) -> Start:
    cache = "cold" if cache_dir else "warm"
    env = dict(os.environ)
    if cache_dir:
        env["AGENTTRACE_CACHE_DIR"] = cache_dir
    # The child imports this checkout (cwd first on sys.path with -m), like the parent did.
    root = str(Path(__file__).resolve().parents[4])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "start.json"
        cmd = [sys.executable, "-m", "agenttrace.bench.harness.coldstart_child", "--options",
               json.dumps(ctx.opts.to_json()), "--arm", arm, "--task", TASK_ID, "--result", str(result)]
        # the real clock, not ctx.clock: the child's readings are on it, across the process boundary
        t0 = default_clock().now_ns()
        try:
            proc = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return Start(arm, cache, False, None, None, None, None, None, False, f"no result in {START_TIMEOUT_S} s")
        if proc.returncode != 0 or not result.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return Start(arm, cache, False, None, None, None, None, None, False,
                         f"exit status {proc.returncode}: {tail[0][:200]}")
        r = json.loads(result.read_text())
    s = lambda a, b: (r[b] - a) / 1e9  # noqa: E731
    first = r["first_valid_ns"]
    phases = r.get("load_phases_s") or {}
    start = Start(
        arm, cache, first is not None, s(t0, "first_valid_ns") if first else None, s(t0, "main_ns"),
        (r["imports_ns"] - r["main_ns"]) / 1e9, (r["loaded_ns"] - r["imports_ns"]) / 1e9,
        (first - r["agent_ns"]) / 1e9 if first else None, bool(r["converted"]),
        "" if first else f"no valid tool call (task {r['outcome']})",
        tokenizer_s=phases.get("tokenizer"),
        weights_s=sum(v for k, v in phases.items() if k != "tokenizer" and not k.startswith("import")),
        agent_s=(r["agent_ns"] - r["loaded_ns"]) / 1e9,
    )
    if start.total_s is not None:
        parts = (start.python_s, start.imports_s, start.load_s, start.agent_s, start.first_call_s)
        start.unaccounted_s = start.total_s - sum(p or 0.0 for p in parts)
    return start


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def run_cold_start(ctx: ScenarioContext) -> ScenarioResult:
    t0 = ctx.clock.now_ns()
    opts = ctx.opts
    starts: list[Start] = []
    for rep in range(opts.cold_start_repeats):
        for arm in opts.arms:
            ctx.tick(f"cold start: warm cache [{arm}] {rep + 1}/{opts.cold_start_repeats}")
            starts.append(_start(ctx, arm, None))
    notes = []
    if opts.cold_cache and opts.model is None:
        ctx.tick("cold start: cold cache (converting the GGUF)")
        with tempfile.TemporaryDirectory(prefix="agenttrace-cold-") as cache_dir:
            starts.append(_start(ctx, opts.baseline, cache_dir))
    elif opts.cold_cache:
        notes.append("No cold-cache start: a model given by path is not converted, so its cache state is the disk's.")

    columns = ["cache", "arm", "starts", "to first valid call s (p50)", "max s", "python s", "imports s", "load s",
               "of which tokenizer s", "of which weights s", "agent s", "first call s", "unaccounted s", "converted"]
    rows = []
    for cache in ("warm", "cold"):
        for arm in opts.arms:
            group = [x for x in starts if x.cache == cache and x.arm == arm]
            if not group:
                continue
            total = distribution(x.total_s for x in group)
            med = lambda attr: distribution(getattr(x, attr) for x in group).p50  # noqa: E731
            rows.append([cache, arm, f"{sum(x.ok for x in group)}/{len(group)}", _f(total.p50), _f(total.max),
                         _f(med("python_s")), _f(med("imports_s")), _f(med("load_s")), _f(med("tokenizer_s")),
                         _f(med("weights_s")), _f(med("agent_s")), _f(med("first_call_s")), _f(med("unaccounted_s")),
                         "yes" if any(x.converted for x in group) else "no"])
    failed = [x for x in starts if not x.ok]
    cold = [x for x in starts if x.cache == "cold"]
    checks = [Check(name="every start reached a valid tool call", passed=not failed,
                    detail=f"{len(starts) - len(failed)}/{len(starts)} starts"
                    + (": " + "; ".join(f"{x.cache} [{x.arm}] {x.error}" for x in failed[:3]) if failed else ""))]
    if cold:
        checks.append(Check(name="the cold start converted the model", passed=all(x.converted for x in cold),
                            detail="the GGUF was converted into the empty cache" if all(x.converted for x in cold)
                            else "the cold start found a converted model"))
    warm = distribution(x.total_s for x in starts if x.cache == "warm")
    summary = f"warm cache: p50 {_f(warm.p50)} s to the first valid tool call"
    if cold and cold[0].total_s is not None:
        summary += f"; cold cache: {_f(cold[0].total_s)} s"
    return ScenarioResult.from_checks("cold_start", "Cold start: process start to first valid tool call", checks,
                                      summary, columns=columns, rows=rows, notes=notes, wall_s=elapsed_s(ctx.clock, t0))
