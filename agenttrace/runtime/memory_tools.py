"""Memory as the agent uses it: the `remember` and `recall` tools, and the runtime's own recall
before a step. Each store call is a span (SPANS.md, segment memory): `create_memory` or
`search_memory` with the items found or written, their bytes and the store's own time.

A memory file that cannot be used never fails the agent: the span is marked failed with the file
and the reason, the tool answers that memory is unavailable (a normal observation, so the model
goes on without it instead of retrying), and the runtime's own recall adds nothing.

Which namespace a call writes and reads (besides `shared`) is the current task run's, set by the
agent loop with `memory_namespace`; tools run in a copy of the caller's context, so they see it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from agenttrace import semconv as sc
from agenttrace.core.tools import Tool
from agenttrace.errors import MemoryUnavailable
from agenttrace.instrument.operations import memory_span
from agenttrace.runtime.memory import ENGINE, SHARED, MemoryItem, MemoryStore, StoreCall
from agenttrace.telemetry import Telemetry

__all__ = ["Recalled", "memory_namespace", "memory_tools", "recall", "remember", "render_facts"]

_NAMESPACE: ContextVar[str] = ContextVar("agenttrace_memory_namespace", default="agent")
ERROR_UNAVAILABLE = "memory_unavailable"


@contextmanager
def memory_namespace(name: str) -> Iterator[None]:
    """Memory calls inside the block write to (and read from, besides `shared`) `name`."""
    token = _NAMESPACE.set(name)
    try:
        yield
    finally:
        _NAMESPACE.reset(token)


@dataclass(frozen=True)
class Recalled:
    """The facts a search found, best first; `unavailable` says why none could be looked for."""

    items: tuple[MemoryItem, ...] = ()
    unavailable: str | None = None


def _traced(operation: str, call: Callable[[], StoreCall], telemetry: Telemetry | None,
            auto: bool = False) -> StoreCall | str:
    """One store call under its memory span: what it did, or why memory is unavailable (the span
    marked failed)."""
    with memory_span(operation, telemetry=telemetry) as m:
        if m is not None and auto:
            m.span.set_attribute(sc.MEMORY_AUTO, True)
        try:
            done = call()
        except MemoryUnavailable as exc:
            if m is not None:
                m.failed(ERROR_UNAVAILABLE, str(exc))
            return str(exc)
        if m is not None:
            m.record(len(done.items), bytes=done.bytes, store_s=done.store_s, store=ENGINE)
        return done


def recall(store: MemoryStore, query: str, *, limit: int = 3, auto: bool = False,
           telemetry: Telemetry | None = None) -> Recalled:
    """Search the current namespace and `shared` for `query`: a `search_memory` span. `auto`
    marks a search the runtime made on its own (not a tool call)."""
    spaces = (SHARED, _NAMESPACE.get())
    done = _traced(sc.OP_SEARCH_MEMORY, lambda: store.search(query, namespaces=spaces, limit=limit), telemetry, auto)
    return Recalled(unavailable=done) if isinstance(done, str) else Recalled(done.items)


def remember(store: MemoryStore, text: str, *, telemetry: Telemetry | None = None) -> str | None:
    """Store `text` in the current namespace: a `create_memory` span. Returns None, or why
    memory is unavailable."""
    namespace = _NAMESPACE.get()
    done = _traced(sc.OP_CREATE_MEMORY, lambda: store.add(text, namespace=namespace), telemetry)
    return done if isinstance(done, str) else None


def _unavailable(why: str) -> str:
    """The observation a memory tool gives when the store cannot be used: not a failure to retry."""
    return f"Memory is unavailable ({why}). Go on without it."


def render_facts(items: tuple[MemoryItem, ...]) -> str:
    return "\n".join(f"- {i.text}" for i in items)


def memory_tools(store: MemoryStore, *, limit: int = 3) -> list[Tool]:
    """`remember` and `recall` over `store` (run on threads in the caller's context, so their
    memory spans nest under the tool's span and see the task's namespace)."""

    def remember_fact(text: str) -> str:
        why = remember(store, text)
        return "Stored." if why is None else _unavailable(why)

    def recall_facts(query: str, limit: int = limit) -> str:
        found = recall(store, query, limit=limit)
        if found.unavailable is not None:
            return _unavailable(found.unavailable)
        return render_facts(found.items) if found.items else f"Nothing stored matches {query!r}."

    return [
        Tool("remember", "Store a fact in long-term memory.",
             {"type": "object", "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 500}},
              "required": ["text"], "additionalProperties": False},
             remember_fact, isolation="thread"),
        Tool("recall", "Search long-term memory for stored facts.",
             {"type": "object",
              "properties": {"query": {"type": "string", "minLength": 1},
                             "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
              "required": ["query"], "additionalProperties": False},
             recall_facts, isolation="thread"),
    ]
