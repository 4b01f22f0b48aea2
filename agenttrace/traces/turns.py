"""The turns of a task of another instrumentation's trace and the steps they make (SPANS.md,
"Traces from other instrumentations"), with the decision table of our own runtime
(agenttrace.core.decisions), so a retry means the same thing whoever wrote the spans.

- A turn is a generation and the members that follow it before the next generation. It fails
  when its generation failed (`error`); when every tool execution failed (`tool_error`, or
  `validation_error` when the instrumentation says the arguments were refused), a failure the
  instrumentation may record only in the next model call's input (AutoGen's results, as
  OpenInference records them); or when a grouping span around its generation failed with no
  tool execution under it (the framework's own check refused the call: `validation_error`).
  A turn that holds answers when it calls no tool, or calls a tool frameworks answer through
  (smolagents' `final_answer`); its generation's end is the decision moment.
- A model call (or a layer around it) that stays open across the tool executions its reply
  asked for ends, for the report, when the first of them starts: the reply came before they ran.
- Steps: the turn after a failed one retries its step (`decisions.is_retried`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from agenttrace import semconv as sc
from agenttrace.core.decisions import is_retried, step_outcome
from agenttrace.traces.conventions import failed
from agenttrace.traces.conventions.openinference import failed_call_ids, tool_calls
from agenttrace.traces.index import Key, SpanIndex, key_of
from agenttrace.traces.inferred import CALL_BOUNDS
from agenttrace.traces.span_records import SpanRecord

__all__ = ["ANSWER_TOOLS", "Turn", "cut_open_calls", "step_outcome_of", "steps", "tool_name", "turns"]

Outcome = sc.AttemptOutcome
_ASKED_FOR_TOOLS = {"tool_calls", "tool_call", "tool_use", "function_call"}
# Tools a framework calls to give its answer: a call of one is the final answer, not a tool call.
ANSWER_TOOLS = frozenset({"final_answer"})


@dataclass
class Turn:
    members: list[SpanRecord]
    generation: SpanRecord | None = None
    outcome: Outcome = Outcome.OK
    decision: str | None = None
    reported_failed: set[Key] = field(default_factory=set)  # tools whose failure only a later call's input says

    def failed(self, tool: SpanRecord) -> bool:
        return failed(tool) or key_of(tool) in self.reported_failed

    @property
    def tools(self) -> list[SpanRecord]:
        return [m for m in self.members if m.segment != sc.Segment.GENERATION]


def tool_name(span: SpanRecord) -> str:
    name = span.attributes.get(sc.GEN_AI_TOOL_NAME)
    return name if isinstance(name, str) else span.name


def _asked_for_tools(gen: SpanRecord) -> bool:
    a = gen.attributes
    reasons = a.get(sc.GEN_AI_RESPONSE_FINISH_REASONS)
    if isinstance(reasons, (list, tuple)) and _ASKED_FOR_TOOLS & {str(r) for r in reasons}:
        return True
    calls = a.get(sc.RESPONSE_TOOL_CALLS)
    return isinstance(calls, int) and calls > 0


def cut_open_calls(index: SpanIndex, turns: list[Turn]) -> bool:
    """A turn's generation, and the grouping layers around it that do not hold its tools, end by
    the time its first tool execution starts, when they cover that execution whole (module
    docstring). Returns whether any span was cut."""
    cut = False
    for t in turns:
        if t.generation is None or not t.tools:
            continue
        first = min(t.tools, key=lambda m: m.start_ns)
        above_tool = {key_of(a) for a in index.ancestors(first)}
        for s in [t.generation, *index.ancestors(t.generation)]:
            s = index.current(s)
            if key_of(s) in above_tool:
                break
            if s.end_ns >= first.end_ns and s.start_ns < first.start_ns:
                kids_end = max((k.end_ns for k in index.children(s)), default=s.start_ns)
                index.with_attributes(s, {sc.INFERRED: (CALL_BOUNDS,)}, end_ns=max(first.start_ns, kids_end))
                cut = True
        t.generation = index.current(t.generation)
        t.members = [index.current(m) for m in t.members]
    return cut


def _refused_by_framework(index: SpanIndex, root: SpanRecord, gen: SpanRecord, members: list[SpanRecord]) -> bool:
    """A grouping span around `gen` (below the task) failed, and no tool execution ran under it."""
    for a in index.ancestors(gen):
        if key_of(a) == key_of(root):
            return False
        if failed(a) and a.segment is None and not any(
                m.segment != sc.Segment.GENERATION and key_of(a) in {key_of(x) for x in index.ancestors(m)} for m in members):
            return True
    return False


def _judge(turn: Turn, refused: bool) -> None:
    """The turn's outcome and decision (module docstring)."""
    gen, tools = turn.generation, turn.tools
    if gen is not None and failed(gen):
        turn.outcome = Outcome.ERROR
        return
    answers = [t for t in tools if tool_name(t) in ANSWER_TOOLS and not turn.failed(t)]
    calls = [t for t in tools if tool_name(t) not in ANSWER_TOOLS]
    failures = [t for t in calls if turn.failed(t)]
    if calls and len(failures) == len(calls) and not answers:
        kinds = {t.attributes.get(sc.ERROR_TYPE) for t in failures}
        turn.outcome = Outcome.VALIDATION_ERROR if kinds == {Outcome.VALIDATION_ERROR.value} else Outcome.TOOL_ERROR
        return
    if refused and not tools:
        turn.outcome = Outcome.VALIDATION_ERROR
        return
    if gen is not None:
        turn.decision = "final_answer" if answers or not (calls or _asked_for_tools(gen)) else "tool_call"


def turns(index: SpanIndex, root: SpanRecord, members: list[SpanRecord]) -> list[Turn]:
    """The task's turns, judged (module docstring)."""
    out: list[Turn] = []
    for m in members:
        if m.segment == sc.Segment.GENERATION or not out:
            out.append(Turn([m], m if m.segment == sc.Segment.GENERATION else None))
        else:
            out[-1].members.append(m)
    for t, later in zip(out, [*out[1:], None]):
        if later is not None and t.generation is not None and later.generation is not None:
            t.reported_failed = _reported_failures(t, later.generation)
        refused = t.generation is not None and _refused_by_framework(index, root, t.generation, members)
        _judge(t, refused)
    return out


def _reported_failures(turn: Turn, later: SpanRecord) -> set[Key]:
    """The turn's tool spans whose calls the next model call was told had failed (OpenInference's
    messages), matched to its generation's calls by tool name and arguments, else in order."""
    bad = failed_call_ids(later)
    calls = [(name, args) for call_id, name, args in tool_calls(turn.generation) if call_id in bad] if bad else []
    found: set[Key] = set()
    spare = [t for t in turn.tools if not failed(t)]
    for name, args in calls:
        same = [t for t in spare if tool_name(t) == name]
        match = next((t for t in same if _same_arguments(t, args)), same[0] if same else None)
        if match is not None:
            spare.remove(match)
            found.add(key_of(match))
    return found


def _same_arguments(tool: SpanRecord, args: str) -> bool:
    recorded = tool.attributes.get(sc.OI_TOOL_PARAMETERS) or tool.attributes.get(sc.OI_INPUT_VALUE)
    try:
        return isinstance(recorded, str) and json.loads(recorded) == json.loads(args)
    except ValueError:
        return False


def steps(turns: list[Turn]) -> list[list[Turn]]:
    """Turns grouped into steps: a turn after a failed one retries its step."""
    out: list[list[Turn]] = []
    for t in turns:
        if out and t.generation is not None and is_retried(out[-1][-1].outcome):
            out[-1].append(t)
        else:
            out.append([t])
    return out


def step_outcome_of(step: list[Turn]) -> sc.StepOutcome:
    last = step[-1]
    return step_outcome(last.outcome, final_answer=last.decision == "final_answer")
