"""A weather agent on the OpenAI Agents SDK, written as its docs show, with no tracing code:
`agenttrace run -- python openai_agents_app.py` profiles it through the installed
`openinference-instrumentation-openai-agents` (tests/profiling/test_run_command.py). The model server
comes from OPENAI_BASE_URL (the scripted fake of tests/frameworks/fake_llm.py)."""

from __future__ import annotations

import asyncio
import time

from agents import Agent, Runner, function_tool


@function_tool
def weather(city: str) -> str:
    """Current weather in a city."""
    time.sleep(0.05)
    return f"sunny in {city}, 21 C"


agent = Agent(name="weather_agent", instructions="You answer questions about the weather with your tools.",
              model="gpt-4o-mini", tools=[weather])


async def main() -> None:
    for question in ("[case: retry] What is the weather in Paris?",
                     "[case: parallel] Compare the weather in Paris and Tokyo."):
        result = await Runner.run(agent, question)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
