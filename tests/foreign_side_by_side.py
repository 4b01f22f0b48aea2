"""The figures of one agent loop traced by each instrumentation and by our API, side by side:
`.venv/bin/python tests/foreign_side_by_side.py` (builds the environments of
tests/foreign_envs.py on first use). Our run is repeated before each foreign one, so a row and
the `agenttrace` rows around it share the machine's state; medians over the loop's tasks.
Prints a Markdown table (BENCHMARKS.md holds the latest)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))

import foreign_envs  # noqa: E402
from fake_openai import base_url, fake_openai  # noqa: E402

from agenttrace.report import report_from_files  # noqa: E402

RUNS = [("genai", "genai"), ("genai-latest", "genai"), ("genai-legacy", "genai-legacy"),
        ("openinference", "openinference"), ("openllmetry", "openllmetry"), ("mixed", "openllmetry")]


def main() -> None:
    env = dict(os.environ, PYTHONPATH=str(TESTS.parent))
    rows = []
    with fake_openai(0.04) as server, tempfile.TemporaryDirectory() as tmp:
        for mode, venv in [("agenttrace", None), *((m, v) for run in RUNS for m, v in (("agenttrace", None), run))]:
            python = sys.executable if venv is None else str(foreign_envs.python(venv))
            out = Path(tmp) / f"{mode}-{len(rows)}.jsonl"
            subprocess.run([python, str(TESTS / "foreign_loop.py"), mode, base_url(server), str(out)], check=True, env=env,
                           capture_output=True)
            report = report_from_files([str(out)])
            tasks = report.tasks

            def p50(f):
                return statistics.median(f(t) for t in tasks) * 1e3

            conventions = "+".join(c.name for i in report.inputs for c in i.conventions)
            rows.append([mode, conventions, str(len(tasks)), "/".join(str(len(t.steps)) for t in tasks),
                         str(report.run.steps_with_retry), f"{report.run.valid_attempts}/{report.run.attempts}",
                         *(f"{p50(f):.1f}" for f in (lambda t: t.ttvtc_s, lambda t: t.segments.tool, lambda t: t.retry_s,
                                                      lambda t: t.segments.generation, lambda t: t.wall_s))])
    header = ["trace", "recognised as", "tasks", "steps per task", "steps with a retry", "attempts valid",
              "TTVTC p50 ms", "tool p50 ms", "retry cost p50 ms", "generation p50 ms", "task p50 ms"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
