"""Generation spans: what a `Generation` record becomes on its `chat {model}` span.

The model measures; this module records (`instrument.traced_model` wraps the call). Its record becomes
the span's GenAI and `agenttrace.spec.*` attributes, a `prefill` child span, and per speculation
round either a `speculate.round` event (default detail) or `speculate.draft` / `speculate.verify`
child spans (detail `fine`), all at the times the model read from the shared clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

from agenttrace import semconv as sc
from agenttrace.core.chat import ChatModel, Generation, GenerationParams, Message, summarize_rounds
from agenttrace.core.roofline import Roofline
from agenttrace.telemetry.content import chat_input_messages, chat_output_messages
from agenttrace.telemetry.spans import child_span

if TYPE_CHECKING:
    from agenttrace.telemetry.setup import Telemetry


def request_attributes(model: ChatModel, params: GenerationParams) -> dict[str, AttributeValue]:
    attrs: dict[str, AttributeValue] = {
        sc.GEN_AI_OPERATION_NAME: sc.OP_CHAT,
        sc.GEN_AI_PROVIDER_NAME: model.provider_name,
        sc.GEN_AI_REQUEST_MODEL: model.model_name,
        sc.GEN_AI_REQUEST_MAX_TOKENS: params.max_tokens,
        sc.GEN_AI_REQUEST_TEMPERATURE: params.temperature,
    }
    if params.top_p < 1.0:
        attrs[sc.GEN_AI_REQUEST_TOP_P] = params.top_p
    if params.seed is not None:
        attrs[sc.GEN_AI_REQUEST_SEED] = params.seed
    return attrs


def generation_attributes(gen: Generation) -> dict[str, AttributeValue]:
    """The response-side attributes of a generation span (SPANS.md)."""
    attrs: dict[str, AttributeValue] = {
        sc.GEN_AI_USAGE_INPUT_TOKENS: gen.input_tokens,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: gen.output_tokens,
        sc.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: gen.cached_input_tokens,
        sc.GEN_AI_RESPONSE_FINISH_REASONS: (gen.finish_reason,),
        sc.SPEC_METHOD: gen.method,
        sc.SPEC_NUM_SPECULATIVE_TOKENS: gen.num_speculative_tokens,
        sc.SPEC_PREFILL_S: (gen.prefill_end_ns - gen.prefill_start_ns) / 1e9,
        sc.SPEC_TOKENS_PER_S: gen.tokens_per_s,
        sc.SPEC_FALLBACK: gen.fallback_reason is not None,
    }
    if gen.first_token_ns is not None:
        attrs[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = (gen.first_token_ns - gen.start_ns) / 1e9
    if gen.fallback_reason is not None:
        attrs[sc.SPEC_FALLBACK_REASON] = gen.fallback_reason
    c = gen.constrain
    if c is not None:
        attrs.update({sc.CONSTRAIN_ENGINE: c.engine, sc.CONSTRAIN_GRAMMAR: c.grammar, sc.CONSTRAIN_MASK_S: c.mask_s,
                      sc.CONSTRAIN_COMPILE_S: c.compile_s, sc.CONSTRAIN_DRAFTS_CUT: c.drafts_cut,
                      sc.CONSTRAIN_ROLLBACKS: c.rollbacks})
        if c.fallback:
            attrs[sc.CONSTRAIN_FALLBACK] = c.fallback
        if c.dead_end:
            attrs[sc.CONSTRAIN_DEAD_END] = c.dead_end
    b = gen.batch
    if b is not None:
        attrs.update({sc.BATCH_SIZE: b.mean_batch_size, sc.BATCH_SIZE_MAX: b.max_batch_size, sc.BATCH_PASSES: b.passes})
        if b.policy:
            attrs.update({sc.SPEC_POLICY: b.policy, sc.SPEC_POLICY_MEAN_K: b.mean_k, sc.SPEC_POLICY_K0_SHARE: b.k0_share})
            if b.reason:
                attrs[sc.SPEC_POLICY_REASON] = b.reason
    if gen.roofline is not None and gen.roofline.phases:
        attrs.update(roofline_attributes(gen.roofline))
    if gen.method != "none":
        s = summarize_rounds(gen.rounds, gen.num_speculative_tokens)
        attrs.update(
            {
                sc.SPEC_ROUNDS: s.rounds,
                sc.SPEC_DRAFT_TOKENS: s.draft_tokens,
                sc.SPEC_ACCEPTED_TOKENS: s.accepted_tokens,
                sc.SPEC_ACCEPTANCE_RATE: s.acceptance_rate,
                sc.SPEC_MEAN_ACCEPTANCE_LENGTH: s.mean_acceptance_length,
                sc.SPEC_ACCEPTANCE_PER_POSITION: s.acceptance_per_position,
                sc.SPEC_DRAFT_S: s.draft_s,
                sc.SPEC_VERIFY_S: s.verify_s,
            }
        )
        trees = [r for r in gen.rounds if r.tree_depth]
        if trees:
            attrs[sc.SPEC_TREE_DEPTH] = max(r.tree_depth for r in trees)
            attrs[sc.SPEC_TREE_NODES] = sum(r.drafted for r in trees) / len(trees)
    return attrs


def roofline_attributes(roof: Roofline) -> dict[str, AttributeValue]:
    """The `agenttrace.roofline.*` arrays (one entry per phase) and the peaks."""
    ph = roof.phases
    attrs: dict[str, AttributeValue] = {
        sc.ROOFLINE_PHASE: tuple(p.phase for p in ph),
        sc.ROOFLINE_PASSES: tuple(p.passes for p in ph),
        sc.ROOFLINE_ROWS: tuple(p.rows for p in ph),
        sc.ROOFLINE_FLOPS: tuple(p.flops for p in ph),
        sc.ROOFLINE_BYTES: tuple(p.bytes for p in ph),
        sc.ROOFLINE_SECONDS: tuple(p.seconds for p in ph),
        sc.ROOFLINE_INTENSITY: tuple(p.intensity for p in ph),
        sc.ROOFLINE_FLOP_S: tuple(p.flop_s for p in ph),
        sc.ROOFLINE_BYTES_S: tuple(p.bytes_s for p in ph),
    }
    if roof.peak_bytes_s:
        attrs.update({sc.ROOFLINE_PEAK_FLOP_S: roof.peak_flop_s, sc.ROOFLINE_PEAK_BYTES_S: roof.peak_bytes_s,
                      sc.ROOFLINE_DEVICE: roof.device})
    return attrs


def record_generation(tel: Telemetry, span: Span, gen: Generation, *, model: str | None = None) -> None:
    """Attributes, the prefill child and the speculation rounds of one generation. A local
    generation has no response id of its own: `gen_ai.response.id` is minted from the span's id,
    so it is unique and names this span; `model` (the generating model) is `gen_ai.response.model`."""
    attrs = generation_attributes(gen)
    attrs[sc.GEN_AI_RESPONSE_ID] = f"gen-{span.get_span_context().span_id:016x}"
    if model:
        attrs[sc.GEN_AI_RESPONSE_MODEL] = model
    span.set_attributes(attrs)
    child_span(
        tel.tracer,
        span,
        sc.Segment.PREFILL,
        sc.SPAN_PREFILL,
        gen.prefill_start_ns,
        gen.prefill_end_ns,
        {sc.TOKENS: gen.prefill_tokens},
    )
    for r in gen.rounds:
        if tel.detail == "fine":
            child_span(
                tel.tracer, span, sc.Segment.DRAFT, sc.SPAN_DRAFT, r.draft_start_ns, r.draft_end_ns,
                {sc.SPEC_DRAFTED: r.drafted},
            )
            child_span(
                tel.tracer, span, sc.Segment.VERIFY, sc.SPAN_VERIFY, r.verify_start_ns, r.verify_end_ns,
                {sc.SPEC_VERIFIED: r.drafted + 1, sc.SPEC_ACCEPTED: r.accepted,
                 **({sc.SPEC_TREE_DEPTH: r.tree_depth} if r.tree_depth else {})},
            )
        else:
            span.add_event(
                sc.EVENT_SPECULATE_ROUND,
                {
                    sc.ROUND_DRAFTED: r.drafted,
                    sc.ROUND_ACCEPTED: r.accepted,
                    sc.ROUND_DRAFT_S: r.draft_s,
                    sc.ROUND_VERIFY_S: r.verify_s,
                    **({sc.ROUND_K: r.k} if r.k else {}),
                    **({sc.ROUND_TREE_DEPTH: r.tree_depth} if r.tree_depth else {}),
                },
                timestamp=r.verify_end_ns,
            )


def record_chat_content(tel: Telemetry, span: Span, messages: Sequence[Message], gen: Generation) -> None:
    """Prompt and output as GenAI messages, only when content capture is on (redacted, capped)."""
    if tel.content.enabled:
        tel.content.record_messages(
            span, chat_input_messages(messages), chat_output_messages(gen.text, gen.finish_reason)
        )
