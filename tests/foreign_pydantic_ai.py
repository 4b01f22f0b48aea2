"""The same weather loop as tests/foreign_loop.py, as a pydantic-ai agent on a `FunctionModel`
(no network) with pydantic-ai's native instrumentation, writing OTLP/JSON lines. Run by
tests/traces/test_foreign_traces.py in the pydantic-ai environment.

    python foreign_pydantic_ai.py OUT.jsonl

The model first calls `weather` with a wrong argument (pydantic-ai refuses it at validation and
asks again), then right, then answers; each model call takes MODEL_S, the tool TOOL_S.
"""

from __future__ import annotations

import sys
import time

from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

MODEL_S, TOOL_S = 0.03, 0.015


def scripted(messages: list, info: AgentInfo) -> ModelResponse:
    time.sleep(MODEL_S)
    turn = 1 + sum(isinstance(m, ModelResponse) for m in messages)
    usage = RequestUsage(input_tokens=10 + 5 * len(messages), output_tokens=7)
    if turn == 1:
        return ModelResponse(parts=[ToolCallPart("weather", {"town": "Paris"}, tool_call_id="call_1")], usage=usage)
    if turn == 2:
        return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"}, tool_call_id="call_2")], usage=usage)
    return ModelResponse(parts=[TextPart("It is sunny in Paris, 21 C.")], usage=usage)


def main(out: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "foreign-pydantic-ai"}))
    provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(out)))
    agent = Agent(FunctionModel(scripted, model_name="scripted-fn"), name="weather_agent",
                  capabilities=[Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))], retries=2)

    @agent.tool_plain
    def weather(city: str) -> str:
        """Current weather in a city."""
        time.sleep(TOOL_S)
        return f"sunny, 21 C in {city}"

    agent.run_sync("What is the weather in Paris?")
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
