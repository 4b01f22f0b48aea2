"""`agenttrace run -- COMMAND`: an unmodified program traced, its report printed when it exits
(however it exits), its exit status kept (agenttrace/profiling).

The first tests run programs in this project's environment, which has the SDK and the OTLP/HTTP
exporter the bootstrap needs: a program whose library records spans through the OpenTelemetry
API alone (tests/frameworks/unmodified/otel_api_app.py), and fake distributions that declare an
instrumentor entry point. The e2e tests at the end run unmodified agents in other environments
(cached, built on first use): a plain loop on the `openai` client with OpenInference's
instrumentation, and four agent frameworks against the scripted fake server.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agenttrace.profiling.bootstrap import BOOTSTRAP_DIR
from agenttrace.profiling.bootstrap.sitecustomize import NESTED_ENV, OTLP_ENV
from agenttrace.profiling.program import child_env, traces_url
from agenttrace.profiling.receiver import otlp_json_line

TESTS = Path(__file__).resolve().parents[1]
APPS = TESTS / "frameworks" / "unmodified"
CACHED_ENVIRONMENTS = ("foreign:openinference-otlp", "framework:openai_agents:requirements.txt",
                       "framework:smolagents:requirements.txt", "framework:pydantic_ai:requirements.txt")
sys.path.insert(0, str(TESTS / "frameworks"))  # fake_llm.py, record.py (the frameworks' pinned environments)
API_APP = APPS / "otel_api_app.py"
TIMEOUT_S = 300


def agenttrace_run(tmp: Path, *command: str, options: tuple[str, ...] = (), env: dict[str, str] | None = None,
                   **popen) -> subprocess.Popen[str]:
    """`agenttrace run --out tmp/traces --format json -o tmp/report.json [options] -- command`, started."""
    args = [sys.executable, "-m", "agenttrace", "run", "--out", str(tmp / "traces"), "--format", "json",
            "-o", str(tmp / "report.json"), *options, "--", *command]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTTRACE_RUN"))}
    # Ctrl-C as in a terminal's foreground job: a suite started in the background of a
    # non-interactive shell inherits SIGINT ignored, and so would the program
    return subprocess.Popen(args, env={**base, **(env or {})}, cwd=tmp, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_sigint, **popen)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finished(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=TIMEOUT_S)
    return proc.returncode, out, err


def spans(tmp: Path) -> list[dict]:
    (path,) = (tmp / "traces").glob("run-*.jsonl")
    docs = [json.loads(line) for line in path.read_text().splitlines()]
    return [dict(s, resource=rs["resource"]) for d in docs for rs in d["resourceSpans"] for ss in rs["scopeSpans"]
            for s in ss["spans"]]


def report(tmp: Path) -> dict:
    return json.loads((tmp / "report.json").read_text())


def steps(rep: dict) -> list[list[str]]:
    return [[s["outcome"] for s in t["steps"]] for t in rep["tasks"]]


# -- programs in this environment ------------------------------------------------------------
def test_a_program_of_api_spans_gets_its_trace_file_report_and_exit_status(tmp_path):
    code, out, err = finished(agenttrace_run(tmp_path, sys.executable, str(API_APP), "exit=3"))
    assert code == 3, err
    got = spans(tmp_path)
    assert sorted(s["name"] for s in got) == sorted(["invoke_agent weather_agent", "chat test-model",
                                                      "execute_tool weather", "chat test-model"] * 2)
    assert all(len(s["traceId"]) == 32 and len(s["spanId"]) == 16 for s in got)  # hex, as OTLP/JSON writes ids
    resource = {a["key"]: a["value"] for a in got[0]["resource"]["attributes"]}
    assert resource["service.name"] == {"stringValue": "otel_api_app"}
    assert "agenttrace.run.id" in resource and "process.pid" in resource
    assert steps(report(tmp_path)) == [["tool_call", "final_answer"]] * 2
    assert f"agenttrace run: 8 spans from otel_api_app in traces{os.sep}run-" in err.replace(str(tmp_path) + os.sep, "")


def test_the_terminal_report_is_printed_after_the_programs_own_output(tmp_path):
    args = [sys.executable, "-m", "agenttrace", "run", "--out", str(tmp_path), "--service", "weather", "--",
            sys.executable, str(API_APP)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "run summary" in done.stdout and "2 (2 completed, 100%)" in done.stdout
    assert "spans from weather in" in done.stderr  # --service names the service


def test_a_program_that_raises_still_gets_its_report(tmp_path):
    code, out, err = finished(agenttrace_run(tmp_path, sys.executable, str(API_APP), "raise"))
    assert code == 1
    assert "RuntimeError: the agent failed after its first task" in err
    assert steps(report(tmp_path)) == [["tool_call", "final_answer"]]


def test_ctrl_c_ends_the_program_not_the_report(tmp_path):
    # as a terminal does: SIGINT to the whole process group, agenttrace and the program alike
    proc = agenttrace_run(tmp_path, sys.executable, str(API_APP), "wait", start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    os.killpg(proc.pid, signal.SIGINT)
    code, out, err = finished(proc)
    assert code == 128 + signal.SIGINT
    assert "KeyboardInterrupt" in err
    assert steps(report(tmp_path)) == [["tool_call", "final_answer"]]


def test_sigterm_is_passed_on_and_the_program_flushes_before_it_ends(tmp_path):
    proc = agenttrace_run(tmp_path, sys.executable, str(API_APP), "wait")
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)  # to agenttrace only: it passes it on
    code, out, err = finished(proc)
    assert code == 128 + signal.SIGTERM
    assert steps(report(tmp_path)) == [["tool_call", "final_answer"]]


def test_a_python_without_the_sdk_runs_untraced_with_one_line_saying_what_to_install(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    bare = tmp_path / "bare" / "bin" / "python"
    script = tmp_path / "hello.py"
    script.write_text("import subprocess, sys\nprint('hello')\n"
                      "subprocess.run([sys.executable, '-c', 'print(\"child\")'])\nsys.exit(4)\n")
    code, out, err = finished(agenttrace_run(tmp_path, str(bare), str(script)))
    assert code == 4
    assert out.splitlines() == ["hello", "child"]
    said = [line for line in err.splitlines() if "runs untraced" in line]
    assert len(said) == 1, err  # the program's own child Python says nothing more
    assert f"{bare} -m pip install opentelemetry-exporter-otlp-proto-http" in said[0]
    assert "agenttrace run: no spans came from" in err
    assert not (tmp_path / "traces").exists() or not list((tmp_path / "traces").iterdir())


def test_the_sitecustomize_it_shadows_still_runs(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("print('the user sitecustomize ran')\n")
    code, out, err = finished(agenttrace_run(tmp_path, sys.executable, str(API_APP), env={"PYTHONPATH": str(mine)}))
    assert code == 0, err
    assert out.splitlines()[0] == "the user sitecustomize ran"
    assert len(report(tmp_path)["tasks"]) == 2


def test_otlp_sends_the_spans_to_a_collector_as_well(tmp_path):
    from otlp_receiver import http_receiver

    with http_receiver() as (url, received):
        code, out, err = finished(agenttrace_run(tmp_path, sys.executable, str(API_APP), options=("--otlp", url)))
    assert code == 0, err
    assert len(received.spans()) == len(spans(tmp_path)) == 8


def test_a_program_not_found_is_exit_127_with_one_line(tmp_path):
    code, out, err = finished(agenttrace_run(tmp_path, "no-such-program-here"))
    assert code == 127
    assert err.strip() == "agenttrace run: no-such-program-here: no such program (not on PATH)"


def _fake_distribution(site: Path, name: str, files: dict[str, str], requires: list[str] = (),
                       entry_points: str = "") -> None:
    """A distribution installed into `site` (a folder on sys.path), as pip would leave it."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("\n".join(["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0",
                                              *(f"Requires-Dist: {r}" for r in requires)]) + "\n")
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)
    for rel, text in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(textwrap.dedent(text))
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in [*files, f"{info.name}/METADATA"]))


FAKE_INSTRUMENTOR = """
    import os
    from opentelemetry import trace

    def log(line):
        with open(os.environ["FAKEINSTR_LOG"], "a") as f:
            f.write(line + "\\n")

    log("{name} loaded")

    class Instrumentor:  # one instance, as BaseInstrumentor has
        is_instrumented_by_opentelemetry = False
        _instance = None

        def __new__(cls):
            cls._instance = cls._instance or object.__new__(cls)
            return cls._instance

        def instrumentation_dependencies(self):
            return [{deps!r}]

        def instrument(self, tracer_provider=None, **kwargs):
            import fakelib
            log(f"{name} instrumented with {{type(tracer_provider).__name__}}")
            tracer = tracer_provider.get_tracer("{name}")
            plain = fakelib.call

            def call():
                with tracer.start_as_current_span("execute_tool {name}", attributes={{"gen_ai.tool.name": "fake"}}):
                    return plain()

            fakelib.call = call
            self.is_instrumented_by_opentelemetry = True
"""


@pytest.fixture
def fake_site(tmp_path) -> Path:
    """fakelib, and instrumentors of it behind `opentelemetry_instrumentor` entry points (their
    loading and instrument() calls logged to FAKEINSTR_LOG): `metainstr` names fakelib in its
    package and its class, `classinstr` only in its class (its package names a library that is
    not installed, as OpenLLMetry's LangChain instrumentation names `langchain`), `absentinstr`
    instruments only libraries that are not installed."""
    site = tmp_path / "site"
    _fake_distribution(site, "fakelib", {"fakelib/__init__.py": """
        import os
        with open(os.environ["FAKEINSTR_LOG"], "a") as f:
            f.write("fakelib imported\\n")

        def call():
            return "called"
        """})
    for name, meta, deps in [("metainstr", "fakelib>=1.0", "fakelib >= 1.0"), ("classinstr", "fakelib-full", "fakelib"),
                             ("absentinstr", "notinstalled", "notinstalled-either")]:
        _fake_distribution(site, name, {f"{name}.py": FAKE_INSTRUMENTOR.format(name=name, deps=deps)},
                           requires=[f'{meta}; extra == "instruments"'],
                           entry_points=f"[opentelemetry_instrumentor]\n{name} = {name}:Instrumentor\n")
    return site


def test_an_instrumentation_is_turned_on_when_its_library_is_first_imported(tmp_path, fake_site):
    log = tmp_path / "instr.log"
    script = tmp_path / "uses_fakelib.py"
    script.write_text("from fakelib import call\nprint(call())\n")
    env = {"PYTHONPATH": str(fake_site), "FAKEINSTR_LOG": str(log)}
    code, out, err = finished(agenttrace_run(tmp_path, sys.executable, str(script), env=env))
    assert code == 0, err
    assert out.strip() == "called"
    lines = log.read_text().splitlines()
    assert sorted(lines[:3]) == ["absentinstr loaded", "classinstr loaded", "metainstr loaded"]
    assert lines[3] == "fakelib imported"  # then both instrumentors, in entry-point order
    assert sorted(lines[4:]) == ["classinstr instrumented with TracerProvider", "metainstr instrumented with TracerProvider"]
    assert sorted(s["name"] for s in spans(tmp_path)) == ["execute_tool classinstr", "execute_tool metainstr"]


def test_a_program_that_never_imports_the_library_never_pays_for_instrumenting_it(tmp_path, fake_site):
    log = tmp_path / "instr.log"
    script = tmp_path / "plain.py"
    script.write_text("print('no fakelib here')\n")
    code, out, err = finished(agenttrace_run(tmp_path, sys.executable, str(script),
                                             env={"PYTHONPATH": str(fake_site), "FAKEINSTR_LOG": str(log)}))
    assert code == 0, err
    assert sorted(log.read_text().splitlines()) == ["absentinstr loaded", "classinstr loaded", "metainstr loaded"]
    assert "no spans came from" in err


def test_a_program_that_instruments_the_library_itself_is_not_instrumented_twice(tmp_path, fake_site):
    # its instrument() imports the library, which is where ours would run: inside theirs
    log = tmp_path / "instr.log"
    script = tmp_path / "instruments_itself.py"
    script.write_text("from opentelemetry.sdk.trace import TracerProvider\n"
                      "import metainstr\nmetainstr.Instrumentor().instrument(tracer_provider=TracerProvider())\n"
                      "import fakelib\nprint(fakelib.call())\n")
    env = {"PYTHONPATH": str(fake_site), "FAKEINSTR_LOG": str(log), "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "classinstr"}
    code, out, err = finished(agenttrace_run(tmp_path, sys.executable, str(script), env=env))
    assert code == 0, err
    assert [line for line in log.read_text().splitlines() if "instrumented" in line] == [
        "metainstr instrumented with TracerProvider"]  # once: the program's own


def test_disabled_instrumentations_stay_off(tmp_path, fake_site):
    log = tmp_path / "instr.log"
    script = tmp_path / "uses_fakelib.py"
    script.write_text("import fakelib\nprint(fakelib.call())\n")
    env = {"PYTHONPATH": str(fake_site), "FAKEINSTR_LOG": str(log),
           "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": "metainstr, absentinstr"}
    code, out, err = finished(agenttrace_run(tmp_path, sys.executable, str(script), env=env))
    assert code == 0, err
    assert log.read_text().splitlines() == ["classinstr loaded", "fakelib imported",
                                            "classinstr instrumented with TracerProvider"]


# -- the pieces -------------------------------------------------------------------------------
def test_the_child_environment_puts_the_bootstrap_first_once():
    env = child_env({"PYTHONPATH": f"/a{os.pathsep}{BOOTSTRAP_DIR}", NESTED_ENV: "1", OTLP_ENV: "x"},
                    "http://127.0.0.1:1/v1/traces", run_id="r")
    assert env["PYTHONPATH"] == f"{BOOTSTRAP_DIR}{os.pathsep}/a"
    assert NESTED_ENV not in env and OTLP_ENV not in env


def test_traces_urls_follow_the_otlp_endpoint_rules():
    assert traces_url("localhost:4318") == "http://localhost:4318/v1/traces"
    assert traces_url("http://collector:4318/") == "http://collector:4318/v1/traces"
    assert traces_url("https://x.example/otlp/v1/traces") == "https://x.example/otlp/v1/traces"


def test_received_requests_become_our_trace_lines(tmp_path):
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Link

    from agenttrace.report.build import report_streamed

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}) as agent:
        with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}, links=[Link(agent.get_span_context())]):
            pass
    line = otlp_json_line(encode_spans(memory.get_finished_spans()))
    doc = json.loads(line)
    (chat_span, agent_span) = sorted(doc["resourceSpans"][0]["scopeSpans"][0]["spans"], key=lambda s: s["name"])
    ctx = agent.get_span_context()
    assert agent_span["traceId"] == f"{ctx.trace_id:032x}" and agent_span["spanId"] == f"{ctx.span_id:016x}"
    assert chat_span["parentSpanId"] == agent_span["spanId"]
    assert chat_span["links"][0]["spanId"] == agent_span["spanId"]
    assert isinstance(chat_span["kind"], int)
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n")
    assert len(report_streamed([str(path)]).tasks) == 1


def test_the_bootstrap_imports_nothing_but_the_standard_library_and_opentelemetry():
    allowed = set(sys.stdlib_module_names) | {"opentelemetry", "pydantic_ai", "_agenttrace_instrument", "__future__"}
    for path in BOOTSTRAP_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                tops = {(node.module or "").split(".")[0]}
            else:
                continue
            assert tops <= allowed, f"{path.name} imports {tops - allowed}"


# -- unmodified agents in their own environments ----------------------------------------------
def _with_fake_server_env(base_url: str) -> dict[str, str]:
    from record import QUIET_ENV

    return {**QUIET_ENV, "OPENAI_BASE_URL": base_url, "OPENAI_API_BASE": base_url, "OPENAI_API_KEY": "sk-fake"}


@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["ok", "raise", "ctrl-c"])
def test_an_unmodified_openai_loop_is_profiled_through_openinference(tmp_path, mode):
    import foreign_envs
    from fake_openai import base_url, fake_openai

    python = foreign_envs.python("openinference-otlp")
    with fake_openai() as server:
        env = _with_fake_server_env(base_url(server))
        app = str(APPS / "openai_app.py")
        if mode == "ctrl-c":
            proc = agenttrace_run(tmp_path, str(python), app, "wait", env=env, start_new_session=True)
            assert proc.stdout.readline().strip() == "waiting"
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc = agenttrace_run(tmp_path, str(python), app, mode, env=env)
        code, out, err = finished(proc)
    assert code == {"ok": 0, "raise": 1, "ctrl-c": 130}[mode], err
    got = spans(tmp_path)
    kinds = [a["value"]["stringValue"] for s in got for a in s["attributes"] if a["key"] == "openinference.span.kind"]
    assert kinds == ["LLM"] * (3 if mode == "ok" else 1)
    rep = report(tmp_path)
    assert rep["inputs"][0]["conventions"][0]["name"] == "OpenInference"
    assert len(rep["tasks"]) == len(kinds)  # no agent span: one task per model call (SPANS.md)


# (app, the recording folder and requirements file whose pinned environment it runs in): one per
# framework of the README's table, LangGraph under both its instrumentations. The suite builds the
# environments of the first three (light: about half a minute each); the others (CrewAI, AutoGen,
# LangGraph, LlamaIndex, ADK: minutes each on a fresh machine) run where they are already built,
# or everywhere with AGENTTRACE_ALL_FRAMEWORKS=1.
ALWAYS = {"openai_agents", "smolagents", "pydantic_ai"}
FRAMEWORKS = [
    ("openai_agents_app.py", "openai_agents", "requirements.txt"),  # OpenInference
    ("langgraph_app.py", "langgraph", "requirements-openinference.txt"),
    ("langgraph_app.py", "langgraph", "requirements-openllmetry.txt"),  # its package names `langchain`, unused here
    ("smolagents_app.py", "smolagents", "requirements.txt"),  # OpenInference
    ("llamaindex_app.py", "llamaindex", "requirements.txt"),  # OpenInference (+ httpx), which opentelemetry-instrument skips
    ("crewai_app.py", "crewai", "requirements.txt"),  # OpenInference's CrewAI and OpenAI
    ("autogen_app.py", "autogen", "requirements.txt"),  # AutoGen's own spans + OpenInference + OpenLLMetry's OpenAI
    ("pydantic_ai_app.py", "pydantic_ai", "requirements.txt"),  # native, switched on by the bootstrap
    ("google_adk_app.py", "google_adk", "requirements.txt"),  # native, on the global provider
]


@pytest.mark.e2e
@pytest.mark.parametrize(("app", "folder", "requirements"), FRAMEWORKS,
                         ids=[f"{f}-{r.removesuffix('.txt')}" for _, f, r in FRAMEWORKS])
def test_an_unmodified_framework_agent_is_profiled(tmp_path, app, folder, requirements):
    import fake_llm
    from record import Recording

    if not (TESTS / "frameworks" / folder / requirements).is_file():
        pytest.skip(f"no pinned environment {folder}/{requirements}")
    rec = Recording(name=app, folder=TESTS / "frameworks" / folder, requirements=requirements)
    if folder not in ALWAYS and not rec.built() and os.environ.get("AGENTTRACE_ALL_FRAMEWORKS") != "1":
        pytest.skip(f"{folder}'s environment is not built and takes minutes to build: set AGENTTRACE_ALL_FRAMEWORKS=1 "
                    "(or run ./scripts/record-frameworks once) to include it")
    python = rec.python()
    env = {"HOME": str(tmp_path), "CREWAI_TRACING_ENABLED": "false", "CREWAI_DISABLE_VERSION_CHECK": "true"}
    with fake_llm.running() as llm:
        code, out, err = finished(agenttrace_run(tmp_path, str(python), str(APPS / app),
                                                 env={**_with_fake_server_env(llm.base_url), **env}))
    assert code == 0, err
    assert "It is sunny in Paris, 21 C." in out and "Paris is sunny at 21 C; Tokyo is sunny at 21 C." in out
    rep = report(tmp_path)
    # the retried call (the framework rejected `town`, then `city` ran) and the two parallel calls: one step each
    assert steps(rep) == [["tool_call", "final_answer"]] * 2, err[-3000:]
    assert [t["steps"][0]["attempts"] for t in rep["tasks"]] == [2, 1]
    assert [t["outcome"] for t in rep["tasks"]] == ["completed"] * 2
    for task in rep["tasks"]:
        assert task["steps"][0]["segments"]["tool"] >= 0.045  # the weather tool's 50 ms (the parallel pair overlaps)
