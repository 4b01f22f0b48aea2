"""How far a torch weight variant moves the top-two logit margin of the bundled model against
fp32, teacher-forced over fp32's greedy texts of the generation benchmark's prompts: the basis of
bench/divergence.py's NEAR_TIE_LOGITS (a parting within what the variants move is a near-tie).

    python scripts/margin_shift.py [VARIANT ...]     (default int4; 2 threads)
"""

from __future__ import annotations

import sys


def main(variants: list[str]) -> None:
    import numpy as np
    import torch

    from agenttrace.bench.prompts import free_text_prompts, tool_call_prompts
    from agenttrace.core.chat import GenerationParams
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import load_weights

    torch.set_num_threads(2)
    exact = load_weights("fp32")
    chat = LocalChatModel(exact.model, exact.tokenizer)
    texts = []
    for messages in tool_call_prompts() + free_text_prompts():
        ids = chat.encode_chat(messages)
        _, out = chat.complete_ids(ids, GenerationParams(max_tokens=96))
        texts.append((ids, out.tokens))
    for variant in variants:
        other = load_weights(variant)
        shifts = []
        for ids, tokens in texts:
            x = torch.tensor([ids + tokens])
            with torch.no_grad():
                a = exact.model(input_ids=x).logits[0, len(ids) - 1:-1].float()
                b = other.model(input_ids=x).logits[0, len(ids) - 1:-1].float()
            top = a.topk(2, dim=-1).indices  # fp32's top two at each position
            ma, mb = a.gather(1, top), b.gather(1, top)
            shifts.append(((mb[:, 0] - mb[:, 1]) - (ma[:, 0] - ma[:, 1])).abs().numpy())
        d = np.concatenate(shifts)
        p50, p90, p99, top = np.percentile(d, [50, 90, 99, 100])
        print(f"{variant} against fp32: |top-two margin shift| over {len(d)} positions: "
              f"p50 {p50:.2f}, p90 {p90:.2f}, p99 {p99:.2f}, max {top:.2f} logits")


if __name__ == "__main__":
    main(sys.argv[1:] or ["int4"])
