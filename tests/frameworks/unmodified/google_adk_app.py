"""A weather agent on Google ADK, written as its docs show, with no tracing code:
`agenttrace run -- python google_adk_app.py` profiles it through ADK's own spans (ADK takes its
tracer from the global provider, which the bootstrap sets), and OpenInference's when
`openinference-instrumentation-google-adk` is installed. The model (litellm's `openai/...`)
reaches the server in OPENAI_BASE_URL (the scripted fake of tests/frameworks/fake_llm.py)."""

from __future__ import annotations

import asyncio
import os

from google.adk.agents import LlmAgent
from google.adk.models.lite_llm import LiteLlm
from google.adk.runners import InMemoryRunner
from google.genai import types


async def weather(city: str) -> str:
    """Current weather in a city."""
    await asyncio.sleep(0.05)
    return f"sunny in {city}, 21 C"


async def main() -> None:
    model = LiteLlm(model="openai/gpt-4o-mini", api_base=os.environ.get("OPENAI_BASE_URL"))
    agent = LlmAgent(name="weather_agent", model=model, tools=[weather],
                     instruction="You answer questions about the weather with your tools.")
    runner = InMemoryRunner(agent=agent, app_name="weather_app")
    for question in ("[case: retry] What is the weather in Paris?",
                     "[case: parallel] Compare the weather in Paris and Tokyo."):
        session = await runner.session_service.create_session(app_name="weather_app", user_id="user")
        message = types.Content(role="user", parts=[types.Part(text=question)])
        async for event in runner.run_async(user_id="user", session_id=session.id, new_message=message):
            if event.is_final_response() and event.content and event.content.parts:
                print("".join(p.text or "" for p in event.content.parts))


if __name__ == "__main__":
    asyncio.run(main())
