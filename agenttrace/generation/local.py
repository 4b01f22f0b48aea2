"""A `ChatModel` over a local transformers causal LM: chat template in, `Generation` out."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from agenttrace.clock import Clock
from agenttrace.core.chat import BatchFigures, CancelToken, Constraint, Generation, GenerationParams, Message
from agenttrace.core.roofline import ModelShape, RooflineMeter
from agenttrace.generation.adaptive import KController
from agenttrace.generation.ceiling import MachinePeaks, model_shape
from agenttrace.generation.constrain import GrammarCompiler
from agenttrace.generation.device import device_clock, device_peaks
from agenttrace.generation.drafters import Drafter, fork_drafter
from agenttrace.generation.kv import Stepper, common_prefix_length
from agenttrace.generation.loop import Decoded, StopCriteria, generate
from agenttrace.generation.packed import packed_view, packs_one_row
from agenttrace.generation.prefix_cache import PrefixCache

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from agenttrace.generation.batching.engine import BatchEngine
    from agenttrace.generation.batching.sequence import BatchStats
    from agenttrace.generation.compiled import CompiledDecoder


def encode_chat(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message]) -> list[int]:
    """Prompt token ids: the tokenizer's chat template with the assistant turn opened."""
    rendered = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in messages],
        tokenize=False,
        add_generation_prompt=True,
    )
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def opening_prefix(tokenizer: PreTrainedTokenizerBase, messages: Sequence[Message], ids: Sequence[int]) -> int:
    """How many of the prompt `ids` are the conversation before its last message (an agent's first
    call: system prompt, tools and examples, before the task's request) as the template renders
    them alone, or 0 (a single message, or a template whose rendering of them is not a prefix)."""
    if len(messages) < 2:
        return 0
    before = tokenizer(tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in messages[:-1]],
                                                     tokenize=False), add_special_tokens=False)["input_ids"]
    return len(before) if common_prefix_length(before, ids) == len(before) else 0


class LocalChatModel:
    """Generates with our own loop (plain or speculative) over `model`.

    drafter: None decodes one token per forward pass; with a drafter each round drafts up to
    `num_speculative_tokens` tokens and verifies them in one pass. adaptive: choose k per round
    from the measured acceptance and costs (else always the maximum). fallback: stop speculating
    within a call once it is measured not to pay. prefix_cache: reuse the KV cache of earlier
    calls for their longest common prefix (True for a default-sized one). packed_verify: run the
    few-token verify passes on prepacked weights (see packed.py); None means on when speculating
    on a CPU where it is available. compiled: decode and verify through torch.compile graphs over
    a static KV cache (compiled.py), or a `CompiledDecoder` of `model` to share (its graphs
    compile once); the first pass of each shape compiles (tens of seconds on a CPU), which
    `self.compiled.warm_up` can do ahead. engine: generate in that continuous-batching engine
    (batching/engine.py), with the other models sharing it, instead of alone (it runs eager
    passes: not with `compiled`). roofline: measure each generation's passes against this
    machine's peaks (probed once per machine, about a second, then read from the cache).
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
        adaptive: bool = False,
        fallback: bool = True,
        prefix_cache: PrefixCache | bool = False,
        packed_verify: bool | None = None,
        compiled: bool | CompiledDecoder = False,
        clock: Clock | None = None,
        engine: BatchEngine | None = None,
        roofline: bool = True,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self._name = name or getattr(model.config, "_name_or_path", None) or type(model).__name__
        self._settings = dict(adaptive=adaptive, fallback=fallback, roofline=roofline)
        # One call at a time on the unbatched path: the prefix cache, the controller and a
        # stateful drafter belong to one generation (an engine takes concurrent calls itself).
        self._lock = threading.Lock()
        self.drafter = drafter
        self.num_speculative_tokens = num_speculative_tokens if drafter is not None else 0
        self.controller = (
            KController(
                self.num_speculative_tokens,
                adaptive=adaptive,
                fallback_below=0.95 if fallback else 0.0,
            )
            if drafter is not None
            else None
        )
        # (an empty PrefixCache is falsy: test for the type, not truthiness)
        self.prefix_cache = prefix_cache if isinstance(prefix_cache, PrefixCache) else (PrefixCache() if prefix_cache else None)
        # A model that runs its passes itself (llama_backend.LlamaCppModel) keeps its KV cache
        # outside torch: no prepacked view, compiled graphs or engine; features where it has
        # forward_features, for chains (no tree's mask); its prefix cache keeps the library's
        # sequences (prefix_cache.py).
        native = isinstance(model, Stepper) and getattr(model, "native", False) is True
        if native:
            self.provider_name = getattr(model, "provider_name", self.provider_name)
            reads = getattr(drafter, "reads_features", False)
            trees = any(getattr(d, "tree", None) is not None for d in (drafter, getattr(drafter, "head", None)))
            unsupported = [what for what, asked in (
                ("compiled graphs (compiled=False)", bool(compiled)), ("a batching engine (engine=None)", engine is not None),
                (f"the {getattr(drafter, 'method', '')} drafter's target features",
                 reads and not callable(getattr(model, "forward_features", None))),
                ("draft trees (a chain drafter)", trees),
            ) if asked]
            if unsupported:
                raise ValueError(f"{model!r} keeps its KV cache in its own library: it takes no {', '.join(unsupported)}")
            packed_verify = False
            if prefix_cache is True:  # the default cache keeps shared prompt prefixes on disk too
                from agenttrace.generation.prompt_store import PromptStore

                self.prefix_cache.store = PromptStore.for_model(model)
            # a context of its own: which cells a call gets (so its bits) depends on what else
            # the context holds (llama_backend's docstring)
            model = model.own_context()
        self.native = native
        self._opened = False  # a chat call has run (chat keeps the first one's opening: open_with)
        if packed_verify is None:
            # Plain decoding takes the packed view too where this process runs 1-row products on
            # it (packed.packs_one_row): a baseline and a speculative arm's plain steps then run
            # the same kernels, so greedy text cannot differ by kernel between arms.
            packed_verify = drafter is not None or packs_one_row()
        # The model the loop runs: with packed weights its verify passes cost far less on a CPU;
        # compiled, its short passes run as torch.compile graphs over a static cache (inductor
        # packs weights its own way, so the two do not stack).
        if compiled and getattr(drafter, "reads_features", False):
            raise ValueError(f"the {drafter.method} drafter reads the target's features, which the compiled path does "
                             "not give yet: use it with compiled=False")
        if compiled and engine is not None:
            raise ValueError("the batching engine runs eager passes: use it with compiled=False")
        self.engine = engine
        if compiled is True:
            from agenttrace.generation.compiled import compiled_view  # (transformers' static cache: on demand)

            compiled = compiled_view(model)
        self.compiled: CompiledDecoder | None = compiled or None
        # (with an engine the engine's passes run, on its own prepacked view: no copy here)
        self._runner = self.compiled or (packed_view(model) if packed_verify and engine is None else model)
        self.clock = clock or device_clock(model.device)
        self._own_clock = clock is not None
        eos = {tokenizer.eos_token_id, *_as_list(getattr(model.generation_config, "eos_token_id", None))}
        self._eos = frozenset(t for t in eos if t is not None)
        self._grammars: GrammarCompiler | None = None
        self._shape: ModelShape | None = None
        self._peaks: MachinePeaks | None = None
        # (a PreTrainedModel means transformers is imported: the test costs nothing otherwise)
        transformers = sys.modules.get("transformers")
        if roofline and transformers is not None and isinstance(model, transformers.PreTrainedModel):
            try:
                self._shape = model_shape(model)
                self._peaks = device_peaks(model.device)
            except Exception:  # an unusual architecture: generations go without a roofline
                self._shape = None

    def prepare_constraint(self, constraint: Constraint) -> str | None:
        """Make `constraint` ready before the first call: map the tokenizer for the grammar
        engine (ConstraintUnavailable, saying what to do, when it cannot be) and compile the
        grammar into the cache. Returns why calls under it will decode unconstrained (the
        grammar does not compile), or None."""
        return self._compiler().compile(constraint, self.clock).error

    def _compiler(self) -> GrammarCompiler:
        if self._grammars is None:
            vocab = int(getattr(self.model.config, "vocab_size", 0) or len(self.tokenizer))
            self._grammars = GrammarCompiler(self.tokenizer, vocab, self._eos)
        return self._grammars

    def bind_clock(self, clock: Clock) -> None:
        """Read time from `clock` (the telemetry's, which `Agent` passes in) unless this model
        was given a clock of its own; on CUDA readings still synchronise with the device."""
        if self._own_clock:
            return
        self.clock = device_clock(self.model.device, clock)

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def context_length(self) -> int | None:
        """Positions the model holds (prompt and reply), from its config; None when unknown."""
        limit = getattr(self.model.config, "max_position_embeddings", None)
        return limit if isinstance(limit, int) and limit > 0 else None

    def sibling(self, *, engine: BatchEngine | None = None) -> LocalChatModel:
        """A model over the same weights and tokenizer that decodes the same way (drafter kind,
        k, adaptivity, fallback) with state of its own: a fresh k controller, the drafter's fork
        (drafters.fork_drafter), an empty prefix cache of the same size, on `engine` when given.
        For agents that generate at once (parallel sub-agents): on one engine their calls batch;
        without one they share this model's prepacked weights and run side by side."""
        if self.compiled is not None:
            raise ValueError("a compiled model's static cache serves one generation at a time: make siblings of an "
                             "eager model (compiled=False)")
        drafter = fork_drafter(self.drafter) if self.drafter is not None else None
        cache = (PrefixCache(self.prefix_cache.max_bytes, self.prefix_cache.store) if self.prefix_cache is not None
                 else False)
        sib = LocalChatModel(self.model, self.tokenizer, name=self._name, drafter=drafter,
                             num_speculative_tokens=self.num_speculative_tokens or 3, prefix_cache=cache,
                             packed_verify=False, clock=self.clock if self._own_clock else None,
                             engine=engine or self.engine, **self._settings)
        if sib.engine is None and not isinstance(sib._runner, Stepper):
            sib._runner = self._runner  # the prepacked view is read-only: shared, not copied
        return sib

    @property
    def batches(self) -> bool:
        """Whether siblings of this model can share a BatchEngine: eager torch weights only (a
        compiled model's static cache and a native library's KV cache take no engine)."""
        return self.compiled is None and not self.native

    @property
    def method(self) -> str:
        return self.drafter.method if self.drafter is not None else "none"

    def encode_chat(self, messages: Sequence[Message]) -> list[int]:
        """Prompt token ids: the tokenizer's chat template with the assistant turn opened."""
        return encode_chat(self.tokenizer, messages)

    @property
    def eos_ids(self) -> frozenset[int]:
        """The token ids that end a reply (the tokenizer's EOS and the generation config's)."""
        return self._eos

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode([t for t in tokens if t not in self._eos], skip_special_tokens=True)

    def chat(
        self, messages: Sequence[Message], params: GenerationParams, *, cancel: CancelToken | None = None
    ) -> Generation:
        start = self.clock.now_ns()
        ids = self.encode_chat(messages)
        if not self._opened and self.prefix_cache is not None and self.prefix_cache.store is not None:
            # A first call's conversation before its request (system prompt, tools, examples) is
            # what this agent sends first in every process: kept on disk, the next process's first
            # call starts from it (prompt_store.py). Only the first: later calls are a task's turns.
            self.prefix_cache.open_with(ids[: opening_prefix(self.tokenizer, messages, ids)])
        self._opened = True
        return self._run(ids, params, cancel, start)[0]

    async def achat(self, messages: Sequence[Message], params: GenerationParams) -> Generation:
        """`chat` on a worker thread; cancelling the awaiting task stops generation within one
        round (the worker sees the cancel token between rounds) and releases its caches."""
        cancel = CancelToken()
        worker = asyncio.ensure_future(asyncio.to_thread(self.chat, messages, params, cancel=cancel))
        try:
            return await asyncio.shield(worker)
        except asyncio.CancelledError:
            cancel.cancel()
            await asyncio.wait([worker])
            raise

    def complete_ids(
        self,
        prompt_ids: list[int],
        params: GenerationParams,
        *,
        cancel: CancelToken | None = None,
        on_tokens: Callable[[list[int]], None] | None = None,
    ) -> tuple[Generation, Decoded]:
        """Generate after already-tokenized input: the record, and the loop's own output (the
        generated ids, EOS included, and decode timings), for servers, benchmarks and tests.
        `on_tokens` receives the tokens generated so far after every round (streaming)."""
        return self._run(prompt_ids, params, cancel, self.clock.now_ns(), on_tokens)

    def _run(
        self,
        prompt_ids: list[int],
        params: GenerationParams,
        cancel: CancelToken | None,
        start: int,
        on_tokens: Callable[[list[int]], None] | None = None,
    ) -> tuple[Generation, Decoded]:
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(limit, int) and len(prompt_ids) >= limit:
            from agenttrace.errors import ContextTooLong

            raise ContextTooLong(f"the prompt has {len(prompt_ids)} tokens; {self.model_name} holds {limit} positions: "
                                 "shorten the conversation (or compact it) and retry")
        stop = StopCriteria(self._eos, params.max_tokens, params.stop, self.decode)
        matcher = self._compiler().matcher(params.constraint, self.clock) if params.constraint is not None else None
        meter = RooflineMeter(self._shape) if self._shape is not None else None
        batch: BatchFigures | None = None
        peaks = self._peaks
        if self.engine is not None:
            from agenttrace.generation.batching.sequence import Request

            out, seq = self.engine.generate(Request(
                prompt_ids, params, stop, drafter=self.drafter, num_speculative_tokens=self.num_speculative_tokens,
                controller=self.controller, prefix_cache=self.prefix_cache, cancel=cancel, on_tokens=on_tokens,
                matcher=matcher))
            meter, batch, peaks = seq.meter, _figures(seq.stats), self.engine.peaks or self._peaks
        else:
            with self._lock:
                out = self._generate_alone(prompt_ids, params, stop, cancel, on_tokens, matcher, meter)
        text = self.decode(out.tokens)
        for s in params.stop:
            if s in text:
                text = text[: text.index(s)]
        gen = Generation(
            text=text,
            input_tokens=len(prompt_ids),
            output_tokens=len(out.tokens),
            finish_reason=out.finish_reason,  # type: ignore[arg-type]
            start_ns=start,
            end_ns=out.end_ns,
            prefill_start_ns=out.prefill_start_ns,
            prefill_end_ns=out.prefill_end_ns,
            first_token_ns=out.first_token_ns,
            cached_input_tokens=out.cached_tokens,
            method=self.method,
            num_speculative_tokens=self.num_speculative_tokens,
            rounds=tuple(out.rounds),
            fallback_reason=out.fallback_reason,
            constrain=out.constrain,
            batch=batch,
            roofline=meter.result(peaks) if meter is not None else None,
        )
        return gen, out

    def _generate_alone(self, prompt_ids, params, stop, cancel, on_tokens, matcher, meter) -> Decoded:
        return generate(
            self._runner,
            prompt_ids,
            params,
            stop,
            self.clock,
            drafter=self.drafter,
            num_speculative_tokens=self.num_speculative_tokens,
            controller=self.controller,
            prefix_cache=self.prefix_cache,
            cancel=cancel,
            on_tokens=on_tokens,
            matcher=matcher,
            meter=meter,
        )


def _figures(stats: BatchStats) -> BatchFigures:
    return BatchFigures(
        mean_batch_size=stats.mean_batch_size, max_batch_size=stats.max_batch_size, passes=stats.passes,
        policy=stats.policy, reason=stats.reason,
        mean_k=stats.k_sum / stats.decode_passes if stats.decode_passes else 0.0,
        k0_share=stats.k_zero / stats.decode_passes if stats.decode_passes else 0.0,
    )


def _as_list(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]
