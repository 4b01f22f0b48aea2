"""Tasks, steps and attempts where a trace has none of ours (SPANS.md, "Traces from other
instrumentations"), and attempts for foreign generations inside our own steps.

Frameworks put their model calls and tool executions (a task's *members*) under layers of their
own: workflow, turn, step, node and chain spans, an agent span around the real agent. None of
those layers decides anything, so the structure comes from the members alone, in time order,
at any depth. The rules, in the order they apply to one task (the outermost agent span, or the
root above generations no agent holds: traces/normalise.py finds them):

- agents inside the task: one whose agent holds no member of its own outside it only wraps it
  (the same task, transparent like any grouping span); one started by an agent that decides
  itself is a delegation (its run is not the task's members, its time the step's delegation);
- members: generations, tool executions and delegations below the task, not inside one another
  (so a framework's LLM span around the client library's counts once) nor inside a delegation;
  LLM spans that end before their model call does (a stream read after the span ended: an event
  of the span, or an HTTP request beside it, comes later) are one call with the grouping span
  that holds them and nothing else of the task's, which covers the request: it is the generation;
- a turn is a generation and the members that follow it before the next generation; it fails
  when its generation failed (`error`), when every tool execution failed (`tool_error`, or
  `validation_error` when the instrumentation says the arguments were refused), or when a
  grouping span around its generation failed with no tool execution under it (the framework's
  own check refused the call: `validation_error`); a turn that holds answers when it calls no
  tool, or calls a tool frameworks answer through (smolagents' `final_answer`);
- steps follow our runtime's decision table (agenttrace.decisions): the turn after a failed one
  retries its step; the decision moment is the end of the generation of a turn that held;
- the task's outcome too (`decisions.task_outcome`): unknown after a tool call, since no span
  says whether the run meant to stop there.

Steps and attempts become synthetic spans placed where the turns' spans sit (under the deepest
span all of a step's spans share), so every figure is computed by the same code as for our own
traces. Everything made here is marked with `agenttrace.inferred`; what could not be inferred is
said on the task with why (`agenttrace.not_inferred`), never left as a bare zero or `unknown`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agenttrace import semconv as sc
from agenttrace.decisions import is_retried, step_outcome, task_outcome
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
CALL_BOUNDS = "model call boundaries"
INFERRED_FIGURES = (TASK, STEPS, RETRIES, DECISIONS, VALIDITY, OUTCOME, ATTEMPT_BOUNDS, CALL_BOUNDS)

_MEMBERS = {sc.Segment.GENERATION, sc.Segment.TOOL, sc.Segment.DELEGATION}
_OURS = {sc.Segment.STEP, sc.Segment.ATTEMPT}
_ASKED_FOR_TOOLS = {"tool_calls", "tool_call", "tool_use", "function_call"}
# Tools a framework calls to give its answer: a call of one is the final answer, not a tool call.
ANSWER_TOOLS = frozenset({"final_answer"})


@dataclass
class _Turn:
    members: list[SpanRecord]
    generation: SpanRecord | None = None
    outcome: Outcome = Outcome.OK
    decision: str | None = None

    @property
    def tools(self) -> list[SpanRecord]:
        return [m for m in self.members if m.segment != sc.Segment.GENERATION]


@dataclass
class _Task:
    """What one task's reading found, for its attributes."""

    members: list[SpanRecord] = field(default_factory=list)
    deciders: list[SpanRecord] = field(default_factory=list)  # agent spans holding members of their own
    not_inferred: list[str] = field(default_factory=list)


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


# -- agents inside a task ---------------------------------------------------------------------
def _boundary(index: SpanIndex, agent: SpanRecord) -> tuple[list[SpanRecord], list[SpanRecord]]:
    """(members, nested agent spans) below `agent`, not inside one another."""
    own: list[SpanRecord] = []
    nested: list[SpanRecord] = []
    for s in index.walk(agent, into=lambda s: s.segment not in _MEMBERS and s.segment != sc.Segment.AGENT):
        if s.segment == sc.Segment.AGENT:
            nested.append(s)
        elif s.segment in _MEMBERS:
            own.append(s)
    return own, nested


def _resolve_agents(index: SpanIndex, root: SpanRecord, task: _Task) -> None:
    """Agent spans inside the task: wrappers become transparent, the rest delegations."""
    pending = [root]
    while pending:
        agent = pending.pop()
        own, nested = _boundary(index, agent)
        if own:
            task.deciders.append(agent)
        for b in nested:
            if own:  # started by an agent that decides itself
                index.with_attributes(b, {sc.SEGMENT: sc.Segment.DELEGATION.value})
            else:  # only wrapped: one task; its members are the task's
                attrs = {k: v for k, v in index.current(b).attributes.items() if k != sc.SEGMENT}
                index.update(b, attributes=attrs)
                pending.append(index.current(b))
    for s in list(index.walk(index.current(root))):  # agents inside tools and delegations: delegations too
        if s.segment == sc.Segment.AGENT:
            index.with_attributes(s, {sc.SEGMENT: sc.Segment.DELEGATION.value})


def _members(index: SpanIndex, root: SpanRecord) -> list[SpanRecord] | None:
    """Generations, tools and delegations below the task (not inside one another), in start
    order; None when the task holds steps of ours (nothing to infer)."""
    out: list[SpanRecord] = []
    for s in index.walk(root, into=lambda s: s.segment not in _MEMBERS):
        if s.segment in _OURS:
            return None
        if s.segment in _MEMBERS:
            out.append(s)
    out.sort(key=lambda s: s.start_ns)
    return out


def _ends_early(index: SpanIndex, gen: SpanRecord, parent: SpanRecord) -> bool:
    """The span ended before its model call did: one of its events, or a network call beside it
    (the request itself), comes after its end."""
    if any(e.time_ns > gen.end_ns for e in gen.events):
        return True
    return any(c.segment == sc.Segment.NETWORK and c.end_ns > gen.end_ns and c.start_ns >= gen.start_ns
               for c in index.children(parent))


def _merge_call_layers(index: SpanIndex, root: SpanRecord, members: list[SpanRecord]) -> tuple[list[SpanRecord], bool]:
    """Generations whose grouping parent holds only them, one of which ended early (module
    docstring): the parent becomes the one generation, with the reply's attributes; the layers
    under it stay as spans of no segment. Returns the members and whether any merge was made."""
    by_parent: dict[Key, list[SpanRecord]] = {}
    for m in members:
        parent = index.parent(m)
        if m.segment == sc.Segment.GENERATION and parent is not None and key_of(parent) != key_of(root) \
                and parent.segment is None:
            by_parent.setdefault(key_of(parent), []).append(m)
    merged: set[Key] = set()
    out_of: dict[Key, SpanRecord] = {}
    for key, gens in by_parent.items():
        parent = index.get(key)
        assert parent is not None
        holds = [m for m in members if key in {key_of(a) for a in index.ancestors(m)}]
        if len(holds) != len(gens) or not any(_ends_early(index, g, parent) for g in gens):
            continue
        reply = max(gens, key=lambda g: (_replied(g), g.end_ns))
        attrs = {k: v for k, v in reply.attributes.items() if k != sc.INFERRED}
        attrs[sc.INFERRED] = (CALL_BOUNDS,)
        out_of[key] = index.with_attributes(parent, attrs)
        for g in gens:
            index.update(g, attributes={k: v for k, v in index.current(g).attributes.items() if k != sc.SEGMENT})
            merged.add(key_of(g))
    if not out_of:
        return members, False
    kept = [m for m in members if key_of(m) not in merged] + list(out_of.values())
    kept.sort(key=lambda s: s.start_ns)
    return kept, True


def _replied(gen: SpanRecord) -> bool:
    """The span holds the model's reply (an output, a finish reason), not just the request."""
    return any(k.startswith(("llm.output_messages", sc.GEN_AI_RESPONSE_FINISH_REASONS, "llm.finish_reason",
                             "gen_ai.output")) for k in gen.attributes)


# -- turns and steps --------------------------------------------------------------------------
def _refused_by_framework(index: SpanIndex, root: SpanRecord, gen: SpanRecord, members: list[SpanRecord]) -> bool:
    """A grouping span around `gen` (below the task) failed, and no tool execution ran under it."""
    for a in index.ancestors(gen):
        if key_of(a) == key_of(root):
            return False
        if failed(a) and a.segment is None:
            under = {key_of(a)}
            if not any(m.segment != sc.Segment.GENERATION and under & {key_of(x) for x in index.ancestors(m)}
                       for m in members):
                return True
    return False


def _judge(turn: _Turn, refused: bool) -> None:
    """The turn's outcome and decision (module docstring)."""
    gen, tools = turn.generation, turn.tools
    if gen is not None and failed(gen):
        turn.outcome = Outcome.ERROR
        return
    answers = [t for t in tools if tool_name(t) in ANSWER_TOOLS and not failed(t)]
    calls = [t for t in tools if tool_name(t) not in ANSWER_TOOLS]
    failures = [t for t in calls if failed(t)]
    if calls and len(failures) == len(calls) and not answers:
        kinds = {t.attributes.get(sc.ERROR_TYPE) for t in failures}
        turn.outcome = Outcome.VALIDATION_ERROR if kinds == {Outcome.VALIDATION_ERROR.value} else Outcome.TOOL_ERROR
        return
    if refused and not tools:
        turn.outcome = Outcome.VALIDATION_ERROR
        return
    if gen is not None:
        turn.decision = "final_answer" if answers or not (calls or _asked_for_tools(gen)) else "tool_call"


def _turns(index: SpanIndex, root: SpanRecord, members: list[SpanRecord]) -> list[_Turn]:
    turns: list[_Turn] = []
    for m in members:
        if m.segment == sc.Segment.GENERATION or not turns:
            turns.append(_Turn([m], m if m.segment == sc.Segment.GENERATION else None))
        else:
            turns[-1].members.append(m)
    for t in turns:
        refused = t.generation is not None and _refused_by_framework(index, root, t.generation, members)
        _judge(t, refused)
    return turns


def _steps(turns: list[_Turn]) -> list[list[_Turn]]:
    steps: list[list[_Turn]] = []
    for t in turns:
        if steps and t.generation is not None and is_retried(steps[-1][-1].outcome):
            steps[-1].append(t)
        else:
            steps.append([t])
    return steps


def _step_outcome(step: list[_Turn]) -> sc.StepOutcome:
    last = step[-1]
    return step_outcome(last.outcome, final_answer=last.decision == "final_answer")


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

    def place(self, n: int, step: list[_Turn]) -> str | None:
        """Places the step; else says why it cannot be (its spans are shared with an earlier step)."""
        chains = {key_of(m): _chain(self.index, m, self.root) for t in step for m in t.members}
        depth = _anchor_depth(list(chains.values()))
        anchor = self.index.current(next(iter(chains.values()))[depth])
        attempts: list[tuple[dict[Key, SpanRecord], list[_Turn]]] = []  # (units, turns) per attempt
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
        self._make(n, anchor, attempts, _step_outcome(step))
        return None

    def _make(self, n: int, anchor: SpanRecord, attempts: list[tuple[dict[Key, SpanRecord], list[_Turn]]],
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
def _outcome(root: SpanRecord, steps: list[list[_Turn]], task: _Task) -> str | None:
    outcomes = [_step_outcome(s) for s in steps]
    outcome = task_outcome(failed=failed(root), final_answers=sum(o is sc.StepOutcome.FINAL_ANSWER for o in outcomes),
                           steps=len(steps), last_step=outcomes[-1] if outcomes else None, after_tool_call=None)
    if outcome is None:
        task.not_inferred.append(
            "outcome: the last step ended in a tool call, not an answer, and the agent span records no outcome"
            if steps else "outcome: no step inferred, and the agent span records no outcome")
    return None if outcome is None else outcome.value


def infer_structure(index: SpanIndex, root: SpanRecord, foreign: set[Key], problems: list[str]) -> None:
    """Infer the steps of the task rooted at `root` (an agent span), in place, and list on it
    what was inferred and what could not be. Nothing is done when the task has steps of ours,
    or none of its spans is another instrumentation's: our own traces are never re-interpreted."""
    members = _members(index, root)
    if members is None or (key_of(root) not in foreign and not any(key_of(m) in foreign for m in members)):
        return
    task = _Task()
    _resolve_agents(index, root, task)
    members = _members(index, index.current(root)) or []
    root = index.current(root)
    members, merged = _merge_call_layers(index, root, members)
    steps = _steps(_turns(index, root, members)) if members else []
    if not members:
        task.not_inferred.append("steps: no model call or tool execution under this agent span")
    placer = _Placer(index, root, problems)
    placed = 0
    for n, step in enumerate(steps, 1):
        why = placer.place(n, step)
        if why is not None:
            task.not_inferred.append(f"steps: {why}")
            break
        placed += 1
    steps = steps[:placed]
    inferred = ([STEPS, DECISIONS, VALIDITY] if steps else []) + ([CALL_BOUNDS] if merged else [])
    if any(len(s) > 1 for s in steps):
        inferred.append(RETRIES)
    if steps and not any(t.decision for s in steps for t in s):
        task.not_inferred.append("TTVTC: no attempt held a decision (every model call's reply failed)")
    attrs: dict[str, object] = {sc.STEPS: placed, sc.DECISIONS_INVALID: sum(t.outcome is not Outcome.OK for s in steps for t in s)}
    root = index.current(root)
    if sc.TASK_OUTCOME not in root.attributes:
        outcome = _outcome(root, steps, task)
        if outcome is not None:
            attrs[sc.TASK_OUTCOME] = outcome
            inferred.append(OUTCOME)
    deciders = [index.current(d) for d in task.deciders]
    if len(deciders) == 1 and key_of(deciders[0]) != key_of(root):  # the task's agent is the one it wraps
        name = deciders[0].attributes.get(sc.GEN_AI_AGENT_NAME)
        if isinstance(name, str):
            attrs[sc.GEN_AI_AGENT_NAME] = name
    previous = root.attributes.get(sc.INFERRED)
    attrs[sc.INFERRED] = tuple(dict.fromkeys([*(previous if isinstance(previous, tuple) else ()), *inferred]))
    if task.not_inferred:
        attrs[sc.NOT_INFERRED] = tuple(task.not_inferred)
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
