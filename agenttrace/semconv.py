"""Every span name, attribute key and enumerated value agenttrace writes or reads (SPANS.md).

Names the OpenTelemetry semantic conventions define are taken from
`opentelemetry-semantic-conventions`; ours live under `agenttrace.`. Nothing else in the package
spells an attribute key as a string literal.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from opentelemetry.semconv._incubating.attributes import db_attributes as _db_old
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _gen_ai
from opentelemetry.semconv._incubating.attributes import http_attributes as _http_old
from opentelemetry.semconv._incubating.attributes import opentracing_attributes as _opentracing
from opentelemetry.semconv._incubating.attributes import otel_attributes as _otel_old
from opentelemetry.semconv._incubating.attributes import rpc_attributes as _rpc
from opentelemetry.semconv._incubating.attributes.host_attributes import HOST_NAME
from opentelemetry.semconv._incubating.attributes.process_attributes import PROCESS_PID
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as _gen_ai_metrics
from opentelemetry.semconv.attributes import db_attributes as _db
from opentelemetry.semconv.attributes import otel_attributes as _otel
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.http_attributes import HTTP_REQUEST_METHOD
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME, SERVICE_VERSION
from opentelemetry.semconv.schemas import Schemas


class Segment(StrEnum):
    """Where a span's self time is charged (`agenttrace.segment`).

    Listed in the reports' order: the three loop containers (whose self time reports show as
    `other`), then the segments in the order of the report's segment fields
    (`agenttrace.report.model.SEGMENT_FIELDS`, made from this enum), its JSON and its columns.
    """

    AGENT = "agent"
    STEP = "step"
    ATTEMPT = "attempt"
    PREFILL = "prefill"
    DRAFT = "draft"
    VERIFY = "verify"
    # Grammar mask computation and compilation, carved out of the generation's self time from
    # `agenttrace.constrain.mask_s` / `compile_s` (SPANS.md), as draft and verify are.
    CONSTRAIN = "constrain"
    GENERATION = "generation"
    PARSE = "parse"
    VALIDATION = "validation"
    TOOL = "tool"
    NETWORK = "network"
    # Not in SPANS.md: time a remote model server held the request before scheduling it (a vLLM
    # server's `gen_ai.latency.time_in_queue`), so a remote generation splits into network,
    # queue, prefill and decode.
    QUEUE = "queue"
    MEMORY = "memory"
    COMPACTION = "compaction"
    DELEGATION = "delegation"


class TaskOutcome(StrEnum):
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    BUDGET_EXHAUSTED = "budget_exhausted"
    LOOP_DETECTED = "loop_detected"  # not in SPANS.md: the same tool call repeated (AgentConfig.loop_repeats)


class StepOutcome(StrEnum):
    TOOL_CALL = "tool_call"
    FINAL_ANSWER = "final_answer"
    INVALID = "invalid"
    ERROR = "error"
    CANCELLED = "cancelled"


class AttemptOutcome(StrEnum):
    OK = "ok"
    PARSE_ERROR = "parse_error"
    VALIDATION_ERROR = "validation_error"
    TOOL_ERROR = "tool_error"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    # Not in SPANS.md: a wrapped agent's attempt that an exception ended which is none of the
    # model's mistakes (e.g. the model server refused the request).
    ERROR = "error"


# --- Resource -----------------------------------------------------------------------------
SERVICE_NAME: Final = SERVICE_NAME
SERVICE_VERSION: Final = SERVICE_VERSION
HOST_NAME: Final = HOST_NAME
PROCESS_PID: Final = PROCESS_PID
RUN_ID: Final = "agenttrace.run.id"
RUN_LABEL: Final = "agenttrace.run.label"
# Not in SPANS.md: on the resource of `agenttrace bench` traces, which suite and repeat a trace
# file holds (its run label is the arm), so a trace read on its own says what it measured.
BENCH_SUITE: Final = "agenttrace.bench.suite"
BENCH_REPEAT: Final = "agenttrace.bench.repeat"

# --- GenAI conventions ---------------------------------------------------------------------
GEN_AI_NAMESPACE: Final = "gen_ai."  # every GenAI attribute's prefix
GEN_AI_OPERATION_NAME: Final = _gen_ai.GEN_AI_OPERATION_NAME
GEN_AI_AGENT_NAME: Final = _gen_ai.GEN_AI_AGENT_NAME
GEN_AI_AGENT_ID: Final = _gen_ai.GEN_AI_AGENT_ID
GEN_AI_AGENT_DESCRIPTION: Final = _gen_ai.GEN_AI_AGENT_DESCRIPTION
GEN_AI_CONVERSATION_ID: Final = _gen_ai.GEN_AI_CONVERSATION_ID
GEN_AI_PROVIDER_NAME: Final = _gen_ai.GEN_AI_PROVIDER_NAME
GEN_AI_REQUEST_MODEL: Final = _gen_ai.GEN_AI_REQUEST_MODEL
GEN_AI_REQUEST_MAX_TOKENS: Final = _gen_ai.GEN_AI_REQUEST_MAX_TOKENS
GEN_AI_REQUEST_TEMPERATURE: Final = _gen_ai.GEN_AI_REQUEST_TEMPERATURE
GEN_AI_REQUEST_TOP_P: Final = _gen_ai.GEN_AI_REQUEST_TOP_P
GEN_AI_REQUEST_SEED: Final = _gen_ai.GEN_AI_REQUEST_SEED
GEN_AI_USAGE_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
GEN_AI_RESPONSE_FINISH_REASONS: Final = _gen_ai.GEN_AI_RESPONSE_FINISH_REASONS
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Final = _gen_ai.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
GEN_AI_TOOL_NAME: Final = _gen_ai.GEN_AI_TOOL_NAME
GEN_AI_TOOL_CALL_ID: Final = _gen_ai.GEN_AI_TOOL_CALL_ID
GEN_AI_TOOL_TYPE: Final = _gen_ai.GEN_AI_TOOL_TYPE
# the whole rendered tool result's length in characters; the model (and the content attribute) see
# at most MAX_RESULT_CHARS of it (runtime/execution.py)
TOOL_RESULT_SIZE: Final = "agenttrace.tool.result.size"
TOOL_RESULT_TRUNCATED: Final = "agenttrace.tool.result.truncated"
GEN_AI_TOOL_DESCRIPTION: Final = _gen_ai.GEN_AI_TOOL_DESCRIPTION
GEN_AI_TOKEN_TYPE: Final = _gen_ai.GEN_AI_TOKEN_TYPE
TOKEN_TYPE_INPUT: Final = _gen_ai.GenAiTokenTypeValues.INPUT.value
TOKEN_TYPE_OUTPUT: Final = _gen_ai.GenAiTokenTypeValues.OUTPUT.value
ERROR_TYPE: Final = ERROR_TYPE
SERVER_ADDRESS: Final = SERVER_ADDRESS
SERVER_PORT: Final = SERVER_PORT
GEN_AI_REQUEST_STOP_SEQUENCES: Final = _gen_ai.GEN_AI_REQUEST_STOP_SEQUENCES
GEN_AI_REQUEST_STREAM: Final = _gen_ai.GEN_AI_REQUEST_STREAM
GEN_AI_RESPONSE_ID: Final = _gen_ai.GEN_AI_RESPONSE_ID
GEN_AI_RESPONSE_MODEL: Final = _gen_ai.GEN_AI_RESPONSE_MODEL
# opt-in content (off by default; see agenttrace.telemetry.content)
GEN_AI_INPUT_MESSAGES: Final = _gen_ai.GEN_AI_INPUT_MESSAGES
GEN_AI_OUTPUT_MESSAGES: Final = _gen_ai.GEN_AI_OUTPUT_MESSAGES
GEN_AI_TOOL_CALL_ARGUMENTS: Final = _gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS
GEN_AI_TOOL_CALL_RESULT: Final = _gen_ai.GEN_AI_TOOL_CALL_RESULT

# The semantic-conventions version our span and attribute names follow: the newest schema of the
# installed `opentelemetry-semantic-conventions` (0.66b2), set as the instrumentation scope's
# schema URL. A test checks it is still the newest after an upgrade of that package.
SCHEMA_URL: Final = Schemas.V1_44_0.value

# --- GenAI client metrics (opt-in; see agenttrace.telemetry.metrics) ---------------------------
METRIC_OPERATION_DURATION: Final = _gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION
METRIC_TOKEN_USAGE: Final = _gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE

OP_INVOKE_AGENT: Final = "invoke_agent"
OP_CHAT: Final = "chat"
OP_EXECUTE_TOOL: Final = "execute_tool"
OP_TEXT_COMPLETION: Final = "text_completion"
OP_SEARCH_MEMORY: Final = "search_memory"
OP_CREATE_MEMORY: Final = "create_memory"
TOOL_TYPE_FUNCTION: Final = "function"
ERROR_CANCELLED: Final = "cancelled"

# --- agenttrace ----------------------------------------------------------------------------
SEGMENT: Final = "agenttrace.segment"
TASK_ID: Final = "agenttrace.task.id"
TASK_OUTCOME: Final = "agenttrace.task.outcome"
STEPS: Final = "agenttrace.steps"
DECISIONS_VALID: Final = "agenttrace.decisions.valid"
DECISIONS_INVALID: Final = "agenttrace.decisions.invalid"
STEP_INDEX: Final = "agenttrace.step.index"
STEP_OUTCOME: Final = "agenttrace.step.outcome"
STEP_ATTEMPTS: Final = "agenttrace.step.attempts"
ATTEMPT_INDEX: Final = "agenttrace.attempt.index"
ATTEMPT_OUTCOME: Final = "agenttrace.attempt.outcome"
TOKENS: Final = "agenttrace.tokens"
PARSE_OK: Final = "agenttrace.parse.ok"
# Not in SPANS.md: what an ok parse produced (`tool_call`, `final_answer`): a final answer's moment
PARSE_RESULT: Final = "agenttrace.parse.result"
VALIDATION_OK: Final = "agenttrace.validation.ok"
VALIDATION_ERRORS: Final = "agenttrace.validation.errors"
VALIDATION_VALIDATOR: Final = "agenttrace.validation.validator"
MEMORY_ITEMS: Final = "agenttrace.memory.items"
COMPACTION_TOKENS_BEFORE: Final = "agenttrace.compaction.tokens_before"
COMPACTION_TOKENS_AFTER: Final = "agenttrace.compaction.tokens_after"
# Not in SPANS.md (issue 16). Memory spans: bytes returned or written, the store's own time (s),
# its engine, and whether the runtime searched on its own (not a tool call). compact_context: the
# budget, the summary's policy (`model`, `extractive`), the turns replaced, and the prompt tokens
# the next generation prefills again as the cached prefix no longer matches. A task stopped for a
# loop: the tool it kept calling and the count (agent span); the step that repeated it.
MEMORY_BYTES: Final = "agenttrace.memory.bytes"
MEMORY_STORE_S: Final = "agenttrace.memory.store_s"
MEMORY_STORE: Final = "agenttrace.memory.store"
MEMORY_AUTO: Final = "agenttrace.memory.auto"
COMPACTION_BUDGET: Final = "agenttrace.compaction.budget"
COMPACTION_POLICY: Final = "agenttrace.compaction.policy"
COMPACTION_TURNS: Final = "agenttrace.compaction.turns"
COMPACTION_REPREFILL_TOKENS: Final = "agenttrace.compaction.reprefill_tokens"
LOOP_TOOL: Final = "agenttrace.loop.tool"
LOOP_REPEATS: Final = "agenttrace.loop.repeats"
LOOP_DETECTED: Final = "agenttrace.loop.detected"
# Not in SPANS.md: whether a decision matched the call (or answer) the task expected, set on the
# span that marks the decision moment (validation or parse) when the task states one. Lets reports
# compute time to correct action from the trace alone without recording argument content.
DECISION_CORRECT: Final = "agenttrace.decision.correct"
# Not in SPANS.md, written only by the reading of other instrumentations' traces, never to a file:
# what was inferred about a span (figure names: traces/inferred.py); the decision a generation's
# reply made (`tool_call`, `final_answer`; its end is the decision moment); on a task, what could
# not be inferred and why ("figure: reason" texts).
INFERRED: Final = "agenttrace.inferred"
INFERRED_DECISION: Final = "agenttrace.inferred.decision"
NOT_INFERRED: Final = "agenttrace.not_inferred"

# Not in SPANS.md, on generation spans recorded by the wrappers: how many tool calls the response
# carried and their names (names are not content, so they are recorded without opt-in); whether
# the caller stopped reading a stream before its end; how long a served request waited for the
# model (the server generates one request at a time).
RESPONSE_TOOL_CALLS: Final = "agenttrace.response.tool_calls"
RESPONSE_TOOL_NAMES: Final = "agenttrace.response.tool_names"
STREAM_STOPPED_EARLY: Final = "agenttrace.stream.stopped_early"
SERVE_QUEUE_S: Final = "agenttrace.serve.queue_s"

# speculative decoding, on the generation span (`agenttrace.spec.*`)
SPEC_METHOD: Final = "agenttrace.spec.method"
SPEC_NUM_SPECULATIVE_TOKENS: Final = "agenttrace.spec.num_speculative_tokens"
SPEC_ROUNDS: Final = "agenttrace.spec.rounds"
SPEC_DRAFT_TOKENS: Final = "agenttrace.spec.draft_tokens"
SPEC_ACCEPTED_TOKENS: Final = "agenttrace.spec.accepted_tokens"
SPEC_ACCEPTANCE_RATE: Final = "agenttrace.spec.acceptance_rate"
SPEC_MEAN_ACCEPTANCE_LENGTH: Final = "agenttrace.spec.mean_acceptance_length"
SPEC_ACCEPTANCE_PER_POSITION: Final = "agenttrace.spec.acceptance_per_position"
SPEC_PREFILL_S: Final = "agenttrace.spec.prefill_s"
SPEC_DRAFT_S: Final = "agenttrace.spec.draft_s"
SPEC_VERIFY_S: Final = "agenttrace.spec.verify_s"
SPEC_TOKENS_PER_S: Final = "agenttrace.spec.tokens_per_s"
SPEC_FALLBACK: Final = "agenttrace.spec.fallback"
SPEC_FALLBACK_REASON: Final = "agenttrace.spec.fallback.reason"
# Not in SPANS.md (which is silent on draft trees): the deepest tree a generation drafted and its
# mean node count per tree round; a tree round's `drafted` counts its nodes, and
# `acceptance_per_position` counts by depth.
SPEC_TREE_DEPTH: Final = "agenttrace.spec.tree.depth"
SPEC_TREE_NODES: Final = "agenttrace.spec.tree.nodes"
# Named by issue 15; SPANS.md is silent on batching and the roofline. How the k of a batched
# generation was chosen ("load_aware", "fixed") and the policy's last reason for it; the mean k it
# allowed and the share of passes where it allowed none.
SPEC_POLICY: Final = "agenttrace.spec.policy"
SPEC_POLICY_REASON: Final = "agenttrace.spec.policy.reason"
SPEC_POLICY_MEAN_K: Final = "agenttrace.spec.policy.mean_k"
SPEC_POLICY_K0_SHARE: Final = "agenttrace.spec.policy.k0_share"
# continuous batching: mean and largest requests per pass of a generation, and its passes
BATCH_SIZE: Final = "agenttrace.batch.size"
BATCH_SIZE_MAX: Final = "agenttrace.batch.size.max"
BATCH_PASSES: Final = "agenttrace.batch.passes"
# the roofline (core/roofline.py): one array entry per phase ("prefill", "verify@n", ...); peaks
ROOFLINE_PHASE: Final = "agenttrace.roofline.phase"
ROOFLINE_PASSES: Final = "agenttrace.roofline.passes"
ROOFLINE_ROWS: Final = "agenttrace.roofline.rows"
ROOFLINE_FLOPS: Final = "agenttrace.roofline.flops"
ROOFLINE_BYTES: Final = "agenttrace.roofline.bytes"
ROOFLINE_SECONDS: Final = "agenttrace.roofline.seconds"
ROOFLINE_INTENSITY: Final = "agenttrace.roofline.intensity"  # FLOPs per byte
ROOFLINE_FLOP_S: Final = "agenttrace.roofline.flop_s"  # attained
ROOFLINE_BYTES_S: Final = "agenttrace.roofline.bytes_s"  # attained
ROOFLINE_PEAK_FLOP_S: Final = "agenttrace.roofline.peak.flop_s"
ROOFLINE_PEAK_BYTES_S: Final = "agenttrace.roofline.peak.bytes_s"
ROOFLINE_DEVICE: Final = "agenttrace.roofline.device"
# on the draft / verify spans (detail level `fine`)
SPEC_DRAFTED: Final = "agenttrace.spec.drafted"
SPEC_VERIFIED: Final = "agenttrace.spec.verified"
SPEC_ACCEPTED: Final = "agenttrace.spec.accepted"

# grammar-constrained decoding, on the generation span (`agenttrace.constrain.*`)
CONSTRAIN_ENGINE: Final = "agenttrace.constrain.engine"
CONSTRAIN_GRAMMAR: Final = "agenttrace.constrain.grammar"
CONSTRAIN_MASK_S: Final = "agenttrace.constrain.mask_s"
CONSTRAIN_COMPILE_S: Final = "agenttrace.constrain.compile_s"
CONSTRAIN_DRAFTS_CUT: Final = "agenttrace.constrain.drafts_cut"
CONSTRAIN_ROLLBACKS: Final = "agenttrace.constrain.rollbacks"
# Not in SPANS.md's list, named by the issue: why the call decoded unconstrained (the grammar
# did not compile), and where the grammar allowed no token before it was complete.
CONSTRAIN_FALLBACK: Final = "agenttrace.constrain.fallback"
CONSTRAIN_DEAD_END: Final = "agenttrace.constrain.dead_end"

# the `speculate.round` event and its attributes (default detail level)
EVENT_SPECULATE_ROUND: Final = "speculate.round"
ROUND_DRAFTED: Final = "drafted"
ROUND_ACCEPTED: Final = "accepted"
ROUND_DRAFT_S: Final = "draft_s"
ROUND_VERIFY_S: Final = "verify_s"
ROUND_K: Final = "k"  # the most tokens the round asked the drafter for
ROUND_TREE_DEPTH: Final = "tree_depth"  # a draft tree's depth (its `drafted` counts nodes); absent for a chain

# --- other instrumentations' names (read only; agenttrace.traces.conventions) ----------------------
# The GenAI conventions before v1.37 / v1.27 (what the official instrumentations write by default).
GEN_AI_SYSTEM: Final = _gen_ai.GEN_AI_SYSTEM
GEN_AI_USAGE_PROMPT_TOKENS: Final = _gen_ai.GEN_AI_USAGE_PROMPT_TOKENS
GEN_AI_USAGE_COMPLETION_TOKENS: Final = _gen_ai.GEN_AI_USAGE_COMPLETION_TOKENS
GEN_AI_OPS_GENERATION: Final = frozenset({"chat", "text_completion", "generate_content"})
GEN_AI_OPS_MEMORY: Final = frozenset({"search_memory", "create_memory", "update_memory", "upsert_memory",
                                      "delete_memory", "retrieval"})
OP_INVOKE_WORKFLOW: Final = "invoke_workflow"
# OpenInference (Arize): the span kind and the keys of LLM, tool and agent spans.
OI_SPAN_KIND: Final = "openinference.span.kind"
OI_LLM_MODEL_NAME: Final = "llm.model_name"
OI_LLM_PROVIDER: Final = "llm.provider"
OI_LLM_SYSTEM: Final = "llm.system"
OI_LLM_TOKENS_PROMPT: Final = "llm.token_count.prompt"
OI_LLM_TOKENS_COMPLETION: Final = "llm.token_count.completion"
OI_TOOL_NAME: Final = "tool.name"
OI_AGENT_NAME: Final = "agent.name"
OI_INPUT_VALUE: Final = "input.value"
OI_OUTPUT_VALUE: Final = "output.value"
OI_TOOL_PARAMETERS: Final = "tool.parameters"
# OpenLLMetry (traceloop): decorator spans and the LLM spans of its instrumentations.
TL_SPAN_KIND: Final = "traceloop.span.kind"
TL_ENTITY_NAME: Final = "traceloop.entity.name"
TL_LLM_REQUEST_TYPE: Final = "llm.request.type"
TL_LLM_USAGE_TOTAL_TOKENS: Final = "llm.usage.total_tokens"
TL_GEN_AI_IS_STREAMING: Final = "gen_ai.is_streaming"
TL_LLM_IS_STREAMING: Final = "llm.is_streaming"
TL_OPENAI_API_BASE: Final = "gen_ai.openai.api_base"
# pydantic-ai's native instrumentation (logfire-style spans)
PAI_AGENT_NAME: Final = "agent_name"
PAI_LOGFIRE_MSG: Final = "logfire.msg"
PAI_FINAL_RESULT: Final = "final_result"
PAI_NAMESPACE: Final = "pydantic_ai."
PAI_TOOL_FAILURE_STAGE: Final = PAI_NAMESPACE + "tool.failure_stage"
PAI_TOOL_RETRY_CAUSE: Final = PAI_NAMESPACE + "tool.retry.cause"
# vLLM's server-side `llm_request` span (vllm/tracing, output_processor.do_tracing)
VLLM_SPAN_NAME: Final = "llm_request"
VLLM_LATENCY_PREFIX: Final = "gen_ai.latency."
VLLM_TIME_IN_QUEUE: Final = VLLM_LATENCY_PREFIX + "time_in_queue"
VLLM_TIME_TO_FIRST_TOKEN: Final = VLLM_LATENCY_PREFIX + "time_to_first_token"
VLLM_TIME_IN_PREFILL: Final = VLLM_LATENCY_PREFIX + "time_in_model_prefill"
VLLM_TIME_IN_DECODE: Final = VLLM_LATENCY_PREFIX + "time_in_model_decode"
VLLM_E2E: Final = VLLM_LATENCY_PREFIX + "e2e"
VLLM_REQUEST_ID: Final = "gen_ai.request.id"
# HTTP / database / RPC client spans (the OTel client conventions; old and new HTTP names)
HTTP_REQUEST_METHOD: Final = HTTP_REQUEST_METHOD
CLIENT_CALL_KEYS: Final = (HTTP_REQUEST_METHOD, _http_old.HTTP_METHOD, _db_old.DB_SYSTEM, _db.DB_SYSTEM_NAME,
                           _rpc.RPC_SYSTEM)

# --- Jaeger's JSON model (agenttrace.traces.jaeger_json writes it, jaeger_input reads it) ---------
# The tags Jaeger's OTLP translator makes from span fields rather than attributes, and the log
# field it names events by; the OTel names come from the conventions, the rest are Jaeger's own.
JAEGER_SCOPE_NAME: Final = _otel.OTEL_SCOPE_NAME
JAEGER_SCOPE_VERSION: Final = _otel.OTEL_SCOPE_VERSION
JAEGER_LIBRARY_NAME: Final = _otel_old.OTEL_LIBRARY_NAME  # what older Jaeger versions wrote instead
JAEGER_LIBRARY_VERSION: Final = _otel_old.OTEL_LIBRARY_VERSION
JAEGER_SPAN_KIND: Final = "span.kind"  # the OTLP kind's name in lower case (`internal`, `client`, ...)
JAEGER_STATUS_CODE: Final = _otel.OTEL_STATUS_CODE
JAEGER_STATUS_DESCRIPTION: Final = _otel.OTEL_STATUS_DESCRIPTION
JAEGER_ERROR: Final = "error"
JAEGER_TRACE_STATE: Final = "w3c.tracestate"
JAEGER_SPAN_FORMAT: Final = "internal.span.format"  # Jaeger's own record of the span's origin
JAEGER_LOG_EVENT: Final = "event"
JAEGER_LOG_MESSAGE: Final = "message"  # the event name in logs of OpenTracing clients
JAEGER_NO_SERVICE_NAME: Final = "OTLPResourceNoServiceName"
# a link's attribute that makes it a CHILD_OF reference (else FOLLOWS_FROM), and that value
LINK_REF_TYPE: Final = _opentracing.OPENTRACING_REF_TYPE
LINK_REF_TYPE_CHILD_OF: Final = _opentracing.OpentracingRefTypeValues.CHILD_OF.value

# --- span names ------------------------------------------------------------------------------
SPAN_PREFILL: Final = "prefill"
SPAN_DRAFT: Final = "speculate.draft"
SPAN_VERIFY: Final = "speculate.verify"
SPAN_PARSE: Final = "parse_tool_call"
SPAN_COMPACTION: Final = "compact_context"


def agent_span_name(agent_name: str) -> str:
    return f"{OP_INVOKE_AGENT} {agent_name}"


def step_span_name(index: int) -> str:
    return f"agent_step {index}"


def attempt_span_name(index: int) -> str:
    return f"attempt {index}"


def generation_span_name(model: str | None, operation: str = OP_CHAT) -> str:
    return f"{operation} {model}" if model else operation


def memory_span_name(operation: str) -> str:
    return operation  # `search_memory` / `create_memory`: the operation is the name (SPANS.md)


def validation_span_name(tool: str) -> str:
    return f"validate_arguments {tool}"


def tool_span_name(tool: str) -> str:
    return f"{OP_EXECUTE_TOOL} {tool}"
