"""Where a module-level tool runs when a worker process cannot import it: scripts without a
`__main__` guard, `python -c` code and scripts piped on stdin run their tools on threads (saying
why once); a guarded script and importable modules keep their workers. Real interpreters run the
scripts, as a user would."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from agenttrace.runtime.placement import has_main_guard, top_level_names

_TOOL = textwrap.dedent("""
    import logging, os
    from agenttrace import Tool
    from agenttrace.runtime.execution import run_tool, warm_up

    def where(x: int) -> list:
        return [x * 2, os.getpid()]
""")
# What the script does at its top level (or under its guard): set up the tool as the agent does
# (warm_up), call it three times, say where each call ran.
_RUN = textwrap.dedent("""
    logging.basicConfig(level=logging.WARNING, format="LOG %(message)s")
    tool = Tool("where", "d", {"type": "object"}, where)
    warm_up([tool])
    for i in range(3):
        doubled, pid = run_tool(tool, {"x": i})
        print(doubled, "thread" if pid == os.getpid() else "worker")
""")
UNGUARDED = _TOOL + _RUN
GUARDED = _TOOL + "\nif __name__ == '__main__':\n" + textwrap.indent(_RUN, "    ")
ON_THREADS = ["0 thread", "2 thread", "4 thread"]
IN_WORKERS = ["0 worker", "2 worker", "4 worker"]


def _run(args: list[str], cwd, stdin: str | None = None) -> tuple[list[str], list[str]]:
    """The script's printed lines, and its lines saying a tool runs on a thread."""
    proc = subprocess.run([sys.executable, *args], check=False, input=stdin, capture_output=True, text=True, timeout=60, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split("\n")[:-1], [line for line in proc.stderr.splitlines() if "runs on a thread" in line]


def test_an_unguarded_script_runs_its_tools_on_threads_and_says_why_once(tmp_path):
    # Before: every worker ran the script again and died starting its own workers (WorkerDied).
    (tmp_path / "agent.py").write_text(UNGUARDED)
    printed, told = _run(["agent.py"], tmp_path)
    assert printed == ON_THREADS
    assert len(told) == 1 and "has no `if __name__ == '__main__':` guard" in told[0] and "agent.py" in told[0]


def test_a_tool_defined_in_python_c_code_runs_on_a_thread(tmp_path):
    # Before: "Can't get attribute 'where' on <module '__main__'>" in the worker.
    printed, told = _run(["-c", UNGUARDED], tmp_path)
    assert printed == ON_THREADS
    assert len(told) == 1 and "where is defined in `python -c` code" in told[0]


def test_a_script_piped_on_stdin_runs_its_tools_on_threads(tmp_path):
    # Before: the worker tried to run "<stdin>" again as a file (WorkerDied).
    printed, told = _run(["-"], tmp_path, stdin=GUARDED)  # even guarded: stdin cannot be read twice
    assert printed == ON_THREADS
    assert len(told) == 1 and "standard input" in told[0]


def test_a_guarded_script_and_an_importable_module_keep_their_workers(tmp_path):
    (tmp_path / "agent.py").write_text(GUARDED)
    assert _run(["agent.py"], tmp_path) == (IN_WORKERS, [])
    # `python -c` code whose tool lives in a module a worker imports by name
    (tmp_path / "mytools.py").write_text(_TOOL)
    code = "from mytools import *\n" + _RUN
    assert _run(["-c", code], tmp_path) == (IN_WORKERS, [])


def test_the_guard_is_read_from_the_source():
    assert has_main_guard(ast.parse("x = 1\nif __name__ == '__main__':\n    main()"))
    assert has_main_guard(ast.parse("if '__main__' == __name__:\n    main()"))
    assert not has_main_guard(ast.parse("main()"))
    assert not has_main_guard(ast.parse("def f():\n    if __name__ == '__main__':\n        main()"))
    assert not has_main_guard(ast.parse("if __name__ != '__main__':\n    main()"))


def test_a_worker_finds_only_what_the_script_defines_outside_its_guard():
    tree = ast.parse(textwrap.dedent("""
        import os.path, json as j
        from x import y as z
        def tool(): ...
        class K: ...
        A, (B, C) = 1, (2, 3)
        try:
            import fast as speed
        except ImportError:
            speed = None
        if __name__ == "__main__":
            def only_when_run(): ...
            local = 1
    """))
    assert top_level_names(tree) == {"os", "j", "z", "tool", "K", "A", "B", "C", "speed"}
