"""Which EAGLE draft shape pays on this machine: chains of k tokens and trees of several shapes
(depth, branch, expand, size), on the generation benchmark's prompts, interleaved, against plain
decoding; each row's decode speedup, mean acceptance length and time per round drafting and
verifying. Not part of the library or the tests.

    python scripts/tree_probe.py THREADS [fp32|int4] [REPEATS]
"""

from __future__ import annotations

import random
import statistics
import sys


def main() -> None:
    import torch

    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    weights = sys.argv[2] if len(sys.argv) > 2 else "fp32"
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    torch.set_num_threads(threads)
    from agenttrace.bench.prompts import free_text_prompts, tool_call_prompts
    from agenttrace.generation.chat import GenerationParams
    from agenttrace.generation.head_drafters import TreeShape, head_drafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import load_weights

    lm = load_weights(weights)
    shapes = {"plain": None, "plain packed": None, "chain k3": 3, "chain k4": 4, "chain k5": 5,
              "tree 3,2,2,6": TreeShape(3, 2, 2, 6), "tree 4,2,2,8": TreeShape(4, 2, 2, 8),
              "tree 4,3,3,10": TreeShape(4, 3, 3, 10), "tree 5,3,3,12": TreeShape(5, 3, 3, 12)}
    models = {}
    for name, shape in shapes.items():
        if shape is None:  # plain decoding on the stock weights, and on the prepacked ones speculation verifies with
            models[name] = LocalChatModel(lm.model, lm.tokenizer, packed_verify=name == "plain packed")
            continue
        tree = shape if isinstance(shape, TreeShape) else None
        k = shape.depth if tree else shape
        drafter = head_drafter("eagle", lm.model, lm.name, tree=tree, int8=True)
        models[name] = LocalChatModel(lm.model, lm.tokenizer, drafter=drafter, num_speculative_tokens=k, fallback=False)
    sets = {"tool_call": ([models["plain"].encode_chat(m) for m in tool_call_prompts()], 64),
            "free_text": ([models["plain"].encode_chat(m) for m in free_text_prompts()], 96)}
    for m in models.values():
        m.complete_ids(sets["tool_call"][0][0], GenerationParams(max_tokens=4))
    rng = random.Random(0)
    runs: dict = {}
    for r in range(repeats):
        for set_name, (prompts, budget) in sets.items():
            for ids in prompts:
                order = list(models)
                rng.shuffle(order)
                for name in order:
                    gen, out = models[name].complete_ids(ids, GenerationParams(max_tokens=budget))
                    runs.setdefault((set_name, name, r), []).append(out)
    print(f"{lm.name} {weights}, {threads} threads, {repeats} interleaved repeats, int8 EAGLE head")
    print("| prompts | shape | decode vs plain | mean acc. len | draft ms/round | verify ms/round | nodes/round |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for set_name in sets:
        def rate(name, r):
            outs = runs[(set_name, name, r)]
            return sum(len(o.tokens) - 1 for o in outs) / sum(o.decode_s for o in outs)
        for name in models:
            ratio = statistics.median(rate(name, r) / rate("plain", r) for r in range(repeats))
            rounds = [x for r in range(repeats) for o in runs[(set_name, name, r)] for x in o.rounds]
            if not rounds:
                print(f"| {set_name} | {name} | {ratio:.2f}x | - | - | - | - |")
                continue
            mal = 1 + sum(x.accepted for x in rounds) / len(rounds)
            print(f"| {set_name} | {name} | {ratio:.2f}x | {mal:.2f} | {1e3 * statistics.mean(x.draft_s for x in rounds):.1f} | "
                  f"{1e3 * statistics.mean(x.verify_s for x in rounds):.1f} | {statistics.mean(x.drafted for x in rounds):.1f} |")


if __name__ == "__main__":
    main()
