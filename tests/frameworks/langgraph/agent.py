"""The weather agent on LangGraph, with LangChain's OpenAI chat model (`langchain-openai`).

    python agent.py {create_agent|react} {openinference|openllmetry}

`create_agent` builds the agents with LangChain 1.x's `langchain.agents.create_agent` (a LangGraph
graph with middleware), `react` with LangGraph's prebuilt `create_react_agent`. Tools are LangChain
`@tool`s; LangGraph's `ToolNode` validates each call's arguments and hands a rejected one back to
the model as an error `ToolMessage` (the retry case). A raising tool is handed back the way each
API's docs show: `ToolErrorMiddleware` for `create_agent`, `ToolNode(handle_tool_errors=True)` for
`create_react_agent`. The delegation is a tool whose body invokes the expert agent's graph (the
"subagent as a tool" pattern); LangChain's callbacks carry the run's context into it.

`openinference` traces with `openinference-instrumentation-langchain`; `openllmetry` with
Traceloop's `opentelemetry-instrumentation-langchain` and `opentelemetry-instrumentation-openai`
(the two instrumentors `Traceloop.init` would start for this app), set up before the agent
factories are imported, as OpenLLMetry wraps them.
"""

from __future__ import annotations

import sys

import truth

API, INSTRUMENTATION = sys.argv[1], sys.argv[2]


def instrument() -> list[str]:
    provider = truth.tracer_provider(f"langgraph-{API}-{INSTRUMENTATION}")
    if INSTRUMENTATION == "openinference":
        from openinference.instrumentation.langchain import LangChainInstrumentor

        LangChainInstrumentor().instrument(tracer_provider=provider)
        return ["openinference-instrumentation-langchain"]
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    LangchainInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    return ["opentelemetry-instrumentation-langchain", "opentelemetry-instrumentation-openai"]


def main() -> None:
    versions = instrument()
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    model = ChatOpenAI(model=truth.MODEL, base_url=truth.BASE_URL, api_key=truth.API_KEY)
    weather, forecast = tool(truth.weather), tool(truth.forecast)

    if API == "create_agent":
        from langchain.agents import create_agent
        from langchain.agents.middleware import ToolErrorMiddleware

        def on_error(exc: Exception, request: object) -> str:
            return f"Error: {type(exc).__name__}: {exc}"

        def make_agent(name: str, instructions: str, tools: list) -> object:
            return create_agent(model, tools=tools, system_prompt=instructions, name=name,
                                middleware=[ToolErrorMiddleware(on_error)])
    else:
        from langgraph.prebuilt import ToolNode, create_react_agent

        def make_agent(name: str, instructions: str, tools: list) -> object:
            return create_react_agent(model, ToolNode(tools, handle_tool_errors=True), prompt=instructions, name=name)

    expert = make_agent("weather_expert", truth.EXPERT_INSTRUCTIONS, [weather])

    @tool
    def ask_expert(question: str) -> str:
        """Ask the weather expert a question."""
        with truth.delegation("ask_expert"):
            result = expert.invoke({"messages": [{"role": "user", "content": question}]})
            return result["messages"][-1].content

    agent = make_agent("weather_agent", truth.INSTRUCTIONS, [weather, forecast, ask_expert])

    def run(case: str, question: str) -> str:
        result = agent.invoke({"messages": [{"role": "user", "content": question}]})
        return result["messages"][-1].content

    truth.run_cases(run, versions=["langgraph", "langchain", "langchain-core", "langchain-openai", *versions, "openai"])


if __name__ == "__main__":
    main()
