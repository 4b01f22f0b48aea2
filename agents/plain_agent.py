"""A plain-Python agent: its own loop and its own tool dispatch over any OpenAI-compatible server,
traced with agenttrace. The lines marked `# +trace` are everything tracing adds (README section
"Wrapping an existing agent"); delete them and the agent runs as before.

    agenttrace serve --port 8000 &
    python -m agenttrace.examples.agents.plain_agent --base-url http://127.0.0.1:8000/v1 --trace traces/plain.jsonl
    agenttrace report traces/plain.jsonl
"""

from __future__ import annotations

import argparse
import json

from openai import OpenAI

import agenttrace as at  # +trace
from agenttrace.examples.agents.function_calling import TOOL_CALL_TASKS
from agenttrace import load_tasks
from agenttrace.examples.tools import default_tools

TOOLS = {t.name: t for t in default_tools()}
SCHEMAS = [{"type": "function", "function": t.definition()} for t in TOOLS.values()]
# One worked exchange, so a small model sees the format it is asked for.
EXAMPLE = [
    {"role": "user", "content": "What's the weather in Rome?"},
    {"role": "assistant", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Rome"}'}}]},
    {"role": "tool", "tool_call_id": "call_0", "content": '{"city": "Rome", "condition": "sunny", "temp_c": 24}'},
    {"role": "assistant", "content": "It is sunny in Rome, 24 C."},
]


@at.agent_span("plain-agent")  # +trace
def run(client: OpenAI, model: str, question: str, max_turns: int = 4) -> str | None:
    messages = [*EXAMPLE, {"role": "user", "content": question}]
    for _ in range(max_turns):
        with at.turn_span():  # +trace: a turn whose call failed leaves its step open for the retry
            reply = client.chat.completions.create(model=model, messages=messages, tools=SCHEMAS, max_tokens=40)
            message = reply.choices[0].message
            if not message.tool_calls:
                at.final_answer()  # +trace: the decision moment
                return message.content
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                at.validate_tool_call(call, tools=SCHEMAS)  # +trace: valid or not, and when
                try:
                    with at.tool_span(call.function.name, call_id=call.id):  # +trace
                        result = TOOLS[call.function.name].function(**json.loads(call.function.arguments))
                except Exception as exc:  # unknown tool, bad JSON or arguments: tell the model
                    result = f"error: {exc}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result, default=str)})
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default="SmolLM2-135M-Instruct")
    parser.add_argument("--tasks", type=int, default=4, help="how many tasks of agents/tasks/tool_calls.jsonl")
    parser.add_argument("--trace", default="traces/plain-agent.jsonl")
    args = parser.parse_args(argv)
    at.configure(trace_file=args.trace, service_name="plain-agent")  # +trace
    client = at.wrap_openai(OpenAI(base_url=args.base_url, api_key="unused"))  # +trace
    for task in load_tasks(TOOL_CALL_TASKS)[: args.tasks]:
        print(f"{task.id}: {run(client, args.model, task.prompt)!r}")
    at.shutdown()  # +trace
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
