"""Every command on every malformed trace file of the fuzz corpus (tests/fuzz_traces.py): exit 0
(read, problems listed) or 2 (nothing usable), never a traceback, within a time limit. Commands
run in-process (`agenttrace.cli.main`) so the corpus stays well under two minutes. Plus
property-based tests of the readers with hypothesis."""

from __future__ import annotations

import contextlib
import io
import json
import math
import signal
import time
import traceback
from pathlib import Path

import pytest

from agenttrace.cli import build_parser
from agenttrace.traces.load import load_spans, spans_from_document
from agenttrace.traces.otlp_json import decode_attributes
from tests.fuzz_traces import SAMPLES, Case, build_corpus

LIMIT_S = 10.0  # per command and file; the slowest (20k spans sharing an id) takes well under 1 s
SAMPLE = str(SAMPLES / "demo-baseline.jsonl")


class _TimeLimit(BaseException):
    pass


_PARSER = build_parser()  # what agenttrace.cli.main builds on each call (entry points: slow)


def main(argv: list[str]) -> int:
    args = _PARSER.parse_args(argv)
    return args.func(args)


def _alarm(signum, frame):
    raise _TimeLimit


def _run(argv: list[str]) -> tuple[int | None, str, float]:
    """Exit code (None: it raised), what it printed or the traceback, seconds taken."""
    out, err = io.StringIO(), io.StringIO()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 2
    except _TimeLimit:
        return None, f"no result within {LIMIT_S} s", LIMIT_S
    except BaseException:  # noqa: BLE001 - the traceback is the failure being looked for
        return None, traceback.format_exc(), time.perf_counter() - t0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    text = out.getvalue() + err.getvalue()
    if "Traceback (most recent call last)" in text:
        return None, text, time.perf_counter() - t0
    return code, text, time.perf_counter() - t0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Case]:
    return build_corpus(tmp_path_factory.mktemp("fuzz"), seed=19)


@pytest.fixture(scope="module")
def one_task(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Run A of `compare`: one recorded task (the whole sample would time its loading 700 times)."""
    path = tmp_path_factory.mktemp("a") / "a.jsonl"
    path.write_text(Path(SAMPLE).read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    return str(path)


def test_corpus_is_large_and_covers_the_issue(corpus: list[Case]) -> None:
    assert len(corpus) >= 500
    kinds = " ".join(c.kind for c in corpus)
    for needle in ("deep kvlist 10000", "deep array 30000", "Infinity", "NaN", "1e400", "9999999999", "wrong type",
                   "run label", "parent cycle", "self parent", "shared id x20000", "timestamp", "random bytes",
                   "empty", "truncated", "surrogate", "name None", "name 7", "jaeger"):
        assert needle in kinds, needle


# Where a crash comes from, for the failure message: the reader side, or a renderer.
_RENDERERS = ("report/terminal.py", "report/markdown.py", "report/html.py", "report/charts.py", "report/text.py",
              "report/model.py", "traces/jaeger_json.py", "commands/export.py")


def _owner(text: str) -> str:
    frames = [line for line in text.splitlines() if line.strip().startswith('File "') and "agenttrace/" in line]
    last = frames[-1] if frames else ""
    return "renderer" if any(r in last for r in _RENDERERS) else "reader/report"


COMMANDS = {
    "report": lambda p, tmp, a: ["report", p],
    "report-json": lambda p, tmp, a: ["report", p, "--format", "json"],
    "report-markdown": lambda p, tmp, a: ["report", p, "--format", "markdown"],
    "report-html": lambda p, tmp, a: ["report", p, "--format", "html", "-o", str(tmp / "r.html")],
    "compare": lambda p, tmp, a: ["compare", a, p, "--resamples", "50", "--format", "json"],
    "export-jaeger-json": lambda p, tmp, a: ["export", p, "--jaeger-json", str(tmp / "j.json")],
}
# Every command: 0 read (problems listed), 2 nothing usable (export's 1 is a collector that
# refused, which writing Jaeger JSON never meets).
ALLOWED: dict[str, tuple[int, ...]] = {}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_survives_the_corpus(command: str, corpus: list[Case], one_task: str, tmp_path: Path) -> None:
    failures = []
    slowest = (0.0, "")
    for case in corpus:
        code, text, seconds = _run(COMMANDS[command](str(case.path), tmp_path, one_task))
        slowest = max(slowest, (seconds, case.kind))
        if code not in ALLOWED.get(command, (0, 2)):
            tail = "\n".join(text.strip().splitlines()[-4:])
            failures.append(f"[{case.kind}] ({case.path.name}) exit {code} [{_owner(text)}]:\n{tail}")
    assert not failures, f"{len(failures)} of {len(corpus)} files failed `{command}`:\n\n" + "\n\n".join(failures[:25])
    assert slowest[0] < LIMIT_S, slowest


@pytest.mark.parametrize("content", [b"\x8b\x00\xffnot json at all\n", b"", b'{"resourceSpans": []}\n'])
def test_nothing_usable_is_exit_2_with_one_line(tmp_path: Path, content: bytes) -> None:
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(content)
    for command in (["report", str(junk)], ["compare", SAMPLE, str(junk)]):
        code, text, _ = _run(command)
        assert code == 2
        assert len(text.strip().splitlines()) == 1 and text.startswith(f"agenttrace {command[0]}: nothing to report")


def test_partial_problems_are_exit_0_and_listed(tmp_path: Path) -> None:
    f = tmp_path / "partial.jsonl"
    f.write_text(Path(SAMPLE).read_text(encoding="utf-8") + "{not json\n", encoding="utf-8")
    code, text, _ = _run(["report", str(f), "--format", "json"])
    assert code == 0
    assert any("not valid JSON" in p for p in json.loads(text)["problems"])


# --- property-based tests of the readers -------------------------------------------------------

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)
_any_value = st.fixed_dictionaries({}, optional={
    "stringValue": st.text(max_size=10) | _json, "intValue": st.integers() | st.text(max_size=5) | _json,
    "doubleValue": st.floats() | _json, "boolValue": _json, "arrayValue": _json, "kvlistValue": _json,
    "bytesValue": _json})
_span = st.fixed_dictionaries({}, optional={
    "traceId": st.sampled_from(["ab" * 16, "", "zz", 5]) | _json, "spanId": st.sampled_from(["cd" * 8, "00" * 8]) | _json,
    "parentSpanId": st.sampled_from(["cd" * 8, "ef" * 8, None]) | _json, "name": _json,
    "kind": st.integers() | _json, "startTimeUnixNano": st.integers() | st.floats() | _json,
    "endTimeUnixNano": st.integers() | st.floats() | _json, "status": _json, "events": _json, "links": _json,
    "attributes": st.lists(st.fixed_dictionaries({"key": st.sampled_from(["agenttrace.step.index", "x"]) | _json,
                                                  "value": _any_value}), max_size=4) | _json})
_request = st.fixed_dictionaries({"resourceSpans": st.lists(st.fixed_dictionaries({}, optional={
    "resource": _json, "scopeSpans": st.lists(st.fixed_dictionaries({}, optional={
        "scope": _json, "spans": st.lists(_span, max_size=4) | _json}), max_size=2) | _json}), max_size=2) | _json})


def _clean(value: object) -> None:
    """Values the readers hand on: finite numbers in int64 range, text without lone surrogates."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float):
            assert math.isfinite(v)
        elif isinstance(v, int) and not isinstance(v, bool):
            assert -(2**63) <= v < 2**64
        elif isinstance(v, str):
            v.encode("utf-8")
        elif isinstance(v, dict):
            stack += [*v.keys(), *v.values()]
        elif isinstance(v, (list, tuple)):
            stack += list(v)


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(_request)
def test_otlp_reader_never_raises_and_hands_on_clean_values(request: dict) -> None:
    problems: list[str] = []
    try:
        spans = spans_from_document(request, "f:1", problems)
    except (TypeError, ValueError, KeyError, AttributeError):
        return  # the loader lists these as the line's problem (load_file)
    for s in spans:
        assert isinstance(s.name, str) and isinstance(s.span_id, str) and isinstance(s.trace_id, str)
        assert isinstance(s.start_ns, int) and isinstance(s.end_ns, int)
        _clean([s.name, s.start_ns, s.end_ns, s.attributes, s.resource, [(e.name, e.time_ns, e.attributes) for e in s.events]])


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(st.lists(st.fixed_dictionaries({"key": _json, "value": _any_value}), max_size=6) | _json)
def test_attribute_decoder_keeps_only_clean_values(items: object) -> None:
    try:
        attrs = decode_attributes(items)  # type: ignore[arg-type]
    except (TypeError, ValueError, KeyError, AttributeError):
        return
    _clean(attrs)


@hypothesis.settings(max_examples=50, deadline=None)
@hypothesis.given(st.binary(max_size=300))
def test_loading_random_bytes_lists_problems_only(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    f = tmp_path_factory.mktemp("bytes") / "b.jsonl"
    f.write_bytes(data)
    loaded = load_spans([f])
    assert all(isinstance(p, str) for p in loaded.problems)


# --- each failure class of issue 19, on one file ------------------------------------------------


def _one_task(tmp_path: Path, edit) -> Path:
    req = json.loads(Path(SAMPLE).read_text(encoding="utf-8").splitlines()[0])
    spans = [s for rs in req["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    text = edit(req, spans)
    path = tmp_path / "t.jsonl"
    path.write_text((text if isinstance(text, str) else json.dumps(req)) + "\n", encoding="utf-8")
    return path


def _segment(span: dict) -> str | None:
    return next((a["value"].get("stringValue") for a in span["attributes"] if a["key"] == "agenttrace.segment"), None)


def test_wrong_typed_attribute_is_a_problem_and_the_span_is_kept(tmp_path: Path) -> None:
    from agenttrace.report.build import report_from_files

    def edit(req, spans):
        for s in spans:
            for a in s["attributes"]:
                if a["key"] == "agenttrace.step.index":
                    a["value"] = {"stringValue": "three"}
    path = _one_task(tmp_path, edit)
    report = report_from_files([str(path)])
    assert len(report.tasks) == 1
    (problem, *_) = [p for p in report.problems if "agenttrace.step.index" in p]
    assert problem.startswith(f"{path}:1: span ") and "is str 'three', not an integer; left out" in problem


def test_parent_cycle_and_self_parent_keep_the_task_and_are_listed(tmp_path: Path) -> None:
    from agenttrace.report.build import report_from_files

    def cycle(req, spans):
        agent = next(s for s in spans if _segment(s) == "agent")
        step = next(s for s in spans if _segment(s) == "step")
        agent["parentSpanId"] = step["spanId"]  # the agent under its own step: a cycle
    report = report_from_files([str(_one_task(tmp_path, cycle))])
    assert len(report.tasks) == 1 and any("parent cycle" in p for p in report.problems)

    def self_parent(req, spans):
        agent = next(s for s in spans if _segment(s) == "agent")
        agent["parentSpanId"] = agent["spanId"]
    report = report_from_files([str(_one_task(tmp_path, self_parent))])
    assert len(report.tasks) == 1 and any("names itself as its parent" in p for p in report.problems)


def test_duplicate_ids_are_renamed_in_linear_time(tmp_path: Path) -> None:
    from agenttrace.report.span_tree import SpanTree

    def dupes(req, spans):
        req["resourceSpans"][0]["scopeSpans"][0]["spans"] = [{**spans[0], "spanId": "00000000000000aa"}
                                                            for _ in range(20_000)]
    loaded = load_spans([_one_task(tmp_path, dupes)])
    t0 = time.perf_counter()
    tree = SpanTree(loaded.spans)
    assert time.perf_counter() - t0 < 2.0  # was 38 s at 16k (quadratic)
    assert len(tree.by_id) == 20_000 and "00000000000000aa_19999" in {k[1] for k in tree.by_id}


def test_deep_nesting_is_cut_with_a_problem_and_lone_surrogates_are_replaced(tmp_path: Path) -> None:
    deep = '{"kvlistValue":{"values":[{"key":"k","value":' * 100 + '{"intValue":"1"}' + "}]}}" * 100

    def edit(req, spans):
        spans[0]["attributes"].append({"key": "deep", "value": "__DEEP__"})
        spans[0]["name"] = "a__S__b"
        return json.dumps(req).replace('"__DEEP__"', deep).replace("__S__", "\\ud800")
    loaded = load_spans([_one_task(tmp_path, edit)])
    first = loaded.spans[0]
    assert first.name == "a\ufffdb"
    assert any("nested deeper than 32 levels" in p for p in loaded.problems)


def test_bad_times_drop_the_span_with_a_problem(tmp_path: Path) -> None:
    def edit(req, spans):
        spans[0]["startTimeUnixNano"] = "-5"
        spans[1]["endTimeUnixNano"] = str(2**70)
    loaded = load_spans([_one_task(tmp_path, edit)])
    assert len([p for p in loaded.problems if "are not nanosecond times" in p]) == 2
