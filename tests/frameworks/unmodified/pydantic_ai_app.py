"""A weather agent on pydantic-ai, written as its docs show, with no tracing code:
`agenttrace run -- python pydantic_ai_app.py` profiles it through pydantic-ai's native
instrumentation, which the bootstrap turns on (`Agent.instrument_all`) when pydantic_ai is
imported (tests/profiling/test_run_command.py). The model server comes from OPENAI_BASE_URL (the scripted
fake of tests/frameworks/fake_llm.py)."""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent

agent = Agent("openai:gpt-4o-mini", name="weather_agent",
              instructions="You answer questions about the weather with your tools.")


@agent.tool_plain
async def weather(city: str) -> str:
    """Current weather in a city."""
    await asyncio.sleep(0.05)
    return f"sunny in {city}, 21 C"


async def main() -> None:
    for question in ("[case: retry] What is the weather in Paris?",
                     "[case: parallel] Compare the weather in Paris and Tokyo."):
        print((await agent.run(question)).output)


if __name__ == "__main__":
    asyncio.run(main())
