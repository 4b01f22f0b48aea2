"""The report's roofline: each phase's passes (prefill, decode, verify@n, batch@B) summed over a
trace's generations from their `agenttrace.roofline.*` arrays, placed against the peaks the
trace recorded (core/roofline.py holds the maths)."""

from __future__ import annotations

from agenttrace.core.roofline import Roofline, add_phases, phases_of
from agenttrace.report.model import TaskFigures
from agenttrace.report.roofline_model import RooflineFigures, RooflinePoint


class RooflineFold:
    """The roofline of tasks added one at a time: each phase's passes summed per run label and
    over all of them, the first peaks recorded, batch sizes and policies counted."""

    def __init__(self) -> None:
        self.by_label: dict[str | None, dict[str, list[float]]] = {}
        self.all: dict[str, list[float]] = {}
        self.peaks: tuple[float, float, str] | None = None
        self.any = False
        self.batched = self.batch_sum = 0.0
        self.policies: dict[str, int] = {}

    def add(self, t: TaskFigures) -> None:
        for s in t.steps:
            for g in s.generations:
                if g.roofline:
                    self.any = True
                    add_phases(self.all, g.roofline)
                    add_phases(self.by_label.setdefault(t.run_label, {}), g.roofline)
                if self.peaks is None and g.roofline_peaks:
                    self.peaks = g.roofline_peaks
                if g.batch_size is not None:
                    self.batched += 1
                    self.batch_sum += g.batch_size
                if g.spec_policy:
                    self.policies[g.spec_policy] = self.policies.get(g.spec_policy, 0) + 1

    def figures(self, labels: list[str | None]) -> RooflineFigures | None:
        """Each phase's passes per label of `labels` ([None]: over all of them), placed against
        the first peaks recorded (every generation's share of a batched pass is the whole pass,
        so a batch's figures weigh by its size: ratios are unchanged)."""
        if not self.any:
            return None
        roof = Roofline((), *self.peaks) if self.peaks else Roofline(())
        points = []
        for label in labels:
            for p in phases_of(self.all if label is None else self.by_label.get(label, {})):
                allowed = roof.roof(p.intensity) if self.peaks else 0.0
                points.append(RooflinePoint(label=label, phase=p.phase, passes=p.passes, rows=p.rows,
                                            intensity=p.intensity, gflop_s=p.flop_s / 1e9, gb_s=p.bytes_s / 1e9,
                                            roof_share=p.flop_s / allowed if allowed else None, bound=roof.bound(p)))
        return RooflineFigures(device=roof.device, peak_gflop_s=roof.peak_flop_s / 1e9,
                               peak_gb_s=roof.peak_bytes_s / 1e9, ridge=roof.ridge, points=points,
                               mean_batch_size=self.batch_sum / self.batched if self.batched else None,
                               policies=self.policies)
