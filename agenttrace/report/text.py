"""The report's figures as short text, shared by the terminal, Markdown and HTML renderings: times
in milliseconds, rates, distributions, the speculation line, the notes on inferred and absent
figures and the run summary's rows. Each figure is worded here once, whichever rendering shows it.

Text from a trace (task ids, run labels, span, tool and agent names, problems, sources) is data,
never markup: each rendering quotes it with its one helper here (`terminal_text`, `markdown_text`
and `markdown_code`, `html_text`), and `no_surrogates` makes any of it encodable.
"""

from __future__ import annotations

import html

from agenttrace.report.model import (
    SEGMENT_FIELDS,
    STAGE_LABELS,
    Distribution,
    RunFigures,
    SpecFigures,
    StepFigures,
    TaskFigures,
)

# A lone surrogate (valid JSON, no UTF-8) becomes U+FFFD: one definition, the trace readers'.
from agenttrace.traces.jsontext import SURROGATES as _SURROGATES
from agenttrace.traces.jsontext import no_surrogates

__all__ = [
    "dist", "html_text", "markdown_code", "markdown_text", "ms", "no_surrogates", "num", "pct", "segment_header",
    "spec_line", "step_label", "summary_grid", "summary_rows", "task_notes", "terminal_text",
]


# Characters a terminal acts on rather than shows: C0 controls but tab and newline (ESC starts ANSI
# and OSC sequences, BEL ends OSC, CR overwrites the line), DEL, C1 controls (0x9b is a one-byte
# CSI) and the bidirectional overrides that reorder what is shown. Written as their escapes.
_VISIBLE = {
    **_SURROGATES,
    **{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (0x09, 0x0A)},
    **{c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
}
# Markdown: one line, pipes and backslashes escaped for tables, no raw HTML or entities, no link
# or code syntax; `_` and `*` stay (intraword `_` is not emphasis, names like tool_call are common).
_MARKDOWN = {
    **_VISIBLE, 0x0A: " ", 0x0D: " ",
    **{ord(c): "\\" + c for c in "\\|`[]"}, ord("<"): "&lt;", ord(">"): "&gt;", ord("&"): "&amp;",
}


def terminal_text(text: object) -> str:
    """Trace text for a rich console: control and escape sequences shown as `\\x1b`, rich markup
    (`[/]`, `[bold]`) escaped so it prints as written."""
    from rich.markup import escape

    return escape(str(text).translate(_VISIBLE))


def markdown_text(text: object) -> str:
    """Trace text for a Markdown paragraph or table cell: shown as written, never as markup."""
    return str(text).translate(_MARKDOWN)


def markdown_code(text: object) -> str:
    """Trace text as a Markdown code span: a fence longer than any run of backticks in it."""
    s = str(text).translate({**_VISIBLE, 0x0A: " ", 0x0D: " "})
    run = longest = 0
    for c in s:
        run = run + 1 if c == "`" else 0
        longest = max(longest, run)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def html_text(text: object) -> str:
    """Trace text for HTML, in an element or a quoted attribute."""
    return html.escape(str(text).translate(_VISIBLE), quote=True)

# Shorter column headers for the segments whose name would widen a table column.
_HEADERS = {"generation": "gen rest", "validation": "valid", "network": "net", "compaction": "compact",
            "delegation": "delegate"}


def segment_header(segment: str) -> str:
    """A segment's column header: its name, or a shorter one."""
    return _HEADERS.get(segment, segment)


def ms(seconds: float | None) -> str:
    """Milliseconds with the precision a reader needs: 1234, 12.3, 0.04."""
    if seconds is None:
        return "-"
    v = seconds * 1e3
    if v >= 100:
        return f"{v:.0f}"
    if v >= 1:
        return f"{v:.1f}"
    return f"{v:.2f}" if v > 0 else "0"


def pct(x: float | None) -> str:
    """A rate as a whole percentage; `-` when there is none."""
    return "-" if x is None else f"{100 * x:.0f}%"


def num(x: float | None, digits: int) -> str:
    """A number with `digits` decimals; `-` when there is none."""
    return "-" if x is None else f"{x:.{digits}f}"


def dist(d: Distribution) -> str:
    """p50 / p95 (/ p99 when there are enough samples) in ms, with the count; `-` when empty."""
    if not d.count:
        return "-"
    text = f"p50 {ms(d.p50)} / p95 {ms(d.p95)}"
    if d.p99 is not None:
        text += f" / p99 {ms(d.p99)}"
    return f"{text} ms (n={d.count})"


def spec_line(spec: SpecFigures) -> str:
    """Generations, tokens, throughput and, for speculative ones, acceptance and fallbacks."""
    if not spec.generations:
        return "no generations"
    parts = [f"{spec.generations} generations, {spec.output_tokens} tokens"]
    if spec.tokens_per_s is not None:
        parts.append(f"{spec.tokens_per_s:.1f} tok/s")
    methods = [m for m in spec.methods if m != "none"]
    if methods and spec.rounds:
        parts.append(
            f"{'/'.join(methods)}: acceptance {pct(spec.acceptance_rate)} "
            f"({spec.accepted_tokens}/{spec.draft_tokens}), mean acceptance length {spec.mean_acceptance_length:.2f} "
            f"over {spec.rounds} rounds"
        )
    if spec.fallbacks:
        parts.append(f"{spec.fallbacks} fell back to plain decoding")
    return "; ".join(parts)


def step_label(step: StepFigures) -> str:
    """The step's index, starred when the step was inferred (see `task_notes`)."""
    return f"{step.index}*" if step.inferred else str(step.index)


def task_notes(task: TaskFigures) -> list[str]:
    """What the task's table cannot show as recorded: inferred figures and absent segments."""
    notes = []
    if task.not_inferred:
        notes.append("not inferred: " + "; ".join(f"{m.figure} ({m.reason})" for m in task.not_inferred))
    if task.inferred:
        notes.append("inferred, not recorded: " + ", ".join(task.inferred)
                     + (" (* steps inferred from the spans' order, SPANS.md)" if any(s.inferred for s in task.steps) else ""))
    if task.absent:
        notes.append("n/a: " + ", ".join(task.absent) + " (no span of this trace's instrumentation records them)")
    st = task.stages
    if task.compactions:
        again = "" if task.reprefill_tokens is None else (
            f"; then {task.reprefill_tokens} prompt tokens prefilled again ({1e3 * (task.reprefill_s or 0):.0f} ms)")
        notes.append(f"compaction: {task.compactions}x, {1e3 * st.compaction:.0f} ms between steps, the summary's "
                     f"generation included{again}")
    if task.sub_agents:
        notes.append(f"delegation: {task.sub_agents} sub-agent run(s), inside the steps above; the coordinator's own "
                     f"time (not waiting for a sub-agent) {1e3 * st.delegation_overhead:.0f} ms")
    if st.memory or st.compaction or st.delegation_overhead:
        notes.append("by stage: " + stage_line(st))
    return notes


def summary_rows(r: RunFigures) -> list[tuple[str, str]]:
    """The run summary as (figure, value) rows, in the order every rendering shows them."""
    total = r.segments.total() or 1.0
    shares = ", ".join(
        f"{segment_header(f)} {100 * getattr(r.segments, f) / total:.0f}%" for f in SEGMENT_FIELDS if getattr(r.segments, f) > 0
    )
    thr = "-" if r.decision_throughput is None else f"{r.decision_throughput:.3f} valid decisions/s"
    tasks = f"{r.tasks} ({r.completed} completed, {pct(r.completion_rate)})"
    if r.partial_tasks:
        tasks += f" + {r.partial_tasks} partial"
    rows = [
        ("tasks", tasks),
        ("attempts valid", f"{r.valid_attempts}/{r.attempts} ({pct(r.validity_rate)})"),
        ("steps needing a retry", f"{r.steps_with_retry}/{r.steps} ({pct(r.retry_share)})"),
        ("time lost to failed attempts", f"{r.retry_s:.2f} s of {r.segments.total():.2f} s"),
        ("decision throughput", thr),
        ("time to valid tool call (task)", dist(r.ttvtc)),
        ("time to valid tool call (step)", dist(r.step_ttvtc)),
        ("time to correct action", dist(r.time_to_correct_action)),
        ("task time", dist(r.task_wall)),
        ("step time", dist(r.step_wall)),
        ("decode time per token", dist(r.decode_s_per_token)),
        ("where the time went", shares or "-"),
        ("generation", spec_line(r.speculation)),
    ]
    if r.constrained_generations or r.constrain_fallbacks:
        rows.append(("constrained decoding", constrain_line(r)))
    if r.overlap_s > 0:
        rows.append(("in parallel, off the critical path", f"{r.overlap_s:.2f} s"))
    st = r.stages
    if st.memory or st.compaction or st.delegation_overhead or r.sub_agents:
        rows.append(("by stage (critical path)", stage_line(st)))
    if r.sub_agents:
        rows.append(("delegation", f"{r.sub_agents} sub-agent runs; coordinator's own time (not waiting for a "
                                   f"sub-agent) {st.delegation_overhead:.2f} s"))
    if r.compactions:
        rows.append(("compaction", f"{r.compactions} compactions, {st.compaction:.2f} s (summaries included); "
                                   f"then {r.reprefill_tokens} tokens prefilled again, {r.reprefill_s:.2f} s"))
    if r.not_inferred:
        rows.append(("not inferred", ", ".join(f"{figure} in {n} task(s)" for figure, n in r.not_inferred.items())
                     + " (each task's notes say why)"))
    if r.loops_detected:
        rows.append(("loops detected", f"{r.loops_detected} task(s) stopped repeating a tool call"))
    return rows


def stage_line(st) -> str:
    """`generation 61%, tool 3%, ...`: each stage's share of the critical path (StageTimes)."""
    total = st.total()
    if total <= 0:
        return "-"
    return ", ".join(f"{label} {100 * getattr(st, f) / total:.0f}%" for f, label in STAGE_LABELS.items())


def constraint_comparison(c) -> str | None:
    """One line for a comparison where either side decoded under a grammar: each side's
    constrained calls, and the validity and completion the constraint is there to change."""
    if not (c.a_run.constrained_generations or c.b_run.constrained_generations):
        return None

    def side(name: str, r: RunFigures) -> str:
        how = constrain_line(r) if r.constrained_generations else "unconstrained"
        return f"{name}: {how}; attempts valid {pct(r.validity_rate)}, tasks completed {pct(r.completion_rate)}"

    return f"constrained decoding - {side(c.a, c.a_run)} | {side(c.b, c.b_run)}"


def whatif_method(w) -> str:
    """A what-if's drafter, marked when its generations were constrained (their own what-if)."""
    return f"{w.method} (constrained)" if w.constrained else w.method


def constrain_line(r: RunFigures) -> str:
    """How many calls decoded under a grammar and what the grammar cost them."""
    segs = r.segments
    model = segs.model_time()
    parts = [f"{r.constrained_generations}/{r.generations} generations under a grammar",
             f"masks and compiling {1e3 * segs.constrain:.0f} ms ({pct(segs.constrain / model if model else None)} of model time)"]
    if r.drafts_cut:
        parts.append(f"{r.drafts_cut} drafted tokens refused before verification")
    if r.constrain_fallbacks:
        parts.append(f"{r.constrain_fallbacks} decoded unconstrained (grammar did not compile)")
    return "; ".join(parts)


def summary_grid(runs: list[RunFigures]) -> list[tuple[str, list[str]]]:
    """The summary of several runs side by side: each figure any run has, in order, with one value
    per run (`-` where a run lacks the figure, e.g. no parallel time)."""
    columns = [dict(summary_rows(r)) for r in runs]
    names = list(dict.fromkeys(name for col in columns for name in col))
    return [(name, [col.get(name, "-") for col in columns]) for name in names]


ROOFLINE_COLUMNS = ("run", "phase", "bound", "passes", "rows", "FLOP/byte", "GFLOP/s", "GB/s", "of roof")


def roofline_rows(roof) -> list[list[str]]:
    """The roofline table's rows (RooflineFigures), one per run label and phase."""
    return [[p.label or "-", p.phase, p.bound, str(p.passes), str(p.rows), f"{p.intensity:.2f}", f"{p.gflop_s:.1f}",
             f"{p.gb_s:.2f}", pct(p.roof_share)] for p in roof.points]


def roofline_line(roof) -> str:
    """The peaks and ridge point under the roofline table, and the batching figures."""
    parts = []
    if roof.peak_gb_s:
        parts.append(f"peaks measured on {roof.device}: {roof.peak_gflop_s:.0f} GFLOP/s (fp32 matmul), "
                     f"{roof.peak_gb_s:.1f} GB/s (read); ridge at {roof.ridge:.1f} FLOP/byte: a pass below it is "
                     "bound by memory, above it by compute")
    else:
        parts.append("no peaks recorded: intensities only")
    if roof.mean_batch_size is not None:
        parts.append(f"mean batch size {roof.mean_batch_size:.1f}")
    if roof.policies:
        parts.append("k policy: " + ", ".join(f"{k} ({v} generations)" for k, v in sorted(roof.policies.items())))
    return "; ".join(parts) + "."
