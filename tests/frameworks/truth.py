"""The agent side of a recording (tests/frameworks/record.py runs each framework's agent script
in its own environment with this folder on PYTHONPATH). Standard library plus the OpenTelemetry
SDK and its OTLP/HTTP exporter, which every framework's environment has.

An agent script builds its framework's agent with the tools below and calls `run_cases`: each
case is one agent run (a task), timed with `time.time_ns()`, the clock the SDK stamps spans with;
every tool body records when it ran and whether it raised. With the fake server's log of model
calls (fake_llm.py), that is the ground truth the report is compared with (ground_truth.py).

    import truth
    def run(case, question): return my_agent.run(question)   # the framework's own call
    truth.run_cases(run, versions=["some-framework", "openinference-instrumentation-x"])

The environment the driver sets: AGENTTRACE_FAKE_LLM (the server's base URL, also OPENAI_BASE_URL),
AGENTTRACE_TRUTH_EVENTS (where the events go), OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (the receiver).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

BASE_URL = os.environ.get("AGENTTRACE_FAKE_LLM", "http://127.0.0.1:9/v1")
MODEL = "gpt-4o-mini"  # a name every framework knows (context sizes, prices): the server answers any
API_KEY = "sk-fake"
TOOL_S = 0.08  # each tool body's time
CASES = ("retry", "parallel", "raises", "delegate")
QUESTIONS = {
    "retry": "[case: retry] What is the weather in Paris?",
    "parallel": "[case: parallel] Compare the weather in Paris and Tokyo.",
    "raises": "[case: raises] What is the forecast for Lima?",
    "delegate": "[case: delegate] Ask the weather expert about Oslo.",
}
INSTRUCTIONS = "You answer questions about the weather with your tools."
EXPERT_INSTRUCTIONS = "You are the weather expert: answer with the weather tool."
EXPERT_DESCRIPTION = "A weather expert who looks up the weather for a question."


class Recorder:
    """Tasks and tool bodies, appended from any thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tasks: list[dict[str, Any]] = []
        self.tools: list[dict[str, Any]] = []
        self.versions: dict[str, str] = {}

    @contextlib.contextmanager
    def tool(self, name: str, *, delegation: bool = False, **args: Any) -> Iterator[None]:
        entry: dict[str, Any] = {"name": name, "args": args, "delegation": delegation, "start_ns": time.time_ns()}
        try:
            yield
            entry["raised"] = None
        except BaseException as exc:
            entry["raised"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            entry["end_ns"] = time.time_ns()
            with self.lock:
                self.tools.append(entry)

    def save(self) -> None:
        path = os.environ.get("AGENTTRACE_TRUTH_EVENTS")
        if path:
            with open(path, "w") as f:
                json.dump({"tasks": self.tasks, "tools": self.tools, "versions": self.versions}, f, indent=1)


REC = Recorder()
_failed_once: set[str] = set()


def weather(city: str) -> str:
    """Current weather in a city."""
    with REC.tool("weather", city=city):
        time.sleep(TOOL_S)
        return f"sunny, 21 C in {city}"


def forecast(city: str) -> str:
    """Tomorrow's weather forecast for a city."""
    with REC.tool("forecast", city=city):
        time.sleep(TOOL_S)
        if city not in _failed_once:  # a transient failure: the first call for a city raises
            _failed_once.add(city)
            raise RuntimeError("forecast service unavailable, try again")
        return f"tomorrow: sunny, 21 C in {city}"


async def aweather(city: str) -> str:
    """Current weather in a city."""
    with REC.tool("weather", city=city):
        await asyncio.sleep(TOOL_S)
        return f"sunny, 21 C in {city}"


async def aforecast(city: str) -> str:
    """Tomorrow's weather forecast for a city."""
    with REC.tool("forecast", city=city):
        await asyncio.sleep(TOOL_S)
        if city not in _failed_once:
            _failed_once.add(city)
            raise RuntimeError("forecast service unavailable, try again")
        return f"tomorrow: sunny, 21 C in {city}"


def delegation(name: str = "ask_expert") -> contextlib.AbstractContextManager[None]:
    """Around a delegation tool's body (the sub-agent's run): recorded as a tool body that delegates."""
    return REC.tool(name, delegation=True)


def tracer_provider(service: str) -> Any:
    """An SDK tracer provider exporting over OTLP/HTTP to the driver's receiver, batched so
    exporting costs the agent nothing measurable; shut down (flushed) by `run_cases`."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    _PROVIDERS.append(provider)
    return provider


_PROVIDERS: list[Any] = []


def run_cases(run: Callable[[str, str], Any], *, versions: Sequence[str] = (), cases: Sequence[str] = CASES,
              warm_up: Callable[[], Any] | None = None) -> None:
    """Run each case as one task (`run(case, question)` returns the answer, or raises), then
    flush the spans and save the events. `warm_up` runs first, untimed (a framework's lazy
    imports and first connection; keep its spans out by calling it before instrumenting, or
    let the server's untagged answer mark it)."""
    for dist in versions:
        try:
            REC.versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            REC.versions[dist] = "not installed"
    if warm_up is not None:
        warm_up()
    for case in cases:
        entry: dict[str, Any] = {"case": case, "question": QUESTIONS[case], "start_ns": time.time_ns()}
        try:
            answer = run(case, QUESTIONS[case])
            entry["answer"] = None if answer is None else str(answer)
            entry["error"] = None
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc(limit=8)
        entry["end_ns"] = time.time_ns()
        REC.tasks.append(entry)
        time.sleep(0.05)  # tasks apart: a late span of one is never read into the next
    for provider in _PROVIDERS:
        provider.force_flush()
        provider.shutdown()
    REC.save()
