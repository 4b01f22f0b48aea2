"""The report in the terminal: one table per task (a row per step), then the run's summary."""

from __future__ import annotations

import io
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from agenttrace.report.model import SEGMENT_FIELDS, Comparison, Report, SegmentTimes, TaskFigures, WhatIf
from agenttrace.report.seen import input_lines, no_tasks_message
from agenttrace.report.text import (
    ROOFLINE_COLUMNS,
    constraint_comparison,
    ms,
    roofline_line,
    roofline_rows,
    segment_header,
    spec_line,
    step_label,
    summary_grid,
    task_notes,
    whatif_method,
)
from agenttrace.report.text import num as _num
from agenttrace.report.text import terminal_text as _t

# Always shown (the list); memory, compaction and delegation only when a task has them.
_CORE = ("prefill", "draft", "verify", "generation", "parse", "validation", "tool", "network", "other")


def _columns(task: TaskFigures) -> list[str]:
    extra = [f for f in SEGMENT_FIELDS if f not in _CORE and getattr(task.segments, f) > 0]
    return [*_CORE[:-1], *extra, "other"]


def _seg_cells(segs: SegmentTimes, cols: list[str], absent: list[str] = ()) -> list[str]:
    return ["n/a" if c in absent else ms(getattr(segs, c)) for c in cols]


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
    table = Table(title=_t(title), title_justify="left", caption=_t(caption), caption_justify="left")
    table.add_column("step", justify="right")
    table.add_column("outcome")
    table.add_column("att", justify="right")
    table.add_column("wall", justify="right")
    table.add_column("TTVTC", justify="right")
    for c in cols:
        table.add_column(segment_header(c), justify="right")
    table.add_column("retry", justify="right")
    for s in task.steps:
        table.add_row(
            step_label(s), _t(s.outcome), str(s.attempts), ms(s.wall_s), ms(s.ttvtc_s),
            *_seg_cells(s.segments, cols, task.absent), ms(s.retry_s),
        )
    table.add_section()
    table.add_row(
        "task", _t(task.outcome), str(task.attempts), ms(task.wall_s), ms(task.ttvtc_s),
        *_seg_cells(task.segments, cols, task.absent), ms(task.retry_s), style="bold",
    )
    return table


def summary_table(report: Report) -> Table:
    """The run summary; with several run labels, one column per label."""
    runs = report.by_label if len(report.by_label) > 1 else [report.run]
    t = Table(title="run summary", title_justify="left", show_header=len(runs) > 1)
    t.add_column("figure")
    for r in runs:
        t.add_column(_t(r.label or "value"))
    for name, values in summary_grid(runs):
        t.add_row(name, *map(_t, values))
    return t


def inputs_table(report: Report) -> Table:
    """Per input: the conventions recognised (spans per segment), what was left out and why,
    and what was inferred."""
    t = Table(title="what was read", title_justify="left")
    for col in ("input", "recognised (spans mapped per segment)", "left out", "inferred"):
        t.add_column(col, overflow="fold")
    for inp in report.inputs:
        lines = input_lines(inp)
        t.add_row(*(_t(x) for x in (lines.source, "\n".join(lines.recognised) or "-", "\n".join(lines.left_out) or "-",
                                       lines.inferred or "-")))
    return t


def whatif_table(whatifs: list[WhatIf]) -> Table:
    """Expected speedup for k = 1..10 per drafter, and where the run's k stood."""
    t = Table(title="speculation what-if (expected speedup by k; a measured figure marked est. is an estimate: "
                    "no plain generation to measure against)", title_justify="left")
    for col in ("run", "drafter", "alpha", "c", "k", "S(k)", "best k", "S(best)", "best/actual", "predicted", "measured"):
        t.add_column(col, justify="right" if col not in ("run", "drafter") else "left")
    for w in whatifs:
        t.add_row(
            _t(w.label or "-"), _t(whatif_method(w)), _num(w.alpha, 3), _num(w.c, 4), str(w.actual_k or "-"), _num(w.speedup_at_actual_k, 2),
            str(w.best_k or "-"), _num(w.best_speedup, 2), _num(w.best_over_actual, 2), _num(w.predicted_speedup, 2),
            _num(w.measured_speedup, 2) + (" est." if w.measured_is_estimate else ""),
        )
    return t


def roofline_table(report: Report) -> Table:
    """Each phase's passes against the roofline (figures; the HTML page draws the chart)."""
    roof = report.roofline
    assert roof is not None
    t = Table(title="roofline: where the passes sit (FLOPs per byte moved, attained rates)", title_justify="left",
              caption=_t(roofline_line(roof)), caption_justify="left")
    for col in ROOFLINE_COLUMNS:
        t.add_column(col, justify="left" if col in ("run", "phase", "bound") else "right")
    for row in roofline_rows(roof):
        t.add_row(*(_t(c) for c in row))
    return t


def comparison_table(c: Comparison) -> Table:
    """Figure by figure: medians of A and B, ratio B/A with its interval, verdict."""
    t = Table(title=f"{_t(c.b)} vs {_t(c.a)}: ratio of medians with a {c.confidence:.0%} bootstrap interval "
                    f"({c.resamples} resamples, seed {c.seed})", title_justify="left")
    for col in ("figure", f"{_t(c.a)} p50", f"{_t(c.b)} p50", "ratio", "interval", "n", "verdict"):
        t.add_column(col, justify="left" if col in ("figure", "verdict") else "right")
    styles = {"gain": "green", "regression": "red", "noise": "dim"}
    for f in c.figures:
        fmt = ms if f.unit == "s" else (lambda x: _num(x, 3))
        unit = " ms" if f.unit == "s" else f" {f.unit}"
        interval = "-" if f.low is None else f"{f.low:.2f}-{f.high:.2f}"
        t.add_row(_t(f.figure), fmt(f.median_a) + unit, fmt(f.median_b) + unit, _num(f.ratio, 2), interval,
                  f"{f.n_a}/{f.n_b}", _t(f.verdict), style=styles.get(f.verdict))
    return t


def render_comparison(c: Comparison, console: Console | None = None) -> None:
    console = console or make_console()
    for problem in c.problems:
        console.print(f"[yellow]warning:[/] {_t(problem)}", highlight=False)
    console.print(comparison_table(c))
    line = constraint_comparison(c)
    if line:
        console.print(_t(line), highlight=False)


def plain_text(render: Callable[[Console], object]) -> str:
    """What `render(console)` prints, as plain text 160 columns wide (the terminal format in a file)."""
    out = io.StringIO()
    render(Console(file=out, width=160, color_system=None))
    return out.getvalue()


def make_console() -> Console:
    """A console for reports: the terminal's width, or 160 columns when writing to a file or CI
    log (rich's 80-column default squeezes a step table into ellipses)."""
    import sys

    return Console(width=None if sys.stdout.isatty() else 160)


def render_report(report: Report, console: Console | None = None, *, tasks: bool = True) -> None:
    """Print one table per task (times in ms) and the run summary."""
    console = console or make_console()
    for problem in report.problems:
        console.print(f"[yellow]warning:[/] {_t(problem)}", highlight=False)
    if report.inputs:
        console.print(inputs_table(report))
    if not report.tasks and not (report.run.tasks or report.run.partial_tasks):  # a summary keeps no task row
        console.print(_t(no_tasks_message(report)), highlight=False)
        return
    if tasks:
        for task in report.tasks:
            console.print(task_table(task))
    console.print(summary_table(report))
    if report.whatif:
        console.print(whatif_table(report.whatif))
    if report.roofline is not None and report.roofline.points:
        console.print(roofline_table(report))
