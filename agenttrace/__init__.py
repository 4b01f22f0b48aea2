"""agenttrace: an agent-loop latency tracer and profiler.

The public API. Names that need torch (the local generator and model loading) are imported on
first use, so `import agenttrace` stays light for reports, exporters and wrapped agents.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agenttrace.clock import Clock, FakeClock, MonotonicClock
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
from agenttrace.generation.chat import (
    CancelToken,
    ChatModel,
    Constraint,
    Generation,
    GenerationParams,
    Message,
    SpecRound,
)
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
from agenttrace.runtime.agent import (
    Agent,
    AgentConfig,
    AttemptRecord,
    StepRecord,
    TaskResult,
)
from agenttrace.runtime.compaction import CompactionConfig
from agenttrace.runtime.delegation import SubAgent, delegation_tools
from agenttrace.runtime.memory import MemoryStore
from agenttrace.runtime.parse import FinalAnswer, ToolCall
from agenttrace.runtime.prompt import Example, PromptStyle
from agenttrace.runtime.tasks import ExpectedCall, Task, load_tasks
from agenttrace.runtime.tools import Tool
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.content import ContentPolicy

if TYPE_CHECKING:
    from agenttrace.adapters.callable import wrap_model
    from agenttrace.adapters.openai import wrap_openai
    from agenttrace.adapters.transformers import trace_generate
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.head_drafters import LookupThenHead, TreeShape, head_drafter
    from agenttrace.generation.batching.engine import BatchEngine
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import load_model
    from agenttrace.profiling import profile
    from agenttrace.report import report_from_files
    from agenttrace.report.terminal import render_report

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
    "load_tasks",
    "memory_span",
    "parse_span",
    "profile",
    "propagate",
    "render_report",
    "report_from_files",
    "shutdown",
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

# name -> module, for names whose modules are heavy to import
_LAZY = {
    "LocalChatModel": "agenttrace.generation.local",
    "BatchEngine": "agenttrace.generation.batching.engine",
    "PromptLookupDrafter": "agenttrace.generation.drafters",
    # the trained draft heads (EAGLE, Medusa) and prompt lookup before them
    "head_drafter": "agenttrace.generation.head_drafters",
    "TreeShape": "agenttrace.generation.head_drafters",
    "LookupThenHead": "agenttrace.generation.head_drafters",
    "load_model": "agenttrace.generation.models",
    # reports pull in numpy and rich; a wrapped agent that only records spans need not
    "report_from_files": "agenttrace.report",
    "render_report": "agenttrace.report.terminal",
    # wrappers around other libraries' objects (they never import those libraries themselves)
    "wrap_openai": "agenttrace.adapters.openai",
    "wrap_model": "agenttrace.adapters.callable",
    "trace_generate": "agenttrace.adapters.transformers",
    # profiling an agent with no tracing code: the installed instrumentations turned on for a block
    "profile": "agenttrace.profiling",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'agenttrace' has no attribute {name!r}")
