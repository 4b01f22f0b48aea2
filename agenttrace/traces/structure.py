"""Tasks, steps and attempts where a trace has none of ours (SPANS.md, "Traces from other
instrumentations": Mapping), and attempts for foreign generations inside our own steps.

Other instrumentations record generations and tool executions under an agent span, but no step
or attempt. The rules, in the order they apply:

- a task is the outermost agent span (an agent inside another is a delegation), else the root
  above generations that no agent span holds (a synthetic agent span when that root is the
  generation itself);
- a turn is a generation and the tool executions (and delegations) that follow it under the
  task before the next generation; a turn whose every tool execution failed is a failed attempt
  (a validation error when the instrumentation says the arguments were refused), one whose
  generation failed is an error;
- a failed turn followed by a generation that calls one of the same tools again (or, after a
  failed generation, by any generation) is a retry: the next attempt of the same step;
- the decision moment is the end of the generation whose tool calls then executed without every
  one failing, or that produced the answer (no tool call).

Steps and attempts become synthetic spans placed where the turn's spans sit (under the deepest
span all of a step's spans share), so every figure is computed by the same code as for our own
traces. Everything made here is marked with `agenttrace.inferred`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agenttrace import semconv as sc
from agenttrace.traces.conventions import failed
from agenttrace.traces.index import Key, SpanIndex, key_of
from agenttrace.traces.records import SpanRecord

__all__ = ["INFERRED_FIGURES", "infer_structure", "place_foreign_in_our_steps"]

Outcome = sc.AttemptOutcome
# Figure names a task's `inferred` list uses (the report shows them as they are).
STEPS = "steps and attempts"
RETRIES = "retries"
DECISIONS = "decision moments (TTVTC)"
VALIDITY = "attempt validity"
OUTCOME = "task outcome"
TASK = "task boundary"
ATTEMPT_BOUNDS = "attempt boundaries"
INFERRED_FIGURES = (TASK, STEPS, RETRIES, DECISIONS, VALIDITY, OUTCOME, ATTEMPT_BOUNDS)

_MEMBERS = {sc.Segment.GENERATION, sc.Segment.TOOL, sc.Segment.DELEGATION}
_OURS = {sc.Segment.STEP, sc.Segment.ATTEMPT}
_STEP_OUTCOME = {Outcome.TOOL_ERROR: sc.StepOutcome.ERROR, Outcome.TIMEOUT: sc.StepOutcome.ERROR,
                 Outcome.ERROR: sc.StepOutcome.ERROR, Outcome.VALIDATION_ERROR: sc.StepOutcome.INVALID}
_ASKED_FOR_TOOLS = {"tool_calls", "tool_call", "tool_use", "function_call"}


@dataclass
class _Turn:
    members: list[SpanRecord]
    generation: SpanRecord | None = None
    outcome: Outcome = Outcome.OK
    decision: str | None = None
    failed_tools: set[str] = field(default_factory=set)

    @property
    def tools(self) -> list[SpanRecord]:
        return [m for m in self.members if m.segment != sc.Segment.GENERATION]


def _tool_name(span: SpanRecord) -> str:
    name = span.attributes.get(sc.GEN_AI_TOOL_NAME)
    return name if isinstance(name, str) else span.name


def _asked_for_tools(gen: SpanRecord) -> bool:
    a = gen.attributes
    reasons = a.get(sc.GEN_AI_RESPONSE_FINISH_REASONS)
    if isinstance(reasons, (list, tuple)) and _ASKED_FOR_TOOLS & {str(r) for r in reasons}:
        return True
    calls = a.get(sc.RESPONSE_TOOL_CALLS)
    return isinstance(calls, int) and calls > 0


def _judge(turn: _Turn) -> None:
    """The turn's outcome and decision (module docstring)."""
    gen, tools = turn.generation, turn.tools
    if gen is not None and failed(gen):
        turn.outcome = Outcome.ERROR
        return
    failures = [t for t in tools if failed(t)]
    if tools and len(failures) == len(tools):
        kinds = {t.attributes.get(sc.ERROR_TYPE) for t in failures}
        turn.outcome = Outcome.VALIDATION_ERROR if kinds == {Outcome.VALIDATION_ERROR.value} else Outcome.TOOL_ERROR
        turn.failed_tools = {_tool_name(t) for t in failures}
        return
    if gen is not None:
        turn.decision = "tool_call" if tools or _asked_for_tools(gen) else "final_answer"


def _members(index: SpanIndex, root: SpanRecord) -> list[SpanRecord] | None:
    """Generations, tools and delegations at the top of the task's subtree (not inside one
    another), in start order; None when the task holds steps of ours (nothing to infer)."""
    out: list[SpanRecord] = []
    for s in index.walk(root, into=lambda s: s.segment not in _MEMBERS):
        if s.segment in _OURS:
            return None
        if s.segment in _MEMBERS:
            out.append(s)
    out.sort(key=lambda s: s.start_ns)
    return out


def _turns(members: list[SpanRecord]) -> list[_Turn]:
    turns: list[_Turn] = []
    for m in members:
        if m.segment == sc.Segment.GENERATION or not turns:
            turns.append(_Turn([m], m if m.segment == sc.Segment.GENERATION else None))
        else:
            turns[-1].members.append(m)
    for t in turns:
        _judge(t)
    return turns


def _steps(turns: list[_Turn]) -> list[list[_Turn]]:
    steps: list[list[_Turn]] = []
    for t in turns:
        prev = steps[-1][-1] if steps else None
        retry = prev is not None and t.generation is not None and (
            prev.outcome is Outcome.ERROR
            or (prev.failed_tools and prev.failed_tools & {_tool_name(x) for x in t.tools}))
        if retry:
            steps[-1].append(t)
        else:
            steps.append([t])
    return steps


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

    def place(self, n: int, step: list[_Turn]) -> bool:
        chains = {key_of(m): _chain(self.index, m, self.root) for t in step for m in t.members}
        depth = _anchor_depth(list(chains.values()))
        anchor = self.index.current(next(iter(chains.values()))[depth])
        attempts: list[tuple[dict[Key, SpanRecord], list[_Turn]]] = []  # (units, turns) per attempt
        for t in step:
            units: dict[Key, SpanRecord] = {}
            for m in t.members:
                unit = chains[key_of(m)][depth + 1]
                if self.used.get(key_of(unit), n) != n:
                    self.problems.append(f"{m.source}: task {self.root.name!r}: step {n} shares the span {unit.name!r} "
                                         "with an earlier step; its steps are not inferred")
                    return False
                self.used[key_of(unit)] = n
                units[key_of(unit)] = unit
            if attempts and units.keys() & attempts[-1][0].keys():  # one span holds both turns: one attempt
                attempts[-1][0].update(units)
                attempts[-1][1].append(t)
            else:
                attempts.append((units, [t]))
        self._make(n, anchor, attempts)
        return True

    def _make(self, n: int, anchor: SpanRecord, attempts: list[tuple[dict[Key, SpanRecord], list[_Turn]]]) -> None:
        index = self.index
        last = attempts[-1][1][-1]
        bounds = [(min(u.start_ns for u in us.values()), max(u.end_ns for u in us.values())) for us, _ in attempts]
        outcome = (sc.StepOutcome.FINAL_ANSWER if last.decision == "final_answer" else sc.StepOutcome.TOOL_CALL) \
            if last.outcome is Outcome.OK else _STEP_OUTCOME[last.outcome]
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


def _task_outcome(root: SpanRecord, steps: list[list[_Turn]]) -> str | None:
    if failed(root):
        return sc.TaskOutcome.FAILED.value
    last = steps[-1][-1] if steps else None
    if last is None:
        return None
    if last.outcome is Outcome.OK:
        return sc.TaskOutcome.COMPLETED.value if last.decision == "final_answer" else None
    return sc.TaskOutcome.FAILED.value


def infer_structure(index: SpanIndex, root: SpanRecord, foreign: set[Key], problems: list[str]) -> None:
    """Infer the steps of the task rooted at `root` (an agent span), in place, and list what was
    inferred on it. Nothing is done when the task has steps of ours, or none of its generations
    and tools is another instrumentation's: our own traces are never re-interpreted."""
    members = _members(index, root)
    if not members or not any(key_of(m) in foreign for m in members):
        return
    steps = _steps(_turns(members))
    placer = _Placer(index, root, problems)
    placed = 0
    for n, step in enumerate(steps, 1):
        if not placer.place(n, step):
            break
        placed += 1
    inferred = [STEPS, DECISIONS, VALIDITY]
    if any(len(s) > 1 for s in steps[:placed]):
        inferred.append(RETRIES)
    attrs: dict[str, object] = {sc.STEPS: placed,
                                sc.DECISIONS_INVALID: sum(t.outcome is not Outcome.OK for s in steps[:placed] for t in s)}
    root = index.current(root)
    if sc.TASK_OUTCOME not in root.attributes:
        outcome = _task_outcome(root, steps[:placed])
        if outcome is not None:
            attrs[sc.TASK_OUTCOME] = outcome
            inferred.append(OUTCOME)
    previous = root.attributes.get(sc.INFERRED)
    names = tuple(dict.fromkeys([*(previous if isinstance(previous, tuple) else ()), *inferred]))
    attrs[sc.INFERRED] = names
    index.with_attributes(root, attrs)


def place_foreign_in_our_steps(index: SpanIndex, step: SpanRecord, foreign: set[Key]) -> None:
    """A step of ours whose generations (or tools) another library recorded: those spans are the
    step's children, beside the attempts our API opened when its own first span came. Each moves
    into the attempt it starts in, else the next one (which then starts where it did), else a new
    attempt."""
    for c in index.children(step):
        if key_of(c) not in foreign or c.segment not in _MEMBERS:
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
