"""Turning on every installed instrumentation, through its entry point: shared by the child
bootstrap of `agenttrace run` (sitecustomize.py imports this by its top-level name) and by
`agenttrace.profile()` (which imports it under the package). Standard library and OpenTelemetry
only, for the same reason as sitecustomize.py: the program's environment is not ours.

Each `opentelemetry_instrumentor` entry point whose library is installed is instrumented with the
given provider by its own `instrument()`: nothing is patched by us. Its class is loaded at once
(to learn what it instruments); `instrument()` runs when the program first imports a library it
instruments (a finder on sys.meta_path sees the import, lets it run, then instruments), or at
once if one is imported already: instrumenting imports the library, and a program that never
uses openai-agents should not pay the second and a half importing it takes. Frameworks with a
public switch and no entry point (NATIVE) are turned on the same way.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

DISABLED_ENV = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"  # honoured as opentelemetry-instrument does
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_INSTRUMENTS = re.compile(r"""extra\s*==\s*['"]instruments(-any)?['"]""")

_log = logging.getLogger("agenttrace.bootstrap")


@dataclass
class Instrumented:
    """What `instrument_installed` did, by entry point (`name (module:Class)`). `waiting` ones are
    turned on when the program imports their library; the lists are updated as that happens."""

    on: list[str] = field(default_factory=list)  # instrumented with the given provider
    waiting: list[str] = field(default_factory=list)  # library installed, not imported yet
    already: list[str] = field(default_factory=list)  # instrumented before we came (left as they were)
    skipped: list[str] = field(default_factory=list)  # no library it instruments is installed, or disabled
    conflicts: list[str] = field(default_factory=list)  # a version the instrumentation does not cover
    failed: list[str] = field(default_factory=list)  # raised while loading or instrumenting (logged)


def _entry_points(group: str) -> list[Any]:
    from importlib.metadata import entry_points

    eps = entry_points()
    return list(eps.select(group=group) if hasattr(eps, "select") else eps.get(group, []))  # 3.9's dict form


def declared_libraries(dist: Any, instrumentor: Any) -> list[str]:
    """The distributions an instrumentation says it instruments: its package's `instruments` /
    `instruments-any` extras and its instrumentor's `instrumentation_dependencies()`. Both count:
    they differ (OpenLLMetry's LangChain instrumentation names `langchain` in its package and
    `langchain-core` in its instrumentor; a LangGraph app has only the second)."""
    names = [m.group(1) for req in getattr(dist, "requires", None) or []
             if _INSTRUMENTS.search(req) and (m := _REQUIREMENT.match(req))]
    for req in instrumentor.instrumentation_dependencies() or ():
        match = _REQUIREMENT.match(str(req))
        if match:
            names.append(match.group(1))
    return list(dict.fromkeys(names))


def installed(names: Iterable[str]) -> list[Any]:
    """The installed distributions among `names`."""
    from importlib.metadata import PackageNotFoundError, distribution

    found = []
    for name in names:
        try:
            found.append(distribution(name))
        except PackageNotFoundError:
            continue
    return found


def top_level_modules(dist: Any) -> set[str]:
    """The modules to watch for a distribution's first import: its top-level modules and
    packages, and below a namespace package (a folder with no `__init__.py`, e.g. `llama_index`
    of llama-index-core, `google` of google-adk) its regular packages (`llama_index.core`),
    which are what an import of its code executes. From its RECORD, else top_level.txt."""
    files = [p.parts for p in dist.files or [] if p.parts and p.parts[0].isidentifier()]
    if not files:
        text = dist.read_text("top_level.txt") or ""
        return {line.strip() for line in text.splitlines() if line.strip().isidentifier()}
    packages = {parts[:-1] for parts in files if parts[-1] == "__init__.py"}
    names = set()
    for parts in files:
        if len(parts) == 1:
            if parts[0].endswith(".py"):
                names.add(parts[0][:-3])
            continue
        # the shallowest regular package holding this file (a namespace package holds no code)
        depth = next((d for d in range(1, len(parts)) if parts[:d] in packages), 0)
        if depth and all(p.isidentifier() for p in parts[:depth]):
            names.add(".".join(parts[:depth]))
    return names


def instrument_installed(provider: Any, *, disabled: Iterable[str] | None = None, lazy: bool = True) -> Instrumented:
    """Instrument, with `provider`, every `opentelemetry_instrumentor` entry point whose library
    is installed: when the program first imports a library it instruments (`lazy`), else now.

    Each instrumentor class is loaded (cheap, mostly) to learn what it instruments; `instrument()`
    then runs the instrumentor's own version check (BaseInstrumentor against its
    `instrumentation_dependencies()`). opentelemetry-instrument checks the package's `instruments`
    extra instead, which can name more: OpenInference's LlamaIndex names a multi-modal package
    agents rarely install, OpenLLMetry's LangChain names `langchain` where LangGraph apps have only
    langchain-core, and it skips both. Failures are logged, never raised."""
    if disabled is None:
        disabled = [n.strip() for n in os.environ.get(DISABLED_ENV, "").split(",") if n.strip()]
    disabled = set(disabled)
    done = Instrumented()
    seen: set[str] = set()
    for ep in _entry_points("opentelemetry_instrumentor"):
        label = f"{ep.name} ({ep.value})"
        if ep.value in seen:  # the same class listed twice (two dist-info folders of one package)
            continue
        seen.add(ep.value)
        if "*" in disabled or ep.name in disabled:
            done.skipped.append(label)
            continue
        try:
            instrumentor = ep.load()()
            declared = declared_libraries(getattr(ep, "dist", None), instrumentor)
        except ModuleNotFoundError as exc:  # its library (or a module it needs) is not installed
            done.skipped.append(label)
            _log.debug("agenttrace: %s skipped: %s", label, exc)
            continue
        except Exception as exc:  # telemetry never breaks the program
            done.failed.append(label)
            _log.warning("agenttrace: loading %s failed (%s: %s); the program runs on without it",
                         label, type(exc).__name__, exc)
            continue
        if getattr(instrumentor, "is_instrumented_by_opentelemetry", False):
            done.already.append(label)
            continue
        libraries = installed(declared)
        if declared and not libraries:
            done.skipped.append(label)
            continue
        modules = set().union(*(top_level_modules(d) for d in libraries))
        turn_on = _once(lambda _module, inst=instrumentor, label=label: _instrument(inst, label, provider, done))
        if lazy and modules:
            done.waiting.append(label)
            after_import(modules, turn_on)
        else:
            turn_on(None)
    return done


def _instrument(instrumentor: Any, label: str, provider: Any, done: Instrumented) -> None:
    if label in done.waiting:
        done.waiting.remove(label)
    if getattr(instrumentor, "is_instrumented_by_opentelemetry", False) or _instrumenting(instrumentor):
        # the program turned it on itself (with its own provider), or is doing so now: its
        # instrument() imported the library, which is what called us; a second one would wrap twice
        done.already.append(label)
        return
    try:
        from opentelemetry.instrumentation.dependencies import DependencyConflictError
    except ImportError:  # no opentelemetry-instrumentation: no BaseInstrumentor to raise it either
        DependencyConflictError = ()  # type: ignore[assignment,misc]  # noqa: N806
    try:
        instrumentor.instrument(tracer_provider=provider, raise_exception_on_conflict=True)
    except DependencyConflictError as exc:
        done.conflicts.append(label)
        _log.info("agenttrace: %s not turned on: %s", label, exc)
        return
    except Exception as exc:  # telemetry never breaks the program
        done.failed.append(label)
        _log.warning("agenttrace: instrumenting %s failed (%s: %s); the program runs on without it",
                     label, type(exc).__name__, exc)
        return
    # an older BaseInstrumentor (no raise_exception_on_conflict) logs a conflict and returns
    (done.on if getattr(instrumentor, "is_instrumented_by_opentelemetry", True) else done.conflicts).append(label)


def _instrumenting(instrumentor: Any) -> bool:
    """True when this thread is inside `instrumentor.instrument()` (the frames up the stack)."""
    code = getattr(getattr(type(instrumentor), "instrument", None), "__code__", None)
    frame = sys._getframe(1) if hasattr(sys, "_getframe") else None
    while frame is not None:
        if frame.f_code is code and frame.f_locals.get("self") is instrumentor:
            return True
        frame = frame.f_back
    return False


def _once(fn: Callable[[Any], None]) -> Callable[[Any], None]:
    """`fn` on the first call only (an instrumentation watching two libraries, e.g. httpx and httpx2)."""
    lock, called = threading.Lock(), []

    def call(module: Any) -> None:
        with lock:
            if called:
                return
            called.append(True)
        fn(module)

    return call


# -- frameworks' own switches ----------------------------------------------------------------
def _pydantic_ai(provider: Any) -> Callable[[Any], None]:
    def switch_on(module: Any) -> None:
        from pydantic_ai.models.instrumented import InstrumentationSettings

        module.Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))

    return switch_on


# Frameworks with a public tracing switch and no instrumentor entry point: module -> switch.
# AutoGen (autogen-core's runtime, agentchat's agents and tools) and Google ADK need none: they
# take their tracer from the global provider when they start a span.
NATIVE: dict[str, Callable[[Any], Callable[[Any], None]]] = {"pydantic_ai": _pydantic_ai}


def enable_native(provider: Any) -> list[str]:
    """Turn on the native tracing of the installed frameworks in NATIVE: now if the module is
    imported, else right after the program first imports it. Returns the modules found."""
    found = []
    for module, make in NATIVE.items():
        if module in sys.modules or importlib.util.find_spec(module) is not None:
            after_import({module}, _guarded(module, make(provider)))
            found.append(module)
    return found


def _guarded(module: str, fn: Callable[[Any], None]) -> Callable[[Any], None]:
    def call(mod: Any) -> None:
        try:
            fn(mod)
        except Exception as exc:
            _log.warning("agenttrace: turning on %s's tracing failed (%s: %s); it runs untraced",
                         module, type(exc).__name__, exc)

    return call


# -- after an import -------------------------------------------------------------------------
def after_import(names: set[str], then: Callable[[Any], None]) -> None:
    """Call `then(module)` right after the program's first import of any of `names` (full module
    names) has run, or now if one is imported already."""
    loaded = next((sys.modules[n] for n in names if n in sys.modules), None)
    if loaded is not None:
        then(loaded)
        return
    with _WATCHER.lock:
        for name in names:
            _WATCHER.waiting.setdefault(name, []).append(then)
        if _WATCHER not in sys.meta_path:
            sys.meta_path.insert(0, _WATCHER)


class _Watcher:
    """A meta-path finder that lets the normal import of a watched module happen (the finders
    after it find it), then calls what waits for it. The module keeps its own loader."""

    def __init__(self) -> None:
        self.waiting: dict[str, list[Callable[[Any], None]]] = {}
        self.lock = threading.Lock()

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        with self.lock:
            then = self.waiting.pop(fullname, None)
        if not then:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):  # a namespace package: no code to follow
            return spec
        spec.loader = _ThenCall(spec.loader, then)
        return spec


_WATCHER = _Watcher()


class _ThenCall:
    """Runs the real loader, puts it back on the module, then calls each of `then`; other
    attributes (resource readers, `get_code`) are the real loader's."""

    def __init__(self, loader: Any, then: list[Callable[[Any], None]]) -> None:
        self._loader = loader
        self._then = then

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        try:
            self._loader.exec_module(module)
        finally:
            module.__loader__ = self._loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._loader
        for then in self._then:
            then(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
