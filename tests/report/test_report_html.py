"""The HTML report: self-contained, escaped, and working in a real headless Chromium."""

from __future__ import annotations

import re

import pytest
from chromium import Browser, ensure_chromium
from test_report import known_task
from trace_builder import S, write_trace

from agenttrace.report.build import report_from_files
from agenttrace.report.compare import compare_labels
from agenttrace.report.html import report_html

PAYLOAD = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=2">'


def hostile_task() -> S:
    tool = S(f"execute_tool {PAYLOAD}", "tool", 0.5, 0.9, {"gen_ai.tool.name": IMG})
    attempt = S("attempt 1", "attempt", 0.0, 1.0, {"agenttrace.attempt.outcome": "ok"}, [
        S("chat m", "generation", 0.0, 0.4, {"gen_ai.usage.output_tokens": 5}),
        S("validate_arguments x", "validation", 0.4, 0.5, {"agenttrace.validation.ok": True}),
        tool,
    ])
    step = S("agent_step 1", "step", 0.0, 1.0, {"agenttrace.step.index": 1, "agenttrace.step.outcome": "tool_call"}, [attempt])
    return S(f"invoke_agent {PAYLOAD}", "agent", 0.0, 1.0, {"agenttrace.task.id": PAYLOAD, "agenttrace.task.outcome": "completed"}, [step])


@pytest.fixture
def report_page(tmp_path):
    write_trace(tmp_path / "a.jsonl", known_task(), hostile_task(), resource={"service.name": "t", "agenttrace.run.label": "A"})
    write_trace(tmp_path / "b.jsonl", known_task(), known_task(), resource={"service.name": "t", "agenttrace.run.label": "B"})
    report = report_from_files([str(tmp_path)], waterfalls=10)
    comparison = compare_labels(report, "A", "B", resamples=500)
    path = tmp_path / "report.html"
    path.write_text(report_html(report, comparison), encoding="utf-8")
    return report, comparison, path


def test_page_is_self_contained_and_escapes_trace_text(report_page):
    _, _, path = report_page
    html = path.read_text()
    assert PAYLOAD not in html and IMG not in html
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert html.count("<script>") == 1  # our own, nothing from the trace
    # nothing is fetched: no src/href attributes, no url() in CSS, no links but the SVG namespace
    assert not re.search(r"<[^>]*\s(src|href)\s*=", html) and "url(" not in html
    assert set(re.findall(r"https?://[^\"' ]+", html)) <= {"http://www.w3.org/2000/svg"}


@pytest.fixture(scope="session")
def chromium():
    try:
        return ensure_chromium()
    except RuntimeError as exc:
        pytest.fail(f"headless Chromium is needed for this test: {exc}")


def test_page_loads_in_chromium_with_the_expected_marks(report_page, chromium, tmp_path):
    report, comparison, path = report_page
    first = [t for t in report.tasks if t.waterfall][0]
    steps = {(t.run_label or "", s.index): s for t in report.tasks for s in t.steps}
    segment_marks = sum(
        1 for (label, index) in steps
        for f in type(first.segments).model_fields
        if sum(getattr(s.segments, f) for t in report.tasks if (t.run_label or "") == label
               for s in t.steps if s.index == index) > 0
    )
    dots = sum(len([v for v in vs if v is not None]) for vs in (
        [t.ttvtc_s for t in report.tasks], [t.wall_s for t in report.tasks],
        [s.wall_s for t in report.tasks for s in t.steps], [s.ttvtc_s for t in report.tasks for s in t.steps]))
    ratios = sum(1 for f in comparison.figures if f.ratio is not None and f.low and f.high)

    with Browser(chromium) as browser:
        browser.open(path)
        assert browser.errors() == []
        count = lambda sel: browser.evaluate(f"document.querySelectorAll({sel!r}).length")  # noqa: E731
        assert count('svg.waterfall[data-task="0"] .mark') == len(first.waterfall)
        assert count('svg.waterfall[data-task="0"] .mark.cp') == sum(s.on_critical_path for s in first.waterfall) > 0
        assert count("svg.segments .mark") == segment_marks
        assert count("svg.distributions .mark") == dots
        assert count("svg.comparison .mark") == ratios > 0
        assert count("svg.whatif .mark") == 10 * len([w for w in report.whatif if w.curve]) > 0
        # the payloads are text on the page, never code
        assert browser.evaluate("window.__pwned === undefined")
        assert PAYLOAD in browser.evaluate("document.body.textContent")
        # choosing another task shows its waterfall
        browser.evaluate("var s = document.getElementById('task-select'); s.value = '1'; "
                         "s.dispatchEvent(new Event('change')); 0")
        assert browser.evaluate("getComputedStyle(document.querySelector('svg.waterfall[data-task=\"1\"]')).display") != "none"
        assert browser.evaluate("getComputedStyle(document.querySelector('svg.waterfall[data-task=\"0\"]')).display") == "none"
        shot = tmp_path / "report.png"
        browser.screenshot(shot)
        assert browser.errors() == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
