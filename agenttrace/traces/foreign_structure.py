"""Tasks, steps and attempts where a trace has none of ours (SPANS.md, "Traces from other
instrumentations"), and attempts for foreign generations inside our own steps.

Frameworks put their model calls and tool executions (a task's *members*) under layers of their
own: workflow, turn, step, node and chain spans, an agent span around the real agent. None of
those layers decides anything, so the structure comes from the members alone, in time order,
at any depth. For one task (the outermost agent span, or the root above generations no agent
holds: traces/normalise.py finds them), in order:

    members.py   agents inside the task (wrappers or delegations), its members, one generation
                 per model call
    turns.py     turns, their outcomes and decisions, steps (our runtime's decision table)
    here         the task's outcome (`decisions.task_outcome`: unknown after a tool call, since
                 no span says whether the run meant to stop there), the steps and attempts
                 placed as spans, then each sub-agent's own steps

Steps and attempts become synthetic spans placed where the turns' spans sit (under the deepest
span all of a step's spans share), so every figure is computed by the same code as for our own
traces. Everything made here is marked with `agenttrace.inferred` (names: traces/inferred.py);
what could not be inferred is said on the task with why (`agenttrace.not_inferred`), never left
as a bare zero or `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agenttrace import semconv as sc
from agenttrace.core.decisions import task_outcome
from agenttrace.traces import members as mb
from agenttrace.traces import turns as tn
from agenttrace.traces.conventions import failed
from agenttrace.traces.index import Key, SpanIndex, key_of
from agenttrace.traces.inferred import (
    ATTEMPT_BOUNDS,
    CALL_BOUNDS,
    DECISIONS,
    OUTCOME,
    RETRIES,
    STEPS,
    TOOL_FAILURES,
    VALIDITY,
)
from agenttrace.traces.span_records import SpanRecord

__all__ = ["infer_structure", "place_foreign_in_our_steps"]

Outcome = sc.AttemptOutcome


@dataclass
class _Task:
    """What one task's reading found, for its attributes."""

    deciders: list[SpanRecord] = field(default_factory=list)  # agent spans holding members of their own
    delegations: list[SpanRecord] = field(default_factory=list)  # sub-agent runs: their own steps are inferred too
    not_inferred: list[str] = field(default_factory=list)


# -- placing steps and attempts ---------------------------------------------------------------
def _chain(index: SpanIndex, span: SpanRecord, root: SpanRecord) -> list[SpanRecord]:
    """Root first, down to `span`."""
    up = index.ancestors(span)
    keys = [key_of(a) for a in up]
    if key_of(root) not in keys:
        return [root, span]
    return [*reversed(up[: keys.index(key_of(root)) + 1]), span]


def _anchor_depth(chains: list[list[SpanRecord]]) -> int:
    """Depth of the deepest span every chain shares that is not itself a member."""
    depth = 0
    while all(depth + 2 < len(c) for c in chains) and len({key_of(c[depth + 1]) for c in chains}) == 1:
        depth += 1
    return depth


class _Placer:
    """Moves one task's turns under synthetic step and attempt spans."""

    def __init__(self, index: SpanIndex, root: SpanRecord, problems: list[str]) -> None:
        self.index, self.root, self.problems = index, root, problems
        self.used: dict[Key, int] = {}  # unit -> step number

    def place(self, n: int, step: list[tn.Turn]) -> str | None:
        """Places the step; else says why it cannot be (its spans are shared with an earlier step)."""
        chains = {key_of(m): _chain(self.index, m, self.root) for t in step for m in t.members}
        depth = _anchor_depth(list(chains.values()))
        anchor = self.index.current(next(iter(chains.values()))[depth])
        attempts: list[tuple[dict[Key, SpanRecord], list[tn.Turn]]] = []  # (units, turns) per attempt
        for t in step:
            units: dict[Key, SpanRecord] = {}
            for m in t.members:
                unit = chains[key_of(m)][depth + 1]
                if self.used.get(key_of(unit), n) != n:
                    why = (f"step {n} shares the span {unit.name!r} with an earlier step: steps from {n} on not "
                           "inferred")
                    self.problems.append(f"{m.source}: task {self.root.name!r}: {why}")
                    return why
                self.used[key_of(unit)] = n
                units[key_of(unit)] = unit
            if attempts and units.keys() & attempts[-1][0].keys():  # one span holds both turns: one attempt
                attempts[-1][0].update(units)
                attempts[-1][1].append(t)
            else:
                attempts.append((units, [t]))
        self._make(n, anchor, attempts, tn.step_outcome_of(step))
        return None

    def _make(self, n: int, anchor: SpanRecord, attempts: list[tuple[dict[Key, SpanRecord], list[tn.Turn]]],
              outcome: sc.StepOutcome) -> None:
        index = self.index
        bounds = [(min(u.start_ns for u in us.values()), max(u.end_ns for u in us.values())) for us, _ in attempts]
        inferred = (STEPS, RETRIES) if len(attempts) > 1 else (STEPS,)
        step_span = index.add_synthetic(
            anchor, f"{anchor.span_id}.step{n}", anchor.span_id, sc.step_span_name(n), bounds[0][0], max(e for _, e in bounds), {
                sc.SEGMENT: sc.Segment.STEP.value, sc.STEP_INDEX: n, sc.STEP_OUTCOME: outcome.value,
                sc.STEP_ATTEMPTS: len(attempts), sc.INFERRED: inferred})
        for i, ((units, turns), (start, end)) in enumerate(zip(attempts, bounds, strict=True), 1):
            attempt = index.add_synthetic(
                step_span, f"{step_span.span_id}.attempt{i}", step_span.span_id, sc.attempt_span_name(i), start, end, {
                    sc.SEGMENT: sc.Segment.ATTEMPT.value, sc.ATTEMPT_INDEX: i, sc.ATTEMPT_OUTCOME: turns[-1].outcome.value,
                    sc.INFERRED: (STEPS, VALIDITY)})
            for u in units.values():
                index.update(index.current(u), parent_id=attempt.span_id)
            for t in turns:
                if t.decision is not None and t.generation is not None:
                    index.with_attributes(index.current(t.generation), {sc.INFERRED_DECISION: t.decision})
        self._adopt(anchor, step_span)

    def _adopt(self, anchor: SpanRecord, step: SpanRecord) -> None:
        """Other children of the anchor that start inside the step (a retrieval, a user's own
        span) move into it, and into the attempt they start in, so no sibling overlaps it."""
        index = self.index
        attempts = [a for a in index.children(step) if a.segment == sc.Segment.ATTEMPT]
        for c in index.children(anchor):
            if c.span_id == step.span_id or c.segment == sc.Segment.STEP or not (step.start_ns <= c.start_ns < step.end_ns):
                continue
            home = next((a for a in attempts if a.start_ns <= c.start_ns < a.end_ns), step)
            index.update(c, parent_id=home.span_id)


# -- the task ---------------------------------------------------------------------------------
def _outcome(root: SpanRecord, steps: list[list[tn.Turn]], task: _Task) -> str | None:
    outcomes = [tn.step_outcome_of(s) for s in steps]
    outcome = task_outcome(failed=failed(root), final_answers=sum(o is sc.StepOutcome.FINAL_ANSWER for o in outcomes),
                           steps=len(steps), last_step=outcomes[-1] if outcomes else None, after_tool_call=None)
    if outcome is None:
        task.not_inferred.append(
            "outcome: the last step ended in a tool call, not an answer, and the agent span records no outcome"
            if steps else "outcome: no step inferred, and the agent span records no outcome")
    return None if outcome is None else outcome.value


def _read(index: SpanIndex, root: SpanRecord, task: _Task) -> tuple[list[tn.Turn], bool]:
    """The task's turns (members.py, turns.py), and whether model call bounds were inferred; says
    on `task` why there are none when there are none."""
    mb.adopt_enclosed(index, root)
    mb.resolve_agents(index, root, task.deciders, task.delegations)
    not_calls = mb.holding_tools(index, index.current(root))
    root = index.current(root)
    members, merged = mb.merge_call_layers(index, root, mb.members(index, root) or [])
    if not members:
        task.not_inferred.append("steps: no model call or tool execution under this agent span")
    elif not any(m.segment == sc.Segment.GENERATION for m in members):
        task.not_inferred.append(
            f"steps: the only LLM span ({not_calls[0].name!r}) holds the tool executions, so it is the agent's run, "
            "not a model call; no model call is recorded" if not_calls else
            "steps: no model call under this agent span, only tool executions (this instrumentation records none): "
            "no attempt or decision to infer")
    else:
        turns = tn.turns(index, root, members)
        return turns, tn.cut_open_calls(index, turns) or merged
    return [], merged


def _attributes(root: SpanRecord, task: _Task, turns: list[tn.Turn], steps: list[list[tn.Turn]], merged: bool) -> dict:
    """What the task span gains: steps, invalid decisions, outcome, agent name, what was inferred
    and what could not be."""
    inferred = ([STEPS, DECISIONS, VALIDITY] if steps else []) + ([CALL_BOUNDS] if merged else [])
    if any(t.reported_failed for t in turns):
        inferred.append(TOOL_FAILURES)
    if any(len(s) > 1 for s in steps):
        inferred.append(RETRIES)
    if steps and not any(t.decision for s in steps for t in s):
        task.not_inferred.append("TTVTC: no attempt held a decision (every model call's reply failed)")
    attrs: dict[str, object] = {sc.STEPS: len(steps),
                                sc.DECISIONS_INVALID: sum(t.outcome is not Outcome.OK for s in steps for t in s)}
    if sc.TASK_OUTCOME not in root.attributes:
        outcome = _outcome(root, steps, task)
        if outcome is not None:
            attrs[sc.TASK_OUTCOME] = outcome
            inferred.append(OUTCOME)
    if len(task.deciders) == 1 and key_of(task.deciders[0]) != key_of(root):  # the task's agent is the one it wraps
        name = task.deciders[0].attributes.get(sc.GEN_AI_AGENT_NAME)
        if isinstance(name, str):
            attrs[sc.GEN_AI_AGENT_NAME] = name
    previous = root.attributes.get(sc.INFERRED)
    attrs[sc.INFERRED] = tuple(dict.fromkeys([*(previous if isinstance(previous, tuple) else ()), *inferred]))
    if task.not_inferred:
        attrs[sc.NOT_INFERRED] = tuple(task.not_inferred)
    return attrs


def infer_structure(index: SpanIndex, root: SpanRecord, foreign: set[Key], problems: list[str]) -> None:
    """Infer the steps of the task rooted at `root` (an agent span, or a sub-agent's run), in
    place, and list on it what was inferred and what could not be; then its sub-agents' steps.
    Nothing is done when the task has steps of ours, or none of its spans is another
    instrumentation's: our own traces are never re-interpreted."""
    members = mb.members(index, root)
    if members is None or (key_of(root) not in foreign and not any(key_of(m) in foreign for m in members)):
        return
    task = _Task()
    turns, merged = _read(index, root, task)
    steps = tn.steps(turns)
    placer = _Placer(index, index.current(root), problems)
    for n, step in enumerate(steps, 1):
        why = placer.place(n, step)
        if why is not None:
            task.not_inferred.append(f"steps: {why}")
            steps = steps[: n - 1]
            break
    task.deciders = [index.current(d) for d in task.deciders]
    root = index.current(root)
    index.with_attributes(root, _attributes(root, task, turns, steps, merged))
    for sub in task.delegations:  # a sub-agent's steps, as our runtime records them inside its run
        infer_structure(index, index.current(sub), foreign, problems)


def place_foreign_in_our_steps(index: SpanIndex, step: SpanRecord, foreign: set[Key]) -> None:
    """A step of ours whose generations (or tools) another library recorded: those spans are the
    step's children, beside the attempts our API opened when its own first span came. Each moves
    into the attempt it starts in, else the next one (which then starts where it did), else a new
    attempt."""
    for c in index.children(step):
        if key_of(c) not in foreign or c.segment not in mb.MEMBERS:
            continue
        attempts = [a for a in index.children(step) if a.segment == sc.Segment.ATTEMPT]
        home = next((a for a in attempts if a.start_ns <= c.start_ns < a.end_ns), None)
        if home is None:
            after = [a for a in attempts if a.start_ns >= c.start_ns]
            if after:
                home = index.with_attributes(after[0], {sc.INFERRED: (ATTEMPT_BOUNDS,)}, start_ns=c.start_ns)
            else:
                n = len(attempts) + 1
                home = index.add_synthetic(step, f"{step.span_id}.attempt{n}", step.span_id, sc.attempt_span_name(n),
                                           c.start_ns, c.end_ns, {
                                               sc.SEGMENT: sc.Segment.ATTEMPT.value, sc.ATTEMPT_INDEX: n,
                                               sc.ATTEMPT_OUTCOME: Outcome.ERROR.value if failed(c) else Outcome.OK.value,
                                               sc.INFERRED: (ATTEMPT_BOUNDS,)})
                step = index.with_attributes(step, {sc.STEP_ATTEMPTS: n})
        index.update(index.current(c), parent_id=home.span_id)
