"""The weather agent on AutoGen AgentChat: an `AssistantAgent` with the tools on
`OpenAIChatCompletionClient` (chat completions, parallel tool calls on), calling the model again
after tool results (`max_tool_iterations`) until it answers in text.

    python agent.py native [--openai-spans]
    python agent.py openinference

`native`: AutoGen's own spans (autogen-core's GenAI `create_agent` / `invoke_agent` /
`execute_tool`, which it starts on the global tracer provider; it has none for model calls).
`--openai-spans` adds what AutoGen's tracing guide pairs them with for model calls: OpenLLMetry's
`opentelemetry-instrumentation-openai`. `openinference`: OpenInference's
`openinference-instrumentation-autogen-agentchat` (its own agent, model-client and tool spans; the
global provider is left unset, so AutoGen's own spans go nowhere).

The delegation is AgentChat's agent-as-tool, `AgentTool`, over an expert `AssistantAgent` named
`weather_expert` (the tool takes its name); a subclass times its run (`run_stream`, which the
agent's workbench calls, and `run`) as the delegation tool's body. The main agent's memory is
cleared (`on_reset`) before each task: an AgentChat agent keeps its conversation across runs.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import truth
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.tools import AgentTool
from autogen_core import CancellationToken
from autogen_ext.models.openai import OpenAIChatCompletionClient

MODE, OPENAI_SPANS = sys.argv[1], "--openai-spans" in sys.argv[2:]


class ExpertTool(AgentTool):
    """AgentTool whose run is timed as the delegation tool's body."""

    async def run(self, args: Any, cancellation_token: CancellationToken) -> Any:
        with truth.delegation(self.name):
            return await super().run(args, cancellation_token)

    async def run_stream(self, args: Any, cancellation_token: CancellationToken) -> Any:
        with truth.delegation(self.name):
            async for event in super().run_stream(args, cancellation_token):
                yield event


def instrument() -> None:
    provider = truth.tracer_provider(f"autogen-{MODE}")
    if MODE == "native":
        from opentelemetry import trace

        trace.set_tracer_provider(provider)
        if OPENAI_SPANS:
            from opentelemetry.instrumentation.openai import OpenAIInstrumentor

            OpenAIInstrumentor().instrument()
    else:
        from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

        AutogenAgentChatInstrumentor().instrument(tracer_provider=provider)


def main() -> None:
    instrument()
    # One loop for every task (the client's connections belong to it), running all along in its own
    # thread as an asyncio application's does: what the agents leave to it after a run (closing
    # the generator `run` stops reading at its answer) happens then, not at the next task.
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    client = OpenAIChatCompletionClient(model=truth.MODEL, base_url=truth.BASE_URL, api_key=truth.API_KEY,
                                        parallel_tool_calls=True, max_retries=0)
    expert = AssistantAgent("weather_expert", model_client=client, tools=[truth.weather],
                            description=truth.EXPERT_DESCRIPTION, system_message=truth.EXPERT_INSTRUCTIONS,
                            reflect_on_tool_use=True, max_tool_iterations=5)
    agent = AssistantAgent("weather_agent", model_client=client, system_message=truth.INSTRUCTIONS,
                           tools=[truth.weather, truth.forecast, ExpertTool(expert, return_value_as_last_message=True)],
                           reflect_on_tool_use=True, max_tool_iterations=5)

    async def run_agent(question: str) -> str:
        await agent.on_reset(CancellationToken())
        result = await agent.run(task=question)
        return result.messages[-1].to_text()

    def run(case: str, question: str) -> str:
        return asyncio.run_coroutine_threadsafe(run_agent(question), loop).result()

    versions = ["autogen-agentchat", "autogen-core", "autogen-ext", "openai"]
    if MODE == "openinference":
        versions.append("openinference-instrumentation-autogen-agentchat")
    elif OPENAI_SPANS:
        versions.append("opentelemetry-instrumentation-openai")
    truth.run_cases(run, versions=versions)
    asyncio.run_coroutine_threadsafe(client.close(), loop).result()
    loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
