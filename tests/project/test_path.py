"""The path of one decision is short: one scripted tool call through the agent, its trace written,
then `agenttrace report` on that file, counting the project's modules whose functions ran (a
module or class body that only defines names, and what it calls to build its constants, is not
counted: a reader follows the calls). The
list is printed, so a change that lengthens the path shows what it added."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# 54 when this test was written (counted this way); 50 after the memory namespace, the lazy
# commands and the device helpers moved. The issue "One decision, one path" aimed at 30: the
# rest is the report's analysis (14 modules) and the trace reading that the issue "Reports where
# the spans are" rebuilds as one path. 51 with telemetry/files.py (issue 31: the trace file's
# lines and the report's -o written whole on a full disk). A change that lengthens the path fails here.
LIMIT = 51

_SCRIPT = r"""
import inspect, json, sys, threading
from pathlib import Path

root = Path(sys.argv[1]) / "agenttrace"
ran = set()

def profile(frame, event, arg):
    # functions only, and not those a module body calls while it is imported (building constants):
    # a reader of the decision's path follows calls, not definitions
    code = frame.f_code
    if event == "call" and code.co_flags & inspect.CO_OPTIMIZED and code.co_filename.startswith(str(root)) \
            and frame.f_back is not None and frame.f_back.f_code.co_name != "<module>":
        ran.add(code.co_filename)

sys.setprofile(profile)
threading.setprofile(profile)

from agenttrace import Agent, FakeClock, Task, Telemetry, Tool
from agenttrace.testing import ScriptedModel
from agenttrace.cli import main

def weather(city: str) -> str:
    return f"sunny in {city}"

trace = Path(sys.argv[2])
clock = FakeClock()
telemetry = Telemetry(clock=clock, trace_file=str(trace), synchronous=True, flush_on_sigterm=False)
tool = Tool("weather", "the weather in a city", {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}, weather, isolation="thread")
model = ScriptedModel(['{"tool": "weather", "arguments": {"city": "Paris"}}', '{"answer": "sunny"}'], clock)
result = Agent(model, [tool], telemetry=telemetry).run(Task(id="t1", prompt="weather in Paris?"))
telemetry.shutdown()
assert result.outcome == "completed", result.outcome
agent_ran = set(ran)
assert main(["report", str(trace), "--format", "json", "-o", str(trace) + ".json"]) == 0
sys.setprofile(None)
threading.setprofile(None)
rel = lambda paths: sorted(str(Path(p).relative_to(root.parent)) for p in paths)
print(json.dumps({"agent": rel(agent_ran), "report": rel(ran - agent_ran)}))
"""


def test_one_tool_call_and_its_report_run_no_more_modules_than_now(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, str(ROOT), str(tmp_path / "t.jsonl")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ran = json.loads(proc.stdout.strip().splitlines()[-1])
    both = sorted({*ran["agent"], *ran["report"]})
    print(f"{len(both)} modules ran ({len(ran['agent'])} in the agent run, {len(ran['report'])} more in the report):")
    for m in both:
        print("  ", m, "(report)" if m in ran["report"] else "")
    report = json.loads((tmp_path / "t.jsonl.json").read_text())
    (task,) = report["tasks"]
    assert [s["outcome"] for s in task["steps"]] == ["tool_call", "final_answer"]
    assert len(both) <= LIMIT, f"{len(both)} modules on the path of one decision (limit {LIMIT})"
