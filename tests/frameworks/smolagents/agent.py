"""The weather agent on smolagents' `ToolCallingAgent` with `OpenAIServerModel` (chat
completions), traced by OpenInference's instrumentation (`openinference-instrumentation-smolagents`).

    python agent.py

The tools are smolagents `@tool` functions calling truth.py's. The delegation is smolagents' own
managed agent: a sub `ToolCallingAgent` named `weather_expert`, passed in `managed_agents=`, which
the main agent's model calls as a tool (`task` argument). For the truth, the sub-agent's class
wraps the `__call__` a managed agent is run by (prompt template, `run`, report) in
`truth.delegation("weather_expert")`: that call is the delegation tool's body.
"""

from __future__ import annotations

from typing import Any

import truth
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from smolagents import OpenAIServerModel, ToolCallingAgent, tool


@tool
def weather(city: str) -> str:
    """Current weather in a city.

    Args:
        city: The city to look up.
    """
    return truth.weather(city)


@tool
def forecast(city: str) -> str:
    """Tomorrow's weather forecast for a city.

    Args:
        city: The city to look up.
    """
    return truth.forecast(city)


class ExpertAgent(ToolCallingAgent):
    """A managed agent whose run, as the manager calls it, is timed as a delegation tool's body."""

    def __call__(self, task: str, **kwargs: Any) -> Any:
        with truth.delegation(self.name):
            return super().__call__(task, **kwargs)


def main() -> None:
    SmolagentsInstrumentor().instrument(tracer_provider=truth.tracer_provider("smolagents"))
    model = OpenAIServerModel(model_id=truth.MODEL, api_base=truth.BASE_URL, api_key=truth.API_KEY)
    expert = ExpertAgent(tools=[weather], model=model, name="weather_expert", description=truth.EXPERT_DESCRIPTION,
                         instructions=truth.EXPERT_INSTRUCTIONS)
    agent = ToolCallingAgent(tools=[weather, forecast], model=model, managed_agents=[expert],
                             instructions=truth.INSTRUCTIONS)

    def run(case: str, question: str) -> Any:
        return agent.run(question)

    truth.run_cases(run, versions=["smolagents", "openinference-instrumentation-smolagents", "openai"])


if __name__ == "__main__":
    main()
