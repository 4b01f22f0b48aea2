"""A weather agent on LlamaIndex's FunctionAgent, written as its docs show, with no tracing
code: `agenttrace run -- python llamaindex_app.py` profiles it through the installed
`openinference-instrumentation-llama-index` (and `opentelemetry-instrumentation-httpx` when that
is installed too). The model server comes from OPENAI_BASE_URL (the scripted fake of
tests/frameworks/fake_llm.py)."""

from __future__ import annotations

import asyncio
import time

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.openai import OpenAI


def weather(city: str) -> str:
    """Current weather in a city."""
    time.sleep(0.05)
    return f"sunny in {city}, 21 C"


async def main() -> None:
    agent = FunctionAgent(name="weather_agent", system_prompt="You answer questions about the weather with your tools.",
                          tools=[weather], llm=OpenAI(model="gpt-4o-mini"))
    for question in ("[case: retry] What is the weather in Paris?",
                     "[case: parallel] Compare the weather in Paris and Tokyo."):
        print(await agent.run(user_msg=question))


if __name__ == "__main__":
    asyncio.run(main())
