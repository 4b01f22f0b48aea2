"""What the benchmarks run: the reference agent's task suites, its worked examples, its tasks and
its tools, taken from the reference examples (`agenttrace.examples`).

The examples are consumers of the library, not part of it: this is the one module of agenttrace
that imports them, and only through their public names, so the bench depends on what a user's
agent could see and a change inside the examples cannot reach past this file. It imports them at
its own import: modules that must stay light import this one inside the functions that run a
workload (or under TYPE_CHECKING for `Suite`).
"""

from __future__ import annotations

from agenttrace.examples.agents.function_calling import EXAMPLES, tool_call_tasks
from agenttrace.examples.agents.suites import SUITES, Suite, load_suite
from agenttrace.examples.tools import default_tools

__all__ = ["EXAMPLES", "SUITES", "Suite", "default_tools", "load_suite", "load_suites", "tool_call_tasks"]


def load_suites(names: list[str] | tuple[str, ...]) -> dict[str, Suite]:
    """The suites `names` (duplicates once, in order) with their tasks loaded; ValueError names
    the suites there are when one is unknown."""
    return {n: load_suite(n) for n in dict.fromkeys(names)}
