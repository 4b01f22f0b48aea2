"""bench/divergence.py: where two configurations' greedy texts part, read in the anchor's logits."""

from __future__ import annotations

import torch

from agenttrace.bench.divergence import NEAR_TIE_LOGITS, Parting, partings, summarize


def _greedy(model, ids: list[int], n: int) -> list[int]:
    out = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(input_ids=torch.tensor([ids + out])).logits[0, -1]
            out.append(int(logits.argmax()))
    return out


def test_the_first_parting_and_the_anchors_margin_there(tiny_model):
    prompt = [5, 9, 11, 3]
    anchor = _greedy(tiny_model, prompt, 6)
    with torch.no_grad():
        logits = tiny_model(input_ids=torch.tensor([prompt + anchor[:3]])).logits[0, -1]
    runner_up = int(logits.topk(2).indices[1])
    other = anchor[:3] + [runner_up, 7, 7]
    found = partings(tiny_model, [prompt, prompt], [anchor, anchor], [anchor, other], eos_ids={2})
    assert len(found) == 1  # the first prompt's texts are the same
    p = found[0]
    assert (p.prompt, p.position, p.anchor_token, p.other_token) == (1, 3, anchor[3], runner_up)
    assert abs(p.margin - float(logits[anchor[3]] - logits[runner_up])) < 1e-5 and p.margin >= 0


def test_a_text_that_ended_first_chose_the_end_of_sequence_token(tiny_model):
    prompt = [5, 9, 11, 3]
    anchor = _greedy(tiny_model, prompt, 4)
    found = partings(tiny_model, [prompt], [anchor], [anchor[:2]], eos_ids={2})
    with torch.no_grad():
        logits = tiny_model(input_ids=torch.tensor([prompt + anchor[:2]])).logits[0, -1]
    assert found[0].other_token is None and found[0].position == 2
    assert abs(found[0].margin - float(logits[anchor[2]] - logits[2])) < 1e-5


def test_the_summary_counts_near_ties_apart_and_reports_the_widest_margin():
    ties = [Parting(0, 4, 10, 11, 0.2), Parting(2, 9, 10, 12, NEAR_TIE_LOGITS + 1.0)]
    s = summarize("fp32 ours_plain", 5, ties)
    assert (s.parted, s.near_ties, s.max_margin) == (2, 1, NEAR_TIE_LOGITS + 1.0)
    assert s.describe() == f"2/5 part, 1 wide (<= {NEAR_TIE_LOGITS + 1.0:.2f})"
    assert summarize("fp32 ours_plain", 5, ties[:1]).describe() == "1/5 part, near-ties (<= 0.20)"
    assert summarize("fp32 ours_plain", 5, []).describe() == "same"
