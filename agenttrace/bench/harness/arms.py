"""The arms: how each one decodes. Every arm is a `LocalChatModel` over the same loaded weights,
with its own prefix cache and k controller, so no arm's state helps or hurts another.

    baseline        plain decoding, one token per forward pass
    prompt_lookup   prompt-lookup drafting, adaptive k up to `prompt_lookup_k`, fallback on
    early_exit      the target's first `early_exit_layers` layers draft (self-speculation),
                    adaptive k up to `early_exit_k`, fallback on: on a CPU it rarely pays, and the
                    controller is what stops it costing time
    prompt_lookup_fixed, early_exit_fixed   the same drafters at a fixed k, no fallback

All arms use the same prefix-cache setting (on by default, `prefix_cache_mb` per arm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agenttrace.bench.harness.options import HarnessOptions

if TYPE_CHECKING:
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import LoadedModel

ARM_DESCRIPTIONS = {
    "baseline": "plain decoding",
    "prompt_lookup": "prompt lookup, adaptive k <= {prompt_lookup_k}, fallback",
    "prompt_lookup_fixed": "prompt lookup, k = {prompt_lookup_k}, no fallback",
    "early_exit": "early exit ({early_exit_layers} layers), adaptive k <= {early_exit_k}, fallback",
    "early_exit_fixed": "early exit ({early_exit_layers} layers), k = {early_exit_k}, no fallback",
}


def describe_arm(arm: str, opts: HarnessOptions) -> str:
    return ARM_DESCRIPTIONS[arm].format(**opts.to_json())


def check_arms(arms: tuple[str, ...]) -> None:
    """ValueError naming the known arms when one is unknown, or when the list is empty."""
    unknown = [a for a in arms if a not in ARM_DESCRIPTIONS]
    if unknown or not arms:
        raise ValueError(f"unknown arm(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(ARM_DESCRIPTIONS)}")


def build_model(arm: str, loaded: LoadedModel, opts: HarnessOptions) -> LocalChatModel:
    """A fresh `LocalChatModel` for `arm` over the loaded weights (its own caches and controller)."""
    from agenttrace.generation.draft_model import early_exit_drafter
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.prefix_cache import PrefixCache

    check_arms((arm,))
    cache = PrefixCache(max_bytes=opts.prefix_cache_mb * 2**20) if opts.prefix_cache_mb > 0 else False
    common = {"name": loaded.name, "prefix_cache": cache}
    if arm == "baseline":
        return LocalChatModel(loaded.model, loaded.tokenizer, **common)
    fixed = arm.endswith("_fixed")
    if arm.startswith("prompt_lookup"):
        drafter, k = PromptLookupDrafter(), opts.prompt_lookup_k
    else:
        drafter, k = early_exit_drafter(loaded.model, opts.early_exit_layers), opts.early_exit_k
    return LocalChatModel(
        loaded.model, loaded.tokenizer, drafter=drafter, num_speculative_tokens=k, adaptive=not fixed,
        fallback=not fixed, **common,
    )
