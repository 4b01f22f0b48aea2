"""A weather crew on CrewAI, written as its docs show, with no tracing code:
`agenttrace run -- python crewai_app.py` profiles it through the installed
`openinference-instrumentation-crewai` (and `openinference-instrumentation-openai` for the model
calls of CrewAI's native OpenAI provider). The model server comes from OPENAI_BASE_URL (the
scripted fake of tests/frameworks/fake_llm.py)."""

from __future__ import annotations

import os
import time

from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool


@tool("weather")
def weather(city: str) -> str:
    """Current weather in a city."""
    time.sleep(0.05)
    return f"sunny in {city}, 21 C"


def main() -> None:
    llm = LLM(model="openai/gpt-4o-mini", base_url=os.environ.get("OPENAI_BASE_URL"))
    agent = Agent(role="weather assistant", goal="You answer questions about the weather with your tools.",
                  backstory="You answer questions about the weather with your tools.", tools=[weather], llm=llm)
    crew = Crew(agents=[agent], tasks=[Task(description="{question}", expected_output="The answer.", agent=agent)])
    for question in ("[case: retry] What is the weather in Paris?",
                     "[case: parallel] Compare the weather in Paris and Tokyo."):
        print(crew.kickoff(inputs={"question": question}))


if __name__ == "__main__":
    main()
