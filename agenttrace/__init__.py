"""agenttrace: an agent-loop latency tracer and profiler.

The public API. Names that need torch (the local generator and model loading) are imported on
first use, so `import agenttrace` stays light for reports, exporters and wrapped agents.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agenttrace.agent import Agent, AgentConfig, AttemptRecord, StepRecord, TaskResult
from agenttrace.chat import CancelToken, ChatModel, Generation, GenerationParams, Message, SpecRound
from agenttrace.clock import Clock, FakeClock, MonotonicClock
from agenttrace.errors import (
    AgentTraceError,
    ArgumentsInvalid,
    GenerationCancelled,
    InputFileError,
    ModelMistake,
    ModelUnavailable,
    ParseError,
    ToolError,
    ToolFailed,
)
from agenttrace.parse import FinalAnswer, ToolCall
from agenttrace.prompt import Example, PromptStyle
from agenttrace.tasks import ExpectedCall, Task, load_tasks
from agenttrace.telemetry import Telemetry
from agenttrace.tools import Tool

if TYPE_CHECKING:
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.models import load_model
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
    "Clock",
    "Example",
    "ExpectedCall",
    "FakeClock",
    "FinalAnswer",
    "Generation",
    "GenerationCancelled",
    "GenerationParams",
    "InputFileError",
    "LocalChatModel",
    "Message",
    "ModelMistake",
    "ModelUnavailable",
    "MonotonicClock",
    "ParseError",
    "PromptLookupDrafter",
    "PromptStyle",
    "SpecRound",
    "StepRecord",
    "Task",
    "TaskResult",
    "Telemetry",
    "Tool",
    "ToolCall",
    "ToolError",
    "ToolFailed",
    "load_model",
    "load_tasks",
    "render_report",
    "report_from_files",
]

# name -> module, for names whose modules are heavy to import
_LAZY = {
    "LocalChatModel": "agenttrace.generation.local",
    "PromptLookupDrafter": "agenttrace.generation.drafters",
    "load_model": "agenttrace.models",
    # reports pull in numpy and rich; a wrapped agent that only records spans need not
    "report_from_files": "agenttrace.report",
    "render_report": "agenttrace.report.terminal",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'agenttrace' has no attribute {name!r}")
