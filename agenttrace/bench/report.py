"""`agenttrace bench report`: how long and how much memory loading and analysing a large trace
takes. Generates synthetic traces of realistic shape (tasks of 1-4 steps, ~10% retried attempts,
speculative generations with per-round events, parse / validation / tool / network spans, a few
parallel tool calls), written as our exporter writes them (OTLP/JSON, 512 spans per line), then
loads and analyses each in a fresh process and prints the sizes side by side.

Each path in a fresh process, side by side (issue 17): `legacy` is today's one pass, `fast` the
stream of whole traces, `clickhouse` the same traces read back from the exporter's table over chdb,
`summary` the stream folded into a summary in bounded memory (`report --sample`). Traces above
FILE_SPANS spans are written as a folder of files of FILE_SPANS spans each.
Targets (issue 17): 1,000,000 spans end to end in <= 15 s and <= 1 GB peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agenttrace import semconv as sc

BATCH = 512  # spans per line, as the BatchSpanProcessor exports them
TARGET_S_PER_MILLION = 15.0
TARGET_MB = 1024.0
FILE_SPANS = 1_000_000  # spans per file of a larger trace (a folder)
SUMMARY_SAMPLE = 100_000  # the summary path's sample per distribution
# the synthetic agent, its model and its one tool
_AGENT, _MODEL, _TOOL = "bench", "bench-model", "weather"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="time and peak memory to load and analyse synthetic traces (default 100k and 1M spans)")
    p.add_argument("--spans", type=int, nargs="+", default=[100_000, 1_000_000], help="trace sizes to measure")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", metavar="DIR", help="keep the generated traces in DIR")
    p.add_argument("--paths", default=",".join(DEFAULT_PATHS),
                   help="comma-separated: legacy (today's one pass), fast (the stream of whole traces), clickhouse (the "
                        "same traces from ClickHouse's exporter table, over chdb), summary (the stream folded into a "
                        f"summary in bounded memory, samples of {SUMMARY_SAMPLE:,}) (default: the first three)")
    p.add_argument("--json", action="store_true",
                   help='print a list of records {"spans", "path", "load_s", "analyse_s", "peak_mb"}')
    p.set_defaults(func=run)


# The writer below formats OTLP/JSON by hand rather than building SDK spans for the official
# encoder (`opentelemetry-exporter-otlp-json-common`'s encode_spans, which our trace-file exporter
# uses): that encoder costs ~106 us a span against ~62 us by hand (20k spans), so making the
# 1M-span trace (~80 s) would take ~45 s longer. tests/test_bench_report.py checks that each line
# written is what the official encoder writes for the same spans.
def _attr(key: str, value: object) -> str:
    if isinstance(value, bool):
        v = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}
    elif isinstance(value, float):
        v = {"doubleValue": value}
    else:
        v = {"stringValue": str(value)}
    return json.dumps({"key": key, "value": v}, separators=(",", ":"))


class _Writer:
    """Writes spans as OTLP/JSON lines of BATCH spans each, one resource (run label) per line."""

    def __init__(self, path: Path, labels: tuple[str, ...]) -> None:
        self.f = path.open("w", encoding="utf-8")
        self.files = 1
        self.heads = {}
        for label in labels:
            res = ",".join(_attr(k, v) for k, v in ((sc.SERVICE_NAME, "bench-agent"), (sc.RUN_LABEL, label),
                                                    (sc.RUN_ID, f"bench-{label}")))
            self.heads[label] = ('{"resourceSpans":[{"resource":{"attributes":[' + res + ']},"scopeSpans":[{"scope":'
                                 '{"name":"agenttrace","version":"0.1.0"},"spans":[')
        self.bufs: dict[str, list[str]] = {label: [] for label in labels}
        self.label = labels[0]
        self.count = 0
        self.next_id = 1

    def new_id(self) -> str:
        self.next_id += 1
        return f"{self.next_id - 1:016x}"

    def raw(self, text: str) -> None:
        buf = self.bufs[self.label]
        buf.append(text)
        self.count += 1
        if len(buf) == BATCH:
            self.flush(self.label)

    def span(self, trace: str, parent: str | None, name: str, segment: str, start: int, end: int,
             attrs: tuple[tuple[str, object], ...] = (), events: str = "", sid: str | None = None) -> str:
        sid = sid or self.new_id()
        attributes = ",".join([_attr(sc.SEGMENT, segment), *(_attr(k, v) for k, v in attrs)])
        parent_field = f',"parentSpanId":"{parent}"' if parent else ""
        events_field = f',"events":[{events}]' if events else ""  # the encoder leaves out empty lists
        self.raw(
            f'{{"traceId":"{trace}","spanId":"{sid}"{parent_field},"flags":256,"name":"{name}","kind":1,'
            f'"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":[{attributes}]'
            f'{events_field},"status":{{}}}}'
        )
        return sid

    def flush(self, label: str) -> None:
        buf = self.bufs[label]
        if buf:
            self.f.write(self.heads[label] + ",".join(buf) + "]}]}]}\n")
            buf.clear()

    def close(self) -> None:
        for label in self.bufs:
            self.flush(label)
        self.f.close()

    def rotate(self, path: Path) -> None:
        """Go on in a new file (between tasks: a trace stays in one file)."""
        self.close()
        self.f = path.open("w", encoding="utf-8")
        self.files += 1


def _rounds(rng: random.Random, t: int, n: int, k: int) -> tuple[str, int, int, float, float, int]:
    events, acc_total, drafted_total, draft_s, verify_s = [], 0, 0, 0.0, 0.0
    for _ in range(n):
        d = k if rng.random() < 0.8 else rng.randint(0, k)
        a = 0
        while a < d and rng.random() < 0.7:
            a += 1
        ds, vs = rng.uniform(1e-5, 3e-5), rng.uniform(0.02, 0.04)
        t += int((ds + vs) * 1e9)
        attrs = ",".join((_attr(sc.ROUND_DRAFTED, d), _attr(sc.ROUND_ACCEPTED, a), _attr(sc.ROUND_DRAFT_S, ds),
                          _attr(sc.ROUND_VERIFY_S, vs)))
        events.append(f'{{"timeUnixNano":"{t}","name":"{sc.EVENT_SPECULATE_ROUND}","attributes":[{attrs}]}}')
        acc_total, drafted_total, draft_s, verify_s = acc_total + a, drafted_total + d, draft_s + ds, verify_s + vs
    return ",".join(events), acc_total, drafted_total, draft_s, verify_s, t


def _generation(w: _Writer, rng: random.Random, trace: str, parent: str, t: int, speculative: bool) -> int:
    prefill = int(rng.uniform(0.05, 0.3) * 1e9)
    out_tokens = rng.randint(8, 60)
    attrs: list[tuple[str, object]] = [(sc.GEN_AI_OPERATION_NAME, sc.OP_CHAT), (sc.GEN_AI_REQUEST_MODEL, _MODEL),
                                       (sc.GEN_AI_USAGE_INPUT_TOKENS, rng.randint(200, 900)),
                                       (sc.GEN_AI_USAGE_OUTPUT_TOKENS, out_tokens)]
    events, end = "", t + prefill
    if speculative:
        k = 3
        events, acc, drafted, ds, vs, end = _rounds(rng, t + prefill, max(1, out_tokens // 3), k)
        attrs += [(sc.SPEC_METHOD, "prompt_lookup"), (sc.SPEC_NUM_SPECULATIVE_TOKENS, k),
                  (sc.SPEC_ROUNDS, max(1, out_tokens // 3)), (sc.SPEC_DRAFT_TOKENS, drafted),
                  (sc.SPEC_ACCEPTED_TOKENS, acc), (sc.SPEC_DRAFT_S, ds), (sc.SPEC_VERIFY_S, vs),
                  (sc.SPEC_PREFILL_S, prefill / 1e9)]
    else:
        end += int(out_tokens * rng.uniform(0.02, 0.04) * 1e9)
        attrs.append((sc.SPEC_METHOD, "none"))
    end += 100_000
    gen = w.span(trace, parent, sc.generation_span_name(_MODEL), sc.Segment.GENERATION, t, end, tuple(attrs), events)
    w.span(trace, gen, sc.SPAN_PREFILL, sc.Segment.PREFILL, t, t + prefill, ((sc.TOKENS, 500),))
    return end


def _attempt(w: _Writer, rng: random.Random, trace: str, step: str, index: int, t: int, final: bool, fail: bool,
             speculative: bool) -> int:
    start = t
    attempt_id = w.new_id()
    t = _generation(w, rng, trace, attempt_id, t + 50_000, speculative)
    result = sc.StepOutcome.FINAL_ANSWER if final else sc.StepOutcome.TOOL_CALL
    ok_parse = not (fail and rng.random() < 0.5)
    parse_error = sc.AttemptOutcome.PARSE_ERROR
    w.span(trace, attempt_id, sc.SPAN_PARSE, sc.Segment.PARSE, t, t + 120_000,
           ((sc.PARSE_OK, ok_parse), (sc.PARSE_RESULT, result) if ok_parse else (sc.ERROR_TYPE, parse_error)))
    t += 120_000
    outcome = sc.AttemptOutcome.OK if not fail else (parse_error if not ok_parse else sc.AttemptOutcome.VALIDATION_ERROR)
    if ok_parse and not final:
        valid = not fail
        w.span(trace, attempt_id, sc.validation_span_name(_TOOL), sc.Segment.VALIDATION, t, t + 200_000,
               ((sc.GEN_AI_TOOL_NAME, _TOOL), (sc.VALIDATION_OK, valid), (sc.DECISION_CORRECT, valid)))
        t += 200_000
        if valid:
            parallel = rng.random() < 0.05
            end_tools = t
            for i in range(2 if parallel else 1):
                ts = t + i * 300_000
                te = ts + int(rng.uniform(0.001, 0.2) * 1e9)
                tool = w.span(trace, attempt_id, sc.tool_span_name(_TOOL), sc.Segment.TOOL, ts, te, ((sc.GEN_AI_TOOL_NAME, _TOOL),))
                if rng.random() < 0.5:
                    w.span(trace, tool, "GET", sc.Segment.NETWORK, ts + 100_000, te - 100_000, ((sc.HTTP_REQUEST_METHOD, "GET"),))
                end_tools = max(end_tools, te)
            t = end_tools
    t += 30_000
    w.span(trace, step, sc.attempt_span_name(index), sc.Segment.ATTEMPT, start, t,
           ((sc.ATTEMPT_INDEX, index), (sc.ATTEMPT_OUTCOME, outcome)), sid=attempt_id)
    return t


def generate(path: Path, spans: int, seed: int = 0, file_spans: int | None = None) -> int:
    """Write a synthetic trace of about `spans` spans (two run labels, half each); returns the
    number of spans written. With `file_spans`, `path` is a folder of files of that many spans."""
    rng = random.Random(seed)
    if file_spans:
        path.mkdir(parents=True, exist_ok=True)
    w = _Writer(path / "part-0001.jsonl" if file_spans else path, ("baseline", "speculative"))
    t = 1_700_000_000_000_000_000
    task = 0
    while w.count < spans:
        if file_spans and w.count >= w.files * file_spans:
            w.rotate(path / f"part-{w.files + 1:04d}.jsonl")
        task += 1
        speculative = task % 2 == 0
        w.label = "speculative" if speculative else "baseline"
        trace = f"{rng.getrandbits(128):032x}"
        agent_id = w.new_id()
        start = t
        n_steps = rng.choices((1, 2, 3, 4), weights=(2, 5, 2, 1))[0]
        for s in range(1, n_steps + 1):
            step_id = w.new_id()
            step_start = t
            final = s == n_steps
            attempts = 2 if rng.random() < 0.1 else 1
            for a in range(1, attempts + 1):
                t = _attempt(w, rng, trace, step_id, a, t, final, a < attempts, speculative)
            t += 20_000
            outcome = sc.StepOutcome.FINAL_ANSWER if final else sc.StepOutcome.TOOL_CALL
            w.span(trace, agent_id, sc.step_span_name(s), sc.Segment.STEP, step_start, t,
                   ((sc.STEP_INDEX, s), (sc.STEP_OUTCOME, outcome), (sc.STEP_ATTEMPTS, attempts)), sid=step_id)
        t += 10_000
        w.span(trace, None, sc.agent_span_name(_AGENT), sc.Segment.AGENT, start, t,
               ((sc.GEN_AI_OPERATION_NAME, sc.OP_INVOKE_AGENT), (sc.GEN_AI_AGENT_NAME, _AGENT), (sc.TASK_ID, f"task-{task}"),
                (sc.TASK_OUTCOME, sc.TaskOutcome.COMPLETED), (sc.STEPS, n_steps)), sid=agent_id)
        t += 1_000_000
    w.close()
    return w.count


PATHS = ("legacy", "fast", "clickhouse", "summary")
DEFAULT_PATHS = ("legacy", "fast", "clickhouse")


def measure(path: str, mode: str, store: str | None = None) -> dict[str, float]:
    """Load and analyse one trace in this process by one path: seconds of each phase, peak RSS.

    legacy: today's one pass (load every span, then analyse the tree). fast: the stream of whole
    traces (traces/stream.py), its reading timed apart from the analysis of each batch. clickhouse:
    the same traces read back from `store` (a chdb folder the parent filled), SQL and rows timed
    as the load. summary: fast, folded into a summary in bounded memory."""
    from agenttrace.report.batched import ReportBuilder

    if mode == "legacy":
        from agenttrace.report.build import build_report
        from agenttrace.traces.load import load_spans

        t0 = time.perf_counter()
        loaded = load_spans([path])
        t1 = time.perf_counter()
        report = build_report(loaded.spans, [path], loaded.problems)
        load_s, analyse_s = t1 - t0, time.perf_counter() - t1
        spans = len(loaded.spans)
    else:
        from agenttrace.traces.stream import no_gc

        problems: list[str] = []
        builder = ReportBuilder(summary=SUMMARY_SAMPLE if mode == "summary" else None)
        if mode in ("fast", "summary"):
            from agenttrace.traces.stream import stream_traces

            batches = (b for b in stream_traces([path], problems))
            add = lambda b: builder.add(b.spans, b.seq)  # noqa: E731
            sources = [path]
        else:
            from agenttrace.traces.clickhouse import ClickHouseQuery, connect, read_traces

            assert store is not None
            query = ClickHouseQuery(store, "otel_traces")
            batches = read_traces(connect(store), query, problems)
            add = builder.add
            sources = [query.describe()]
        load_s = analyse_s = 0.0
        with no_gc():
            while True:
                t0 = time.perf_counter()
                batch = next(batches, None)
                t1 = time.perf_counter()
                load_s += t1 - t0
                if batch is None:
                    break
                add(batch)
                analyse_s += time.perf_counter() - t1
            t1 = time.perf_counter()
            report = builder.report(sources, problems)
            analyse_s += time.perf_counter() - t1
        spans = builder.spans
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB
    return {"spans": spans, "tasks": report.run.tasks + report.run.partial_tasks, "load_s": load_s, "analyse_s": analyse_s, "peak_mb": peak_mb,
            "problems": len(report.problems)}


def fill_store(path: str, store: str) -> int:
    """Export a trace file into a chdb folder with the exporter's schema (not measured)."""
    from agenttrace.traces.clickhouse import connect
    from agenttrace.traces.clickhouse_export import export_spans
    from agenttrace.traces.otlp_file import iter_spans

    problems: list[str] = []
    return export_spans(connect(store), "otel_traces", (s for line in iter_spans([path], problems) for s in line))


@dataclass
class Row:
    spans: int
    path: str
    file_mb: float
    tasks: int
    load_s: float
    analyse_s: float
    peak_mb: float


def _child(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "agenttrace.bench.report", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise SystemExit(f"agenttrace bench report: unknown path(s) {', '.join(unknown)}; choose from {', '.join(PATHS)}")
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="agenttrace-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    # progress on stderr: with --json, stdout carries only the records
    console = Console(width=max(150, Console().width), stderr=args.json)
    for n in args.spans:
        big = n > FILE_SPANS
        path = folder / (f"synthetic-{n}" if big else f"synthetic-{n}.jsonl")
        t0 = time.perf_counter()
        written = generate(path, n, args.seed, FILE_SPANS if big else None)
        size_mb = sum(f.stat().st_size for f in (path.iterdir() if big else [path])) / 1e6
        console.print(f"generated {written} spans ({size_mb:.0f} MB) in {time.perf_counter() - t0:.1f} s")
        store = None
        if "clickhouse" in paths:
            store = f"chdb:{folder / f'chdb-{n}'}"
            t0 = time.perf_counter()
            filled = _child("--fill", str(path), store)["rows"]
            console.print(f"exported {filled} spans into {store} (the exporter's table) in {time.perf_counter() - t0:.1f} s")
        for mode in paths:
            try:
                m = _child(str(path), mode, *([store] if mode == "clickhouse" and store else []))
            except RuntimeError as exc:
                console.print(f"[red]measuring {path} ({mode}) failed:[/]\n{exc}")
                return 1
            rows.append(Row(int(m["spans"]), mode, size_mb, int(m["tasks"]), m["load_s"], m["analyse_s"],
                            m["peak_mb"]))
            console.print(f"  {mode}: {m['load_s'] + m['analyse_s']:.1f} s, {m['peak_mb']:.0f} MB peak")
        if not args.keep:
            if big:
                shutil_rmtree(path)
            else:
                os.remove(path)
            if store:
                import shutil

                shutil.rmtree(store.removeprefix("chdb:"), ignore_errors=True)
    if args.json:
        print(json.dumps([{"spans": r.spans, "path": r.path, "load_s": round(r.load_s, 3), "analyse_s": round(r.analyse_s, 3),
                           "peak_mb": round(r.peak_mb, 1)} for r in rows], indent=2))
    else:
        _table(console, rows, Table)
    if not args.keep:
        shutil_rmtree(folder)
    return 0


def shutil_rmtree(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _table(console, rows: list[Row], table_type) -> None:
    table = table_type(title=f"load and analyse a trace, each path in a fresh process (targets: 1M spans in <= "
                             f"{TARGET_S_PER_MILLION:g} s and <= {TARGET_MB:g} MB)", title_justify="left")
    for col in ("spans", "path", "file MB", "tasks", "load s", "analyse s", "total s", "us/span", "peak MB",
                "vs legacy", "time / target", "memory / target"):
        table.add_column(col, justify="right" if col != "path" else "left", no_wrap=True)
    legacy = {r.spans: r.load_s + r.analyse_s for r in rows if r.path == "legacy"}
    for r in rows:
        total = r.load_s + r.analyse_s
        scale = r.spans / 1e6
        base = legacy.get(r.spans)
        table.add_row(f"{r.spans:,}", r.path, f"{r.file_mb:.0f}", f"{r.tasks:,}", f"{r.load_s:.1f}", f"{r.analyse_s:.1f}",
                      f"{total:.1f}", f"{1e6 * total / r.spans:.1f}", f"{r.peak_mb:.0f}",
                      f"{base / total:.2f}x" if base and r.path != "legacy" else "-",
                      f"{total / (TARGET_S_PER_MILLION * scale):.2f}",
                      f"{r.peak_mb / TARGET_MB:.2f}" if r.spans >= 1_000_000 else "-")
    console.print(table)


if __name__ == "__main__":
    if sys.argv[1] == "--fill":
        print(json.dumps({"rows": fill_store(sys.argv[2], sys.argv[3])}))
    else:
        print(json.dumps(measure(sys.argv[1], sys.argv[2], *sys.argv[3:4])))
