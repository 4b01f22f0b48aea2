"""A recorded framework trace's report beside its ground truth: what tests/traces/test_framework_traces.py
asserts and what record.py prints after each recording.

Exact: the number of tasks, and per task its outcome, steps (outcome and attempts each), attempts
and retries. Within TOLERANCE_S: time to valid tool call and tool time (the spans' clocks and the
run's own clocks differ by the framework's overhead around a call, a few ms). Parallel branches:
reported when, and only when, tool bodies really ran side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOLERANCE_S = 0.020
_FAILED_STEP = {"invalid", "error", "cancelled"}


@dataclass
class Figure:
    task: int  # 1-based, in start order
    name: str
    truth: Any
    report: Any
    ok: bool


def _close(a: float | None, b: float | None) -> bool:
    return a is not None and b is not None and abs(a - b) <= TOLERANCE_S


def _steps_match(truth: list[tuple[str, int]], report: list[tuple[str, int]]) -> bool:
    return len(truth) == len(report) and all(
        ta == ra and (to == ro or (to == "failed" and ro in _FAILED_STEP)) for (to, ta), (ro, ra) in zip(truth, report))


def figures(report: Any, truth: dict[str, Any]) -> list[Figure]:
    """Every compared figure of every task (a task the report lacks compares with None). Where
    the recording's instrumentation cannot give a figure (`expect_not_inferred`), the report must
    say so (and why) instead: that is what is compared."""
    out = [Figure(0, "tasks", len(truth["tasks"]), len(report.tasks), len(truth["tasks"]) == len(report.tasks))]
    cannot = set(truth.get("expect_not_inferred") or ())
    for i, t in enumerate(truth["tasks"], 1):
        r = report.tasks[i - 1] if i <= len(report.tasks) else None
        said = {} if r is None else {m.figure: m.reason for m in r.not_inferred}
        steps_t = [(s["outcome"], s["attempts"]) for s in t["steps"]]
        steps_r = None if r is None else [(s.outcome, s.attempts) for s in r.steps]
        retries_r = None if r is None else sum(max(0, s.attempts - 1) for s in r.steps)
        compared = {
            "outcome": Figure(i, "outcome", t["outcome"], r and r.outcome, r is not None and r.outcome == t["outcome"]),
            "steps": Figure(i, "steps", steps_t, steps_r, steps_r is not None and _steps_match(steps_t, steps_r)),
            "attempts": Figure(i, "attempts", t["attempts"], r and r.attempts, r is not None and r.attempts == t["attempts"]),
            "retries": Figure(i, "retries", t["retries"], retries_r, retries_r == t["retries"]),
            "TTVTC": Figure(i, "ttvtc_s", t["ttvtc_s"], r and r.ttvtc_s, r is not None and _close(t["ttvtc_s"], r.ttvtc_s)),
            "tool_s": Figure(i, "tool_s", t["tool_s"], r and r.segments.tool, r is not None and _close(t["tool_s"], r.segments.tool)),
            "parallel": Figure(i, "parallel branches", t["parallel_s"] > TOLERANCE_S, r and r.overlap_s > TOLERANCE_S,
                               r is not None and (t["parallel_s"] > TOLERANCE_S) == (r.overlap_s > TOLERANCE_S)),
        }
        for name, fig in compared.items():
            missing = name if name in cannot else "steps" if name in ("attempts", "retries") and "steps" in cannot else None
            if missing is None:
                out.append(fig)
            elif name == missing:
                out.append(Figure(i, f"{name} not inferred", "said, with why", said.get(name), bool(said.get(name))))
        out += [Figure(i, f"{m} not inferred", None, said[m], False) for m in said if m not in cannot]
    return out


def report_of(trace_path: Path) -> Any:
    """The report `agenttrace report FILE` computes (files stream as whole traces)."""
    from agenttrace.report.build import report_streamed

    return report_streamed([str(trace_path)])


def _fmt(v: Any) -> str:
    if isinstance(v, float) and v < 10:
        return f"{v * 1e3:.1f} ms"
    if isinstance(v, list):
        return " ".join(f"{o}x{a}" for o, a in v) or "-"
    return "-" if v is None else str(v)


def summary(trace_path: Path, truth_path: Path) -> str:
    """The report beside the truth, one line per task (mismatches marked), as Markdown."""
    truth = json.loads(Path(truth_path).read_text())
    figs = figures(report_of(trace_path), truth)
    bad = [f for f in figs if not f.ok]
    lines = [f"## {truth['recording']} ({', '.join(f'{k} {v}' for k, v in truth.get('versions', {}).items())}): "
             f"{'matches its truth' if not bad else f'{len(bad)} figures differ'}"]
    lines.append("| task | case | figure | truth | report |")
    lines.append("|---|---|---|---|---|")
    for f in figs:
        if f.task == 0 or f.name in ("steps", "ttvtc_s", "tool_s", "outcome") or not f.ok:
            case = truth["tasks"][f.task - 1]["case"] if f.task else ""
            lines.append(f"| {f.task or ''} | {case} | {f.name}{'' if f.ok else ' **differs**'} | {_fmt(f.truth)} | {_fmt(f.report)} |")
    return "\n".join(lines)


def side_by_side(truth_paths: list[Path]) -> str:
    """One Markdown table of every recording: per task the truth and the report's figures; then,
    for the figures a recording's spans cannot give, what the report says instead."""
    rows = ["| recording (versions) | case | steps: truth / report | attempts | retries | outcome | TTVTC ms | tool ms |",
            "|---|---|---|---|---|---|---|---|"]
    said_by: dict[str, dict[str, str]] = {}
    for path in truth_paths:
        truth = json.loads(Path(path).read_text())
        report = report_of(Path(str(path).removesuffix(".truth.json") + ".jsonl"))
        versions = ", ".join(f"{k} {v}" for k, v in truth.get("versions", {}).items())
        for i, t in enumerate(truth["tasks"]):
            r = report.tasks[i] if i < len(report.tasks) else None
            said = {} if r is None else {m.figure: m.reason for m in r.not_inferred}
            said_by.setdefault(truth["recording"], {}).update(said)

            def pair(a: Any, b: Any, figure: str) -> str:
                return f"{_fmt(a)} / " + ("not inferred" if figure in said else _fmt(b))

            steps_r = None if r is None else [(s.outcome, s.attempts) for s in r.steps]
            retries_r = None if r is None else sum(max(0, s.attempts - 1) for s in r.steps)
            ms = [None if x is None else round(x * 1e3, 1) for x in (t["ttvtc_s"], r and r.ttvtc_s)]
            rows.append("| " + " | ".join([
                f"{truth['recording']} ({versions})" if i == 0 else "", t["case"],
                pair([(s["outcome"], s["attempts"]) for s in t["steps"]], steps_r, "steps"),
                pair(t["attempts"], r and r.attempts, "steps"), pair(t["retries"], retries_r, "steps"),
                pair(t["outcome"], r and r.outcome, "outcome"), pair(ms[0], ms[1], "TTVTC"),
                f"{t['tool_s'] * 1e3:.1f} / {r.segments.tool * 1e3:.1f}" if r else "-"]) + " |")
    notes = [f"- {name}: " + "; ".join(f"{fig} not inferred: {why}" for fig, why in said.items())
             for name, said in said_by.items() if said]
    return "\n".join(rows + ([""] + notes if notes else []))
