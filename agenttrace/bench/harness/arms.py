"""The arms: how each one decodes. Every arm is a `LocalChatModel` over the same loaded weights,
with its own prefix cache and k controller, so no arm's state helps or hurts another.

    baseline        plain decoding, one token per forward pass
    prompt_lookup   prompt-lookup drafting, adaptive k up to `prompt_lookup_k`, fallback on
    early_exit      the target's first `early_exit_layers` layers draft (self-speculation),
                    adaptive k up to `early_exit_k`, fallback on: on a CPU it rarely pays, and the
                    controller is what stops it costing time
    prompt_lookup_fixed, early_exit_fixed   the same drafters at a fixed k, no fallback
    eagle, eagle_tree, medusa, lookup_eagle   the trained heads (agenttrace train-drafter; the
                    bundled model's ship with agenttrace): EAGLE's one chain or draft trees,
                    Medusa's heads, and prompt lookup where it matches with EAGLE trees elsewhere;
                    eager only (they read the target's features)
    constrained, prompt_lookup_constrained, ...   an arm with `_constrained` appended (and
                    `constrained` for the baseline) decodes the same way under the grammar of a
                    decision (the agent's `constrained` setting): its model is the unconstrained
                    arm's, so a change in validity comes from the constraint, not the decoding

All arms use the same prefix-cache setting (on by default, `prefix_cache_mb` per arm), and the
same decode path: eager, or with `compiled` torch.compile graphs over a static KV cache.
"""

from __future__ import annotations

import weakref
from dataclasses import replace
from typing import TYPE_CHECKING

from agenttrace.bench.harness.options import HarnessOptions

if TYPE_CHECKING:
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import LoadedModel
    from agenttrace.runtime.agent import AgentConfig

_CONSTRAINED = "_constrained"

ARM_DESCRIPTIONS = {
    "baseline": "plain decoding",
    "prompt_lookup": "prompt lookup, adaptive k <= {prompt_lookup_k}, fallback",
    "prompt_lookup_fixed": "prompt lookup, k = {prompt_lookup_k}, no fallback",
    "early_exit": "early exit ({early_exit_layers} layers), adaptive k <= {early_exit_k}, fallback",
    "early_exit_fixed": "early exit ({early_exit_layers} layers), k = {early_exit_k}, no fallback",
    "eagle": "trained EAGLE head, one chain of adaptive k <= {eagle_k}, fallback",
    "eagle_tree": "trained EAGLE head, draft trees of depth <= {eagle_k}, fallback",
    "medusa": "trained Medusa heads, adaptive k <= 3, fallback",
    "lookup_eagle": "prompt lookup where it matches, else EAGLE trees; k <= {prompt_lookup_k}, fallback",
}
_HEADS = ("eagle", "eagle_tree", "medusa", "lookup_eagle")


def decoding(arm: str) -> tuple[str, bool]:
    """The arm's decoding (an ARM_DESCRIPTIONS key) and whether it is constrained."""
    if arm == "constrained":
        return "baseline", True
    if arm.endswith(_CONSTRAINED):
        return arm[: -len(_CONSTRAINED)], True
    return arm, False


def describe_arm(arm: str, opts: HarnessOptions) -> str:
    base, constrained = decoding(arm)
    text = ARM_DESCRIPTIONS[base].format(**opts.to_json())
    return f"{text}, constrained to the decision grammar" if constrained else text


def arm_config(arm: str, config: AgentConfig) -> AgentConfig:
    """The agent settings of `arm`: `config` with the arm's constraint setting."""
    return replace(config, constrained=decoding(arm)[1])


def check_arms(arms: tuple[str, ...]) -> None:
    """ValueError naming the known arms when one is unknown, or when the list is empty."""
    unknown = [a for a in arms if decoding(a)[0] not in ARM_DESCRIPTIONS or a == "baseline" + _CONSTRAINED]
    if unknown or not arms:
        known = [*ARM_DESCRIPTIONS, "constrained", *(f"{a}{_CONSTRAINED}" for a in ARM_DESCRIPTIONS if a != "baseline")]
        raise ValueError(f"unknown arm(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(known)}")


# what our loop runs on llama.cpp's kernels: drafters that need only tokens (no features, no draft
# model over torch layers)
LLAMA_CPP_ARMS = ("baseline", "prompt_lookup", "prompt_lookup_fixed")


def load_for(opts: HarnessOptions, clock=None) -> LoadedModel:
    """The model every arm runs on, as `opts` asks (backend, weights, device, threads)."""
    from agenttrace.generation.models import load_model

    if opts.backend == "llama.cpp":
        unfit = [a for a in opts.arms if decoding(a)[0] not in LLAMA_CPP_ARMS]
        if unfit or opts.compiled:
            raise ValueError(f"the llama.cpp backend runs the {', '.join(LLAMA_CPP_ARMS)} arms (and their constrained "
                             f"variants), eager: drop {', '.join(unfit) or '--compiled'}")
        return load_model(opts.model, backend="llama.cpp", threads=opts.threads, clock=clock)
    return load_model(opts.model, device=opts.device, dtype=opts.dtype, quantize=opts.quantize, clock=clock)


def build_model(arm: str, loaded: LoadedModel, opts: HarnessOptions, engine=None) -> LocalChatModel:
    """A fresh `LocalChatModel` for `arm` over the loaded weights (its own caches and controller);
    with `engine`, generating in that shared batching engine."""
    from agenttrace.generation.draft_model import early_exit_drafter
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.prefix_cache import PrefixCache
    from agenttrace.generation.prompt_store import PromptStore

    check_arms((arm,))
    arm = decoding(arm)[0]
    # (on llama.cpp's kernels the cache also keeps shared prompt prefixes on disk: prompt_store.py)
    store = PromptStore.for_model(loaded.model)
    cache = PrefixCache(max_bytes=opts.prefix_cache_mb * 2**20, store=store) if opts.prefix_cache_mb > 0 else False
    common = {"name": loaded.name, "prefix_cache": cache, **({"engine": engine} if engine is not None else {})}
    if arm == "baseline":
        return LocalChatModel(loaded.model, loaded.tokenizer, compiled=_compiled(loaded, opts, 0), **common)
    fixed = arm.endswith("_fixed")
    if arm in _HEADS:
        if opts.compiled:
            raise ValueError(f"the {arm} arm reads the target's features, which the compiled path does not give "
                             "yet: run it without --compiled")
        drafter, k = _head_drafter(arm, loaded, opts)
    elif arm.startswith("prompt_lookup"):
        drafter, k = PromptLookupDrafter(), opts.prompt_lookup_k
    else:
        drafter, k = early_exit_drafter(loaded.model, opts.early_exit_layers), opts.early_exit_k
    return LocalChatModel(
        loaded.model, loaded.tokenizer, drafter=drafter, num_speculative_tokens=k, adaptive=not fixed,
        fallback=not fixed, compiled=_compiled(loaded, opts, k), **common,
    )


def _head_drafter(arm: str, loaded: LoadedModel, opts: HarnessOptions):
    """(drafter, k) of a trained-head arm (ModelUnavailable, saying what to do, without a head)."""
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.head_drafters import LookupThenHead, TreeShape, head_drafter, int8_pays

    int8 = int8_pays(loaded.model)
    if arm == "medusa":
        return head_drafter("medusa", loaded.model, loaded.name, int8=int8), 3
    tree = None if arm == "eagle" else TreeShape(depth=opts.eagle_k)
    eagle = head_drafter("eagle", loaded.model, loaded.name, tree=tree, int8=int8)
    if arm == "lookup_eagle":
        return LookupThenHead(PromptLookupDrafter(), eagle), opts.prompt_lookup_k
    return eagle, opts.eagle_k


# One compiled model per loaded model, shared by the arms: its graphs compile once.
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
COMPILED_CAPACITY = 2048  # one static-cache size for every call of a run: one set of graphs


def _compiled(loaded: LoadedModel, opts: HarnessOptions, k: int):
    """With `opts.compiled`, the shared compiled model, its passes for up to k + 1 tokens
    compiled now: a shape first met inside a task would spend the task's deadline compiling
    (a call longer than the capacity still compiles its own size when it comes)."""
    if not opts.compiled:
        return False
    from agenttrace.generation.compiled import compiled_view, widths_through

    compiled = _COMPILED.get(loaded.model)
    if compiled is None:
        compiled = _COMPILED[loaded.model] = compiled_view(loaded.model, min_capacity=COMPILED_CAPACITY)
    compiled.warm_up([0], widths_through(k + 1))
    return compiled
