"""A weather agent on smolagents' ToolCallingAgent, written as its docs show, with no tracing
code: `agenttrace run -- python smolagents_app.py` profiles it through the installed
`openinference-instrumentation-smolagents` (tests/profiling/test_run_command.py). The model server comes
from OPENAI_BASE_URL (the scripted fake of tests/frameworks/fake_llm.py)."""

from __future__ import annotations

import time

from smolagents import OpenAIServerModel, ToolCallingAgent, tool


@tool
def weather(city: str) -> str:
    """Current weather in a city.

    Args:
        city: The city to look up.
    """
    time.sleep(0.05)
    return f"sunny in {city}, 21 C"


def main() -> None:
    agent = ToolCallingAgent(tools=[weather], model=OpenAIServerModel(model_id="gpt-4o-mini"),
                             instructions="You answer questions about the weather with your tools.")
    for question in ("[case: retry] What is the weather in Paris?",
                     "[case: parallel] Compare the weather in Paris and Tokyo."):
        print(agent.run(question))


if __name__ == "__main__":
    main()
