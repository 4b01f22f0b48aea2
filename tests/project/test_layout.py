"""The layout holds (README, "Architecture"): every package installed under the project's own
name, no import circle and each stage importing only the torch-free core and the stages before it
(every import counts: module-level, function-level, `TYPE_CHECKING`), the public API imported
lazily, no oversized module, and the export path free of torch."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "agenttrace"
EXAMPLES = {"agenttrace.examples.agents": ROOT / "agents", "agenttrace.examples.tools": ROOT / "tools"}
MAX_LINES = 400

# The stages in the order a decision passes them: each imports only the shared vocabulary (SHARED
# and the torch-free `core`) and the stages before it. No exceptions: module-level, function-level
# and `if TYPE_CHECKING:` imports all count. The facade (`agenttrace/__init__`) names the public API
# lazily; the examples use only it; the consumers (bench, training, commands) come last.
SHARED = ("agenttrace.semconv", "agenttrace.errors", "agenttrace.clock", "agenttrace.core")
ORDER = ("generation", "telemetry", "testing", "instrument", "runtime", "adapters", "serve", "traces", "report",
         "columnar", "profiling", "agenttrace", "examples", "bench", "training", "commands", "cli", "__main__")


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for root, prefix in [(PACKAGE, "agenttrace"), *((p, n) for n, p in EXAMPLES.items())]:
        for path in root.rglob("*.py"):
            if "data" in path.relative_to(root).parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join([prefix, *parts])] = path
    return mods


def _imports(path: Path, module: str, mods: dict[str, Path]) -> set[str]:
    """Modules of ours that `path` imports anywhere: at module level, inside functions and under
    `if TYPE_CHECKING:`. `from pkg import sub` counts as importing `pkg.sub`, not `pkg`."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
            names = subs or [base]
        else:
            continue
        found.update(n for n in names if n in mods and n != module and not module.startswith(n + "."))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(p, m, mods) for m, p in mods.items()}


def test_pyproject_lists_every_package_and_installs_the_examples_under_our_name():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {m for m, p in _modules().items() if p.name == "__init__.py"}
    assert listed == on_disk, f"pyproject.toml [tool.setuptools] packages differ from the folders: {listed ^ on_disk}"
    assert config["package-dir"] == {n: p.name for n, p in EXAMPLES.items()}
    assert not any(p.split(".")[0] in ("agents", "tools") for p in listed)


def test_a_built_wheel_puts_nothing_but_agenttrace_at_the_top_level(tmp_path):
    # built from a copy: setuptools writes build/ and *.egg-info/ beside the sources
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("agenttrace", "agents", "tools"):
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    if proc.returncode != 0 and "No module named" in proc.stderr:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip()[-200:]}")
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("agenttrace-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"agenttrace"}, tops
    assert "agenttrace/examples/tools/calculator.py" in names
    assert "agenttrace/examples/agents/tasks/tool_calls.jsonl" in names


def test_no_import_circle_not_even_through_function_level_imports(graph):
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in graph:
            if v not in index:
                visit(v)
    finally:  # other tests (the parser's nesting limit) depend on the default
        sys.setrecursionlimit(limit)
    assert circles == []


def _shared(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in SHARED)


def _rank(module: str) -> int:
    """The stage's place in ORDER (the shared vocabulary: -1)."""
    if _shared(module):
        return -1
    parts = module.split(".")
    return ORDER.index(parts[1] if len(parts) > 1 else "agenttrace")


def test_each_stage_imports_only_the_shared_core_and_the_stages_before_it(graph):
    wrong = [f"{m} -> {t}" for m, targets in graph.items() for t in targets
             if not _shared(t) and (_shared(m) or _rank(t) > _rank(m))]
    assert wrong == []


def test_the_examples_use_only_the_public_api(graph):
    wrong = [f"{m} -> {t}" for m, targets in graph.items() if m.startswith("agenttrace.examples.") for t in targets
             if not (t == "agenttrace" or t.startswith("agenttrace.examples.") or _shared(t))]
    assert wrong == []


def test_the_facade_imports_its_public_names_lazily():
    """`import agenttrace` runs no stage: every public name is imported on first use."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    eager = [ast.unparse(n) for n in tree.body if isinstance(n, ast.ImportFrom | ast.Import)
             and any(a.name.startswith("agenttrace") or (getattr(n, "module", "") or "").startswith("agenttrace")
                     for a in n.names)]
    assert eager == []


def test_only_the_bench_workloads_module_reaches_the_examples(graph):
    reaching = sorted(m for m, targets in graph.items() if not m.startswith("agenttrace.examples")
                      and any(t.startswith("agenttrace.examples") for t in targets))
    assert reaching == ["agenttrace.bench.workloads"]


def test_no_module_is_over_the_size_limit():
    big = {m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}


def test_the_export_path_never_imports_torch(tmp_path):
    from trace_builder import S, write_trace

    step = S("agent_step 1", "step", 0.0, 2.0, {"agenttrace.step.index": 1},
             [S("execute_tool calculator", "tool", 0.5, 1.5, {"gen_ai.tool.name": "calculator"})])
    write_trace(tmp_path / "t.jsonl", S("invoke_agent a", "agent", 0.0, 2.0, {"gen_ai.agent.name": "a"}, [step]))
    code = (
        "import sys, contextlib, io; from agenttrace.cli import main; d = sys.argv[1]\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "    assert main(['export', d + '/t.jsonl', '--jaeger-json', d + '/j.json']) == 0\n"
        "    assert main(['export', d + '/t.jsonl', '--otlp', 'http://127.0.0.1:9', '--timeout', '1']) == 1\n"
        "import agenttrace.traces.replay, agenttrace.traces.jaeger_json, agenttrace.traces.otlp_file\n"
        "bad = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "print('HEAVY', bad, file=sys.stderr); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "j.json").stat().st_size > 0


# Every time is read through agenttrace/clock.py (one injectable clock: spans, latencies and
# deadlines on one time base, and a FakeClock in tests). Not read through it: the clock itself;
# the bootstrap, which runs inside the user's program with only the standard library and
# OpenTelemetry; and the llama.cpp worker, which runs in a venv where agenttrace is not installed.
_CLOCK_READS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns"}
_READS_TIME_ITSELF = ("agenttrace/clock.py", "agenttrace/profiling/bootstrap/", "agenttrace/bench/llama_worker.py")


def test_every_time_is_read_through_the_clock():
    found = []
    for path in sorted(_modules().values()):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(_READS_TIME_ITSELF):
            continue
        tree = ast.parse(path.read_text())
        aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
                   if a.name == "time"}
        bare = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "time"
                for a in n.names if a.name in _CLOCK_READS}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "time" and not node.level:
                # `from time import perf_counter`: the read can then hide behind any name
                found += [(rel, node.lineno, f"from time import {a.name}") for a in node.names
                          if a.name in _CLOCK_READS or a.name == "*"]
            elif (isinstance(node, ast.Attribute) and node.attr in _CLOCK_READS
                  and isinstance(node.value, ast.Name) and node.value.id in aliases):
                # a call, or the function passed on to be called later (`default=time.monotonic`)
                found.append((rel, node.lineno, f"{node.value.id}.{node.attr}"))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in bare:
                found.append((rel, node.lineno, f"{node.func.id}()"))
    wrong = [f"{rel}:{line} ({what})" for rel, line, what in sorted(found)]
    assert wrong == [], "read the time through agenttrace.clock (default_clock(), an object's clock):\n" + "\n".join(wrong)
