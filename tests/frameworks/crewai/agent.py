"""The weather agent on CrewAI (one Agent with the tools, one Task whose description is the
question, a Crew), traced by OpenInference's CrewAI instrumentation plus its OpenAI one: the
pinned CrewAI calls `openai/...` models through its native OpenAI provider (the `openai` SDK,
native function calling), not through LiteLLM.

    python agent.py

The crews' task descriptions are `{question}`, filled in by `kickoff(inputs=...)`. The delegation
is a tool, `ask_expert`, whose body kicks off a sub-crew of the expert agent: CrewAI's own coworker
tools (`allow_delegation=True`: "Delegate work to coworker", "Ask question to coworker") take the
coworker's role as an argument, which the scripted server cannot fill in, and their body (a
`BaseAgentTool._execute`) has no place to time it without patching CrewAI.
"""

from __future__ import annotations

import truth
from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool
from openinference.instrumentation.crewai import CrewAIInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor


def main() -> None:
    provider = truth.tracer_provider("crewai")
    CrewAIInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    llm = LLM(model=f"openai/{truth.MODEL}", base_url=truth.BASE_URL, api_key=truth.API_KEY, max_retries=0)

    @tool("weather")
    def weather(city: str) -> str:
        """Current weather in a city."""
        return truth.weather(city)

    @tool("forecast")
    def forecast(city: str) -> str:
        """Tomorrow's weather forecast for a city."""
        return truth.forecast(city)

    expert = Agent(role="weather expert", goal=truth.EXPERT_INSTRUCTIONS, backstory=truth.EXPERT_DESCRIPTION,
                   tools=[weather], llm=llm, allow_delegation=False, verbose=False)

    expert_crew = Crew(agents=[expert], tasks=[Task(description="{question}", expected_output="The expert's answer.",
                                                    agent=expert)], verbose=False)

    @tool("ask_expert")
    def ask_expert(question: str) -> str:
        """Ask the weather expert a question."""
        with truth.delegation("ask_expert"):
            return str(expert_crew.kickoff(inputs={"question": question}))

    agent = Agent(role="weather assistant", goal=truth.INSTRUCTIONS, backstory=truth.INSTRUCTIONS,
                  tools=[weather, forecast, ask_expert], llm=llm, allow_delegation=False, verbose=False)

    crew = Crew(agents=[agent], tasks=[Task(description="{question}", expected_output="The answer to the question.",
                                            agent=agent)], verbose=False)

    def run(case: str, question: str) -> str:
        return str(crew.kickoff(inputs={"question": question}))  # the task's description is the question

    truth.run_cases(run, versions=["crewai", "openinference-instrumentation-crewai",
                                   "openinference-instrumentation-openai", "openai"])


if __name__ == "__main__":
    main()
