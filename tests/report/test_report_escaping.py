"""Trace text is data in every output: rich markup, ANSI/OSC sequences, HTML, Markdown syntax and
lone UTF-16 surrogates from a trace print as text (or U+FFFD) in the terminal, Markdown, HTML and
JSON reports and in `export --jaeger-json`, and never crash them."""

from __future__ import annotations

import json
import re

import pytest
from trace_builder import S, to_otlp, write_trace

from agenttrace.cli import main
from agenttrace.report.text import markdown_code, markdown_text, terminal_text

ANSI = "\x1b[31mred"
OSC = "\x1b]8;;http://x\x07link"
HOSTILE = ["[/]", "[bold]x[/bold]", ANSI, OSC, "<script>alert(1)</script>", "a|b `c`"]
CONTROL = ["\x1b", "\x07"]  # never raw in an output a terminal may show


def task(name: str, start: float = 0.0) -> S:
    """A one-step task with `name` as its task id, outcome, agent, model, tool and span names."""
    t = start
    attempt = S("attempt 1", "attempt", t, t + 1, {"agenttrace.attempt.outcome": "ok"}, [
        S(f"chat {name}", "generation", t, t + 0.4, {"gen_ai.usage.output_tokens": 5, "gen_ai.request.model": name}),
        S(f"validate_arguments {name}", "validation", t + 0.4, t + 0.5, {"agenttrace.validation.ok": True}),
        S(f"execute_tool {name}", "tool", t + 0.5, t + 0.9, {"gen_ai.tool.name": name}),
    ])
    step = S("agent_step 1", "step", t, t + 1, {"agenttrace.step.index": 1, "agenttrace.step.outcome": name}, [attempt])
    return S(f"invoke_agent {name}", "agent", t, t + 1, {"agenttrace.task.id": name, "agenttrace.task.outcome": name,
                                                       "gen_ai.agent.name": name}, [step])


@pytest.fixture
def hostile(tmp_path):
    """Two labelled runs whose every string is hostile, in a file whose name is too, with a broken
    line (a problem naming the file)."""
    folder = tmp_path / "in"
    folder.mkdir()
    a, b = folder / "[bold]a<b>|`.jsonl", folder / "b.jsonl"
    write_trace(a, *(task(n) for n in HOSTILE), resource={"service.name": "<svc>", "agenttrace.run.label": "[/]"})
    write_trace(b, *(task(n) for n in HOSTILE), resource={"service.name": OSC, "agenttrace.run.label": ANSI})
    a.write_text(a.read_text() + "{not json " + OSC + "\n")
    return folder


@pytest.fixture
def surrogates(tmp_path):
    """A file whose strings hold lone surrogates, written as OTLP/JSON's `\\ud800` escapes."""
    line = json.dumps(to_otlp(task("SURR"), resource={"service.name": "SURR", "agenttrace.run.label": "SURR"}))
    path = tmp_path / "surrogates.jsonl"
    path.write_text(line.replace("SURR", "x\\ud800y\\udfffz") + "\n", encoding="ascii")
    return path


def _report(args, tmp_path, fmt: str, capsys) -> str:
    if fmt == "terminal":
        assert main(["report", *args]) == 0
        return capsys.readouterr().out
    out = tmp_path / f"out.{fmt}"
    assert main(["report", *args, "--format", fmt, "-o", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def _table_widths(md: str) -> set[int]:
    """Cells per table row, counting only unescaped pipes."""
    return {len(re.findall(r"(?<!\\)\|", line)) for line in md.splitlines() if line.startswith("| ")}


def test_terminal_prints_trace_text_as_written(hostile, tmp_path, capsys):
    out = _report([str(hostile)], tmp_path, "terminal", capsys)
    for raw in CONTROL:
        assert raw not in out
    assert "task <script>alert(1)</script> [[/]]" in out
    assert "task [/] [[/]]" in out and "[bold]x[/bold]" in out  # shown, not taken as markup
    assert "\\x1b[31mred" in out and "\\x1b]8;;http://x\\x07link" in out
    assert "[bold]a<b>|`.jsonl" in out  # the source, and the problem naming it


def test_markdown_shows_trace_text_as_text(hostile, tmp_path, capsys):
    md = _report([str(hostile)], tmp_path, "markdown", capsys)
    for raw in [*CONTROL, "<script>", "[/]", "[bold]"]:
        assert raw not in md
    assert "### task \\[/\\] [\\[/\\]]" in md and "&lt;script&gt;alert(1)&lt;/script&gt;" in md
    assert "a\\|b \\`c\\`" in md and "\\x1b\\[31mred" in md
    assert len(_table_widths(md)) > 1  # tables of several widths, each row as wide as its header:
    for table in md.split("\n\n"):
        if table.startswith("| "):
            assert len(_table_widths(table)) == 1, table
    assert f"Sources: {markdown_code(hostile)}" in md and "\\[bold\\]a&lt;b&gt;\\|\\`.jsonl" in md


def test_html_escapes_trace_text(hostile, tmp_path, capsys):
    page = _report([str(hostile)], tmp_path, "html", capsys)
    assert page.count("<script>") == 1 and "\x1b" not in page and "\x07" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "\\x1b[31mred" in page


def test_json_keeps_trace_text_exactly(hostile, tmp_path, capsys):
    data = json.loads(_report([str(hostile)], tmp_path, "json", capsys))
    assert sorted({t["task_id"] for t in data["tasks"]}) == sorted(HOSTILE)
    assert {r["label"] for r in data["by_label"]} == {"[/]", ANSI}


@pytest.mark.parametrize("fmt", ["terminal", "markdown", "html", "json"])
def test_lone_surrogates_become_replacement_characters(surrogates, tmp_path, capsys, fmt):
    out = _report([str(surrogates)], tmp_path, fmt, capsys)
    out.encode("utf-8")  # strict: no surrogate left
    assert "x\ufffdy\ufffdz" in out
    if fmt == "json":
        assert json.loads(out)["tasks"][0]["task_id"] == "x\ufffdy\ufffdz"


def test_jaeger_export_of_hostile_text(hostile, surrogates, tmp_path):
    out = tmp_path / "jaeger.json"
    assert main(["export", str(hostile / "b.jsonl"), str(surrogates), "--jaeger-json", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    names = {s["operationName"] for t in data["data"] for s in t["spans"]}
    assert {f"invoke_agent {n}" for n in HOSTILE} <= names  # JSON carries text exactly
    assert "invoke_agent x\ufffdy\ufffdz" in names
    services = {p["serviceName"] for t in data["data"] for p in t["processes"].values()}
    assert services == {OSC, "x\ufffdy\ufffdz"}


def test_jaeger_export_of_null_and_numeric_span_names(tmp_path):
    request = to_otlp(task("t"))
    spans = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    spans[1]["name"], spans[2]["name"] = None, 5
    path = tmp_path / "names.jsonl"
    path.write_text(json.dumps(request) + "\n")
    out = tmp_path / "jaeger.json"
    main(["export", str(path), "--jaeger-json", str(out)])
    (trace,) = json.loads(out.read_text())["data"]
    assert [s["operationName"] for s in trace["spans"]][:3] == ["invoke_agent t", "", "5"]


def parallel_task(start: float) -> S:
    """A task whose one step runs two tools side by side: 2 s off the critical path."""
    t = start
    attempt = S("attempt 1", "attempt", t, t + 3, {}, [S("execute_tool a", "tool", t, t + 2),
                                                      S("execute_tool b", "tool", t + 1, t + 3)])
    return S("invoke_agent p", "agent", t, t + 3, {"agenttrace.task.id": "p"}, [S("agent_step 1", "step", t, t + 3, {}, [attempt])])


@pytest.mark.parametrize("parallel_first", [True, False])
def test_two_run_labels_where_only_one_ran_tools_in_parallel(tmp_path, capsys, parallel_first):
    """Only one run has the summary's "in parallel" row (an IndexError when it was the run that
    started first): every rendering shows the row, `-` for the other run."""
    first, second = (parallel_task(0), task("s", 10)) if parallel_first else (task("s", 0), parallel_task(10))
    write_trace(tmp_path / "a.jsonl", first, resource={"agenttrace.run.label": "first"})
    write_trace(tmp_path / "b.jsonl", second, resource={"agenttrace.run.label": "second"})
    args = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    values = ("2.00 s", "-") if parallel_first else ("-", "2.00 s")
    row = "in parallel, off the critical path"
    assert re.search(rf"{row}\s*│\s*{re.escape(values[0])}\s*│\s*{re.escape(values[1])}\s*│",
                     _report(args, tmp_path, "terminal", capsys))
    assert f"| {row} | {values[0]} | {values[1]} |" in _report(args, tmp_path, "markdown", capsys)
    assert f"<td>{row}</td><td>{values[0]}</td><td>{values[1]}</td>" in _report(args, tmp_path, "html", capsys)


def test_helpers_on_ordinary_and_hostile_text():
    for ordinary in ("weather-paris", "tool_call", "p50 12 ms (n=3)"):
        assert terminal_text(ordinary) == markdown_text(ordinary) == ordinary
    assert terminal_text("[/]") == "\\[/]" and terminal_text("\x9b2J\u202e") == "\\x9b2J\\u202e"
    assert markdown_text("a\nb\\c") == "a b\\\\c"
    assert markdown_code("traces/x") == "`traces/x`" and markdown_code("a``b") == "```a``b```"
    assert markdown_code("`a") == "`` `a ``"
