"""The report's roofline records (`roofline_fold.py` folds a run's generations into them)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["RooflineFigures", "RooflinePoint"]


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
