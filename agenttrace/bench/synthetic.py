"""Synthetic traces of realistic shape for `agenttrace bench report`: tasks of 1-4 steps, ~10%
retried attempts, speculative generations with per-round events, parse / validation / tool /
network spans, a few parallel tool calls; two run labels, half each. Written as our exporter
writes them (OTLP/JSON, BATCH spans per line); a large trace as a folder of files."""

from __future__ import annotations

import json
import random
from pathlib import Path

from agenttrace import semconv as sc

BATCH = 512  # spans per line, as the BatchSpanProcessor exports them
# the synthetic agent, its model and its one tool
_AGENT, _MODEL, _TOOL = "bench", "bench-model", "weather"


# The writer below formats OTLP/JSON by hand rather than building SDK spans for the official
# encoder (`opentelemetry-exporter-otlp-json-common`'s encode_spans, which our trace-file exporter
# uses): that encoder costs ~106 us a span against ~62 us by hand (20k spans), so making the
# 1M-span trace (~80 s) would take ~45 s longer. tests/bench/test_bench_report.py checks that each line
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
