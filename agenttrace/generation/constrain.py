"""Grammar-constrained decoding: which tokens the grammar allows next, as a mask over the logits.

The engine is llguidance, chosen by measurement on this project's CPU machine with the bundled
model's 49,152-token vocabulary and the reference tools' decision grammars (`agenttrace bench
grammar`, BENCHMARKS.md): compiling a tool set's grammar took 3.3 ms against xgrammar's 26.8 ms,
a mask 0.25 ms per token against 0.38 ms, and llguidance is an 8 MB wheel with no dependencies
where xgrammar pulls in triton (1 GB on disk). Both roll consumed tokens back, which
verification after a rejected draft needs.

A `GrammarCompiler` belongs to one tokenizer (mapping it costs ~0.6 s, so it is built once, and
a tokenizer llguidance cannot map fails there, at set-up, not mid-task) and caches compiled
grammars per constraint. A `Matcher` is one generation's grammar state: the loop asks it for the
mask before each sampled position, advances it on accepted tokens, and rolls it back to the
accepted prefix after a rejected draft.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agenttrace.clock import Clock
from agenttrace.core.chat import ConstrainStats, Constraint
from agenttrace.errors import ConstraintUnavailable, GrammarDeadEnd

__all__ = ["ENGINE", "GrammarCompiler", "Matcher", "apply_mask_"]

_log = logging.getLogger(__name__)

ENGINE = "llguidance"
# The separators json.dumps writes, which the prompt's worked examples use. Flexible whitespace
# would let a small model pad a call with spaces and newlines until the token budget runs out.
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_MAX_CACHED = 64  # compiled grammars kept per tokenizer (one per tool set in practice)


@dataclass(frozen=True)
class _Compiled:
    prototype: Any | None  # an LLMatcher at the grammar's start, copied for each generation
    compile_s: float
    error: str | None


def llguidance_tokenizer(tokenizer: Any, vocab_size: int | None = None, eos: list[int] | None = None):
    """llguidance's map of `tokenizer` (~0.6 s: build it once). llguidance reads the Rust
    tokenizer's JSON, which transformers' fast tokenizers and our ChatTokenizer keep as
    `backend_tokenizer` (llguidance.hf would import transformers for the same steps)."""
    import llguidance

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("it has no Rust tokenizer (backend_tokenizer)")
    backend = copy.copy(backend)  # padding and truncation off, on a copy: the caller's stays as it was
    backend.no_padding()
    backend.no_truncation()
    if eos is None and getattr(tokenizer, "eos_token_id", None) is not None:
        eos = [tokenizer.eos_token_id]
    return llguidance.LLTokenizer(backend.to_str(), n_vocab=vocab_size, eos_token=eos)


class GrammarCompiler:
    """Compiles constraints for one tokenizer and caches them (bounded, least recently used)."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_ids: Collection[int]) -> None:
        try:
            import llguidance
        except ImportError as exc:  # pragma: no cover - llguidance is in the `model` extra
            raise ConstraintUnavailable(
                "constrained decoding needs llguidance: pip install 'agenttrace[model]', or run without constraints"
            ) from exc
        self._llg = llguidance
        self.vocab_size = vocab_size
        self.eos_ids = frozenset(eos_ids)
        eos = sorted(eos_ids)
        try:
            self._tokenizer = llguidance_tokenizer(tokenizer, vocab_size, eos or None)
        except Exception as exc:
            raise ConstraintUnavailable(
                f"llguidance cannot map the tokenizer {type(tokenizer).__name__} ({exc}); constrained decoding needs "
                "a fast (Rust-backed) Hugging Face tokenizer. Run without constrained decoding for this model."
            ) from exc
        self._cache: OrderedDict[Constraint, _Compiled] = OrderedDict()
        self._lock = threading.Lock()

    def _grammar(self, c: Constraint) -> str:
        m = self._llg.LLMatcher
        if c.kind == "json_schema":
            return m.grammar_from_json_schema(c.source, defaults=JSON_OPTIONS)
        if c.kind == "regex":
            return m.grammar_from_regex(c.source)
        if c.kind == "lark":
            return m.grammar_from_lark(c.source)
        raise ValueError(f"unknown constraint kind {c.kind!r}; use json_schema, regex or lark")

    def compile(self, c: Constraint, clock: Clock) -> _Compiled:
        """The compiled grammar of `c`: from the cache (compile_s 0) or compiled now. A grammar
        the engine refuses is cached too, with its error, so it is not retried every call."""
        with self._lock:  # the batch's request threads compile at once
            hit = self._cache.get(c)
            if hit is not None:
                self._cache.move_to_end(c)
                return _Compiled(hit.prototype, 0.0, hit.error)
        start = clock.now_ns()
        try:
            grammar = self._grammar(c)
            failed, messages = self._llg.LLMatcher.validate_grammar_with_warnings(grammar, self._tokenizer)
            error = messages[0] if failed else None
            prototype = None if failed else self._llg.LLMatcher(self._tokenizer, grammar, log_level=0)
            if prototype is not None and prototype.is_error():
                prototype, error = None, prototype.get_error()
        except (ValueError, TypeError) as exc:  # not valid JSON, a schema that is not an object...
            prototype, error = None, f"{type(exc).__name__}: {exc}"
        compiled = _Compiled(prototype, (clock.now_ns() - start) / 1e9, _one_line(error) if error else None)
        with self._lock:
            self._cache[c] = compiled
            if len(self._cache) > _MAX_CACHED:
                self._cache.popitem(last=False)
        return compiled

    def matcher(self, c: Constraint, clock: Clock) -> Matcher:
        """A fresh matcher for one generation under `c` (`active` False when it fell back)."""
        compiled = self.compile(c, clock)
        if compiled.error and compiled.compile_s:  # once per grammar: later calls hit the cache
            _log.warning("grammar %r does not compile (%s); decoding unconstrained", c.name, compiled.error)
        inner = compiled.prototype.deep_copy() if compiled.prototype is not None else None
        return Matcher(inner, self.vocab_size, clock, grammar=c.name, compile_s=compiled.compile_s,
                       fallback=compiled.error, eos_ids=self.eos_ids)


def apply_mask_(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """logits [..., V] set to -inf where `allowed` [..., V'] is False, in place; columns past V'
    (a model head padded beyond the tokenizer's vocabulary) are refused too."""
    width = allowed.shape[-1]
    logits[..., :width].masked_fill_(~allowed.to(logits.device), float("-inf"))
    logits[..., width:] = float("-inf")
    return logits


def _one_line(text: str) -> str:
    # the engine's errors span lines ("regex parse error:" then what is wrong); keep them all
    line = " ".join(part.strip() for part in text.splitlines() if part.strip()) or "grammar error"
    return line[:300]


class Matcher:
    """The grammar state of one generation. With `inner` None (the grammar did not compile) it
    constrains nothing and only carries the fallback reason to the span."""

    def __init__(self, inner: Any | None, vocab_size: int, clock: Clock, *, grammar: str, compile_s: float = 0.0,
                 fallback: str | None = None, eos_ids: Collection[int] = ()) -> None:
        self._m = inner
        self._eos = frozenset(eos_ids)
        self._vocab = vocab_size
        self._clock = clock
        self._grammar = grammar
        self._compile_s = compile_s
        self._fallback = fallback
        self.mask_ns = 0
        self.drafts_cut = 0
        self.rollbacks = 0
        self.dead_end: str | None = None

    @property
    def active(self) -> bool:
        return self._m is not None

    @property
    def stopped(self) -> bool:
        """The grammar is complete and allows nothing more (the output ends here)."""
        return self._m is not None and self._m.is_stopped() and not self._m.is_error()

    def stats(self) -> ConstrainStats:
        return ConstrainStats(engine=ENGINE, grammar=self._grammar, mask_s=self.mask_ns / 1e9, compile_s=self._compile_s,
                              drafts_cut=self.drafts_cut, rollbacks=self.rollbacks, fallback=self._fallback,
                              dead_end=self.dead_end)

    def _allowed(self) -> torch.Tensor:
        """[V] bool: the tokens the grammar allows next. GrammarDeadEnd when there are none."""
        m = self._m
        if m.is_error():  # (the engine's stop reason, not its error text: that may quote the model's tokens)
            raise GrammarDeadEnd(f"the grammar is in an error state ({m.stop_reason()})")
        bits = np.frombuffer(m.compute_bitmask(), dtype=np.uint8)
        # With no token left, llguidance enters an error state (stop reason NoExtensionBias) and
        # returns a mask of EOS alone: that is a dead end, not the end of the grammar.
        allowed = torch.from_numpy(np.unpackbits(bits, bitorder="little")[: self._vocab].view(np.bool_))
        if m.is_error() or not bool(allowed.any()):
            raise GrammarDeadEnd(f"the grammar allows no token here although the output is not complete "
                                 f"({m.stop_reason()})")
        return allowed

    def mask_(self, logits: torch.Tensor) -> torch.Tensor:
        """Set the logits [V] of every token the grammar refuses to -inf, in place."""
        if self._m is None:
            return logits
        start = self._clock.now_ns()
        try:
            apply_mask_(logits, self._allowed())
        finally:
            self.mask_ns += self._clock.now_ns() - start
        return logits

    def advance(self, token: int) -> None:
        """Consume one sampled (so allowed) token."""
        if self._m is not None and not self._m.consume_token(token):
            raise GrammarDeadEnd(f"the grammar refused a sampled token ({self._m.stop_reason()})")

    def masks_along(self, draft: Sequence[int]) -> tuple[torch.Tensor | None, int, bool]:
        """The masks of a verify pass over (pending token, *draft): row i is what the grammar
        allows after draft[:i]. Consumes the draft up to its first refused token and returns
        (masks, tokens consumed, must_cut); rows past the refused token are all True
        (verification cannot reach them). A drafted EOS the grammar allows is verified but not
        consumed (llguidance cannot roll an EOS back; an accepted one ends the output anyway).
        must_cut: the draft has to end after the consumed tokens whatever the drafter, because
        the grammar is complete there (plain decoding stops at that point too) or a drafted
        token led to a dead end. (None, len(draft), False) when inactive."""
        if self._m is None:
            return None, len(draft), False
        start = self._clock.now_ns()
        try:
            rows = torch.ones(len(draft) + 1, self._vocab, dtype=torch.bool)
            consumed = 0
            for i in range(len(draft) + 1):
                try:
                    rows[i] = self._allowed()
                except GrammarDeadEnd:
                    if i == 0:
                        raise
                    # draft[i-1] is allowed but leads nowhere: undo it and end the draft before it
                    self._m.rollback(1)
                    return rows[:i], consumed - 1, True
                if i == len(draft):
                    break
                if self._m.is_stopped():
                    return rows[: i + 1], consumed, True
                token = draft[i]
                if not rows[i, token] or token in self._eos or not self._m.consume_token(token):
                    break
                consumed += 1
            return rows, consumed, False
        finally:
            self.mask_ns += self._clock.now_ns() - start

    def rollback(self, n: int) -> None:
        """Undo the last `n` consumed tokens (drafted tokens the target rejected)."""
        if self._m is not None and n > 0:
            self._m.rollback(n)
            self.rollbacks += 1
