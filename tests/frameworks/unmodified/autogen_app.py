"""A weather agent on AutoGen AgentChat, written as its docs show, with no tracing code:
`agenttrace run -- python autogen_app.py` profiles it through AutoGen's own spans (autogen-core
starts them on the global tracer provider, which the bootstrap sets) and the installed
instrumentations (`openinference-instrumentation-autogen-agentchat`, OpenLLMetry's
`opentelemetry-instrumentation-openai`). The model server comes from OPENAI_BASE_URL (the
scripted fake of tests/frameworks/fake_llm.py)."""

from __future__ import annotations

import asyncio

from autogen_agentchat.agents import AssistantAgent
from autogen_ext.models.openai import OpenAIChatCompletionClient


async def weather(city: str) -> str:
    """Current weather in a city."""
    await asyncio.sleep(0.05)
    return f"sunny in {city}, 21 C"


async def main() -> None:
    client = OpenAIChatCompletionClient(model="gpt-4o-mini", parallel_tool_calls=True)
    for question in ("[case: retry] What is the weather in Paris?",
                     "[case: parallel] Compare the weather in Paris and Tokyo."):
        agent = AssistantAgent("weather_agent", model_client=client, tools=[weather], reflect_on_tool_use=True,
                               max_tool_iterations=5,
                               system_message="You answer questions about the weather with your tools.")
        result = await agent.run(task=question)
        print(result.messages[-1].to_text())
    await client.close()


if __name__ == "__main__":
    asyncio.run(main())
