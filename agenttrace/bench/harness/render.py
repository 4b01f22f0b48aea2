"""The harness's tables, built once as text and rendered twice: to the terminal (rich) and to
Markdown (the report in the output folder, and the section of BENCHMARKS.md it replaces)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agenttrace.bench.harness.arm_figures import MIN_SAMPLES, ArmFigures, BenchFigures
from agenttrace.bench.harness.arms import describe_arm
from agenttrace.bench.harness.options import HarnessOptions
from agenttrace.bench.harness.records import Manifest, ScenarioResult
from agenttrace.generation.models import weights_label
from agenttrace.report.model import STAGE_FIELDS, STAGE_LABELS, Distribution


@dataclass
class TextTable:
    title: str
    columns: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)


def _s(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _pair(d: Distribution, scale: float = 1.0, digits: int = 2) -> str:
    if not d.count:
        return "-"
    return f"{d.p50 * scale:.{digits}f} / {d.p95 * scale:.{digits}f}"  # type: ignore[operator]


def _mib(x: int | None) -> str:
    return "-" if x is None else f"{x / 2**20:.0f}"


def headline(figs: BenchFigures, opts: HarnessOptions) -> TextTable:
    """Per suite, each arm against the baseline on what matters: a correct action, sooner."""
    rows = []
    for a in figs.arms:
        if a.arm == opts.baseline:
            continue
        base = figs.arm(a.suite, opts.baseline)
        vs = {v.figure: v.estimate for v in figs.versus if v.suite == a.suite and v.arm == a.arm}

        def cell(name: str) -> str:
            e = vs.get(name)
            if e is None or e.ratio is None:
                return "-"
            return f"{e.ratio:.2f} [{e.low:.2f}-{e.high:.2f}] {e.verdict}"

        rows.append([a.suite, a.arm, f"{_pct(base.correctness_rate if base else None)} -> {_pct(a.correctness_rate)}",
                     cell("time to correct action"), cell("time to valid tool call"), cell("task time"),
                     cell("time per output token")])
    return TextTable(
        "Headline: each arm against the baseline (arm / baseline: median of per-task-run ratios, 95% bootstrap "
        "interval)",
        ["suite", "arm", "correct (baseline -> arm)", "time to correct action", "time to valid tool call", "task time",
         "time per output token"], rows,
        ["Below 1 is faster. Each arm ran the same task runs as the baseline, so each figure is compared task "
         "run by task run (generation by generation for TTFT and time per token) and the interval comes from "
         f"resampling those pairs; with under {MIN_SAMPLES} pairs, the unpaired ratio of medians, and under "
         f"{MIN_SAMPLES} samples a side no verdict (too few). An interval containing 1.0 is noise: no gain or "
         "regression is claimed."],
    )


def latency_table(figs: BenchFigures) -> TextTable:
    rows = [[a.suite, a.arm, str(a.tasks), _pair(a.ttvtc), _pair(a.correct_action), _pair(a.task_wall),
             _pair(a.ttft, 1e3, 0), _pair(a.tpot, 1e3, 1), _s(a.tokens_per_s, 1)] for a in figs.arms]
    return TextTable("Latency per suite and arm (p50 / p95)",
                     ["suite", "arm", "task runs", "TTVTC s", "correct action s", "task s", "TTFT ms", "TPOT ms", "tok/s"],
                     rows, ["TTVTC: task start to the first valid tool call or answer; correct action: to the first "
                            "decision matching the task's expected call (tasks that reached one); TTFT: call start to "
                            "first token; TPOT: (end - first token) / (tokens - 1), per generation; tok/s: output "
                            "tokens over generation time."])


def _same(a: ArmFigures) -> str:
    return "-" if a.same_output is None else f"{a.same_output[0]}/{a.same_output[1]}"


def quality_table(figs: BenchFigures) -> TextTable:
    rows = []
    for a in figs.arms:
        energy = "no sensor" if a.energy_j_per_task is None else f"{a.energy_j_per_task:.1f} J ({a.power_w:.0f} W)"
        rows.append([a.suite, a.arm, _pct(a.completion_rate), _pct(a.validity_rate), f"{a.correct}/{a.checkable}",
                     _s(a.tool_calls_per_task, 1), _pct(a.lost_share), _pct(a.constrain_share), _same(a),
                     _pct(a.acceptance_rate), _s(a.mean_acceptance_length),
                     f"{a.fallbacks}/{a.generations}", _mib(a.peak_rss_bytes),
                     "no sensor" if a.peak_gpu_bytes is None else _mib(a.peak_gpu_bytes), energy])
    return TextTable("Quality, speculation and resources per suite and arm",
                     ["suite", "arm", "completed", "valid attempts", "correct", "calls/task", "lost to failed attempts",
                      "grammar mask / model time", "same text as reference",
                      "acceptance", "mean acc. len", "fallbacks/gens", "peak RSS MiB", "peak GPU MiB", "energy/task"],
                     rows, ["Correct: the final answer holds the expected value, or (tasks without one) the first call "
                            "is the expected call. Lost: wall time of attempts that failed over task time. Grammar "
                            "mask: the constrain segment over prefill + draft + verify + constrain + generation. Same "
                            "text: every attempt's output equals the reference arm's on that task (greedy decoding: "
                            "speculation must not change it); the reference of a constrained arm is the plain "
                            "constrained arm, so a change in validity or correctness between constrained and "
                            "unconstrained arms comes from the constraint, not from speculation."])


def stages_table(figs: BenchFigures) -> TextTable | None:
    """Where task time went by stage, per suite and arm, for suites whose agents remember,
    compact or delegate (None when none did)."""
    arms = [a for a in figs.arms if a.stages.memory or a.stages.compaction or a.stages.delegation_overhead
            or a.sub_agents or a.compactions]
    if not arms:
        return None
    rows = [[a.suite, a.arm, str(a.tasks), *(_pct(a.stages.share(f)) for f in STAGE_FIELDS),
             _pair(a.ttvtc), _pair(a.correct_action), str(a.compactions),
             f"{a.reprefill_tokens} ({a.reprefill_s:.1f} s)", str(a.sub_agents), str(a.loops_detected)]
            for a in arms]
    return TextTable(
        "Where task time went, by stage (share of the tasks' critical paths)",
        ["suite", "arm", "task runs", *STAGE_LABELS.values(), "TTVTC s", "correct action s", "compactions",
         "re-prefilled tokens", "sub-agent runs", "loops stopped"],
        rows,
        ["Stages are read off each task's critical path and sum to its time. Compaction counts the compact_context "
         "span whole, the generation that wrote its summary included; its second cost is the next generation's "
         "prefill of the tokens the cached prefix no longer covers (re-prefilled tokens, and their share of that "
         "prefill's measured time). In a task that delegates, the sub-agents' time goes to its stages and the "
         "coordinator's own time, memory aside, is delegation overhead: time in the coordinator not spent waiting "
         "for a sub-agent. TTVTC and correct action: p50 / p95 over task runs."],
    )


def versus_table(figs: BenchFigures) -> TextTable:
    rows = []
    for v in figs.versus:
        e = v.estimate
        unit = " s" if v.unit == "s" else ""
        rows.append([v.suite, v.arm, v.figure, _s(e.median_a, 3) + unit, _s(e.median_b, 3) + unit, _s(e.ratio),
                     "-" if e.low is None else f"{e.low:.2f}-{e.high:.2f}",
                     f"{e.n_a} pairs" if e.paired else f"{e.n_a}/{e.n_b}", e.verdict])
    return TextTable("Each arm against the baseline, figure by figure",
                     ["suite", "arm", "figure", "baseline p50", "arm p50", "ratio", "95% interval", "n", "verdict"], rows)


def scenario_tables(results: list[ScenarioResult]) -> list[TextTable]:
    out = []
    for r in results:
        checks = [[("PASS" if c.passed else "FAIL"), c.name, c.detail] for c in r.checks]
        out.append(TextTable(f"Scenario {r.name}: {'PASS' if r.passed else 'FAIL'} - {r.summary}",
                             ["", "check", "detail"], checks))
        if r.rows:
            out.append(TextTable(r.title, r.columns, r.rows, r.notes))
        elif r.notes:
            out[-1].notes += r.notes
    return out


def all_tables(figs: BenchFigures, scenarios: list[ScenarioResult], opts: HarnessOptions) -> list[TextTable]:
    tables = []
    if figs.arms:
        tables += [headline(figs, opts), latency_table(figs), quality_table(figs)]
        stages = stages_table(figs)
        tables += ([stages] if stages is not None else []) + [versus_table(figs)]
    return tables + scenario_tables(scenarios)


def pass_lines(scenarios: list[ScenarioResult]) -> list[str]:
    return [f"{r.name}: {'PASS' if r.passed else 'FAIL'} ({r.summary})" for r in scenarios]


# -- terminal --------------------------------------------------------------------------------
def to_terminal(console: Console, tables: list[TextTable], scenarios: list[ScenarioResult]) -> None:
    for t in tables:
        table = Table(title=escape(t.title), title_justify="left", caption=escape(" ".join(t.notes)) or None,
                      caption_justify="left")
        for i, c in enumerate(t.columns):
            table.add_column(c, justify="left" if i < 2 or c in ("check", "detail", "figure", "verdict") else "right",
                             overflow="fold")
        for row in t.rows:
            style = {"gain": "green", "regression": "red", "PASS": "green", "FAIL": "red"}.get(row[-1] if row else "", None)
            style = style or {"PASS": "green", "FAIL": "red"}.get(row[0] if row else "", None)
            table.add_row(*(escape(c) for c in row), style=style)
        console.print(table)
    for line in pass_lines(scenarios):
        console.print(("[green]" if ": PASS" in line else "[red]") + escape(line) + "[/]", highlight=False)


# -- Markdown --------------------------------------------------------------------------------
def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_markdown(t: TextTable, level: int) -> list[str]:
    out = [f"{'#' * level} {t.title}", ""]
    out.append("| " + " | ".join(_cell(c) for c in t.columns) + " |")
    out.append("| " + " | ".join("---" if i < 2 else "---:" for i in range(len(t.columns))) + " |")
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    out.append("")
    out += [f"{n}" for n in t.notes] + ([""] if t.notes else [])
    return out


def report_markdown(figs: BenchFigures, scenarios: list[ScenarioResult], opts: HarnessOptions, manifest: Manifest,
                    *, level: int = 1) -> str:
    """The whole report: how it was measured, the headline, the tables, the scenario verdicts."""
    h = "#" * level
    minutes = manifest.run_s / 60
    sessions = manifest.sessions or [f"{manifest.started}: {manifest.command}"]
    out = [f"{h} agenttrace bench on {opts.device}", "",
           f"- Command: `{manifest.command}`" + (
               "" if len(sessions) < 2 else "; resumed: " + "; ".join(f"`{s}`" for s in sessions[1:])),
           f"- Machine: {manifest.machine}",
           f"- Started: {manifest.started}; measuring took {minutes:.1f} min (all sessions of this output folder)",
           f"- Suites: {', '.join(opts.suites)}; {opts.tasks_per_suite} tasks per suite per repeat, {opts.repeats} "
           f"repeats (each repeat takes the next tasks of a seeded shuffle of the suite), arms in a shuffled order "
           f"for every task (seed {opts.seed})",
           "- Arms: " + "; ".join(f"{a} ({describe_arm(a, opts)})" for a in opts.arms),
           f"- Every arm: prefix cache {'on, ' + str(opts.prefix_cache_mb) + ' MiB per arm' if opts.prefix_cache_mb else 'off'}, "
           f"greedy, {opts.max_tokens} tokens per generation (more where a suite's agent asks for more), {opts.task_deadline_s:g} s per task, "
           f"torch threads: {opts.threads or 'torch default'}; weights: {weights_label(opts.dtype, opts.quantize)}"
           + ("; compiled decode path (torch.compile, static KV cache)" if opts.compiled else "")
           + (" (quality changes against an fp32 run of the same tasks come from quantization, not speculation)"
              if opts.quantize or opts.dtype != "float32" else ""),
           "- Sensors: " + "; ".join(f"{k}: {v}" for k, v in manifest.sensors.items()), ""]
    if scenarios:
        out += [f"{h}# Scenario verdicts", "", *(f"- {line}" for line in pass_lines(scenarios)), ""]
    for t in all_tables(figs, scenarios, opts):
        out += table_markdown(t, level + 1)
    if figs.problems:
        out += [f"{h}# Problems met while reading the traces", "", *(f"- {_cell(p)}" for p in figs.problems), ""]
    return "\n".join(out)


def update_section(path: Path, section: str, text: str) -> None:
    """Replace the text between `<!-- bench:SECTION:begin -->` and `<!-- bench:SECTION:end -->`
    in `path` (appending the markers and text when they are not there); the rest is kept."""
    begin, end = f"<!-- bench:{section}:begin -->", f"<!-- bench:{section}:end -->"
    doc = path.read_text(encoding="utf-8") if path.exists() else ""
    block = f"{begin}\n{text.rstrip()}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    doc = pattern.sub(lambda _: block, doc) if pattern.search(doc) else doc.rstrip() + ("\n\n" if doc else "") + block + "\n"
    path.write_text(doc, encoding="utf-8")
