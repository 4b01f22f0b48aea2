"""The weather agent on Google ADK (`google-adk`), with ADK's own OpenTelemetry spans (ADK's
tracer comes from the global tracer provider, which this script sets to the driver's).

    python agent.py [--openinference]

`--openinference` adds OpenInference's instrumentation (`openinference-instrumentation-google-adk`,
GoogleADKInstrumentor, on the same provider, which also stays the global one as Phoenix's
`register()` leaves it); the instrumentor takes over ADK's own tracers.

ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN (recordings.toml) picks ADK's span schema: 2, the default
(`invoke_workflow` / `invoke_agent` / `generate_content` / `execute_tool`, GenAI semconv), or 1,
the legacy one of ADK 1.x (`invocation` / `invoke_agent` / `call_llm` / `execute_tool`).

The agents are `LlmAgent`s on `LiteLlm(model="openai/gpt-4o-mini", api_base=...)`, so ADK talks
to the fake OpenAI server's Chat Completions route through litellm. Each task runs in a new
session of one `InMemoryRunner`.

The delegation is ADK's agent-as-a-tool: an `AgentTool` wrapping the expert `LlmAgent`
(`weather_expert`, which is also the tool's name); that one instance's `run_async` (the expert's
run) is wrapped to time it for the truth (an instance attribute, not a subclass, so the span's
`gen_ai.tool.type` stays `AgentTool`). A wrong argument name (`town`) is refused by ADK itself:
`FunctionTool.run_async` finds the mandatory `city` missing and returns `{"error": ...}` to the
model without running the body. A raising tool is handled by ADK's `ReflectAndRetryToolPlugin`
(the documented plugin that turns a tool's exception into a reflection response for the model;
without it the exception ends the run).
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import truth
from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.plugins.reflect_retry_tool_plugin import ReflectAndRetryToolPlugin
from google.adk.runners import InMemoryRunner
from google.adk.tools.agent_tool import AgentTool
from google.genai import types
from opentelemetry import trace

APP, USER = "weather_app", "user"
OPENINFERENCE = "--openinference" in sys.argv[1:]


async def weather(city: str) -> str:
    """Current weather in a city."""
    return await truth.aweather(city)


async def forecast(city: str) -> str:
    """Tomorrow's weather forecast for a city."""
    return await truth.aforecast(city)


def timed(tool: AgentTool) -> AgentTool:
    """The AgentTool, its run (the expert agent's) timed as the delegation."""
    run_async = tool.run_async

    async def timed_run_async(**kwargs):  # type: ignore[no-untyped-def]
        with truth.delegation(tool.name):
            return await run_async(**kwargs)

    tool.run_async = timed_run_async  # type: ignore[method-assign]
    return tool


def main() -> None:
    model = LiteLlm(model=f"openai/{truth.MODEL}", api_base=truth.BASE_URL, api_key=truth.API_KEY)
    expert = LlmAgent(name="weather_expert", model=model, description=truth.EXPERT_DESCRIPTION,
                      instruction=truth.EXPERT_INSTRUCTIONS, tools=[weather])
    agent = LlmAgent(name="weather_agent", model=model, instruction=truth.INSTRUCTIONS,
                     tools=[weather, forecast, timed(AgentTool(agent=expert))])
    runner = InMemoryRunner(agent=agent, app_name=APP, plugins=[ReflectAndRetryToolPlugin(max_retries=3)])

    async def ask(question: str) -> str:
        session = await runner.session_service.create_session(app_name=APP, user_id=USER,
                                                              session_id=str(uuid.uuid4()))
        answer = None
        message = types.Content(role="user", parts=[types.Part(text=question)])
        async for event in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
            if event.is_final_response() and event.content and event.content.parts:
                answer = "".join(p.text or "" for p in event.content.parts)
        if answer is None:
            raise RuntimeError("no final response")
        return answer

    loop = asyncio.new_event_loop()

    def run(case: str, question: str) -> str:
        return loop.run_until_complete(ask(question))

    def warm_up() -> None:
        """An untagged question, untraced (ADK's tracer is the global proxy until the provider is
        set): litellm's lazy imports on the first model call (about 4 s here) stay out of task 1."""
        run("warm-up", "Hello")
        provider = truth.tracer_provider("google-adk-openinference" if OPENINFERENCE else "google-adk")
        trace.set_tracer_provider(provider)
        if OPENINFERENCE:
            from openinference.instrumentation.google_adk import GoogleADKInstrumentor

            GoogleADKInstrumentor().instrument(tracer_provider=provider)

    versions = ["google-adk", "litellm", "openai"]
    if OPENINFERENCE:
        versions += ["openinference-instrumentation-google-adk", "openinference-instrumentation"]
    truth.run_cases(run, versions=versions, warm_up=warm_up)


if __name__ == "__main__":
    main()
