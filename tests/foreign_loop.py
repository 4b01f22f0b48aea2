"""One tool-calling agent loop over the real `openai` client, traced in turn by the ecosystem's
instrumentations or by agenttrace, writing OTLP/JSON lines. Run by tests/traces/test_foreign_traces.py,
each mode in the environment that has its packages (tests/cached_venv.py); it imports agenttrace
only in the modes that use it.

    python foreign_loop.py MODE BASE_URL OUT.jsonl

The loop: ask, run each tool call the reply holds (a wrong argument raises TypeError, whose text
goes back to the model), ask again, until a reply without tool calls. Against tests/fake_openai.py
that is a failed call, the same tool called right, and the answer: two decisions, one retried.
Each mode runs it TASKS times, one agent run (task) each, so a comparison can take medians that
the first run's one-off costs (a schema compiled, a code path warmed) do not move.

modes
    genai, genai-latest,  opentelemetry-instrumentation-openai-v2 + opentelemetry-util-genai's
    genai-legacy          TelemetryHandler for the agent and tool spans (genai-latest sets
                          OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental)
    openinference         openinference-instrumentation-openai + OITracer agent and tool spans
    openllmetry           traceloop's opentelemetry-instrumentation-openai, with agent and tool
                          spans as traceloop-sdk's @agent / @tool decorators write them
    agenttrace            our API as the README shows it: agent_span, turn_span, wrap_openai,
                          validate_tool_call, tool_span, final_answer
    mixed                 our agent_span, step_span (retrying inside the step) and validation and
                          tool spans around OpenLLMetry's chat spans, in one file
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

MODE, BASE_URL, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
if MODE == "genai-latest":
    os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"

MODEL = "test-model"
WEATHER = {"type": "function", "function": {
    "name": "weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                   "additionalProperties": False}}}
QUESTION = "What is the weather in Paris?"
TOOL_S = 0.015
TASKS = 5


def weather(city: str) -> str:
    time.sleep(TOOL_S)
    return f"sunny, 21 C in {city}"


def call_tool(call: Any) -> str:
    return weather(**json.loads(call.function.arguments))  # TypeError on a wrong argument


def client() -> Any:
    import openai

    c = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0)
    # The first request pays for openai's lazy imports and the connection: made before any
    # instrumentation is on, so no mode's trace holds it.
    c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "warm up"}])
    return c


def file_provider(service: str) -> Any:
    from opentelemetry.exporter.otlp.json.file import FileSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(OUT)))
    return provider


def loop(c: Any, agent: Any, tool: Any) -> None:
    for _ in range(TASKS):
        one_task(c, agent, tool)


def one_task(c: Any, agent: Any, tool: Any) -> str:
    """The agent loop, traced only through `agent()` (a context manager) and `tool(call)`."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    with agent():
        for _ in range(4):
            reply = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id, "content": tool(call)})
    return ""


def _error_text(exc: Exception) -> str:
    return f"error: {type(exc).__name__}: {exc}"


# -- the ecosystem's instrumentations -----------------------------------------------------------
def run_genai() -> None:
    import inspect

    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.util.genai.handler import TelemetryHandler

    c = client()
    provider = file_provider(f"foreign-{MODE}")
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    handler = TelemetryHandler(tracer_provider=provider)

    @contextlib.contextmanager
    def agent() -> Iterator[None]:
        if "agent_name" in inspect.signature(handler.start_invoke_local_agent).parameters:  # util-genai 1.x
            run = handler.start_invoke_local_agent(agent_name="weather-agent", request_model=MODEL)
        else:  # util-genai 0.4
            run = handler.start_invoke_local_agent("openai", request_model=MODEL)
            run.agent_name = "weather-agent"
        yield
        run.stop()

    def tool(call: Any) -> str:
        run = handler.start_tool(call.function.name, tool_call_id=call.id, tool_type="function",
                                 tool_description=WEATHER["function"]["description"])
        try:
            result = call_tool(call)
        except Exception as exc:
            run.fail(exc)
            return _error_text(exc)
        run.stop()
        return result

    loop(c, agent, tool)
    provider.shutdown()


def run_openinference() -> None:
    from openinference.instrumentation import OITracer, TraceConfig
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.trace import StatusCode

    c = client()
    provider = file_provider("foreign-openinference")
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = OITracer(provider.get_tracer("weather-agent"), config=TraceConfig())

    @contextlib.contextmanager
    def agent() -> Iterator[None]:
        with tracer.start_as_current_span("weather-agent", openinference_span_kind="agent") as span:
            yield
            span.set_status(StatusCode.OK)

    def tool(call: Any) -> str:
        try:  # the exception leaving the span marks it ERROR with an exception event
            with tracer.start_as_current_span(call.function.name, openinference_span_kind="tool") as span:
                span.set_tool(name=call.function.name, description=WEATHER["function"]["description"],
                              parameters=WEATHER["function"]["parameters"])
                result = call_tool(call)
                span.set_status(StatusCode.OK)
                return result
        except Exception as exc:
            return _error_text(exc)

    loop(c, agent, tool)
    provider.shutdown()


def _traceloop_entity(tracer: Any, name: str, kind: str) -> Any:
    """A span as traceloop-sdk's decorators start one (decorators/base.py, 0.62)."""
    span = tracer.start_span(f"{name}.{kind}")
    span.set_attribute("traceloop.span.kind", kind)
    span.set_attribute("traceloop.entity.name", name)
    if kind == "tool":
        span.set_attribute("gen_ai.tool.name", name)
    return span


def run_openllmetry() -> None:
    from opentelemetry import trace
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.trace import Status, StatusCode

    c = client()
    provider = file_provider("foreign-openllmetry")
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("traceloop.tracer")

    @contextlib.contextmanager
    def agent() -> Iterator[None]:
        span = _traceloop_entity(tracer, "weather_agent", "agent")
        with trace.use_span(span, end_on_exit=True):
            yield

    def tool(call: Any) -> str:
        span = _traceloop_entity(tracer, call.function.name, "tool")
        with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
            try:
                return call_tool(call)
            except Exception as exc:
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                span.record_exception(exc)
                return _error_text(exc)

    loop(c, agent, tool)
    provider.shutdown()


# -- agenttrace -----------------------------------------------------------------------------------
def run_agenttrace() -> None:
    import agenttrace as at

    c = client()
    at.configure(trace_file=OUT, service_name="agenttrace-loop")
    c = at.wrap_openai(c)

    def turn_loop() -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
        with at.agent_span("weather-agent"):
            for _ in range(4):
                with at.turn_span():  # a failed turn leaves its step open: the next turn retries it
                    reply = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
                    message = reply.choices[0].message
                    if not message.tool_calls:
                        at.final_answer()
                        return message.content
                    messages.append(message.model_dump(exclude_none=True))
                    for call in message.tool_calls:
                        at.validate_tool_call(call, tools=[WEATHER])
                        try:
                            with at.tool_span(call.function.name, call_id=call.id):
                                result = call_tool(call)
                        except Exception as exc:
                            result = _error_text(exc)
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return ""

    for _ in range(TASKS):
        turn_loop()
    at.shutdown()


def run_mixed() -> None:
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    import agenttrace as at

    c = client()
    tel = at.configure(trace_file=OUT, service_name="mixed-loop")
    OpenAIInstrumentor().instrument(tracer_provider=tel.provider)  # OpenLLMetry writes the chat spans
    for _ in range(TASKS):
        mixed_task(c)
    at.shutdown()


def mixed_task(c: Any) -> None:
    import agenttrace as at

    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    with at.agent_span("weather-agent"):
        for _ in range(4):
            with at.step_span() as step:
                for _attempt in range(3):
                    reply = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER])
                    message = reply.choices[0].message
                    if not message.tool_calls:
                        at.final_answer()
                        return
                    checks = [at.validate_tool_call(call, tools=[WEATHER]) for call in message.tool_calls]
                    messages.append(message.model_dump(exclude_none=True))
                    for call, check in zip(message.tool_calls, checks, strict=True):
                        if check.ok:
                            with at.tool_span(call.function.name, call_id=call.id):
                                result = call_tool(call)
                        else:
                            result = "error: " + check.message
                        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
                    if all(check.ok for check in checks):
                        break
                    step.retry()


RUNS = {"genai": run_genai, "genai-latest": run_genai, "genai-legacy": run_genai, "openinference": run_openinference,
        "openllmetry": run_openllmetry, "agenttrace": run_agenttrace, "mixed": run_mixed}

if __name__ == "__main__":
    RUNS[MODE]()
