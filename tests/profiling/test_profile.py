"""`agenttrace.profile()`: a block of code profiled in the running process, its report printed
when it ends (however it ends), each block with its own trace file (agenttrace/profiling).

Each test runs a small program in a subprocess (the global tracer provider is set once per
process, and must not leak into the other tests): the library of otel_api_app.py records GenAI
spans through the OpenTelemetry API alone. The e2e test profiles the real `openai` client through
an installed instrumentation (traceloop's), in its own cached environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agenttrace.report.build import report_streamed

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
APPS = TESTS / "frameworks" / "unmodified"
CACHED_ENVIRONMENTS = ("foreign:openllmetry",)  # built in the background (conftest.py)


def run_program(tmp: Path, body: str, python: str | Path = sys.executable, env: dict[str, str] | None = None,
                ) -> subprocess.CompletedProcess[str]:
    """Run `body` (with agenttrace and the unmodified apps importable) in a fresh interpreter."""
    script = tmp / "program.py"
    script.write_text(f"import sys\nsys.path[:0] = [{str(APPS)!r}, {str(ROOT)!r}]\n" + textwrap.dedent(body))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTTRACE_RUN"))}
    return subprocess.run([str(python), str(script)], capture_output=True, text=True, timeout=300, cwd=tmp,
                          env={**base, **(env or {})})


def files(tmp: Path) -> list[Path]:
    """The blocks' trace files in the order the blocks began: profile-<time>.jsonl, then -2, -3 ..."""
    def began(path: Path) -> tuple[str, int]:
        stamp, _, n = path.stem.removeprefix("profile-").partition("-")[2].partition("-")
        return stamp, int(n or 1)

    return sorted((tmp / "traces").glob("profile-*.jsonl"), key=began)


def span_names(path: Path) -> list[str]:
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    return [s["name"] for d in docs for rs in d["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def test_a_block_gets_its_trace_file_and_report(tmp_path):
    done = run_program(tmp_path, """
        import agenttrace, otel_api_app
        with agenttrace.profile(out="traces", format="json") as p:
            otel_api_app.task()
        print(json.dumps({"file": str(p.trace_file), "spans": p.spans}), file=sys.stderr)
    """.replace("import agenttrace", "import json, agenttrace"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [[s["outcome"] for s in t["steps"]] for t in report["tasks"]] == [["tool_call", "final_answer"]]
    said = json.loads(done.stderr.strip().splitlines()[-1])
    (path,) = files(tmp_path)
    assert said == {"file": str(path.relative_to(tmp_path)), "spans": 4}


def test_each_block_has_its_own_file_and_spans_outside_every_block_go_nowhere(tmp_path):
    done = run_program(tmp_path, """
        import agenttrace, otel_api_app
        with agenttrace.profile(report=False):
            otel_api_app.task()
        otel_api_app.task()
        with agenttrace.profile(report=False):
            otel_api_app.task()
            with agenttrace.profile(report=False):  # nested: both files get the inner block's spans
                otel_api_app.chat("stop")
    """)
    assert done.returncode == 0, done.stderr
    first, second, inner = files(tmp_path)
    assert len(span_names(first)) == 4
    assert sorted(span_names(second)) == sorted([*span_names(first), "chat test-model"])
    assert span_names(inner) == ["chat test-model"]


def test_a_block_that_raises_prints_its_report_then_the_exception_goes_on(tmp_path):
    done = run_program(tmp_path, """
        import agenttrace, otel_api_app
        with agenttrace.profile(format="markdown"):
            otel_api_app.task()
            raise RuntimeError("the agent failed")
    """)
    assert done.returncode == 1
    assert done.stdout.startswith("# agenttrace report")
    assert done.stderr.rstrip().endswith("RuntimeError: the agent failed")
    (path,) = files(tmp_path)
    assert len(report_streamed([str(path)]).tasks) == 1


def test_a_program_with_its_own_provider_keeps_it_and_the_block_records_alongside(tmp_path):
    done = run_program(tmp_path, """
        import agenttrace, otel_api_app
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        memory = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        trace.set_tracer_provider(provider)
        with agenttrace.profile(report=False):
            otel_api_app.task()
        assert trace.get_tracer_provider() is provider
        print(len(memory.get_finished_spans()))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "4"
    (path,) = files(tmp_path)
    assert len(span_names(path)) == 4


def test_otlp_sends_the_blocks_spans_to_a_collector_as_well(tmp_path):
    from otlp_receiver import http_receiver

    with http_receiver() as (url, received):
        done = run_program(tmp_path, f"""
            import agenttrace, otel_api_app
            with agenttrace.profile(otlp={url!r}, report=False):
                otel_api_app.task()
        """)
    assert done.returncode == 0, done.stderr
    assert len(received.spans()) == 4


def test_a_block_with_no_spans_says_so_and_leaves_no_empty_file(tmp_path):
    done = run_program(tmp_path, """
        import agenttrace
        with agenttrace.profile():
            pass
    """)
    assert done.returncode == 0, done.stderr
    assert "agenttrace.profile: no spans were recorded in the block" in done.stderr
    assert files(tmp_path) == []


@pytest.mark.e2e
def test_the_openai_client_is_profiled_through_an_installed_instrumentation(tmp_path):
    import foreign_envs
    from fake_openai import base_url, fake_openai

    python = foreign_envs.python("openllmetry")  # traceloop's openai instrumentation, and agenttrace's dependencies
    with fake_openai() as server:
        done = run_program(tmp_path, """
            import agenttrace, openai_app
            with agenttrace.profile(format="markdown") as p:
                openai_app.main("ok")
            print("instrumented:", p.instrumented)
        """, python=python, env={"OPENAI_BASE_URL": base_url(server), "OPENAI_API_KEY": "sk-fake",
                                 "TRACELOOP_TELEMETRY": "false"})
    assert done.returncode == 0, done.stderr
    assert "# agenttrace report" in done.stdout
    assert "instrumented: ['openai (opentelemetry.instrumentation.openai:OpenAIInstrumentor)']" in done.stdout
    (path,) = files(tmp_path)
    assert span_names(path) == ["openai.chat"] * 3
    assert len(report_streamed([str(path)]).tasks) == 3  # no agent span: a task per model call (SPANS.md)
