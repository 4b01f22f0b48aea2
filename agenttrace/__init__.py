"""agenttrace: an agent-loop latency tracer and profiler.

The public API. Every name is imported on first use (`_LAZY`), so `import agenttrace` runs no
stage: a report, an exporter or a wrapped agent pays only for the modules it uses, and nothing
here imports torch until the local generator or model loading is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agenttrace.adapters.callable import wrap_model
    from agenttrace.adapters.openai import wrap_openai
    from agenttrace.adapters.transformers import trace_generate
    from agenttrace.clock import Clock, FakeClock, MonotonicClock
    from agenttrace.core.chat import (
        CancelToken,
        ChatModel,
        Constraint,
        Generation,
        GenerationParams,
        Message,
        SpecRound,
    )
    from agenttrace.core.tools import Tool
    from agenttrace.errors import (
        AgentTraceError,
        ArgumentsInvalid,
        ConstraintUnavailable,
        ContextTooLong,
        GenerationCancelled,
        InputFileError,
        MemoryUnavailable,
        ModelMistake,
        ModelUnavailable,
        ParseError,
        ToolError,
        ToolFailed,
    )
    from agenttrace.generation.backend_choice import BackendChoice, choose_backend
    from agenttrace.generation.batching.engine import BatchEngine
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.head_drafters import LookupThenHead, TreeShape, head_drafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import load_model
    from agenttrace.instrument import (
        PropagatingExecutor,
        ValidationResult,
        agent_span,
        attempt_span,
        compaction_span,
        configure,
        current_run,
        current_step,
        delegation_span,
        final_answer,
        generation_span,
        memory_span,
        parse_span,
        propagate,
        shutdown,
        step_span,
        tool_span,
        traced_model,
        turn_span,
        validate_tool_call,
        validate_tool_calls,
        validation_span,
    )
    from agenttrace.profiling import profile
    from agenttrace.report import report_from_files
    from agenttrace.report.terminal import render_report
    from agenttrace.runtime.agent import Agent, AgentConfig, AttemptRecord, StepRecord, TaskResult
    from agenttrace.runtime.compaction import CompactionConfig
    from agenttrace.runtime.delegation import SubAgent, delegation_tools
    from agenttrace.runtime.memory import MemoryStore
    from agenttrace.runtime.parse import FinalAnswer, ToolCall
    from agenttrace.runtime.prompt import Example, PromptStyle
    from agenttrace.runtime.tasks import ExpectedCall, Task, load_tasks
    from agenttrace.telemetry import Telemetry
    from agenttrace.telemetry.content import ContentPolicy

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentTraceError",
    "ArgumentsInvalid",
    "AttemptRecord",
    "CancelToken",
    "ChatModel",
    "CompactionConfig",
    "Clock",
    "ContentPolicy",
    "Example",
    "ExpectedCall",
    "FakeClock",
    "FinalAnswer",
    "Generation",
    "Constraint",
    "ConstraintUnavailable",
    "GenerationCancelled",
    "ContextTooLong",
    "GenerationParams",
    "InputFileError",
    "LocalChatModel",
    "BatchEngine",
    "LookupThenHead",
    "MemoryStore",
    "MemoryUnavailable",
    "Message",
    "ModelMistake",
    "ModelUnavailable",
    "MonotonicClock",
    "ParseError",
    "PromptLookupDrafter",
    "PromptStyle",
    "PropagatingExecutor",
    "SpecRound",
    "StepRecord",
    "SubAgent",
    "Task",
    "TaskResult",
    "Telemetry",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolFailed",
    "TreeShape",
    "ValidationResult",
    "agent_span",
    "attempt_span",
    "compaction_span",
    "configure",
    "current_run",
    "current_step",
    "delegation_span",
    "delegation_tools",
    "final_answer",
    "generation_span",
    "head_drafter",
    "load_model",
    "choose_backend",
    "BackendChoice",
    "load_tasks",
    "make_console",
    "memory_span",
    "parse_span",
    "profile",
    "propagate",
    "render_report",
    "report_from_files",
    "shutdown",
    "shutdown_all",
    "step_span",
    "tool_span",
    "trace_generate",
    "traced_model",
    "turn_span",
    "validate_tool_call",
    "validate_tool_calls",
    "validation_span",
    "wrap_model",
    "wrap_openai",
]

# name -> module for every public name: `import agenttrace` imports none of them, so a report,
# an exporter or a wrapped agent pays only for what it uses
_LAZY = {
    "Clock": "agenttrace.clock",
    "FakeClock": "agenttrace.clock",
    "MonotonicClock": "agenttrace.clock",
    "CancelToken": "agenttrace.core.chat",
    "ChatModel": "agenttrace.core.chat",
    "Constraint": "agenttrace.core.chat",
    "Generation": "agenttrace.core.chat",
    "GenerationParams": "agenttrace.core.chat",
    "Message": "agenttrace.core.chat",
    "SpecRound": "agenttrace.core.chat",
    "Tool": "agenttrace.core.tools",
    "AgentTraceError": "agenttrace.errors",
    "ArgumentsInvalid": "agenttrace.errors",
    "ConstraintUnavailable": "agenttrace.errors",
    "ContextTooLong": "agenttrace.errors",
    "GenerationCancelled": "agenttrace.errors",
    "InputFileError": "agenttrace.errors",
    "MemoryUnavailable": "agenttrace.errors",
    "ModelMistake": "agenttrace.errors",
    "ModelUnavailable": "agenttrace.errors",
    "ParseError": "agenttrace.errors",
    "ToolError": "agenttrace.errors",
    "ToolFailed": "agenttrace.errors",
    "PropagatingExecutor": "agenttrace.instrument",
    "ValidationResult": "agenttrace.instrument",
    "agent_span": "agenttrace.instrument",
    "attempt_span": "agenttrace.instrument",
    "compaction_span": "agenttrace.instrument",
    "configure": "agenttrace.instrument",
    "current_run": "agenttrace.instrument",
    "current_step": "agenttrace.instrument",
    "delegation_span": "agenttrace.instrument",
    "final_answer": "agenttrace.instrument",
    "generation_span": "agenttrace.instrument",
    "memory_span": "agenttrace.instrument",
    "parse_span": "agenttrace.instrument",
    "propagate": "agenttrace.instrument",
    "shutdown": "agenttrace.instrument",
    "step_span": "agenttrace.instrument",
    "tool_span": "agenttrace.instrument",
    "traced_model": "agenttrace.instrument",
    "turn_span": "agenttrace.instrument",
    "validate_tool_call": "agenttrace.instrument",
    "validate_tool_calls": "agenttrace.instrument",
    "validation_span": "agenttrace.instrument",
    "Agent": "agenttrace.runtime.agent",
    "AgentConfig": "agenttrace.runtime.agent",
    "AttemptRecord": "agenttrace.runtime.agent",
    "StepRecord": "agenttrace.runtime.agent",
    "TaskResult": "agenttrace.runtime.agent",
    "CompactionConfig": "agenttrace.runtime.compaction",
    "SubAgent": "agenttrace.runtime.delegation",
    "delegation_tools": "agenttrace.runtime.delegation",
    "MemoryStore": "agenttrace.runtime.memory",
    "FinalAnswer": "agenttrace.runtime.parse",
    "ToolCall": "agenttrace.runtime.parse",
    "Example": "agenttrace.runtime.prompt",
    "PromptStyle": "agenttrace.runtime.prompt",
    "ExpectedCall": "agenttrace.runtime.tasks",
    "Task": "agenttrace.runtime.tasks",
    "load_tasks": "agenttrace.runtime.tasks",
    "Telemetry": "agenttrace.telemetry",
    "ContentPolicy": "agenttrace.telemetry.content",
    "LocalChatModel": "agenttrace.generation.local",
    "BatchEngine": "agenttrace.generation.batching.engine",
    "PromptLookupDrafter": "agenttrace.generation.drafters",
    # the trained draft heads (EAGLE, Medusa) and prompt lookup before them
    "head_drafter": "agenttrace.generation.head_drafters",
    "TreeShape": "agenttrace.generation.head_drafters",
    "LookupThenHead": "agenttrace.generation.head_drafters",
    "load_model": "agenttrace.generation.models",
    # which backend (torch, llama.cpp's kernels) runs a workload sooner on this machine, measured
    "choose_backend": "agenttrace.generation.backend_choice",
    "BackendChoice": "agenttrace.generation.backend_choice",
    # reports pull in numpy and rich; a wrapped agent that only records spans need not
    "report_from_files": "agenttrace.report",
    "render_report": "agenttrace.report.terminal",
    # wrappers around other libraries' objects (they never import those libraries themselves)
    "wrap_openai": "agenttrace.adapters.openai",
    "wrap_model": "agenttrace.adapters.callable",
    "trace_generate": "agenttrace.adapters.transformers",
    # profiling an agent with no tracing code: the installed instrumentations turned on for a block
    "profile": "agenttrace.profiling",
    # several Telemetry shut down at once (their collectors' bounds overlap); the report's console
    "shutdown_all": "agenttrace.telemetry.exit",
    "make_console": "agenttrace.report.terminal",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'agenttrace' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
