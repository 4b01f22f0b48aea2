"""Continuous batching (generation/batching): a request's greedy output in a batch is its output
alone, with or without speculation (chains, EAGLE trees, ragged k), through chunked prefill and
the prefix cache; faults stay with their request; the load-aware policy and the roofline."""

from __future__ import annotations

import random
import threading

import pytest
import torch

from agenttrace.core.chat import GenerationParams
from agenttrace.errors import ContextTooLong, GenerationCancelled
from agenttrace.generation.adaptive import KController
from agenttrace.generation.batching.engine import BatchEngine
from agenttrace.generation.batching.sequence import Request
from agenttrace.generation.drafters import PromptLookupDrafter
from agenttrace.generation.head_drafters import EagleDrafter, TreeShape
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.generation.prefix_cache import PrefixCache
from agenttrace.testing import FakeClock
from tests.tiny_heads import EOS

STOP = StopCriteria(frozenset({2}), 32)


def _prompts(n: int, seed: int = 0, longest: int = 200) -> list[list[int]]:
    rng = random.Random(seed)
    # repeated stretches give prompt lookup something to find
    return [[rng.randrange(3, 64) for _ in range(rng.randrange(4, longest))] * 2 for _ in range(n)]


def _alone(model, prompts, stop=STOP):
    return [generate(model, p, GenerationParams(), stop, FakeClock()).tokens for p in prompts]


@pytest.fixture
def engine(tiny_model):
    eng = BatchEngine(tiny_model, prefill_chunk=48)  # prompts of up to 400 tokens prefill in chunks
    yield eng
    eng.close()


def test_plain_requests_in_one_batch_each_get_their_output_alone(tiny_model, engine):
    prompts = _prompts(8)
    futures = [engine.submit(Request(p, GenerationParams(), STOP)) for p in prompts]
    got = [f.result(timeout=120)[0].tokens for f in futures]
    assert got == _alone(tiny_model, prompts)
    assert engine.mean_batch_size > 2  # they did share passes


@pytest.mark.parametrize("policy", ["fixed", "load_aware"])
def test_speculating_requests_with_ragged_drafts_keep_their_greedy_output(tiny_model, policy):
    eng = BatchEngine(tiny_model, prefill_chunk=64, policy=policy)
    try:
        prompts = _prompts(8, seed=1)
        reqs = [Request(p, GenerationParams(), STOP, drafter=PromptLookupDrafter(), num_speculative_tokens=1 + i % 5,
                        controller=KController(1 + i % 5)) for i, p in enumerate(prompts)]
        out = [f.result(timeout=120) for f in [eng.submit(r) for r in reqs]]
    finally:
        eng.close()
    assert [d.tokens for d, _ in out] == _alone(tiny_model, prompts)
    if policy == "fixed":
        assert sum(len(d.rounds) for d, _ in out) > 0  # drafts were verified in the batch
    assert all(seq.stats.policy == policy and seq.stats.passes > 0 for _, seq in out)


def test_eagle_trees_and_the_prefix_cache_in_a_batch_equal_plain_decoding_alone(heads):
    model = heads.model
    stop = StopCriteria(frozenset({EOS}), 24)
    prompts = [s.tokens[: s.prompt_len].tolist() for s in heads.train[:6]]
    expected = _alone(model, prompts, stop)
    caches = [PrefixCache() for _ in prompts]

    def drafter(tree: bool):
        return EagleDrafter(heads.eagle, model, tree=TreeShape(depth=3) if tree else None)

    eng = BatchEngine(model, policy="fixed", prefill_chunk=16)
    try:
        # chains and trees side by side; then trees only, each request reusing its prompt (and
        # its features) from its own prefix cache
        for trees in ([i % 2 == 1 for i in range(len(prompts))], [True] * len(prompts)):
            reqs = [Request(p, GenerationParams(), stop, drafter=drafter(tree), num_speculative_tokens=3,
                            prefix_cache=cache) for p, tree, cache in zip(prompts, trees, caches)]
            out = [f.result(timeout=120)[0] for f in [eng.submit(r) for r in reqs]]
            assert [d.tokens for d in out] == expected
    finally:
        eng.close()
    assert sum(r.accepted for d in out for r in d.rounds) > 10 and any(r.tree_depth for d in out for r in d.rounds)
    assert all(d.cached_tokens > 0 for d in out)


def test_one_failing_request_of_eight_fails_alone(tiny_model, engine):
    prompts = _prompts(8, seed=2)

    def explode(tokens):
        if len(tokens) > 3:
            raise RuntimeError("injected: the client's stream broke")

    bad_id = 10_000  # not in the vocabulary: the packed pass raises, then each segment is run alone
    reqs = [Request(p, GenerationParams(), STOP) for p in prompts]
    reqs[3] = Request(prompts[3], GenerationParams(), STOP, on_tokens=explode)
    reqs[5] = Request(prompts[5][:-1] + [bad_id], GenerationParams(), STOP)
    futures = [engine.submit(r) for r in reqs]
    with pytest.raises(RuntimeError, match="injected"):
        futures[3].result(timeout=120)
    with pytest.raises(IndexError):
        futures[5].result(timeout=120)
    expected = _alone(tiny_model, prompts)
    for i in (0, 1, 2, 4, 6, 7):
        assert futures[i].result(timeout=120)[0].tokens == expected[i]


def test_a_cancelled_request_leaves_at_the_next_pass_and_frees_its_cache(tiny_model, engine):
    prompts = _prompts(4, seed=3)
    cancel_after = threading.Event()
    from agenttrace.core.chat import CancelToken

    token = CancelToken()

    def on_tokens(tokens):
        if len(tokens) >= 2:
            token.cancel()
            cancel_after.set()

    long_stop = StopCriteria(frozenset(), 64)
    reqs = [Request(p, GenerationParams(), long_stop) for p in prompts]
    reqs[0] = Request(prompts[0], GenerationParams(), long_stop, cancel=token, on_tokens=on_tokens)
    futures = [engine.submit(r) for r in reqs]
    with pytest.raises(GenerationCancelled):
        futures[0].result(timeout=120)
    rest = [f.result(timeout=120) for f in futures[1:]]
    assert [d.tokens for d, _ in rest] == _alone(tiny_model, prompts[1:], long_stop)
    assert engine._active == [] and all(seq.cache is None for _, seq in rest)


def test_a_prompt_longer_than_the_context_is_refused_with_what_to_do(tiny_model, engine):
    with pytest.raises(ContextTooLong, match="shorten the conversation"):
        engine.submit(Request(list(range(3, 60)) * 10, GenerationParams(), STOP))  # 570 > 512 positions
    # one that fits but whose budget does not: cut where the positions run out
    decoded, _ = engine.submit(Request([5] * 500, GenerationParams(), StopCriteria(frozenset(), 64))).result(timeout=120)
    assert len(decoded.tokens) == 12 and decoded.finish_reason == "length"


def test_local_models_generate_in_a_shared_engine_and_record_the_batch():
    from agenttrace.core.chat import Message
    from agenttrace.generation.local import LocalChatModel
    from tests.serve.test_serve_abuse import tiny_loaded

    loaded = tiny_loaded()
    eng = BatchEngine(loaded.model)
    try:
        models = [LocalChatModel(loaded.model, loaded.tokenizer, engine=eng, drafter=PromptLookupDrafter(),
                                 num_speculative_tokens=3) for _ in range(3)]
        gens: list = [None] * 3

        def run(i):
            gens[i] = models[i].chat([Message("user", f"hello {i} hello {i}")], GenerationParams(max_tokens=12))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with pytest.raises(ContextTooLong, match="shorten"):
            models[0].chat([Message("user", "hello " * 400)], GenerationParams(max_tokens=4))
    finally:
        eng.close()
    for g in gens:
        assert g.batch is not None and g.batch.policy == "load_aware" and g.batch.passes > 0
        assert g.roofline is not None and g.roofline.phases
    with pytest.raises(ValueError, match="eager passes"):
        LocalChatModel(loaded.model, loaded.tokenizer, engine=eng, compiled=True)


def test_the_engine_refuses_after_close(tiny_model):
    eng = BatchEngine(tiny_model)
    eng.close()
    with pytest.raises(GenerationCancelled, match="closed"):
        eng.submit(Request([5, 6, 7], GenerationParams(), STOP))


def test_a_batch_in_bf16_int4_with_row_wise_attention_is_bit_identical_to_alone():
    """Where the linear kernels keep each row's bits whatever the row count (the quantized
    variants on this project's CPUs), batching changes nothing at all, not even the logits."""
    from agenttrace.generation import kv
    from agenttrace.generation.batching.passes import Segment, batched_forward
    from agenttrace.generation.invariant import use_rowwise_attention
    from agenttrace.generation.quantize import quantize_model
    from tests.generation.test_quantize import small

    model = small()
    quantize_model(model, "int4")
    assert use_rowwise_attention(model)
    prompts = _prompts(4, seed=4, longest=30)
    with torch.inference_mode():
        alone = []
        for p in prompts:
            cache = kv.new_cache(model)
            kv.forward(model, p, cache)
            alone.append(kv.forward(model, [7, 8, 9], cache))
        BatchEngine(model).close()  # switches the attention to the batching wrapper
        caches = [kv.new_cache(model) for _ in prompts]
        for c, p in zip(caches, prompts):
            kv.forward(model, p, c)  # a pass without a batch layout: the model's own attention
        out = batched_forward(model, [Segment(c, [7, 8, 9]) for c in caches])
    for a, b in zip(alone, out.logits):
        assert torch.equal(a, b)


def test_agents_sharing_an_engine_leave_the_batch_and_the_roofline_in_their_trace_and_report(tmp_path):
    """The public API as a user would: two agents over one BatchEngine; their spans carry the
    batch and the roofline, and the report (terminal and HTML) places the phases."""
    from agenttrace import Agent, BatchEngine, LocalChatModel, Telemetry, render_report, report_from_files
    from agenttrace import semconv as sc
    from agenttrace.core.tools import Tool
    from agenttrace.report.html import report_html
    from agenttrace.report.terminal import make_console
    from agenttrace.traces.otlp_file import read_spans
    from tests.serve.test_serve_abuse import tiny_loaded

    loaded = tiny_loaded()
    loaded.model.config.max_position_embeddings = 4096  # the agent's prompt (tools, examples) is longer than 256
    path = tmp_path / "trace.jsonl"
    tel = Telemetry(service_name="t", trace_file=path)
    tool = Tool("echo", "echo its text", {"type": "object", "properties": {"text": {"type": "string"}}},
                lambda text="": text, isolation="thread")
    engine = BatchEngine(loaded.model)
    try:
        agents = [Agent(LocalChatModel(loaded.model, loaded.tokenizer, engine=engine, drafter=PromptLookupDrafter(),
                                       num_speculative_tokens=3), [tool], telemetry=tel) for _ in range(2)]
        results: list = []
        threads = [threading.Thread(target=lambda a=a, i=i: results.append(a.run(f"say hello {i}")))
                   for i, a in enumerate(agents)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        engine.close()
        tel.shutdown()
    assert len(results) == 2
    gens = [s for s in read_spans([path]).spans if sc.ROOFLINE_PHASE in s.attributes]
    assert gens and all(sc.BATCH_SIZE in s.attributes and s.attributes[sc.SPEC_POLICY] == "load_aware" for s in gens)
    report = report_from_files([str(path)])
    assert report.roofline is not None and report.roofline.points
    assert report.roofline.peak_gb_s > 0 and {p.bound for p in report.roofline.points} <= {"memory", "compute"}
    console = make_console()
    with console.capture() as cap:
        render_report(report, console)
    assert "roofline" in cap.get()
    from agenttrace.report.markdown import report_markdown

    assert "## Roofline" in report_markdown(report)
    assert {p.phase.partition("@")[0] for p in report.roofline.points} <= {"prefill", "decode", "verify", "batch"}
    page = report_html(report)
    assert 'class="chart roofline"' in page and page.count('class="mark roofline"') == len(report.roofline.points)


def test_a_request_that_times_out_leaves_the_batch_and_the_others_finish():
    """asyncio.wait_for over achat: the timeout cancels the request's token, and the engine drops
    it at its next pass, freeing its cache, while the request beside it runs to its end."""
    import asyncio

    from agenttrace.core.chat import Message
    from agenttrace.generation.local import LocalChatModel
    from tests.serve.test_serve_abuse import tiny_loaded

    loaded = tiny_loaded(step_s=0.0)
    eng = BatchEngine(loaded.model)
    slow = [0]

    def on_pass(_module, _args):  # every pass of the engine takes 20 ms: a long generation is long
        slow[0] += 1
        import time

        time.sleep(0.02)

    hook = loaded.model.model.register_forward_pre_hook(on_pass)
    try:
        a, b = (LocalChatModel(loaded.model, loaded.tokenizer, engine=eng) for _ in range(2))
        long = GenerationParams(max_tokens=200)

        async def both():
            timed = asyncio.wait_for(a.achat([Message("user", "hello")], long), timeout=0.5)
            other = b.achat([Message("user", "hello world")], GenerationParams(max_tokens=40))
            return await asyncio.gather(timed, other, return_exceptions=True)

        timed_out, finished = asyncio.run(both())
    finally:
        hook.remove()
        eng.close()
    assert isinstance(timed_out, (asyncio.TimeoutError, TimeoutError))
    assert finished.output_tokens == 40 or finished.finish_reason == "stop"
    assert eng._active == [] and slow[0] < 200  # the timed-out request did not run its 200 tokens


def test_an_engine_prefix_cache_shares_a_common_prompt_across_requests(tiny_model):
    shared = PrefixCache()
    eng = BatchEngine(tiny_model, prefix_cache=shared, narrow_threads=1)
    system = list(range(3, 40))
    prompts = [system + [50 + i, 51 + i] for i in range(4)]
    try:
        first = eng.submit(Request(prompts[0], GenerationParams(), STOP, prefix_cache=PrefixCache())).result(timeout=60)[0]
        rest = [f.result(timeout=60)[0] for f in [eng.submit(Request(p, GenerationParams(), STOP)) for p in prompts[1:]]]
    finally:
        eng.close()
    assert first.cached_tokens == 0 and all(d.cached_tokens == len(system) for d in rest)
    assert [d.tokens for d in [first, *rest]] == _alone(tiny_model, prompts)
