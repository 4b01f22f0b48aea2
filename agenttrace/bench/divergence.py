"""Where two configurations' greedy texts part, and whether that is a near-tie.

Two configurations of one model (a weight variant, another build of the kernels, another KV-cache
type) compute each logit a little differently, so their greedy texts may part where the top two
logits are nearly equal, and only there; a parting at a wide margin means one of them computes
something else. `partings` finds each prompt's first parting from an anchor configuration and
reads the anchor model's logits of the two tokens there (the anchor is torch's most exact weights
in the run), so the benchmark counts partings at near-ties apart from the rest and reports the
margin instead of a bare "differs".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NEAR_TIE_LOGITS", "Parting", "PartingSummary", "partings", "summarize"]

# A parting counts as a near-tie when the anchor's logits of the two tokens are this close: what
# the coarsest weight variant here moves a top-two margin by (`scripts/margin_shift.py`, the
# bundled model, 335 positions: int4 against fp32 p99 1.52 logits, int8 0.62, bf16 0.27); a
# parting wider than that means one configuration computes something else.
NEAR_TIE_LOGITS = 1.5


@dataclass(frozen=True)
class Parting:
    prompt: int  # index of the prompt in its set
    position: int  # index of the first generated token that differs
    anchor_token: int | None  # None: that text ended there (an end-of-sequence token, not kept in the text)
    other_token: int | None
    margin: float  # the anchor model's logit of its choice minus that of the other's (>= 0 under greedy)


@dataclass(frozen=True)
class PartingSummary:
    anchor: str  # the configuration compared against, e.g. "fp32 ours_plain"
    prompts: int
    parted: int
    near_ties: int  # of the partings, those within NEAR_TIE_LOGITS
    max_margin: float | None  # the widest margin at a parting (None: none parted)

    def describe(self) -> str:
        if not self.parted:
            return "same"
        wide = self.parted - self.near_ties
        return (f"{self.parted}/{self.prompts} part, " + ("near-ties" if not wide else f"{wide} wide")
                + f" (<= {self.max_margin:.2f})")


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def partings(model, prompts: list[list[int]], anchor: list[list[int]], other: list[list[int]],
             eos_ids: set[int]) -> list[Parting]:
    """Each prompt's first parting between the anchor's generated tokens and the other's, with
    the anchor model's (torch) logits read at that position by one teacher-forced pass; a text
    that ended there chose an end-of-sequence token (the best-scored of `eos_ids`)."""
    import torch

    out = []
    for i, (ids, a, b) in enumerate(zip(prompts, anchor, other, strict=True)):
        pos = _first_difference(a, b)
        if pos is None:
            continue
        with torch.no_grad():
            x = torch.tensor([ids + a[:pos]], device=model.device)
            logits = model(input_ids=x).logits[0, -1].float()
        eos = max(float(logits[t]) for t in eos_ids) if eos_ids else float("nan")

        def choice(seq: list[int]) -> tuple[int | None, float]:
            return (seq[pos], float(logits[seq[pos]])) if pos < len(seq) else (None, eos)

        (mine, s_a), (theirs, s_b) = choice(a), choice(b)
        out.append(Parting(i, pos, mine, theirs, s_a - s_b))
    return out


def summarize(anchor: str, count: int, found: list[Parting]) -> PartingSummary:
    margins = [p.margin for p in found if p.margin == p.margin]  # (NaN: no end-of-sequence id to score)
    near = sum(abs(m) <= NEAR_TIE_LOGITS for m in margins)
    return PartingSummary(anchor, count, len(found), near, max(margins) if margins else None)
