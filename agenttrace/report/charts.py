"""Inline SVG charts for the HTML report: plain functions from figures to SVG text.

Every data mark carries the class `mark` (and one naming its kind), so tests and users can count
them; every piece of text from a trace goes through `esc`, so a span named `<script>` is text.
"""

from __future__ import annotations

import math
from collections import defaultdict

from agenttrace.report.model import SEGMENT_FIELDS, Comparison, RooflineFigures, TaskFigures, WhatIf
from agenttrace.report.text import html_text as esc

COLORS = {
    "prefill": "#4e79a7", "draft": "#f28e2b", "verify": "#e15759", "constrain": "#9d7660", "generation": "#76b7b2", "parse": "#59a14f",
    "validation": "#edc948", "tool": "#b07aa1", "network": "#ff9da7", "queue": "#f1ce63", "memory": "#9c755f", "compaction": "#bab0ac",
    "delegation": "#8cd17d", "other": "#d4d4d4", "agent": "#cfcfcf", "step": "#e3e3e3", "attempt": "#ececec",
}
VERDICT_COLORS = {"gain": "#2e7d32", "regression": "#c62828", "noise": "#757575", "n/a": "#bdbdbd"}
MAX_DOTS = 2000  # per distribution row; beyond that an evenly spaced subset is drawn
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _ms(seconds: float) -> str:
    v = seconds * 1e3
    return f"{v:.0f} ms" if v >= 100 else f"{v:.1f} ms" if v >= 1 else f"{v:.2f} ms"


def _svg(width: int, height: int, body: list[str], cls: str, extra: str = "") -> str:
    return (f'<svg class="chart {cls}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" {FONT} {extra}>' + "".join(body) + "</svg>")


def _axis(x0: float, x1: float, y: float, t_max: float, fmt=_ms, ticks: int = 5) -> list[str]:
    out = [f'<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#999"/>']
    for i in range(ticks + 1):
        x = x0 + (x1 - x0) * i / ticks
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x:.1f}" y2="{y + 4}" stroke="#999"/>'
                   f'<text x="{x:.1f}" y="{y + 15}" text-anchor="middle">{esc(fmt(t_max * i / ticks))}</text>')
    return out


def waterfall(task: TaskFigures, index: int, width: int = 1100) -> str:
    """One task's spans on its time line, one bar per span (indented by depth, coloured by
    segment); spans on the critical path (as Jaeger's UI computes it) are outlined."""
    spans = task.waterfall or []
    label_w, row_h, top = 300, 16, 8
    t_max = max([s.end_s for s in spans] + [task.wall_s, 1e-9])
    scale = (width - label_w - 20) / t_max
    body = []
    for i, s in enumerate(spans):
        y = top + i * row_h
        x = label_w + max(0.0, s.start_s) * scale
        w = max(1.0, (s.end_s - s.start_s) * scale)
        tip = f"{s.name} [{s.segment}] {_ms(s.end_s - s.start_s)} at +{_ms(s.start_s)}"
        tip += "".join(f"\n{k} = {v}" for k, v in s.attributes.items())
        if s.on_critical_path:
            tip += "\non the critical path"
        stroke = ' stroke="#111" stroke-width="1.5"' if s.on_critical_path else ""
        err = ' fill-opacity="0.6"' if s.status == "ERROR" else ""
        body.append(f'<text x="{4 + 10 * s.depth}" y="{y + 11}">{esc(s.name[:60])}</text>'
                    f'<rect class="mark span{" cp" if s.on_critical_path else ""}" x="{x:.1f}" y="{y + 2}" width="{w:.1f}" '
                    f'height="{row_h - 4}" fill="{COLORS.get(s.segment, COLORS["other"])}"{stroke}{err}>'
                    f"<title>{esc(tip)}</title></rect>")
    height = top + len(spans) * row_h + 24
    body += _axis(label_w, width - 20, height - 22, t_max)
    hidden = "" if index == 0 else ' style="display:none"'
    return _svg(width, height, body, "waterfall", f'data-task="{index}"{hidden}')


def segment_bars(tasks: list[TaskFigures], width: int = 1100) -> str:
    """Stacked bars of the mean time per segment, one bar per (run label, step index)."""
    groups: dict[tuple[str, int], list] = defaultdict(list)
    for t in tasks:
        for s in t.steps:
            groups[(t.run_label or "", s.index)].append(s.segments)
    keys = sorted(groups)
    bar_h, gap, label_w, top = 18, 6, 160, 24
    means = {k: {f: sum(getattr(s, f) for s in groups[k]) / len(groups[k]) for f in SEGMENT_FIELDS} for k in keys}
    t_max = max([sum(m.values()) for m in means.values()] + [1e-9])
    scale = (width - label_w - 20) / t_max
    body = _legend(8, 12)
    for i, k in enumerate(keys):
        y = top + i * (bar_h + gap)
        body.append(f'<text x="4" y="{y + 13}">{esc((k[0] + " ") if k[0] else "")}step {k[1]} (n={len(groups[k])})</text>')
        x = float(label_w)
        for f in SEGMENT_FIELDS:
            v = means[k][f]
            if v <= 0:
                continue
            w = v * scale
            body.append(f'<rect class="mark seg" x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar_h}" '
                        f'fill="{COLORS[f]}"><title>{esc(f"{k[0]} step {k[1]}: {f} {_ms(v)} (mean)")}</title></rect>')
            x += w
    height = top + len(keys) * (bar_h + gap) + 24
    body += _axis(label_w, width - 20, height - 22, t_max)
    return _svg(width, height, body, "segments")


def _legend(x: float, y: float) -> list[str]:
    out = []
    for f in SEGMENT_FIELDS:
        label = "gen rest" if f == "generation" else f
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{COLORS[f]}"/><text x="{x + 13}" y="{y}">{label}</text>')
        x += 18 + 7 * len(label)
    return out


def distributions(rows: list[tuple[str, list[float]]], width: int = 1100) -> str:
    """Strip plots: one row per (figure, run), a dot per sample, the p50-p95 span as a bar."""
    label_w, row_h, top = 300, 26, 6
    t_max = max([max(v) for _, v in rows if v] + [1e-9])
    scale = (width - label_w - 20) / t_max
    body = []
    for i, (name, values) in enumerate(rows):
        y = top + i * row_h + row_h / 2
        body.append(f'<text x="4" y="{y + 4}">{esc(name)} (n={len(values)})</text>')
        if not values:
            continue
        xs = sorted(values)
        p50, p95 = _pct(xs, 50), _pct(xs, 95)
        body.append(f'<rect x="{label_w + p50 * scale:.1f}" y="{y - 7}" width="{max(1.0, (p95 - p50) * scale):.1f}" height="14" '
                    f'fill="#e0e7f1"><title>{esc(f"p50 {_ms(p50)}, p95 {_ms(p95)}")}</title></rect>'
                    f'<line x1="{label_w + p50 * scale:.1f}" y1="{y - 8}" x2="{label_w + p50 * scale:.1f}" y2="{y + 8}" stroke="#1f4e8c" stroke-width="2"/>')
        step = max(1, math.ceil(len(xs) / MAX_DOTS))
        for j, v in enumerate(xs[::step]):
            jitter = ((j * 7919) % 11 - 5) * 0.9
            body.append(f'<circle class="mark dot" cx="{label_w + v * scale:.1f}" cy="{y + jitter:.1f}" r="2.2" '
                        f'fill="#1f4e8c" fill-opacity="0.55"><title>{esc(_ms(v))}</title></circle>')
    height = top + len(rows) * row_h + 24
    body += _axis(label_w, width - 20, height - 22, t_max)
    return _svg(width, height, body, "distributions")


def _pct(xs: list[float], q: float) -> float:
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def comparison(c: Comparison, width: int = 1100) -> str:
    """Forest plot: per figure, the ratio of medians (B/A) and its interval on a log axis; the
    line at 1.0 is "no change"; colour says gain, regression or noise."""
    rows = [f for f in c.figures if f.ratio is not None and f.low and f.high]
    label_w, row_h, top = 300, 22, 8
    lo = min([f.low for f in rows] + [0.5])  # type: ignore[type-var]
    hi = max([f.high for f in rows] + [2.0])  # type: ignore[type-var]
    llo, lhi = math.log(lo), math.log(hi)
    span = width - label_w - 20

    def x(v: float) -> float:
        return label_w + (math.log(v) - llo) / (lhi - llo) * span

    height = top + len(rows) * row_h + 30
    body = [f'<line x1="{x(1.0):.1f}" y1="{top}" x2="{x(1.0):.1f}" y2="{height - 26}" stroke="#333" stroke-dasharray="4 3"/>']
    for i, f in enumerate(rows):
        y = top + i * row_h + row_h / 2
        color = VERDICT_COLORS.get(f.verdict, "#999")
        tip = f"{f.figure}: {c.b}/{c.a} = {f.ratio:.3f} [{f.low:.3f}, {f.high:.3f}] -> {f.verdict}"
        body.append(f'<text x="4" y="{y + 4}">{esc(f.figure)}</text>'
                    f'<line x1="{x(f.low):.1f}" y1="{y}" x2="{x(f.high):.1f}" y2="{y}" stroke="{color}" stroke-width="2"/>'
                    f'<circle class="mark ratio {esc(f.verdict)}" cx="{x(f.ratio):.1f}" cy="{y}" r="4" fill="{color}">'
                    f"<title>{esc(tip)}</title></circle>")
    for v in (0.25, 0.5, 1.0, 2.0, 4.0):
        if lo <= v <= hi:
            body.append(f'<text x="{x(v):.1f}" y="{height - 8}" text-anchor="middle">{v:g}x</text>')
    return _svg(width, height, body, "comparison")


def whatif_curves(ws: list[WhatIf], width: int = 520, height: int = 240) -> str:
    """Expected speedup S(k) for k = 1..10, one line per drafter, the run's k marked."""
    curves = [w for w in ws if w.curve]
    left, bottom, top, right = 40, 30, 10, 130
    s_max = max([p.speedup for w in curves for p in w.curve] + [1.0]) * 1.1
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    body = [f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>']

    def xy(k: int, s: float) -> tuple[float, float]:
        return (left + (k - 1) / 9 * (width - left - right), height - bottom - s / s_max * (height - top - bottom))

    for k in range(1, 11):
        body.append(f'<text x="{xy(k, 0)[0]:.1f}" y="{height - bottom + 14}" text-anchor="middle">{k}</text>')
    for v in range(0, int(s_max) + 1):
        body.append(f'<text x="{left - 6}" y="{xy(1, v)[1] + 4:.1f}" text-anchor="end">{v}x</text>')
    for i, w in enumerate(curves):
        color = palette[i % len(palette)]
        pts = " ".join(f"{xy(p.k, p.speedup)[0]:.1f},{xy(p.k, p.speedup)[1]:.1f}" for p in w.curve)
        body.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        for p in w.curve:
            px, py = xy(p.k, p.speedup)
            actual = p.k == w.actual_k
            tip = f"{w.label or '-'} {w.method}: k={p.k} S={p.speedup:.2f}"
            body.append(f'<circle class="mark k{" actual" if actual else ""}" cx="{px:.1f}" cy="{py:.1f}" r="{5 if actual else 2.5}" '
                        f'fill="{color}"><title>{esc(tip)}</title></circle>')
        body.append(f'<text x="{width - right + 8}" y="{top + 14 + 14 * i}" fill="{color}">{esc((w.label or "") + " " + w.method)}</text>')
    return _svg(width, height, body, "whatif")


_PHASE_COLORS = {"prefill": "#4e79a7", "decode": "#59a14f", "verify": "#e15759", "batch": "#b07aa1"}


def roofline(roof: RooflineFigures, width: int = 640, height: int = 360) -> str:
    """Log-log roofline: attained GFLOP/s against FLOPs per byte, the memory roof (slope: the
    read bandwidth) and the compute roof (the matmul peak), one point per run and phase."""
    pts = [p for p in roof.points if p.intensity > 0 and p.gflop_s > 0]
    left, bottom, top, right = 56, 36, 12, 150
    xs = [p.intensity for p in pts] + ([roof.ridge] if roof.ridge else [])
    ys = [p.gflop_s for p in pts] + ([roof.peak_gflop_s] if roof.peak_gflop_s else [])
    if not xs or not ys:
        return '<p class="note">No roofline figures in these traces.</p>'
    x_lo, x_hi = 10 ** math.floor(math.log10(min(xs)) - 0.3), 10 ** math.ceil(math.log10(max(xs)) + 0.3)
    y_lo, y_hi = 10 ** math.floor(math.log10(min(ys)) - 0.3), 10 ** math.ceil(math.log10(max(ys)) + 0.3)

    def xy(x: float, y: float) -> tuple[float, float]:
        fx = (math.log10(x) - math.log10(x_lo)) / (math.log10(x_hi) - math.log10(x_lo))
        fy = (math.log10(y) - math.log10(y_lo)) / (math.log10(y_hi) - math.log10(y_lo))
        return left + fx * (width - left - right), height - bottom - fy * (height - top - bottom)

    body = [f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#999"/>',
            f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#999"/>',
            f'<text x="{(left + width - right) / 2:.0f}" y="{height - 4}" text-anchor="middle">FLOPs per byte (log)</text>',
            f'<text x="12" y="{top + 10}">GFLOP/s (log)</text>']
    for e in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1):
        x, y = xy(10 ** e, y_lo)
        body.append(f'<text x="{x:.1f}" y="{y + 14:.1f}" text-anchor="middle">{10 ** e:g}</text>')
    for e in range(round(math.log10(y_lo)), round(math.log10(y_hi)) + 1):
        x, y = xy(x_lo, 10 ** e)
        body.append(f'<text x="{x - 6:.1f}" y="{y + 4:.1f}" text-anchor="end">{10 ** e:g}</text>')
    if roof.peak_gb_s and roof.peak_gflop_s:
        x0 = max(x_lo, y_lo / roof.peak_gb_s)
        a, b, c = xy(x0, roof.peak_gb_s * x0), xy(roof.ridge, roof.peak_gflop_s), xy(x_hi, roof.peak_gflop_s)
        body.append(f'<polyline class="roof" points="{a[0]:.1f},{a[1]:.1f} {b[0]:.1f},{b[1]:.1f} {c[0]:.1f},{c[1]:.1f}" '
                    'fill="none" stroke="#333" stroke-width="2"/>')
        body.append(f'<text x="{b[0]:.1f}" y="{b[1] - 6:.1f}" text-anchor="middle">ridge {roof.ridge:.1f}</text>')
    labels = list(dict.fromkeys(p.label for p in pts))
    for p in pts:
        px, py = xy(p.intensity, p.gflop_s)
        color = _PHASE_COLORS.get(p.phase.partition("@")[0], "#777")
        shape = labels.index(p.label) % 2
        tip = f"{p.label or ''} {p.phase}: {p.intensity:.2f} FLOP/B, {p.gflop_s:.1f} GFLOP/s, {p.passes} passes"
        mark = (f'<circle class="mark roofline" cx="{px:.1f}" cy="{py:.1f}" r="4" fill="{color}">' if not shape else
                f'<rect class="mark roofline" x="{px - 4:.1f}" y="{py - 4:.1f}" width="8" height="8" fill="{color}">')
        body.append(mark + f"<title>{esc(tip)}</title>" + ("</circle>" if not shape else "</rect>"))
        body.append(f'<text x="{px + 6:.1f}" y="{py - 5:.1f}" font-size="9">{esc(p.phase)}</text>')
    for i, (kind, color) in enumerate(_PHASE_COLORS.items()):
        body.append(f'<text x="{width - right + 12}" y="{top + 14 + 14 * i}" fill="{color}">{kind}</text>')
    return _svg(width, height, body, "roofline")
