"""What the scenarios share: their context, a span processor that counts what opened and what
closed, snapshots of memory and threads, and a model wrapper that says when a generation is
under way."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from agenttrace import semconv as sc
from agenttrace.bench.harness.arms import arm_config
from agenttrace.bench.harness.options import HarnessOptions
from agenttrace.bench.harness.sensors import current_rss_bytes
from agenttrace.clock import Clock, default_clock
from agenttrace.core.chat import CancelToken, ChatModelWrapper, Generation, GenerationParams, Message
from agenttrace.runtime.agent import AgentConfig

if TYPE_CHECKING:
    from agenttrace.bench.workloads import Suite
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import LoadedModel
    from agenttrace.generation.prefix_cache import PrefixCache

Tick = Callable[[str], None]


@dataclass
class ScenarioContext:
    opts: HarnessOptions
    loaded: LoadedModel
    suites: dict[str, Suite]  # with their tasks loaded
    out: Path  # this scenario's folder for traces
    tick: Tick = field(default=lambda _: None)
    clock: Clock = field(default_factory=default_clock)  # what every scenario's timings read

    def config(self, suite: Suite, arm: str | None = None) -> AgentConfig:
        """The suite's agent budget with the run's per-task deadline and token budget (and
        `arm`'s constraint setting when given)."""
        cfg = arm_config(arm, suite.config) if arm is not None else suite.config
        return replace(cfg, deadline_s=self.opts.task_deadline_s,
                       params=replace(cfg.params, max_tokens=self.opts.max_tokens))

    def task(self, suite: str, task_id: str):
        """A task by id, or the suite's first task when the id is not there (a trimmed suite)."""
        tasks = self.suites[suite].tasks
        return next((t for t in tasks if t.id == task_id), tasks[0])


class SpanCounter(SpanProcessor):
    """Counts spans started and ended and keeps the ended ones: equal counts after a run mean no
    span was left open."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.started = 0
        self.ended: list[ReadableSpan] = []

    def on_start(self, span, parent_context=None) -> None:
        with self._lock:
            self.started += 1

    def on_end(self, span: ReadableSpan) -> None:
        with self._lock:
            self.ended.append(span)

    @property
    def open(self) -> int:
        return self.started - len(self.ended)

    def since(self, n: int) -> list[ReadableSpan]:
        return self.ended[n:]


def segment_spans(spans: Sequence[ReadableSpan], segment: str) -> list[ReadableSpan]:
    return [s for s in spans if (s.attributes or {}).get(sc.SEGMENT) == segment]


@dataclass(frozen=True)
class MemorySnapshot:
    """Memory after a full collection, less what prefix caches hold: a generation that finished
    before the cancel (the step before a cancelled tool) rightly leaves its KV entries there, within
    the cache's byte budget; everything else must come back."""

    rss_bytes: int | None
    tensors: int  # live torch tensors (parameters included), prefix-cache entries excluded
    tensor_bytes: int
    gpu_allocated_bytes: int | None
    cached_bytes: int = 0  # held by the prefix caches (reported, not compared)

    def describe(self) -> str:
        rss = "-" if self.rss_bytes is None else f"{self.rss_bytes / 2**20:.0f} MiB RSS"
        gpu = "" if self.gpu_allocated_bytes is None else f", {self.gpu_allocated_bytes / 2**20:.1f} MiB on the GPU"
        cached = f" + {self.cached_bytes / 2**20:.1f} MiB in the prefix cache" if self.cached_bytes else ""
        return f"{self.tensors} tensors ({self.tensor_bytes / 2**20:.1f} MiB){cached}, {rss}{gpu}"


def _cache_tensors(caches: Sequence[PrefixCache | None]) -> list:
    """The key/value tensors prefix caches hold (None: an arm without a prefix cache)."""
    return [t for cache in caches if cache is not None for t in cache.tensors()]


def _storage_bytes(t) -> int:
    # oneDNN-prepacked weights (generation/packed.py) are opaque: no storage to read, so count
    # their logical size
    return t.numel() * t.element_size() if t.is_mkldnn else t.untyped_storage().nbytes()


def memory_snapshot(device: str, prefix_caches: Sequence[PrefixCache | None] = ()) -> MemorySnapshot:
    """Live tensors and resident memory after a full collection (tensors shared by views count
    once per view object: what matters is that the count comes back, not the total)."""
    import torch

    gc.collect()
    cached = {id(t) for t in _cache_tensors(prefix_caches)}
    # type() rather than isinstance: isinstance reads __class__, which wakes deprecated lazy modules
    tensors = [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)]
    mine = [t for t in tensors if id(t) not in cached]
    cached_bytes = sum(t.nbytes for t in tensors if id(t) in cached)
    nbytes = sum(_storage_bytes(t) for t in mine if t.device.type != "meta")
    gpu = None
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        gpu = int(torch.cuda.memory_allocated()) - cached_bytes
    rss = current_rss_bytes()
    if rss is not None and not device.startswith("cuda"):
        rss -= cached_bytes  # on a CPU the cached KV tensors are resident memory
    return MemorySnapshot(rss, len(mine), nbytes, gpu, cached_bytes)


# Memory may come back lower (a drafter drops its cache when cancelled) but not higher than this.
RSS_SLACK_BYTES = 48 * 2**20  # the allocator keeps freed pages; 48 MiB is ~1000 tokens of KV cache
TENSOR_SLACK_BYTES = 2**20


def memory_back(before: MemorySnapshot, after: MemorySnapshot) -> tuple[bool, str]:
    ok = after.tensor_bytes <= before.tensor_bytes + TENSOR_SLACK_BYTES and after.tensors <= before.tensors
    if before.rss_bytes is not None and after.rss_bytes is not None:
        ok = ok and after.rss_bytes <= before.rss_bytes + RSS_SLACK_BYTES
    if before.gpu_allocated_bytes is not None and after.gpu_allocated_bytes is not None:
        ok = ok and after.gpu_allocated_bytes <= before.gpu_allocated_bytes + TENSOR_SLACK_BYTES
    return ok, f"before: {before.describe()}; after: {after.describe()}"


def new_threads(before: set[threading.Thread]) -> list[str]:
    """Names of live threads that were not there before."""
    return sorted(t.name for t in threading.enumerate() if t not in before and t.is_alive())


class WatchedModel(ChatModelWrapper):
    """A `LocalChatModel` that sets `reached` once a generation has produced `after_tokens`
    tokens: the moment a scenario knows it is cancelling mid-generation, not before or after."""

    inner: LocalChatModel

    def __init__(self, inner: LocalChatModel, after_tokens: int = 3) -> None:
        super().__init__(inner)
        self.after_tokens = after_tokens
        self.reached = threading.Event()

    def chat(self, messages: Sequence[Message], params: GenerationParams, *,
             cancel: CancelToken | None = None) -> Generation:
        def seen(tokens: list[int]) -> None:
            if len(tokens) >= self.after_tokens:
                self.reached.set()

        gen, _ = self.inner.complete_ids(self.inner.encode_chat(messages), params, cancel=cancel, on_tokens=seen)
        return gen
