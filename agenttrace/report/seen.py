"""What the report saw in its inputs, as plain text lines: the conventions recognised and the
spans mapped to each segment, the spans left out and why, the figures inferred (SPANS.md: "Said,
not hidden"). Shared by the terminal, Markdown and HTML renderings."""

from __future__ import annotations

from dataclasses import dataclass

from agenttrace.report.inputs import InputFigures
from agenttrace.report.model import Report

__all__ = ["InputLines", "input_lines", "no_tasks_message"]


@dataclass(frozen=True)
class InputLines:
    source: str
    recognised: list[str]
    left_out: list[str]
    inferred: str  # "" when nothing was inferred


def input_lines(inp: InputFigures) -> InputLines:
    recognised = []
    for c in inp.conventions:
        segments = ", ".join(f"{seg} {n}" for seg, n in c.segments.items()) or "none mapped"
        variants = f" [{'; '.join(c.variants)}]" if c.variants else ""
        recognised.append(f"{c.name}{variants}: {c.spans} spans ({segments})")
    left_out = [
        f"{lo.spans} span(s) {('of ' + lo.convention + ': ') if lo.convention else ''}{lo.reason}"
        f" ({', '.join(lo.names)}{', ...' if lo.spans > len(lo.names) else ''})"
        for lo in inp.left_out
    ]
    return InputLines(f"{inp.source} ({inp.spans} spans)", recognised, left_out, ", ".join(inp.inferred))


def no_tasks_message(report: Report) -> str:
    """Why a report has no task, naming what its inputs held instead."""
    spans = sum(i.spans for i in report.inputs)
    if not spans:
        return "No spans found in the inputs."
    names = sorted({c.name for i in report.inputs for c in i.conventions})
    seen = f" (recognised: {', '.join(names)})" if names else " (no known convention)"
    return (f"No tasks found in {spans} spans{seen}: a task is an agent span, or the root above a model call "
            "(generation); these inputs hold neither. See what was left out below.")
