"""The arms of `agenttrace bench generation`: transformers' `generate` and our loop with each
drafter (prompt lookup, early exit, the trained EAGLE and Medusa heads, their combination with
prompt lookup), eager or compiled, and llama.cpp's through its peer. Each arm is a function
(prompt ids, token budget) -> Run, timed on the bench's one clock."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from agenttrace.bench.generation_records import Run
from agenttrace.clock import Clock
from agenttrace.errors import ModelUnavailable

__all__ = ["HEAD_ARMS", "NATIVE_ARMS", "build_arms", "stop_ids", "warm_up"]

# Our loop on llama.cpp's kernels (generation/llama_backend.py), over the bundled GGUF itself and
# (`_q8`) over its Q8_0 copy (llama_weights.py): they run once, as the `gguf` weights, whatever
# --weights says. The trained heads' arms (eagle_k4, medusa_k3) draft from llama.cpp's features.
_NATIVE = ("plain", "prompt_lookup_k3", "prompt_lookup_k8", "prompt_lookup_adaptive16", "eagle_k4", "medusa_k3")
NATIVE_ARMS = tuple(f"ours_llama{q}_{a}" for q in ("", "_q8") for a in _NATIVE)


def _hf_arm(model, tokenizer, clock: Clock, **kwargs) -> Callable[[list[int], int], Run]:
    """transformers' `generate` (greedy) as an arm, timed on `clock`: end to end around the call,
    decode from its first new token."""
    import torch
    from transformers.generation.streamers import BaseStreamer

    class FirstToken(BaseStreamer):
        """Marks when generate() emits its first new token (its first put is the prompt)."""

        def __init__(self) -> None:
            self.calls, self.first = 0, None

        def put(self, value) -> None:
            self.calls += 1
            if self.calls == 2:
                self.first = clock.now_ns()

        def end(self) -> None:
            pass

    def run(ids: list[int], budget: int) -> Run:
        streamer = FirstToken()
        start = clock.now_ns()  # the prompt's tensor is built inside, as our loop builds its own
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([ids], device=model.device), max_new_tokens=budget, do_sample=False, streamer=streamer,
                pad_token_id=tokenizer.eos_token_id, **kwargs,
            )
        end = clock.now_ns()
        new = out[0, len(ids) :].tolist()
        first = streamer.first if streamer.first is not None else end
        return Run((end - start) / 1e9, (end - first) / 1e9, new)

    return run


def _our_arm(chat_model) -> Callable[[list[int], int], Run]:
    from agenttrace.core.chat import GenerationParams

    def run(ids: list[int], budget: int) -> Run:
        gen, out = chat_model.complete_ids(ids, GenerationParams(max_tokens=budget))
        return Run(
            gen.duration_s, out.decode_s, out.tokens,
            sum(r.drafted for r in out.rounds), sum(r.accepted for r in out.rounds), len(out.rounds),
        )

    run.compiled = chat_model.compiled  # type: ignore[attr-defined]  (warmed up before timing)
    run.max_width = chat_model.num_speculative_tokens + 1  # type: ignore[attr-defined]
    return run


def _head(kind: str, loaded, k: int, *, tree: bool = False, int8: bool | None = False, lookup: bool = False) -> dict:
    """The LocalChatModel settings of a trained-head arm: a fixed k (no controller choices, no
    fallback), as the other fixed-k arms. int8=None: the int8 head where it pays (`int8_pays`)."""
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.head_drafters import LookupThenHead, TreeShape, head_drafter, int8_pays

    if int8 is None:
        int8 = int8_pays(loaded.model)
    drafter = head_drafter(kind, loaded.model, loaded.name, tree=TreeShape() if tree else None, int8=int8)
    if lookup:
        drafter = LookupThenHead(PromptLookupDrafter(), drafter)
    return {"drafter": drafter, "num_speculative_tokens": k, "fallback": False}


# The trained heads (agenttrace train-drafter; the bundled model's ship with agenttrace).
HEAD_ARMS: dict[str, Callable[[object], dict]] = {
    "ours_eagle_k4": lambda loaded: _head("eagle", loaded, 4),
    "ours_eagle_tree": lambda loaded: _head("eagle", loaded, 4, tree=True),
    "ours_eagle_tree_int8": lambda loaded: _head("eagle", loaded, 4, tree=True, int8=True),
    "ours_medusa_k3": lambda loaded: _head("medusa", loaded, 3),
    "ours_lookup_eagle_tree": lambda loaded: _head("eagle", loaded, 6, tree=True, lookup=True, int8=None),
}


def warm_up(arm, lengths: list[int]) -> float | None:
    """Compile a compiled arm's shapes for calls of these lengths; the seconds its graphs took
    to compile (also when another arm sharing its compiled model compiled them first), or None."""
    compiled = getattr(arm, "compiled", None)
    if compiled is None:
        return None
    from agenttrace.generation.compiled import widths_through

    widths = widths_through(arm.max_width)
    compiled.warm_up(lengths, widths)
    return sum(s for (_, width), s in compiled.compile_s.items() if width in widths)


def build_arms(loaded, names: list[str], clock: Clock, peer=None,
               longest: int = 0) -> dict[str, Callable[[list[int], int], Run]]:
    """The arms `names` over the loaded model, every one timed on `clock` (the llama.cpp arms on
    `peer`, a LlamaPeer); SystemExit naming the arms there are when one is unknown. The compiled
    arms share one compiled model whose static caches hold `longest` tokens (prompt and budget):
    one cache size, so one set of graphs."""
    from agenttrace.generation.compiled import capacity_for, compiled_view
    from agenttrace.generation.draft_model import early_exit_drafter, early_exit_view
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel

    m, tok = loaded.model, loaded.tokenizer
    shared = []

    def ours(compiled: bool = False, **kw):
        if compiled and not shared:
            shared.append(compiled_view(m, min_capacity=capacity_for(longest)))
        return _our_arm(LocalChatModel(m, tok, name=loaded.name, clock=clock, compiled=compiled and shared[0], **kw))

    factories: dict[str, Callable[[], Callable]] = {
        "hf_generate": lambda: _hf_arm(m, tok, clock),
        "hf_prompt_lookup_k10": lambda: _hf_arm(m, tok, clock, prompt_lookup_num_tokens=10),
        "hf_assisted_early_exit8": lambda: _hf_arm(m, tok, clock, assistant_model=early_exit_view(m, 8)),
        "ours_plain": lambda: ours(),
        # plain decoding on the prepacked weights the speculative arms verify with (one more
        # copy of the weights; on some CPUs faster per step than the stock kernels too)
        "ours_plain_packed": lambda: ours(packed_verify=True),
        "ours_prompt_lookup_k3": lambda: ours(drafter=PromptLookupDrafter(), num_speculative_tokens=3, fallback=False),
        "ours_prompt_lookup_k8": lambda: ours(drafter=PromptLookupDrafter(), num_speculative_tokens=8, fallback=False),
        "ours_prompt_lookup_adaptive16": lambda: ours(drafter=PromptLookupDrafter(), num_speculative_tokens=16, adaptive=True),
        "ours_early_exit8_k3": lambda: ours(drafter=early_exit_drafter(m, 8), num_speculative_tokens=3, fallback=False),
        "ours_early_exit8_adaptive": lambda: ours(drafter=early_exit_drafter(m, 8), num_speculative_tokens=4, adaptive=True),
        "ours_plain_compiled": lambda: ours(compiled=True),
        "ours_prompt_lookup_k3_compiled": lambda: ours(drafter=PromptLookupDrafter(), num_speculative_tokens=3,
                                                       fallback=False, compiled=True),
        "ours_prompt_lookup_k8_compiled": lambda: ours(drafter=PromptLookupDrafter(), num_speculative_tokens=8,
                                                       fallback=False, compiled=True),
    }
    factories.update({name: (lambda make=make: ours(**make(loaded))) for name, make in HEAD_ARMS.items()})
    native: dict[bool, object] = {}  # one llama.cpp model per weights for every arm on it (a context each)

    def on_llama(q8: bool, head: tuple[str, int] | None = None, **kw):
        from agenttrace.generation.llama_backend import LlamaCppModel
        from agenttrace.generation.llama_weights import requantized
        from agenttrace.generation.models import cache_dir, find_bundled_gguf

        if q8 not in native:
            import torch

            try:  # the GGUF the bundled model was converted from; llama.cpp's threads = torch's
                gguf = find_bundled_gguf()
                native[q8] = LlamaCppModel(requantized(gguf, cache_dir()) if q8 else gguf, threads=torch.get_num_threads(),
                                           tables_from=gguf)
            except ModelUnavailable as exc:
                raise SystemExit(f"the {', '.join(NATIVE_ARMS)} arms: {exc}") from exc
        model = native[q8]
        if head is not None:  # a trained head's chain (kind, k): its drafter binds this model's tables
            kw = _head(head[0], SimpleNamespace(model=model, name=loaded.name), head[1])
        return _our_arm(LocalChatModel(model, tok, name=model.config._name_or_path, clock=clock, **kw))

    drafting = {"plain": {}, "prompt_lookup_k3": {"num_speculative_tokens": 3, "fallback": False},
                "prompt_lookup_k8": {"num_speculative_tokens": 8, "fallback": False},
                "prompt_lookup_adaptive16": {"num_speculative_tokens": 16, "adaptive": True}}
    for q in ("", "_q8"):
        for a, kw in drafting.items():
            factories[f"ours_llama{q}_{a}"] = lambda q8=bool(q), kw=kw: on_llama(
                q8, **({"drafter": PromptLookupDrafter(), **kw} if kw else {}))
        for kind, k in (("eagle", 4), ("medusa", 3)):  # the trained heads' chains, on llama.cpp's features
            factories[f"ours_llama{q}_{kind}_k{k}"] = lambda q8=bool(q), head=(kind, k): on_llama(q8, head)
    if peer is not None:
        stop = sorted(stop_ids(loaded))
        factories["llama_cpp"] = lambda: peer.arm(stop, lookup=False)
        factories["llama_cpp_lookup"] = lambda: peer.arm(stop, lookup=True)
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise SystemExit(f"unknown arm(s): {', '.join(unknown)}; choose from {', '.join(factories)}")
    return {n: factories[n]() for n in names}


def stop_ids(loaded) -> set[int]:
    """The token ids a chat model of `loaded` stops at."""
    from agenttrace.generation.local import LocalChatModel

    return set(LocalChatModel(loaded.model, loaded.tokenizer).eos_ids)
