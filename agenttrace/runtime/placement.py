"""Whether a worker process can run a tool's function, decided before the call.

A worker (multiprocessing's 'forkserver' context) is a fresh interpreter that gets the function by
reference: its module is imported by name. The caller's `__main__` is the exception, and
multiprocessing treats it by how it was started:

- a script (`python script.py`, or `python -m module`): every worker runs it again, as
  `__mp_main__`. Safe only behind an `if __name__ == "__main__":` guard; without one each worker
  would run the whole script (start the agent, call the model) and every tool call would fail.
  A script read from standard input cannot be read again at all.
- `python -c`, an interactive session, `python -m package` (its `__main__.py`): not run again,
  so what it defines does not exist in a worker ("Can't get attribute").

So a function runs in a worker only when every name it refers to in `__main__` (itself, a
partial's arguments, their classes) is defined at the top level of a guarded script, and no
function does when the worker would run an unguarded script again. The script's source is read
with `ast` once per process; no source means no worker. Everything else runs on a thread.
"""

from __future__ import annotations

import ast
import io
import logging
import os
import pickle
import sys
import threading
import types
from dataclasses import dataclass
from multiprocessing import process
from pathlib import Path
from typing import Any

from agenttrace.core.tools import Tool

__all__ = ["MainModule", "can_run_in_worker", "has_main_guard", "main_module", "top_level_names", "worker_refusal"]

logger = logging.getLogger(__name__)
_told: set[tuple[str, str]] = set()  # (tool, reason) already logged
_told_lock = threading.Lock()


@dataclass(frozen=True)
class MainModule:
    """What a worker process makes of the caller's `__main__`."""

    label: str  # how a message names it: "the script /x/y.py", "`python -c` code"
    defines: frozenset[str]  # names a worker's copy of it defines at top level (none when not run again)
    refusal: str | None = None  # why no function may run in a worker (running it again is unsafe)


def can_run_in_worker(tool: Tool) -> bool:
    """Whether a worker process can run `tool`'s function; when not, the reason is logged (a
    warning, once per tool and reason) and the call belongs on a thread."""
    why = worker_refusal(tool.function)
    if why is None:
        return True
    with _told_lock:
        first = (tool.name, why) not in _told
        _told.add((tool.name, why))
    if first:
        logger.warning("tool %r runs on a thread, not in a worker process (a timeout returns control "
                       "but cannot stop it): %s", tool.name, why)
    return False


def worker_refusal(function: Any) -> str | None:
    """Why a worker process cannot run `function` (a sentence to log), or None when it can.

    Only the caller's `__main__` is checked (the one module a worker does not import by name); a
    function that does not pickle at all is the Tool's own check (core/tools.py).
    """
    main = main_module()
    if main.refusal is not None:
        return main.refusal
    missing = sorted(n for n in _main_references(function) if n.split(".")[0] not in main.defines)
    if missing:
        return (f"{missing[0]} is defined in {main.label}, which a worker process cannot import "
                "(define it in a module, or at the top level of a script with an "
                "`if __name__ == '__main__':` guard)")
    return None


_cache: dict[tuple[int, str | None, str | None], MainModule] = {}
_cache_lock = threading.Lock()


def main_module() -> MainModule:
    """The caller's `__main__` as a worker sees it, worked out once per main module."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    key = (id(main), getattr(main, "__file__", None), getattr(spec, "name", None))
    with _cache_lock:
        found = _cache.get(key)
        if found is None:
            found = _cache[key] = _describe(main)
    return found


def _describe(main: types.ModuleType | None) -> MainModule:
    """multiprocessing.spawn's own choice (get_preparation_data, prepare), read from this side."""
    spec_name = getattr(getattr(main, "__spec__", None), "name", None)
    if spec_name is not None:  # started with -m
        if spec_name == "__main__" or spec_name.endswith(".__main__"):
            return MainModule(f"the package's {spec_name.replace('.', '/')}.py", frozenset())
        origin = getattr(main.__spec__, "origin", None)  # type: ignore[union-attr]
        return _rerun_script(f"the module {spec_name} (run with -m)", origin)
    path = getattr(main, "__file__", None)
    if path is None:
        return MainModule("`python -c` code or an interactive session", frozenset())
    if path == "<stdin>":
        return MainModule("a script read from standard input", frozenset(), refusal=(
            "the script was read from standard input, which a worker process cannot read again "
            "(save it to a file with an `if __name__ == '__main__':` guard to run tools in workers)"))
    if not os.path.isabs(path) and process.ORIGINAL_DIR is not None:
        path = os.path.join(process.ORIGINAL_DIR, path)
    path = os.path.normpath(path)
    if Path(path).stem == "ipython":  # multiprocessing leaves IPython's launcher alone
        return MainModule("an IPython session", frozenset())
    return _rerun_script(f"the script {path}", path)


def _rerun_script(label: str, path: str | None) -> MainModule:
    """A main module every worker runs again: usable when its source has the guard."""
    try:
        tree = ast.parse(Path(path).read_bytes()) if path else None
    except (OSError, SyntaxError, ValueError):
        tree = None
    if tree is None:
        return MainModule(label, frozenset(), refusal=(
            f"{label} cannot be read, and a worker process would have to run it again"))
    if not has_main_guard(tree):
        return MainModule(label, frozenset(), refusal=(
            f"{label} has no `if __name__ == '__main__':` guard, so a worker process would run all "
            "of it again (add the guard to run tools in workers, where a timeout stops them)"))
    return MainModule(label, top_level_names(tree))


def _is_main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":` (either side of the ==)."""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    test = node.test
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    texts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and texts == ["__main__"]


def has_main_guard(tree: ast.Module) -> bool:
    """Whether the module's top level has an `if __name__ == "__main__":` block."""
    return any(_is_main_guard(node) for node in tree.body)


def top_level_names(tree: ast.Module) -> frozenset[str]:
    """Names the module binds when imported under another name (as a worker runs it): its
    top-level definitions, assignments and imports, also inside top-level `if`/`try`/`with`
    blocks, but not inside the `__main__` guard."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if _is_main_guard(node):
                continue
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            for field in ("body", "orelse", "finalbody"):
                if isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)) and hasattr(node, field):
                    visit(getattr(node, field))
            for handler in getattr(node, "handlers", []):
                visit(handler.body)

    visit(tree.body)
    return frozenset(names)


class _MainFinder(pickle.Pickler):
    """Pickles into nothing, noting each function and class it refers to in `__main__`."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL)
        self.found: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)) and getattr(obj, "__module__", None) == "__main__":
            self.found.add(obj.__qualname__)
        return NotImplemented  # pickled as usual


def _main_references(function: Any) -> set[str]:
    """The qualified names in `__main__` that pickling `function` refers to (what a worker must
    find there)."""
    finder = _MainFinder()
    try:
        finder.dump(function)
    except Exception:  # does not pickle: not this module's question (the Tool checked)
        return set()
    return finder.found
