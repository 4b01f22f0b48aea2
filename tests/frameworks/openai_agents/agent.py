"""The weather agent on the OpenAI Agents SDK, traced by OpenInference's instrumentation
(`openinference-instrumentation-openai-agents`, which replaces the SDK's own trace processor).

    python agent.py {chat|responses} [--stream]

`chat` runs the agents on `OpenAIChatCompletionsModel`, `responses` on the SDK's default, the
Responses API; `--stream` uses `Runner.run_streamed`. The delegation is a function tool whose body
runs the expert agent (the SDK's agent-as-tool, with the body timed for the truth).
"""

from __future__ import annotations

import asyncio
import sys

import truth
from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

API, STREAM = sys.argv[1], "--stream" in sys.argv[2:]


def main() -> None:
    client = AsyncOpenAI(base_url=truth.BASE_URL, api_key=truth.API_KEY, max_retries=0)
    model_class = OpenAIChatCompletionsModel if API == "chat" else OpenAIResponsesModel
    model = model_class(model=truth.MODEL, openai_client=client)
    OpenAIAgentsInstrumentor().instrument(tracer_provider=truth.tracer_provider(f"openai-agents-{API}"))

    async def run_agent(agent: Agent, question: str) -> str:
        if STREAM:
            result = Runner.run_streamed(agent, question)
            async for _ in result.stream_events():
                pass
            return str(result.final_output)
        return str((await Runner.run(agent, question)).final_output)

    expert = Agent(name="weather_expert", instructions=truth.EXPERT_INSTRUCTIONS, model=model,
                   tools=[function_tool(truth.weather)])

    @function_tool
    async def ask_expert(question: str) -> str:
        """Ask the weather expert a question."""
        with truth.delegation("ask_expert"):
            return await run_agent(expert, question)

    agent = Agent(name="weather_agent", instructions=truth.INSTRUCTIONS, model=model,
                  tools=[function_tool(truth.weather), function_tool(truth.forecast), ask_expert])

    loop = asyncio.new_event_loop()  # one loop for every task: the client's connections belong to it

    def run(case: str, question: str) -> str:
        return loop.run_until_complete(run_agent(agent, question))

    truth.run_cases(run, versions=["openai-agents", "openinference-instrumentation-openai-agents", "openai"])


if __name__ == "__main__":
    main()
