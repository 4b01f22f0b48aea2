"""`trace_generate`: a transformers model whose `generate()` calls are generation spans, with the
speculation figures transformers' assisted generation does not expose.

    traced = agenttrace.trace_generate(model)
    out = traced.generate(input_ids, assistant_model=small, max_new_tokens=64)  # or prompt_lookup_num_tokens=3
    traced.last_generation.rounds    # drafted / accepted tokens and timings per verification step

How it observes without patching transformers: a streamer (transformers calls `put` with the
prompt first, then with the tokens each step adds — in assisted generation, the accepted draft
tokens plus the target's own token, one `put` per verification step) and, on the target model
only, PyTorch forward hooks (the public `register_forward_pre_hook` / `register_forward_hook`,
removed when the call returns) that time each target forward pass and read how many tokens it
scored. For verification step i > 1 the target scores `drafted + 1` tokens; its first forward
pass scores the prompt and the first draft together. So per step: drafted = scored - 1 (the
first: scored - prompt), accepted = tokens put - 1.

That first pass both prefills the prompt and verifies the first draft: it is recorded as prefill,
and the first round's verify time is only what follows it. Draft time is from the end of the
previous step to the start of the next target pass (the assistant's work, or the n-gram lookup).
A caller's own `streamer=` still gets every call. Hooks only count forward passes made on the
calling thread, so another thread using the same model meanwhile is not mixed in.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from agenttrace.clock import Clock
from agenttrace.core.chat import Generation, SpecRound
from agenttrace.instrument.model_spans import generation_span
from agenttrace.telemetry import Telemetry

__all__ = ["TracedGenerate", "trace_generate"]


@dataclass
class _Observed:
    """What the streamer and the hooks saw during one `generate` call (clock ns)."""

    prompt_ns: int | None = None
    prompt_len: int = 0
    batch: int = 1
    puts: list[tuple[int, int, int | None]] = field(default_factory=list)  # (time, tokens, last token)
    forwards: list[list[int]] = field(default_factory=list)  # [start, end, tokens scored]


class _Streamer:
    """A transformers streamer (`put` / `end`) that timestamps what it is given."""

    def __init__(self, clock: Clock, seen: _Observed, inner: Any | None) -> None:
        self.clock, self.seen, self.inner = clock, seen, inner

    def put(self, value: Any) -> None:
        now = self.clock.now_ns()
        shape = tuple(value.shape)
        if self.seen.prompt_ns is None:
            self.seen.prompt_ns = now
            self.seen.prompt_len = shape[-1] if shape else 1
            self.seen.batch = shape[0] if len(shape) == 2 else 1
        else:
            n = shape[-1] if len(shape) == 2 else 1  # (batch, n) in assisted steps, (batch,) in plain ones
            last = int(value.reshape(-1)[-1]) if value.numel() else None
            self.seen.puts.append((now, n, last))
        if self.inner is not None:
            self.inner.put(value)

    def end(self) -> None:
        if self.inner is not None:
            self.inner.end()


def _eos_ids(model: Any, kwargs: dict[str, Any]) -> set[int]:
    eos = kwargs.get("eos_token_id")
    if eos is None:
        config = kwargs.get("generation_config") or getattr(model, "generation_config", None)
        eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return set()
    return {int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])}


def _method(kwargs: dict[str, Any]) -> tuple[str, int]:
    """(agenttrace.spec.method, configured k) of this call."""
    config = kwargs.get("generation_config")
    lookup = kwargs.get("prompt_lookup_num_tokens") or getattr(config, "prompt_lookup_num_tokens", None)
    assistant = kwargs.get("assistant_model")
    if assistant is not None:
        k = kwargs.get("num_assistant_tokens") or getattr(assistant.generation_config, "num_assistant_tokens", None)
        return "draft_model", int(k or 0)
    if lookup:
        return "prompt_lookup", int(lookup)
    return "none", 0


def build_generation(seen: _Observed, start_ns: int, end_ns: int, method: str, k: int, eos: set[int], max_new: int | None) -> Generation:
    """The `Generation` record of one observed `generate` call."""
    puts, fwd = seen.puts, seen.forwards
    prompt_ns = seen.prompt_ns if seen.prompt_ns is not None else start_ns
    first_put = puts[0][0] if puts else end_ns
    prefill_start, prefill_end = (fwd[0][0], fwd[0][1]) if fwd else (prompt_ns, first_put)
    rounds: list[SpecRound] = []
    if method != "none" and len(fwd) == len(puts):  # one target pass per verification step
        previous_end = prompt_ns
        for i, ((put_ns, n, _), (f_start, f_end, scored)) in enumerate(zip(puts, fwd, strict=True)):
            drafted = scored - seen.prompt_len if i == 0 else scored - 1
            if drafted > 0:
                verify_start = f_end if i == 0 else f_start  # the first pass is counted as prefill
                rounds.append(SpecRound(previous_end, f_start, verify_start, put_ns, drafted, max(0, n - 1)))
            previous_end = put_ns
    generated = sum(n for _, n, _ in puts)
    last = puts[-1][2] if puts else None
    finish = "stop" if last in eos else ("length" if max_new is not None and generated >= max_new else "stop")
    return Generation(
        text="",
        input_tokens=seen.prompt_len * seen.batch,
        output_tokens=generated * seen.batch,
        finish_reason=finish,  # type: ignore[arg-type]
        start_ns=start_ns,
        end_ns=end_ns,
        prefill_start_ns=prefill_start,
        prefill_end_ns=prefill_end,
        first_token_ns=first_put if puts else None,
        method=method,
        num_speculative_tokens=max([k, *(r.drafted for r in rounds)]) if method != "none" else 0,
        rounds=tuple(rounds),
    )


class TracedGenerate:
    """A transformers model whose `generate` records a generation span; every other attribute is
    the model's own. `last_generation` holds the record of the latest call on this wrapper."""

    def __init__(self, model: Any, *, telemetry: Telemetry | None = None, name: str | None = None) -> None:
        self.model = model
        self.telemetry = telemetry
        self.name = name or getattr(model.config, "_name_or_path", None) or type(model).__name__
        self.last_generation: Generation | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """`model.generate(*args, **kwargs)`, recorded (see the module docstring)."""
        method, k = _method(kwargs)
        config = kwargs.get("generation_config") or getattr(self.model, "generation_config", None)
        max_new = kwargs.get("max_new_tokens") or getattr(config, "max_new_tokens", None)
        sampled = kwargs.get("do_sample", getattr(config, "do_sample", False))
        temperature = float(kwargs.get("temperature", getattr(config, "temperature", 1.0)) or 0.0) if sampled else 0.0
        scope = generation_span(
            self.name, provider="transformers", max_tokens=max_new, temperature=temperature, telemetry=self.telemetry
        )
        with scope as handle:
            if handle is None:  # telemetry could not open the span: generate untraced
                return self.model.generate(*args, **kwargs)
            clock = handle.telemetry.clock
            seen = _Observed()
            kwargs["streamer"] = _Streamer(clock, seen, kwargs.get("streamer"))
            hooks = self._hook(clock, seen)
            start = clock.now_ns()
            try:
                out = self.model.generate(*args, **kwargs)
            finally:
                for h in hooks:
                    h.remove()
            gen = build_generation(seen, start, clock.now_ns(), method, k, _eos_ids(self.model, kwargs), max_new)
            self.last_generation = gen
            handle.record(gen)
            return out

    def _hook(self, clock: Clock, seen: _Observed) -> list[Any]:
        thread = threading.get_ident()

        def before(_module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            if threading.get_ident() != thread:
                return
            ids = kwargs.get("input_ids", args[0] if args else None)
            if ids is None:
                ids = kwargs.get("inputs_embeds")
            scored = int(ids.shape[1]) if ids is not None and getattr(ids, "ndim", 0) >= 2 else 1
            seen.forwards.append([clock.now_ns(), 0, scored])

        def after(_module: Any, _args: Any, _kwargs: Any, _output: Any) -> None:
            if threading.get_ident() == thread and seen.forwards:
                seen.forwards[-1][1] = clock.now_ns()

        return [
            self.model.register_forward_pre_hook(before, with_kwargs=True),
            self.model.register_forward_hook(after, with_kwargs=True),
        ]


def trace_generate(model: Any, *, telemetry: Telemetry | None = None, name: str | None = None) -> TracedGenerate:
    """Wrap a transformers model (a `GenerationMixin`) so each `generate()` is a generation span
    with prefill, decode and, for assisted generation (`assistant_model=`) or prompt lookup
    (`prompt_lookup_num_tokens=`), the tokens drafted and accepted per verification step."""
    return TracedGenerate(model, telemetry=telemetry, name=name)
