"""The report as one self-contained HTML page: inline CSS, inline SVG charts, a few lines of
script to choose the task of the waterfall; no network resources, so it opens offline and can be
attached to a ticket. Trace text is escaped everywhere (text.html_text).

Sections: summary (per run label), waterfall of one task's spans (choose the task), stacked
segment bars across steps, latency distributions, speculation what-if, and the comparison view
(B against A) when a comparison is given or the report holds exactly two run labels.
"""

from __future__ import annotations

from agenttrace.report import charts
from agenttrace.report.model import Comparison, Report, TaskFigures
from agenttrace.report.seen import input_lines, no_tasks_message
from agenttrace.report.text import (
    ROOFLINE_COLUMNS,
    constraint_comparison,
    ms,
    roofline_line,
    roofline_rows,
    summary_grid,
    task_notes,
    whatif_method,
)
from agenttrace.report.text import html_text as esc
from agenttrace.report.text import num as _f

_CSS = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1180px}
h1{font-size:22px}h2{font-size:17px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}.gain{color:#2e7d32;font-weight:600}.regression{color:#c62828;font-weight:600}
.noise{color:#757575}.problems li{font-family:monospace;font-size:12px}.note{color:#555;font-size:13px}
select{font-size:13px;margin:6px 0}
"""

_SCRIPT = """
(function () {
  var select = document.getElementById('task-select');
  if (!select) { return; }
  select.addEventListener('change', function () {
    var charts = document.querySelectorAll('svg.waterfall');
    for (var i = 0; i < charts.length; i++) {
      charts[i].style.display = charts[i].getAttribute('data-task') === select.value ? '' : 'none';
    }
  });
})();
"""


def _summary(report: Report) -> str:
    runs = report.by_label if len(report.by_label) > 1 else [report.run]
    head = "".join(f"<th>{esc(r.label or 'value')}</th>" for r in runs)
    rows = "".join(f"<tr><td>{esc(name)}</td>" + "".join(f"<td>{esc(v)}</td>" for v in values) + "</tr>"
                   for name, values in summary_grid(runs))
    return f'<table class="summary"><tr><th>figure</th>{head}</tr>{rows}</table>'


def _inputs(report: Report) -> str:
    rows = []
    for inp in report.inputs:
        lines = input_lines(inp)
        cells = [lines.source, "<br>".join(map(esc, lines.recognised)) or "-", "<br>".join(map(esc, lines.left_out)) or "-",
                 esc(lines.inferred or "-")]
        rows.append(f"<tr><td>{esc(cells[0])}</td>" + "".join(f"<td style=\"text-align:left\">{c}</td>" for c in cells[1:])
                    + "</tr>")
    head = "<tr><th>input</th><th>recognised (spans mapped per segment)</th><th>left out</th><th>inferred</th></tr>"
    empty = f'<p class="note">{esc(no_tasks_message(report))}</p>' if not report.tasks else ""
    return f'<table class="inputs">{head}{"".join(rows)}</table>{empty}'


def _inferred(report: Report) -> str:
    """Per task: what was inferred rather than recorded, and which segments its trace cannot show."""
    items = "".join(f"<li>task {esc(t.task_id)}: {esc('; '.join(task_notes(t)))}</li>" for t in report.tasks if task_notes(t))
    return f'<ul class="inferred">{items}</ul>' if items else ""


def _task_option(i: int, t: TaskFigures) -> str:
    label = f"{t.task_id}" + (f" [{t.run_label}]" if t.run_label else "") + f" - {t.outcome}, {ms(t.wall_s)} ms"
    return f'<option value="{i}">{esc(label)}</option>'


def _waterfalls(report: Report) -> str:
    tasks = [t for t in report.tasks if t.waterfall]
    if not tasks:
        return '<p class="note">No task carries its spans (run with --waterfalls N).</p>'
    options = "".join(_task_option(i, t) for i, t in enumerate(tasks))
    note = ('<p class="note">One bar per span, coloured by segment; outlined bars are on the critical path as '
            "Jaeger's UI computes it. Hover for details.</p>")
    return (f'<label>task: <select id="task-select">{options}</select></label>{note}'
            + "".join(charts.waterfall(t, i) for i, t in enumerate(tasks)))


def _distribution_rows(report: Report) -> list[tuple[str, list[float]]]:
    labels = list(dict.fromkeys(t.run_label for t in report.tasks))
    rows = []
    for name, get in (
        ("time to valid tool call (task)", lambda ts: [t.ttvtc_s for t in ts if not t.partial]),
        ("task wall time", lambda ts: [t.wall_s for t in ts if not t.partial]),
        ("step wall time", lambda ts: [s.wall_s for t in ts for s in t.steps]),
        ("time to valid tool call (step)", lambda ts: [s.ttvtc_s for t in ts for s in t.steps]),
    ):
        for lab in labels:
            values = [v for v in get([t for t in report.tasks if t.run_label == lab]) if v is not None]
            rows.append((f"{name}" + (f" [{lab}]" if lab else ""), values))
    return rows


def _whatif(report: Report) -> str:
    if not report.whatif:
        return '<p class="note">No speculative generations in these traces.</p>'
    rows = "".join(
        f"<tr><td>{esc(w.label or '-')}</td><td>{esc(whatif_method(w))}</td><td>{_f(w.alpha, 3)}</td><td>{_f(w.c, 4)}</td>"
        f"<td>{w.actual_k or '-'}</td><td>{_f(w.speedup_at_actual_k, 2)}</td><td>{w.best_k or '-'}</td>"
        f"<td>{_f(w.best_speedup, 2)}</td><td>{_f(w.predicted_speedup, 2)}</td>"
        f"<td>{_f(w.measured_speedup, 2)}{' est.' if w.measured_is_estimate else ''}</td></tr>"
        for w in report.whatif
    )
    table = ("<table><tr><th>run</th><th>drafter</th><th>alpha</th><th>c</th><th>k</th><th>S(k)</th><th>best k</th>"
             f"<th>S(best)</th><th>predicted</th><th>measured</th></tr>{rows}</table>")
    note = ('<p class="note">S(k): expected speedup over plain decoding (core/costmodel.py) from the rounds: '
            "a is the per-token acceptance (maximum likelihood over rounds), c the cost of one more drafted token "
            "(drafting plus the wider verify pass) over a plain step. Predicted: for the run's own rounds; measured: "
            "against plain generations of the same model, est. where there are none.</p>")
    return note + table + charts.whatif_curves(report.whatif)


def _roofline(report: Report) -> str:
    roof = report.roofline
    if roof is None or not roof.points:
        return '<p class="note">No generation in these traces carries roofline figures (agenttrace.roofline.*).</p>'
    head = "".join(f"<th>{esc(c)}</th>" for c in ROOFLINE_COLUMNS)
    rows = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in roofline_rows(roof))
    return (f'<p class="note">{esc(roofline_line(roof))}</p>' + charts.roofline(roof)
            + f"<table><tr>{head}</tr>{rows}</table>")


def _comparison(c: Comparison) -> str:
    rows = "".join(
        f'<tr><td>{esc(f.figure)}</td><td>{_f(f.median_a, 4)}</td><td>{_f(f.median_b, 4)}</td><td>{_f(f.ratio, 3)}</td>'
        f'<td>{"-" if f.low is None else f"{f.low:.3f} - {f.high:.3f}"}</td><td>{f.n_a}/{f.n_b}</td>'
        f'<td class="{esc(f.verdict)}">{esc(f.verdict)}</td></tr>'
        for f in c.figures
    )
    head = (f'<p class="note">{esc(c.b)} against {esc(c.a)}: ratio of medians with a {c.confidence:.0%} bootstrap '
            f"interval ({c.resamples} resamples, seed {c.seed}); an interval containing 1.0 is noise.</p>")
    table = (f"<table><tr><th>figure</th><th>{esc(c.a)} p50</th><th>{esc(c.b)} p50</th><th>ratio</th><th>interval</th>"
             f"<th>n</th><th>verdict</th></tr>{rows}</table>")
    line = constraint_comparison(c)
    return head + charts.comparison(c) + table + (f'<p class="note">{esc(line)}</p>' if line else "")


def report_html(report: Report, comparison: Comparison | None = None) -> str:
    """The whole page. Without `comparison`, a report holding exactly two run labels is compared
    (second label against the first)."""
    if comparison is None:
        labels = [r.label for r in report.by_label if r.label is not None]
        if len(report.by_label) == 2 and len(labels) == 2:
            from agenttrace.report.compare import compare_labels

            comparison = compare_labels(report, labels[0], labels[1])
    sections = [
        ("What was read", _inputs(report) + _inferred(report)),
        ("Summary", _summary(report)),
        ("Waterfall of one task", _waterfalls(report)),
        ("Where the time went, step by step",
         '<p class="note">Mean time per segment for each step index (per run label).</p>' + charts.segment_bars(report.tasks)),
        ("Latency distributions", '<p class="note">One dot per task or step; the band spans p50 to p95.</p>'
         + charts.distributions(_distribution_rows(report))),
        ("Speculation what-if", _whatif(report)),
        ("Roofline", _roofline(report)),
    ]
    if comparison is not None:
        sections.append((f"Comparison: {comparison.b} vs {comparison.a}", _comparison(comparison)))
    if report.problems:
        items = "".join(f"<li>{esc(p)}</li>" for p in report.problems)
        sections.append(("Problems met while reading", f'<ul class="problems">{items}</ul>'))
    body = "".join(f'<section><h2>{esc(title)}</h2>{html}</section>' for title, html in sections)
    sources = ", ".join(esc(s) for s in report.sources)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>agenttrace report</title>'
        f"<style>{_CSS}</style></head><body><h1>agenttrace report</h1>"
        f'<p class="note">{len(report.tasks)} tasks from {sources}</p>{body}<script>{_SCRIPT}</script></body></html>'
    )
