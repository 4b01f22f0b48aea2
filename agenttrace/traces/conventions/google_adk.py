"""Google's Agent Development Kit (ADK): its own spans (scope `gcp.vertex.agent`), which follow the
GenAI conventions (`invoke_workflow`, `invoke_agent`, `generate_content`, `execute_tool`; schema
1, before ADK 2, also `invocation` and a `call_llm` layer around each model call), and
OpenInference's instrumentation of it. Most of it is read by the GenAI and OpenInference
modules; this one knows what only ADK does:

- a tool failure ADK turned into a result: a tool that returned ADK's error form
  (`{"status": "error", ...}`, as its docs ask tools to report failures) or whose exception
  `ReflectAndRetryToolPlugin` caught (`response_type: ERROR_HANDLED_BY_REFLECT_AND_RETRY_PLUGIN`)
  has a span of status UNSET or OK, the failure only in its result (`gen_ai.tool.call.result`,
  schema 1's `gcp.vertex.agent.tool_response`, or OpenInference's `output.value`): such a tool
  execution failed;
- `execute_tool (merged)` (tool name `(merged tools)`) is ADK merging the responses of parallel
  calls, not a tool execution;
- schema 1's `call_llm` is a layer around one model call (its `generate_content` child).
"""

from __future__ import annotations

import json
from typing import Any

from agenttrace import semconv as sc
from agenttrace.traces.conventions import SpanRole, genai, openinference
from agenttrace.traces.span_records import SpanRecord

NAME = "Google ADK"
SCOPE = "gcp.vertex.agent"
OI_SCOPE = "openinference.instrumentation.google_adk"
MERGED = "(merged tools)"
MERGED_REASON = "execute_tool (merged): ADK merging parallel calls' responses, not a tool execution"
CALL_LLM_REASON = "call_llm: ADK's layer around one model call (its generate_content child is the call)"
_PLUGIN_ERROR = "ERROR_HANDLED_BY_REFLECT_AND_RETRY_PLUGIN"
ADK_KEYS = "gcp.vertex.agent."
_RESULTS = (sc.GEN_AI_TOOL_CALL_RESULT, sc.OI_OUTPUT_VALUE, "gcp.vertex.agent.tool_response")  # schema 2, OpenInference, schema 1


def tool_result_failed(text: Any) -> bool:
    """The tool's result is ADK's form of a failure (module docstring)."""
    if not isinstance(text, str) or "error" not in text.lower():
        return False
    try:
        result = json.loads(text)
    except ValueError:
        return False
    if isinstance(result, dict) and isinstance(result.get("response"), dict):  # OpenInference wraps the response
        result = result["response"]
    if not isinstance(result, dict):
        return False
    return (str(result.get("response_type", "")).startswith(_PLUGIN_ERROR) or result.get("status") == "error"
            or ("error" in result and len(result) == 1))


def _is_adk(span: SpanRecord) -> bool:
    """ADK wrote it, or OpenInference's instrumentation of ADK: by the scope, or (a store that
    drops scopes, such as Phoenix) by ADK's own `gcp.vertex.agent.*` keys."""
    return span.scope in (SCOPE, OI_SCOPE) or any(k.startswith(ADK_KEYS) for k in span.attributes)


def role(span: SpanRecord) -> SpanRole | None:
    if not _is_adk(span):
        return None
    a = span.attributes
    if a.get(sc.GEN_AI_TOOL_NAME) == MERGED:
        return SpanRole(NAME, None, MERGED_REASON)
    if span.name == "call_llm" and sc.GEN_AI_OPERATION_NAME not in a and sc.OI_SPAN_KIND not in a:
        return SpanRole(NAME, None, CALL_LLM_REASON)
    base = openinference.role(span) if sc.OI_SPAN_KIND in a else genai.role(span)
    if base is None:
        return None
    if base.segment == sc.Segment.TOOL and any(tool_result_failed(a.get(k)) for k in _RESULTS):
        return SpanRole(base.convention if base.convention == openinference.NAME else NAME, base.segment, base.reason, base.variant,
                        {**base.attributes, sc.ERROR_TYPE: sc.AttemptOutcome.TOOL_ERROR.value})
    if span.scope == OI_SCOPE or base.convention == openinference.NAME:
        return base
    return SpanRole(NAME, base.segment, base.reason, base.variant, base.attributes)
