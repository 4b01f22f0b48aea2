"""A plain tool-calling loop on the `openai` client, with no tracing code at all: what
`agenttrace run` must profile unmodified (tests/profiling/test_run_command.py). The server and key come
from OPENAI_BASE_URL and OPENAI_API_KEY (the loopback fake of tests/fake_openai.py).

    python openai_app.py [ok | raise | wait | exit=N]

ok: the loop to its answer; raise: an exception after the first model call; wait: one model
call, then `waiting` on stdout and a sleep (the test sends SIGINT or SIGTERM); exit=N: the loop,
then exit status N.
"""

from __future__ import annotations

import json
import sys
import time

from openai import OpenAI

TOOLS = [{"type": "function", "function": {
    "name": "weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def weather(city: str) -> str:
    time.sleep(0.05)
    return f"sunny in {city}, 21 C"


def main(mode: str) -> int:
    client = OpenAI(max_retries=0)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    for _ in range(4):
        reply = client.chat.completions.create(model="test-model", messages=messages, tools=TOOLS).choices[0].message
        if mode == "raise":
            raise RuntimeError("the agent failed after its first model call")
        if mode == "wait":
            print("waiting", flush=True)
            time.sleep(60)
        if not reply.tool_calls:
            print(reply.content)
            break
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            args = json.loads(call.function.arguments)
            try:
                result = weather(**args)
            except TypeError as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return int(mode.split("=")[1]) if mode.startswith("exit=") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "ok"))
