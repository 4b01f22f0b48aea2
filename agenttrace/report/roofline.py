"""The report's roofline: each phase's passes (prefill, decode, verify@n, batch@B) summed over a
trace's generations from their `agenttrace.roofline.*` arrays, placed against the peaks the
trace recorded (generation/roofline.py holds the maths)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from agenttrace.generation.roofline import Roofline, merge

if TYPE_CHECKING:
    from agenttrace.report.model import TaskFigures


class RooflinePoint(BaseModel):
    """One phase of a run against the roofline: its passes summed over the run's generations."""

    label: str | None = None
    phase: str
    passes: int
    rows: int
    intensity: float = Field(description="FLOPs per byte moved")
    gflop_s: float = Field(description="attained")
    gb_s: float = Field(description="attained")
    roof_share: float | None = Field(None, description="attained FLOP/s over what the roof allows at this intensity")
    bound: str = Field("-", description="memory or compute (against the ridge point); - without peaks")


class RooflineFigures(BaseModel):
    """Where a trace's passes sit against the machine's measured peaks (those of the first
    generation that carried them)."""

    device: str = ""
    peak_gflop_s: float = 0.0
    peak_gb_s: float = 0.0
    ridge: float = Field(0.0, description="FLOPs per byte where the roofs meet")
    points: list[RooflinePoint] = Field(default_factory=list)
    mean_batch_size: float | None = Field(None, description="agenttrace.batch.size over batched generations")
    policies: dict[str, int] = Field(default_factory=dict, description="generations per agenttrace.spec.policy")


def roofline_figures(tasks: list[TaskFigures], labels: list[str | None]) -> RooflineFigures | None:
    """Each phase's passes summed per run label (every generation's share of a batched pass is
    the whole pass, so a batch's figures weigh by its size: ratios are unchanged), placed against
    the first peaks recorded."""
    gens = [(t.run_label, g) for t in tasks for s in t.steps for g in s.generations]
    if not any(g.roofline for _, g in gens):
        return None
    peaks = next((g.roofline_peaks for _, g in gens if g.roofline_peaks), None)
    roof = Roofline((), *peaks) if peaks else Roofline(())
    points = []
    for label in labels:
        phases = merge(p for lab, g in gens if label is None or lab == label
                       for p in g.roofline)
        for p in phases:
            allowed = roof.roof(p.intensity) if peaks else 0.0
            points.append(RooflinePoint(label=label, phase=p.phase, passes=p.passes, rows=p.rows, intensity=p.intensity,
                                        gflop_s=p.flop_s / 1e9, gb_s=p.bytes_s / 1e9,
                                        roof_share=p.flop_s / allowed if allowed else None, bound=roof.bound(p)))
    batched = [g.batch_size for _, g in gens if g.batch_size is not None]
    policies: dict[str, int] = {}
    for _, g in gens:
        if g.spec_policy:
            policies[g.spec_policy] = policies.get(g.spec_policy, 0) + 1
    return RooflineFigures(device=roof.device, peak_gflop_s=roof.peak_flop_s / 1e9, peak_gb_s=roof.peak_bytes_s / 1e9,
                           ridge=roof.ridge, points=points,
                           mean_batch_size=sum(batched) / len(batched) if batched else None, policies=policies)
