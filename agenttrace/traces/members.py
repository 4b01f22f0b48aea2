"""What a task of another instrumentation's trace is made of (SPANS.md, "Traces from other
instrumentations"): its *members*, the generations, tool executions and delegations below it
that its steps are inferred from (traces/turns.py, traces/foreign_structure.py).

- Agents inside the task: one whose agent makes no model call of its own outside it only wraps
  it (the same task, transparent like any grouping span: a workflow around the agent, or graph
  nodes a framework marks as agents); one started by an agent that decides itself (calls the
  model itself), or started inside a tool execution, is a delegation: a sub-agent's run. A tool
  whose model calls sit under one child of it and no agent span runs a sub-agent too (that
  child is its run).
- Lost parents: a childless agent or grouping span whose interval holds a later sibling's is that
  sibling's parent, which the instrumentation lost (a context not passed on: OpenLLMetry's
  sub-agent `invoke_agent` beside the work it ran, LangGraph's `call_model` beside its
  `RunnableSequence`): the sibling moves under it, so the two are not read as parallel branches.
- Members: below the task, not inside one another (so a framework's LLM span around the client
  library's counts once) nor inside a delegation. An LLM span that holds tool executions is no
  model call (an agent's run labelled as one). LLM spans that end before their model call does
  (a stream read after the span ended: an event of the span, or an HTTP request beside it, comes
  later) are one call with the grouping span that holds them and nothing else of the task's,
  which covers the request: that span is the generation.
"""

from __future__ import annotations

from agenttrace import semconv as sc
from agenttrace.traces.index import Key, SpanIndex, key_of
from agenttrace.traces.inferred import CALL_BOUNDS, PARENTS, TASK
from agenttrace.traces.span_records import SpanRecord

__all__ = ["MEMBERS", "adopt_enclosed", "holding_tools", "members", "merge_call_layers", "resolve_agents"]

MEMBERS = {sc.Segment.GENERATION, sc.Segment.TOOL, sc.Segment.DELEGATION}
_OURS = {sc.Segment.STEP, sc.Segment.ATTEMPT}


_HOLDERS = {None, sc.Segment.AGENT.value}  # spans that may have lost their children (not a call or a tool)


def adopt_enclosed(index: SpanIndex, root: SpanRecord) -> bool:
    """Moves each sibling a childless agent or grouping span encloses under it (module
    docstring); returns whether any moved."""
    moved = False
    for parent in [root, *list(index.walk(root))]:
        kids = index.children(parent)
        for host in kids:
            if host.segment not in _HOLDERS or index.children(host):
                continue
            for other in kids:
                other = index.current(other)
                if other.span_id != host.span_id and other.parent_id == parent.span_id \
                        and host.start_ns <= other.start_ns and other.end_ns <= host.end_ns \
                        and (host.start_ns, host.end_ns) != (other.start_ns, other.end_ns):
                    index.with_attributes(other, {sc.INFERRED: (PARENTS,)}, parent_id=host.span_id)
                    moved = True
    return moved


def _boundary(index: SpanIndex, agent: SpanRecord) -> tuple[list[SpanRecord], list[SpanRecord]]:
    """(members, nested agent spans) below `agent`, not inside one another."""
    own: list[SpanRecord] = []
    nested: list[SpanRecord] = []
    for s in index.walk(agent, into=lambda s: s.segment not in MEMBERS and s.segment != sc.Segment.AGENT):
        if s.segment == sc.Segment.AGENT:
            nested.append(s)
        elif s.segment in MEMBERS:
            own.append(s)
    return own, nested


def resolve_agents(index: SpanIndex, root: SpanRecord, deciders: list[SpanRecord], delegations: list[SpanRecord]) -> None:
    """Agent spans inside the task: wrappers become transparent, the rest delegations."""
    pending = [root]
    while pending:
        agent = pending.pop()
        own, nested = _boundary(index, agent)
        decides = any(m.segment == sc.Segment.GENERATION for m in own)  # tools alone decide nothing
        if decides:
            deciders.append(agent)
        for b in nested:
            if decides:  # started by an agent that decides itself
                index.with_attributes(b, {sc.SEGMENT: sc.Segment.DELEGATION.value})
            else:  # only wrapped: one task; its members are the task's
                pending.append(index.drop_segment(b))
    runs = (sc.Segment.AGENT, sc.Segment.DELEGATION)
    for s in list(index.walk(index.current(root), into=lambda s: s.segment not in runs)):
        if s.segment == sc.Segment.AGENT:  # inside a tool: a sub-agent's run too
            s = index.with_attributes(s, {sc.SEGMENT: sc.Segment.DELEGATION.value})
        elif s.segment == sc.Segment.TOOL:
            s = _unmarked_run(index, s) or s
        if s.segment == sc.Segment.DELEGATION:
            delegations.append(s)


def _unmarked_run(index: SpanIndex, tool: SpanRecord) -> SpanRecord | None:
    """A tool that runs a sub-agent no agent span marks (model calls below it, under one child
    of the tool: LlamaIndex's agent run is a CHAIN): that child is the sub-agent's run."""
    kids = index.children(tool)
    holders = [k for k in kids if k.segment is None and any(d.segment == sc.Segment.GENERATION for d in index.walk(k))]
    if len(holders) != 1 or any(d.segment in (sc.Segment.AGENT, sc.Segment.DELEGATION) for d in index.walk(tool)):
        return None
    return index.with_attributes(holders[0], {sc.SEGMENT: sc.Segment.DELEGATION.value, sc.INFERRED: (TASK,)})


def members(index: SpanIndex, root: SpanRecord) -> list[SpanRecord] | None:
    """Generations, tools and delegations below the task (not inside one another), in start
    order; None when the task holds steps of ours (nothing to infer)."""
    out: list[SpanRecord] = []
    for s in index.walk(root, into=lambda s: s.segment not in MEMBERS):
        if s.segment in _OURS:
            return None
        if s.segment in MEMBERS:
            out.append(s)
    out.sort(key=lambda s: s.start_ns)
    return out


def holding_tools(index: SpanIndex, root: SpanRecord) -> list[SpanRecord]:
    """Generation spans below the task with a tool execution below them: not one model call.
    Their segment is dropped (they become grouping spans); returned for the task's notes."""
    found = []
    for s in list(index.walk(root, into=lambda s: s.segment != sc.Segment.DELEGATION)):
        s = index.current(s)
        if s.segment == sc.Segment.GENERATION and any(d.segment == sc.Segment.TOOL for d in index.walk(s)):
            found.append(index.drop_segment(s))
    return found


def _ends_early(index: SpanIndex, gen: SpanRecord, parent: SpanRecord) -> bool:
    """The span ended before its model call did: one of its events, or a network call beside it
    (the request itself), comes after its end."""
    if any(e.time_ns > gen.end_ns for e in gen.events):
        return True
    return any(c.segment == sc.Segment.NETWORK and c.end_ns > gen.end_ns and c.start_ns >= gen.start_ns
               for c in index.children(parent))


def merge_call_layers(index: SpanIndex, root: SpanRecord, members: list[SpanRecord]) -> tuple[list[SpanRecord], bool]:
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
            index.drop_segment(g)
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
