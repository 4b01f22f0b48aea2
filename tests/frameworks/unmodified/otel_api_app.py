"""A program whose library records GenAI spans through the OpenTelemetry API alone, as AutoGen
and Google ADK do: no SDK set up, no exporter, nothing for agenttrace. Under `agenttrace run` the
spans reach the trace file because the bootstrap sets the global provider
(tests/profiling/test_run_command.py, tests/profiling/test_profile.py).

    python otel_api_app.py [ok | raise | wait | exit=N] [TASKS]

Each task: invoke_agent { chat (calls weather), execute_tool weather, chat (answers) }.
ok: TASKS tasks (default 2); raise: one task, then an exception; wait: one task, then `ready`
on stdout and a sleep (the test sends a signal); exit=N: the tasks, then exit status N.
"""

from __future__ import annotations

import sys
import time

from opentelemetry import trace
from opentelemetry.trace import SpanKind

tracer = trace.get_tracer("weather-lib")


def chat(finish: str) -> None:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "test-model",
             "gen_ai.response.finish_reasons": [finish]}
    with tracer.start_as_current_span("chat test-model", kind=SpanKind.CLIENT, attributes=attrs):
        time.sleep(0.02)


def task() -> None:
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather_agent"}
    with tracer.start_as_current_span("invoke_agent weather_agent", attributes=attrs):
        chat("tool_calls")
        tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather", "gen_ai.tool.call.id": "call_1"}
        with tracer.start_as_current_span("execute_tool weather", attributes=tool):
            time.sleep(0.03)
        chat("stop")


def main(mode: str, tasks: int) -> int:
    for _ in range(1 if mode in ("raise", "wait") else tasks):
        task()
    if mode == "raise":
        raise RuntimeError("the agent failed after its first task")
    if mode == "wait":
        print("ready", flush=True)
        time.sleep(60)
    return int(mode.split("=")[1]) if mode.startswith("exit=") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "ok", int(sys.argv[2]) if len(sys.argv) > 2 else 2))
