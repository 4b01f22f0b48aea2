"""A `ChatModel` over a local transformers causal LM: chat template in, `Generation` out."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agenttrace.chat import CancelToken, Generation, GenerationParams, Message
from agenttrace.clock import Clock, MonotonicClock, default_clock
from agenttrace.generation.drafters import Drafter
from agenttrace.generation.loop import StopCriteria, generate


def device_clock(device: torch.device, base: MonotonicClock | None = None) -> MonotonicClock:
    """The shared clock, synchronising with the GPU before each reading when on CUDA, so draft
    and verify times measure the kernels rather than their launch."""
    base = base or default_clock()
    if device.type == "cuda":
        return base.with_sync(lambda: torch.cuda.synchronize(device))
    return base


class LocalChatModel:
    """Generates with our own loop (plain or speculative) over `model`.

    `drafter=None` decodes one token per forward pass; with a drafter, each round drafts up to
    `num_speculative_tokens` tokens and verifies them in one pass.
    """

    provider_name = "transformers"

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        name: str | None = None,
        drafter: Drafter | None = None,
        num_speculative_tokens: int = 3,
        clock: Clock | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self._name = name or getattr(model.config, "_name_or_path", None) or type(model).__name__
        self.drafter = drafter
        self.num_speculative_tokens = num_speculative_tokens if drafter is not None else 0
        self.clock = clock or device_clock(model.device)
        eos = {tokenizer.eos_token_id, *_as_list(getattr(model.generation_config, "eos_token_id", None))}
        self._eos = frozenset(t for t in eos if t is not None)

    @property
    def model_name(self) -> str:
        return self._name

    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        """Prompt token ids: the tokenizer's chat template with the assistant turn opened."""
        rendered = self.tokenizer.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in messages],
            tokenize=False,
            add_generation_prompt=True,
        )
        return self.tokenizer(rendered, add_special_tokens=False)["input_ids"]

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode([t for t in tokens if t not in self._eos], skip_special_tokens=True)

    def chat(
        self, messages: Sequence[Message], params: GenerationParams, *, cancel: CancelToken | None = None
    ) -> Generation:
        start = self.clock.now_ns()
        return self._run(self.encode_chat(messages), params, cancel, start)[0]

    def complete_ids(
        self, prompt_ids: list[int], params: GenerationParams, *, cancel: CancelToken | None = None
    ) -> tuple[Generation, list[int]]:
        """Generate after already-tokenized input: the record and the generated ids (EOS
        included), for benchmarks and equivalence tests."""
        return self._run(prompt_ids, params, cancel, self.clock.now_ns())

    def _run(
        self, prompt_ids: list[int], params: GenerationParams, cancel: CancelToken | None, start: int
    ) -> tuple[Generation, list[int]]:
        stop = StopCriteria(self._eos, params.max_tokens, params.stop, self.decode)
        out = generate(
            self.model,
            prompt_ids,
            params,
            stop,
            self.clock,
            drafter=self.drafter,
            num_speculative_tokens=self.num_speculative_tokens,
            cancel=cancel,
        )
        text = self.decode(out.tokens)
        for s in params.stop:
            if s in text:
                text = text[: text.index(s)]
        return Generation(
            text=text,
            input_tokens=len(prompt_ids),
            output_tokens=len(out.tokens),
            finish_reason=out.finish_reason,  # type: ignore[arg-type]
            start_ns=start,
            end_ns=out.end_ns,
            prefill_start_ns=out.prefill_start_ns,
            prefill_end_ns=out.prefill_end_ns,
            first_token_ns=out.first_token_ns,
            method=self.drafter.method if self.drafter is not None else "none",
            num_speculative_tokens=self.num_speculative_tokens,
            rounds=tuple(out.rounds),
            fallback_reason=out.fallback_reason,
        ), out.tokens


def _as_list(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
