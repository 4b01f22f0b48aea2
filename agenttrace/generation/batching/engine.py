"""Continuous batching: one thread owns the model and runs every request's passes together.

Requests (`submit`) join the batch between passes and leave it when they finish, fail or are
cancelled. Each pass packs, per request: its pending token and its draft (ragged k, chosen by
the policy), or the next chunk of its prompt while it prefills; prefill chunks share a budget of
`prefill_chunk` tokens per pass, so a long new prompt delays the others by at most one chunk.
Each request keeps its own KV cache (and its prefix cache, drafter and controller), so its
greedy output is the one it gets alone (passes.py says where that is exact).

Policies: "load_aware" (policy.allocate_batch_k over the pass cost this engine measures,
fitted on rows with decay, and each request's acceptance from its own controller) or "fixed"
(every request its own k_max). The policy's choice and reason are kept per request.

Faults stay with their request: a drafter that raises makes its request decode plainly (as
alone); an exception in a request's own step (its stop criteria, streaming callback, grammar)
fails that request only; a pass that raises is rerun segment by segment after every cache is
cropped back, so only the request whose segment fails gets the error.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from concurrent.futures import Future

import torch

from agenttrace.clock import Clock, default_clock
from agenttrace.core.roofline import RooflineMeter
from agenttrace.errors import ContextTooLong, GenerationCancelled
from agenttrace.generation import kv
from agenttrace.generation.batching.passes import Segment, batched_forward, enable_batching
from agenttrace.generation.batching.policy import PassCost, allocate_batch_k
from agenttrace.generation.batching.sequence import Request, Sequence
from agenttrace.generation.ceiling import model_shape
from agenttrace.generation.loop import Decoded
from agenttrace.generation.prefix_cache import PrefixCache

__all__ = ["BatchEngine", "POLICIES"]

_log = logging.getLogger(__name__)
POLICIES = ("load_aware", "fixed")
WIDE_ROWS = 128  # a pass of this many rows or more runs on `threads`, a narrower one on `narrow_threads`


class BatchEngine:
    """Runs requests in continuous batches on `model` (see the module docstring).

    max_batch: requests in one pass (more wait their turn, FIFO). prefill_chunk: prompt tokens
    per pass across the requests prefilling. max_context: positions a request may use (prompt +
    max_tokens); None: the model's `max_position_embeddings`."""

    def __init__(self, model, *, max_batch: int = 32, prefill_chunk: int = 256, policy: str = "load_aware",
                 clock: Clock | None = None, max_context: int | None = None, roofline: bool = True,
                 threads: int | None = None, narrow_threads: int | None = None,
                 prefix_cache: PrefixCache | None = None) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown batching policy {policy!r}; choose from {', '.join(POLICIES)}")
        if isinstance(model, kv.Stepper):
            raise ValueError("the batching engine runs eager passes; use a model without compiled=True")
        enable_batching(model)
        self.model = model
        self._runner = _packed(model)
        self.max_batch = max_batch
        self.prefill_chunk = prefill_chunk
        self.policy = policy
        self.clock = clock or default_clock()
        limit = getattr(model.config, "max_position_embeddings", None)
        self.max_context = max_context or (limit if isinstance(limit, int) and limit > 0 else None)
        self.cost = PassCost()
        self._shape = model_shape(model) if roofline else None
        self._queue: deque[tuple[Sequence, Future]] = deque()
        self._active: list[tuple[Sequence, Future]] = []
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.passes = 0
        self.batch_size_sum = 0
        self.threads = threads or torch.get_num_threads()
        self.narrow_threads = narrow_threads or self.threads
        self.prefix_cache = prefix_cache
        self.peaks = None  # the machine's peaks at the engine's thread count, once its thread runs

    # -- the callers' side ---------------------------------------------------------------------
    def submit(self, req: Request) -> Future:
        """Queue `req`; the future gives its `Decoded`, or raises what failed it
        (GenerationCancelled when cancelled). ContextTooLong right away for a prompt that
        cannot fit."""
        need = len(req.prompt_ids) + 1
        if self.max_context is not None and need > self.max_context:
            raise ContextTooLong(f"the prompt has {len(req.prompt_ids)} tokens; the model holds {self.max_context} "
                                 "positions: shorten the conversation (or compact it) and retry")
        if not req.prompt_ids:
            raise ValueError("an empty prompt: there is nothing to continue")
        if self.max_context is not None and len(req.prompt_ids) + req.stop.max_tokens > self.max_context:
            # what fits: the output ends with finish reason "length" where the positions run out
            req = dataclasses.replace(req, stop=dataclasses.replace(
                req.stop, max_tokens=self.max_context - len(req.prompt_ids)))
        future: Future = Future()
        meter = RooflineMeter(self._shape) if self._shape is not None else None
        if self.prefix_cache is not None:
            req = dataclasses.replace(req, prefix_cache=self.prefix_cache)
        seq = Sequence(req, self._runner, self.clock, self.prefill_chunk, meter, self.clock.now_ns())
        seq.stats.policy = self.policy if seq.speculating else ""
        with self._wake:
            if self._closed:
                raise GenerationCancelled("the batching engine is closed")
            self._queue.append((seq, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agenttrace-batch", daemon=True)
                self._thread.start()
            self._wake.notify()
        return future

    def generate(self, req: Request) -> tuple[Decoded, Sequence]:
        """Submit and wait (the calling thread blocks; cancel through `req.cancel`)."""
        future = self.submit(req)
        return future.result()

    def close(self) -> None:
        """Cancel what is queued or running and stop the thread (safe to call twice)."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout=30)

    @property
    def mean_batch_size(self) -> float:
        return self.batch_size_sum / self.passes if self.passes else 0.0

    # -- the engine's thread -------------------------------------------------------------------
    def _run(self) -> None:
        if self._shape is not None:
            from agenttrace.generation.device import device_peaks

            torch.set_num_threads(self.threads)
            self.peaks = device_peaks(self.model.device)  # the machine's roofs: with every thread the engine uses
        torch.set_num_threads(self.narrow_threads)  # this thread's own setting (OpenMP's is per thread)
        self._threads_now = self.narrow_threads
        while True:
            with self._wake:
                while not self._closed and not self._queue and not self._active:
                    self._wake.wait()
                if self._closed:
                    pending = list(self._queue) + self._active
                    self._queue.clear()
                    self._active = []
                    for seq, fut in pending:
                        self._fail(seq, fut, GenerationCancelled("the batching engine closed"))
                    return
                while self._queue and len(self._active) < self.max_batch:
                    self._active.append(self._queue.popleft())
            try:
                self._step()
            except Exception as exc:  # a bug in the engine itself: fail what runs, keep serving
                _log.exception("batching engine step failed")
                for seq, fut in self._active:
                    self._fail(seq, fut, exc)
                self._active = []

    def _fail(self, seq: Sequence, fut: Future, exc: BaseException) -> None:
        seq.release()
        if not fut.done():
            fut.set_exception(exc)

    def _step(self) -> None:
        with torch.inference_mode():
            live = []
            for seq, fut in self._active:
                if seq.cancelled:
                    self._fail(seq, fut, GenerationCancelled(f"generation cancelled after {len(seq.out)} tokens"))
                    continue
                live.append((seq, fut))
            self._active = live
            if not live:
                return
            planned = self._plan(live)
            if not planned:  # every request failed while planning
                self._active = [(s, f) for s, f in self._active if not f.done()]
                return
            segments = [seg for _, _, seg in planned]
            lengths = [kv.cached_length(seg.cache) for seg in segments]
            rows = sum(len(s.ids) for s in segments)
            wanted = self.threads if rows >= WIDE_ROWS else self.narrow_threads
            if wanted != self._threads_now:
                torch.set_num_threads(wanted)
                self._threads_now = wanted
            start = self.clock.now_ns()
            try:
                reads = any(seq.reads for seq, _, _ in planned)
                out = batched_forward(self._runner, segments, features=reads)
                results = [(seq, fut, out.logits[i], out.hidden[i] if out.hidden else None)
                           for i, (seq, fut, _) in enumerate(planned)]
            except Exception:
                results = self._isolate(planned, lengths, reads)
            end = self.clock.now_ns()
            seconds = (end - start) / 1e9
            size = len(planned)
            self.passes += 1
            self.batch_size_sum += size
            if all(seq.plan is not None and seq.plan.kind != "prefill" for seq, _, _ in planned):
                self.cost.add(rows, seconds)  # decode passes set the policy's line
            contexts = [(n, len(s.ids)) for n, s in zip(lengths, segments)]
            phase = _phase(planned)
            logit_rows = sum(len(s.logit_rows) if s.logit_rows is not None else len(s.ids) for s in segments)
            for seq, fut, logits, hidden in results:
                seq.stats.add_pass(size, seconds)
                if seq.meter is not None:
                    seq.meter.add(phase, contexts, logit_rows, seconds)
                if isinstance(logits, BaseException):
                    self._fail(seq, fut, logits)
                    continue
                try:
                    seq.absorb(logits, hidden, start, end)
                    if seq.result is not None:
                        decoded = seq.finish()
                        fut.set_result((decoded, seq))
                except Exception as exc:  # this request's own failure: the others go on
                    self._fail(seq, fut, exc)
            self._active = [(s, f) for s, f in self._active if not f.done()]

    def _plan(self, live) -> list[tuple[Sequence, Future, Segment]]:
        budget = self.prefill_chunk
        planned: list[tuple[Sequence, Future, Segment]] = []
        decoding = []
        for seq, fut in live:
            if seq.prefilling:
                if budget > 0:
                    try:
                        if seq.cache is None:
                            seq.begin()  # now, not at admission: the prefix cache has what was prefilled since
                        seg = seq.plan_prefill(budget)
                    except Exception as exc:
                        self._fail(seq, fut, exc)
                        continue
                    budget -= len(seg.ids)
                    planned.append((seq, fut, seg))
            else:
                decoding.append((seq, fut))
        ks = self._choose_k(decoding, sum(len(s.ids) for _, _, s in planned))
        for (seq, fut), k in zip(decoding, ks, strict=True):
            try:
                planned.append((seq, fut, seq.plan_decode(k)))
            except Exception as exc:
                self._fail(seq, fut, exc)
        return planned

    def _choose_k(self, decoding, prefill_rows: int) -> list[int]:
        if self.policy == "fixed":
            return [seq.req.num_speculative_tokens if seq.speculating else 0 for seq, _ in decoding]
        models = []
        for seq, _ in decoding:
            ctl = seq.req.controller
            if seq.speculating and seq.fallback is None and ctl is not None:
                models.append((ctl.model(), seq.req.num_speculative_tokens))
            else:
                models.append((None, 0))
        size = len(decoding) + (1 if prefill_rows else 0)
        choices = allocate_batch_k(models, len(decoding) + prefill_rows, self.cost.line(), size)
        ks = []
        for (seq, _), choice in zip(decoding, choices, strict=True):
            if seq.speculating:
                seq.stats.reason = choice.reason
                seq.stats.decode_passes += 1
                seq.stats.k_sum += choice.k
                seq.stats.k_zero += choice.k == 0
            ks.append(choice.k)
        return ks

    def _isolate(self, planned, lengths, reads):
        """The packed pass raised: crop every cache back, run each segment alone, and give the
        error only to the segment that raises."""
        results = []
        for (seq, fut, seg), length in zip(planned, lengths, strict=True):
            kv.crop(seg.cache, length)
            try:
                out = batched_forward(self._runner, [seg], features=reads)
                results.append((seq, fut, out.logits[0], out.hidden[0] if out.hidden else None))
            except Exception as exc:
                kv.crop(seg.cache, length)
                results.append((seq, fut, exc, None))
        return results


def _packed(model):
    """`model` with prepacked weights for a batch's few-row products (packed.py: one view per
    model, shared by its engines)."""
    from agenttrace.generation.packed import packed_view

    return packed_view(model, max_rows=256)


def _phase(planned) -> str:
    """The roofline phase of a pass: "prefill" when it carries a prompt chunk (those rows
    dominate it), else "decode" (one request, one token), "verify@n" (one request, n tokens) or
    "batch@B" (B requests decoding or verifying together)."""
    if any(seq.plan is not None and seq.plan.kind == "prefill" for seq, _, _ in planned):
        return "prefill"
    if len(planned) > 1:
        return f"batch@{len(planned)}"
    n = len(planned[0][2].ids)
    return "decode" if n == 1 else f"verify@{n}"
