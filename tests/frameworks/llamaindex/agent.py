"""The weather agent on LlamaIndex's `FunctionAgent` (llama_index.core.agent.workflow) with
`llama-index-llms-openai`'s `OpenAI` (chat completions), traced by OpenInference's instrumentation
(`openinference-instrumentation-llama-index`).

    python agent.py [--httpx]

The agent streams, as `FunctionAgent` does by default (`streaming=True`: `astream_chat_with_tools`).
`--httpx` also turns on OpenTelemetry's httpx instrumentation (`opentelemetry-instrumentation-httpx`),
which the OpenAI client's requests go through. The tools are truth.py's functions, which
`FunctionAgent` wraps in `FunctionTool`s (a sync function runs in the loop's executor). The
delegation is the orchestrator pattern of LlamaIndex's multi-agent docs: a tool `ask_expert` whose
body runs the expert `FunctionAgent` (timed for the truth).
"""

from __future__ import annotations

import asyncio
import sys

import truth
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.llms.openai import OpenAI
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

HTTPX = "--httpx" in sys.argv[1:]


def main() -> None:
    provider = truth.tracer_provider("llamaindex-httpx" if HTTPX else "llamaindex")
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    if HTTPX:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

        HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    llm = OpenAI(model=truth.MODEL, api_base=truth.BASE_URL, api_key=truth.API_KEY)

    expert = FunctionAgent(name="weather_expert", description=truth.EXPERT_DESCRIPTION,
                           system_prompt=truth.EXPERT_INSTRUCTIONS, tools=[truth.weather], llm=llm)

    async def ask_expert(question: str) -> str:
        """Ask the weather expert a question."""
        with truth.delegation("ask_expert"):
            return str(await expert.run(user_msg=question))

    agent = FunctionAgent(name="weather_agent", system_prompt=truth.INSTRUCTIONS,
                          tools=[truth.weather, truth.forecast, ask_expert], llm=llm)

    loop = asyncio.new_event_loop()  # one loop for every task: the client's connections belong to it

    async def arun(question: str) -> str:
        return str(await agent.run(user_msg=question))  # the workflow starts in a running loop

    def run(case: str, question: str) -> str:
        return loop.run_until_complete(arun(question))

    versions = ["llama-index-core", "llama-index-llms-openai", "openinference-instrumentation-llama-index", "openai"]
    truth.run_cases(run, versions=versions + (["opentelemetry-instrumentation-httpx"] if HTTPX else []))


if __name__ == "__main__":
    main()
