"""The public API is what it should be, and importing it stays light."""

from __future__ import annotations

import subprocess
import sys

import agenttrace

EXPECTED = {
    "Agent", "AgentConfig", "AgentTraceError", "ArgumentsInvalid", "AttemptRecord", "CancelToken", "ChatModel",
    "Clock", "Constraint", "ConstraintUnavailable", "Example", "ExpectedCall", "FakeClock", "FinalAnswer", "Generation", "GenerationCancelled",
    "GenerationParams", "InputFileError", "LocalChatModel", "BatchEngine", "ContextTooLong", "Message", "ModelMistake", "ModelUnavailable",
    "MonotonicClock", "ParseError", "PromptLookupDrafter", "PromptStyle", "SpecRound", "StepRecord", "Task",
    "TaskResult", "Telemetry", "Tool", "ToolCall", "ToolError", "ToolFailed", "load_model", "load_tasks",
    "render_report", "report_from_files", "make_console", "shutdown_all",
    # memory, compaction and delegation in the runtime
    "CompactionConfig", "MemoryStore", "MemoryUnavailable", "SubAgent", "delegation_tools",
    # the trained draft heads; which backend runs a workload sooner here
    "head_drafter", "TreeShape", "LookupThenHead", "choose_backend", "BackendChoice",
    # wrapping agents users already have (agenttrace.instrument, agenttrace.adapters)
    "ContentPolicy", "PropagatingExecutor", "ValidationResult", "agent_span", "attempt_span", "compaction_span",
    "configure", "current_run", "current_step", "delegation_span", "final_answer", "generation_span", "memory_span",
    "parse_span", "propagate", "shutdown", "step_span", "tool_span", "trace_generate", "traced_model",
    "turn_span", "validate_tool_call", "validate_tool_calls", "validation_span", "wrap_model", "wrap_openai",
    # profiling an agent with no tracing code (agenttrace.profiling)
    "profile",
}


def test_all_lists_exactly_the_public_names_and_each_resolves():
    assert set(agenttrace.__all__) == EXPECTED
    for name in agenttrace.__all__:
        assert getattr(agenttrace, name) is not None, name


def test_import_agenttrace_does_not_import_torch():
    code = "import sys, agenttrace; sys.exit(int('torch' in sys.modules or 'transformers' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
