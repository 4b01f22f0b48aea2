"""What a report read, per input: the span conventions it recognised, the spans it left out and
why, and which figures it inferred (SPANS.md, "Traces from other instrumentations"). Part of the
report's JSON schema (`model.Report.inputs`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agenttrace.traces import Reading, inferred
from agenttrace.traces.remote import NETWORK_SPLIT


class ConventionFigures(BaseModel):
    """One span convention recognised in one input."""

    name: str = Field(description="agenttrace, OpenTelemetry GenAI, OpenInference, OpenLLMetry, pydantic-ai, vLLM server, ...")
    spans: int
    segments: dict[str, int] = Field(description="spans mapped to each segment")
    variants: list[str] = Field(default_factory=list, description="attribute sets or versions of the convention seen")


class LeftOutFigures(BaseModel):
    """Spans of one input that were not mapped to a segment, for one reason."""

    convention: str | None = Field(description="the convention that recognised them (None: none did)")
    reason: str
    spans: int
    names: list[str] = Field(description="their span names (the first few distinct ones)")


class InputFigures(BaseModel):
    """What the report saw in one input (a file, or a Jaeger query)."""

    source: str
    spans: int
    conventions: list[ConventionFigures]
    left_out: list[LeftOutFigures] = Field(default_factory=list)
    inferred: list[str] = Field(default_factory=list, description="figures inferred for this input's tasks")


def input_figures(reading: Reading) -> InputFigures:
    """What the report saw in one input, as the JSON carries it."""
    return InputFigures(
        source=reading.source,
        spans=reading.spans,
        conventions=[ConventionFigures(name=c.name, spans=c.spans, segments=dict(sorted(c.segments.items())),
                                       variants=sorted(c.variants)) for c in reading.conventions.values()],
        left_out=[LeftOutFigures(convention=lo.convention, reason=lo.reason, spans=lo.count, names=lo.names)
                  for lo in reading.left_out.values()],
        inferred=[f for f in inferred.INFERRED_FIGURES + (NETWORK_SPLIT,) if f in reading.inferred],
    )
