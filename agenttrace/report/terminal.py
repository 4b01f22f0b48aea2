"""The report in the terminal: one table per task (a row per step), then the run's summary."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agenttrace.report.model import (
    SEGMENT_FIELDS,
    Comparison,
    Distribution,
    Report,
    RunFigures,
    SegmentTimes,
    SpecFigures,
    StepFigures,
    TaskFigures,
    WhatIf,
)
from agenttrace.report.seen import input_lines, no_tasks_message

# Always shown (the list); memory, compaction and delegation only when a task has them.
_CORE = ("prefill", "draft", "verify", "generation", "parse", "validation", "tool", "network", "other")
_HEADERS = {"generation": "gen rest", "validation": "valid", "network": "net", "compaction": "compact",
            "delegation": "delegate"}


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


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _columns(task: TaskFigures) -> list[str]:
    extra = [f for f in SEGMENT_FIELDS if f not in _CORE and getattr(task.segments, f) > 0]
    return [*_CORE[:-1], *extra, "other"]


def _seg_cells(segs: SegmentTimes, cols: list[str], absent: list[str] = ()) -> list[str]:
    return ["n/a" if c in absent else ms(getattr(segs, c)) for c in cols]


def spec_line(spec: SpecFigures) -> str:
    if not spec.generations:
        return "no generations"
    parts = [f"{spec.generations} generations, {spec.output_tokens} tokens"]
    if spec.tokens_per_s is not None:
        parts.append(f"{spec.tokens_per_s:.1f} tok/s")
    methods = [m for m in spec.methods if m != "none"]
    if methods and spec.rounds:
        parts.append(
            f"{'/'.join(methods)}: acceptance {_pct(spec.acceptance_rate)} "
            f"({spec.accepted_tokens}/{spec.draft_tokens}), mean acceptance length {spec.mean_acceptance_length:.2f} "
            f"over {spec.rounds} rounds"
        )
    if spec.fallbacks:
        parts.append(f"{spec.fallbacks} fell back to plain decoding")
    return "; ".join(parts)


def task_table(task: TaskFigures) -> Table:
    cols = _columns(task)
    label = f" [{task.run_label}]" if task.run_label else ""
    partial = " (partial: agent span missing)" if task.partial else ""
    title = f"task {task.task_id}{label}{partial}: {task.outcome}, {task.wall_s:.2f} s"
    if task.ttvtc_s is not None:
        title += f", TTVTC {ms(task.ttvtc_s)} ms"
    if task.time_to_correct_action_s is not None:
        title += f", correct action {ms(task.time_to_correct_action_s)} ms"
    if task.overlap_s > 0:
        title += f", {ms(task.overlap_s)} ms in parallel branches off the critical path"
    caption = spec_line(task.speculation)
    notes = task_notes(task)
    if notes:
        caption += "\n" + "\n".join(notes)
    # trace text is not markup: a run label "[speculative]" must show, not style
    table = Table(title=escape(title), title_justify="left", caption=escape(caption), caption_justify="left")
    table.add_column("step", justify="right")
    table.add_column("outcome")
    table.add_column("att", justify="right")
    table.add_column("wall", justify="right")
    table.add_column("TTVTC", justify="right")
    for c in cols:
        table.add_column(_HEADERS.get(c, c), justify="right")
    table.add_column("retry", justify="right")
    for s in task.steps:
        table.add_row(
            step_label(s), s.outcome, str(s.attempts), ms(s.wall_s), ms(s.ttvtc_s),
            *_seg_cells(s.segments, cols, task.absent), ms(s.retry_s),
        )
    table.add_section()
    table.add_row(
        "task", task.outcome, str(task.attempts), ms(task.wall_s), ms(task.ttvtc_s),
        *_seg_cells(task.segments, cols, task.absent), ms(task.retry_s), style="bold",
    )
    return table


def step_label(step: StepFigures) -> str:
    """The step's index, starred when the step was inferred (see `task_notes`)."""
    return f"{step.index}*" if step.inferred else str(step.index)


def task_notes(task: TaskFigures) -> list[str]:
    """What the task's table cannot show as recorded: inferred figures and absent segments."""
    notes = []
    if task.inferred:
        notes.append("inferred, not recorded: " + ", ".join(task.inferred)
                     + (" (* steps inferred from the spans' order, SPANS.md)" if any(s.inferred for s in task.steps) else ""))
    if task.absent:
        notes.append("n/a: " + ", ".join(task.absent) + " (no span of this trace's instrumentation records them)")
    return notes


def _dist(d: Distribution) -> str:
    if not d.count:
        return "-"
    text = f"p50 {ms(d.p50)} / p95 {ms(d.p95)}"
    if d.p99 is not None:
        text += f" / p99 {ms(d.p99)}"
    return f"{text} ms (n={d.count})"


def _summary_rows(r: RunFigures) -> list[tuple[str, str]]:
    total = r.segments.total() or 1.0
    shares = ", ".join(
        f"{_HEADERS.get(f, f)} {100 * getattr(r.segments, f) / total:.0f}%" for f in SEGMENT_FIELDS if getattr(r.segments, f) > 0
    )
    thr = "-" if r.decision_throughput is None else f"{r.decision_throughput:.3f} valid decisions/s"
    tasks = f"{r.tasks} ({r.completed} completed, {_pct(r.completion_rate)})"
    if r.partial_tasks:
        tasks += f" + {r.partial_tasks} partial"
    rows = [
        ("tasks", tasks),
        ("attempts valid", f"{r.valid_attempts}/{r.attempts} ({_pct(r.validity_rate)})"),
        ("steps needing a retry", f"{r.steps_with_retry}/{r.steps} ({_pct(r.retry_share)})"),
        ("time lost to failed attempts", f"{r.retry_s:.2f} s of {r.segments.total():.2f} s"),
        ("decision throughput", thr),
        ("time to valid tool call (task)", _dist(r.ttvtc)),
        ("time to valid tool call (step)", _dist(r.step_ttvtc)),
        ("time to correct action", _dist(r.time_to_correct_action)),
        ("task time", _dist(r.task_wall)),
        ("step time", _dist(r.step_wall)),
        ("decode time per token", _dist(r.decode_s_per_token)),
        ("where the time went", shares or "-"),
        ("generation", spec_line(r.speculation)),
    ]
    if r.overlap_s > 0:
        rows.append(("in parallel, off the critical path", f"{r.overlap_s:.2f} s"))
    return rows


def summary_table(report: Report) -> Table:
    """The run summary; with several run labels, one column per label."""
    runs = report.by_label if len(report.by_label) > 1 else [report.run]
    t = Table(title="run summary", title_justify="left", show_header=len(runs) > 1)
    t.add_column("figure")
    for r in runs:
        t.add_column(r.label or "value")
    columns = [_summary_rows(r) for r in runs]
    for i, (name, _) in enumerate(columns[0]):
        t.add_row(name, *(col[i][1] for col in columns))
    return t


def inputs_table(report: Report) -> Table:
    """Per input: the conventions recognised (spans per segment), what was left out and why,
    and what was inferred."""
    t = Table(title="what was read", title_justify="left")
    for col in ("input", "recognised (spans mapped per segment)", "left out", "inferred"):
        t.add_column(col, overflow="fold")
    for inp in report.inputs:
        lines = input_lines(inp)
        t.add_row(*(escape(x) for x in (lines.source, "\n".join(lines.recognised) or "-", "\n".join(lines.left_out) or "-",
                                       lines.inferred or "-")))
    return t


def whatif_table(whatifs: list[WhatIf]) -> Table:
    """Expected speedup for k = 1..10 per drafter, and where the run's k stood."""
    t = Table(title="speculation what-if (Leviathan et al. 2023: expected speedup by k)", title_justify="left")
    for col in ("run", "drafter", "alpha", "c", "k", "S(k)", "best k", "S(best)", "best/actual", "measured"):
        t.add_column(col, justify="right" if col not in ("run", "drafter") else "left")
    for w in whatifs:
        t.add_row(
            w.label or "-", w.method, _num(w.alpha, 3), _num(w.c, 4), str(w.actual_k or "-"), _num(w.speedup_at_actual_k, 2),
            str(w.best_k or "-"), _num(w.best_speedup, 2), _num(w.best_over_actual, 2), _num(w.measured_speedup, 2),
        )
    return t


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def comparison_table(c: Comparison) -> Table:
    """Figure by figure: medians of A and B, ratio B/A with its interval, verdict."""
    t = Table(title=f"{c.b} vs {c.a}: ratio of medians with a {c.confidence:.0%} bootstrap interval "
                    f"({c.resamples} resamples, seed {c.seed})", title_justify="left")
    for col in ("figure", f"{c.a} p50", f"{c.b} p50", "ratio", "interval", "n", "verdict"):
        t.add_column(col, justify="left" if col in ("figure", "verdict") else "right")
    styles = {"gain": "green", "regression": "red", "noise": "dim"}
    for f in c.figures:
        fmt = ms if f.unit == "s" else (lambda x: _num(x, 3))
        unit = " ms" if f.unit == "s" else f" {f.unit}"
        interval = "-" if f.low is None else f"{f.low:.2f}-{f.high:.2f}"
        t.add_row(f.figure, fmt(f.median_a) + unit, fmt(f.median_b) + unit, _num(f.ratio, 2), interval,
                  f"{f.n_a}/{f.n_b}", f.verdict, style=styles.get(f.verdict))
    return t


def render_comparison(c: Comparison, console: Console | None = None) -> None:
    console = console or make_console()
    for problem in c.problems:
        console.print(f"[yellow]warning:[/] {problem}", highlight=False)
    console.print(comparison_table(c))


def make_console() -> Console:
    """A console for reports: the terminal's width, or 160 columns when writing to a file or CI
    log (rich's 80-column default squeezes a step table into ellipses)."""
    import sys

    return Console(width=None if sys.stdout.isatty() else 160)


def render_report(report: Report, console: Console | None = None, *, tasks: bool = True) -> None:
    """Print one table per task (times in ms) and the run summary."""
    console = console or make_console()
    for problem in report.problems:
        console.print(f"[yellow]warning:[/] {problem}", highlight=False)
    if report.inputs:
        console.print(inputs_table(report))
    if not report.tasks:
        console.print(no_tasks_message(report), highlight=False)
        return
    if tasks:
        for task in report.tasks:
            console.print(task_table(task))
    console.print(summary_table(report))
    if report.whatif:
        console.print(whatif_table(report.whatif))
