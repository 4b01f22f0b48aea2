"""A weather agent on LangGraph's prebuilt ReAct agent with LangChain's OpenAI chat model,
written as their docs show, with no tracing code: `agenttrace run -- python langgraph_app.py`
profiles it through the installed instrumentation (`openinference-instrumentation-langchain`,
or OpenLLMetry's `opentelemetry-instrumentation-langchain` with its OpenAI one). The model server
comes from OPENAI_BASE_URL (the scripted fake of tests/frameworks/fake_llm.py)."""

from __future__ import annotations

import time

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import ToolNode, create_react_agent


@tool
def weather(city: str) -> str:
    """Current weather in a city."""
    time.sleep(0.05)
    return f"sunny in {city}, 21 C"


def main() -> None:
    agent = create_react_agent(ChatOpenAI(model="gpt-4o-mini"), ToolNode([weather], handle_tool_errors=True),
                               prompt="You answer questions about the weather with your tools.", name="weather_agent")
    for question in ("[case: retry] What is the weather in Paris?",
                     "[case: parallel] Compare the weather in Paris and Tokyo."):
        print(agent.invoke({"messages": [{"role": "user", "content": question}]})["messages"][-1].content)


if __name__ == "__main__":
    main()
