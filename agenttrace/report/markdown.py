"""The report and the comparison as Markdown (GitHub-flavoured tables), for PRs and notes."""

from __future__ import annotations

from agenttrace.report.model import SEGMENT_FIELDS, Comparison, Report, TaskFigures, WhatIf
from agenttrace.report.seen import input_lines, no_tasks_message
from agenttrace.report.text import (
    ROOFLINE_COLUMNS,
    constraint_comparison,
    markdown_code,
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
from agenttrace.report.text import markdown_text as _cell
from agenttrace.report.text import num as _f


def _table(header: list[str], rows: list[list[str]], right_from: int = 1) -> list[str]:
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    out = ["| " + " | ".join(_cell(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return out


def _task(task: TaskFigures) -> list[str]:
    cols = [f for f in SEGMENT_FIELDS if getattr(task.segments, f) > 0 or f in task.absent]
    title = f"### task {_cell(task.task_id)}" + (f" [{_cell(task.run_label)}]" if task.run_label else "")
    lines = [title, "", _cell(f"{task.outcome}, {task.wall_s:.2f} s"
             + (f", time to valid tool call {ms(task.ttvtc_s)} ms" if task.ttvtc_s is not None else "")
             + (f", correct action {ms(task.time_to_correct_action_s)} ms" if task.time_to_correct_action_s is not None else "")
             + (f", {ms(task.overlap_s)} ms in parallel off the critical path" if task.overlap_s > 0 else "")
             + (" (partial: agent span missing)" if task.partial else "")), ""]
    header = ["step", "outcome", "attempts", "wall ms", "TTVTC ms", *(f"{segment_header(c)} ms" for c in cols), "retry ms"]

    def seg(segs, c: str) -> str:
        return "n/a" if c in task.absent else ms(getattr(segs, c))

    rows = [[step_label(s), s.outcome, str(s.attempts), ms(s.wall_s), ms(s.ttvtc_s),
             *(seg(s.segments, c) for c in cols), ms(s.retry_s)] for s in task.steps]
    rows.append(["task", task.outcome, str(task.attempts), ms(task.wall_s), ms(task.ttvtc_s),
                 *(seg(task.segments, c) for c in cols), ms(task.retry_s)])
    notes = [f"- {_cell(n)}" for n in task_notes(task)]
    return [*lines, *_table(header, rows, right_from=2), "", _cell(spec_line(task.speculation)), *([""] + notes if notes else []), ""]


def _inputs(report: Report) -> list[str]:
    out = ["## What was read", ""]
    rows = []
    for inp in report.inputs:
        lines = input_lines(inp)
        rows.append([lines.source, "; ".join(lines.recognised) or "-", "; ".join(lines.left_out) or "-", lines.inferred or "-"])
    return [*out, *_table(["input", "recognised (spans mapped per segment)", "left out", "inferred"], rows, right_from=99), ""]


def _whatif(ws: list[WhatIf]) -> list[str]:
    out = ["## Speculation what-if", "",
           "Expected speedup S(k) over plain decoding from the rounds' acceptance by position a and the cost c of "
           "one more drafted token (drafting plus the wider verify pass) over a plain step (core/costmodel.py); "
           "predicted: for the run's own rounds; measured: against plain generations of the same model, "
           "est. where there are none.", ""]
    rows = []
    for w in ws:
        curve = " ".join(f"{p.k}:{p.speedup:.2f}" for p in w.curve) or "-"
        rows.append([w.label or "-", whatif_method(w), _f(w.alpha, 3), _f(w.c, 4), str(w.actual_k or "-"),
                     _f(w.speedup_at_actual_k, 2), str(w.best_k or "-"), _f(w.best_speedup, 2), _f(w.predicted_speedup, 2),
                     _f(w.measured_speedup, 2) + (" est." if w.measured_is_estimate else ""), curve])
    return [*out, *_table(["run", "drafter", "alpha", "c", "k", "S(k)", "best k", "S(best)", "predicted", "measured",
                           "S by k"], rows, 2), ""]


def report_markdown(report: Report, *, tasks: bool = True) -> str:
    """The whole report: per-task step tables (unless `tasks` is False), the run summary (one
    column per run label), the what-if, and the problems met while reading."""
    out = ["# agenttrace report", "", "Sources: " + ", ".join(markdown_code(s) for s in report.sources), ""]
    if report.inputs:
        out += _inputs(report)
    if not report.tasks and not (report.run.tasks or report.run.partial_tasks):  # a summary keeps no task row
        out += [_cell(no_tasks_message(report)), ""]
    if tasks:
        out += ["## Tasks", ""] if report.tasks else []
        for t in report.tasks:
            out += _task(t)
    runs = report.by_label if len(report.by_label) > 1 else [report.run]
    rows = [[name, *values] for name, values in summary_grid(runs)]
    out += ["## Run summary", "", *_table(["figure", *(r.label or "value" for r in runs)], rows, right_from=99), ""]
    if report.whatif:
        out += _whatif(report.whatif)
    if report.roofline is not None and report.roofline.points:
        out += ["## Roofline", "", _cell(roofline_line(report.roofline)), "",
                *_table(list(ROOFLINE_COLUMNS), roofline_rows(report.roofline), 3), ""]
    if report.problems:
        out += ["## Problems met while reading", "", *(f"- {_cell(p)}" for p in report.problems), ""]
    return "\n".join(out)


def comparison_markdown(c: Comparison) -> str:
    """B against A: ratio of medians with its bootstrap interval and verdict, per figure."""
    rows = []
    for f in c.figures:
        fmt = (lambda x: ms(x) + " ms") if f.unit == "s" else (lambda x: _f(x, 3))
        interval = "-" if f.low is None else f"{f.low:.2f} - {f.high:.2f}"
        rows.append([f.figure, fmt(f.median_a), fmt(f.median_b), _f(f.ratio, 2), interval, f"{f.n_a}/{f.n_b}",
                     f"**{f.verdict}**" if f.verdict in ("gain", "regression") else f.verdict])
    out = [f"# {_cell(c.b)} vs {_cell(c.a)}", "",
           f"Ratio of medians ({_cell(c.b)} / {_cell(c.a)}) with a {c.confidence:.0%} bootstrap interval ({c.resamples} resamples, "
           f"seed {c.seed}); an interval containing 1.0 is noise.", "",
           *_table(["figure", f"{c.a} p50", f"{c.b} p50", "ratio", "interval", "n", "verdict"], rows), ""]
    line = constraint_comparison(c)
    if line:
        out += [_cell(line), ""]
    if c.problems:
        out += ["## Problems met while reading", "", *(f"- {_cell(p)}" for p in c.problems), ""]
    return "\n".join(out)
