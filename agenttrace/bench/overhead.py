"""`agenttrace bench overhead`: what tracing costs an agent, arm against arm in one run.

The same agent tasks run under each telemetry configuration in turn, the order rotating every
repeat so the machine's drift falls on every arm alike:

    off        the OpenTelemetry no-op tracer: what an uninstrumented agent pays (nothing)
    file       our default: OTLP/JSON lines to a trace file, default detail
    file+otlp  the file and OTLP/HTTP to a collector on loopback (a sink that answers 200)
    fine       the file at detail `fine` (a draft and a verify span per speculation round)
    content    the file with content capture on (prompts, outputs, arguments: redacted, capped)

Two workloads. `scripted`: a model that answers at once (a tool call, then the answer, with
speculation rounds to record) and a tool that returns at once, so a task is nearly all tracing:
its extra time over `off`, divided by the spans it wrote, is the cost per span. `bundled`: the
reference agent on the bundled model, where a step takes seconds: its spans per step and step
time turn the cost per span into the share of a step's wall time (a direct A/B of steps that long
cannot resolve 1%; it is printed too, with its interval, as the check that nothing is far off).
"""

from __future__ import annotations

import argparse
import http.server
import json
import statistics
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from tempfile import TemporaryDirectory

from opentelemetry.trace import NoOpTracer

from agenttrace.clock import Clock, default_clock
from agenttrace.core.chat import CancelToken, Generation, GenerationParams, Message, SpecRound
from agenttrace.core.tools import Tool
from agenttrace.report.stats import RatioEstimate, bootstrap_paired_ratio
from agenttrace.runtime.agent import Agent, AgentConfig
from agenttrace.runtime.tasks import Task
from agenttrace.telemetry import Telemetry
from agenttrace.telemetry.content import ContentPolicy

ARMS = ("off", "file", "file+otlp", "fine", "content")


class _Off(Telemetry):
    """Telemetry whose tracer is OpenTelemetry's no-op one: spans cost what they cost a process
    that installed no SDK."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tracer = NoOpTracer()


class _Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def telemetry_for(arm: str, folder: Path, index: int, otlp: str, clock: Clock) -> Telemetry:
    trace = folder / f"{_stem(arm)}.{index}.jsonl"
    if arm == "off":
        return _Off(clock=clock)
    if arm == "file":
        return Telemetry(clock=clock, trace_file=trace)
    if arm == "file+otlp":
        return Telemetry(clock=clock, trace_file=trace, otlp_endpoint=otlp, otlp_protocol="http/protobuf")
    if arm == "fine":
        return Telemetry(clock=clock, trace_file=trace, detail="fine")
    if arm == "content":
        return Telemetry(clock=clock, trace_file=trace, content=ContentPolicy(enabled=True))
    raise ValueError(f"unknown arm {arm!r}; the arms are {', '.join(ARMS)}")


class InstantModel:
    """A `ChatModel` that answers at once, on the real clock: a tool call, then a final answer,
    each with `rounds` speculation rounds to record (so `fine` detail has its spans)."""

    provider_name = "scripted"
    model_name = "instant"

    def __init__(self, clock: Clock, rounds: int = 4) -> None:
        self.clock, self.rounds, self.calls = clock, rounds, 0

    def chat(self, messages: Sequence[Message], params: GenerationParams, *, cancel: CancelToken | None = None) -> Generation:
        self.calls += 1
        text = ('{"tool": "echo", "arguments": {"text": "hi"}}' if self.calls % 2 else '{"answer": "done"}')
        now = self.clock.now_ns
        start = now()
        rounds = tuple(SpecRound(now(), now(), now(), now(), 3, 2, 3) for _ in range(self.rounds))
        end = now()
        return Generation(text=text, input_tokens=200, output_tokens=12, finish_reason="stop", start_ns=start,
                          end_ns=end, prefill_start_ns=start, prefill_end_ns=start, first_token_ns=start,
                          method="prompt_lookup", num_speculative_tokens=3, rounds=rounds)


def _echo(text: str) -> dict:
    return {"text": text}


# On a thread: a worker process per call would add its own cost to every arm and hide tracing's.
ECHO = Tool(name="echo", description="Returns its text.", function=_echo, isolation="thread",
            parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                        "additionalProperties": False})


@dataclass
class ArmRuns:
    task_s: list[float] = field(default_factory=list)
    spans: int = 0
    steps: int = 0


def _stem(arm: str) -> str:
    return arm.replace("+", "_")


def _spans_in(folder: Path, arm: str) -> int:
    count = 0
    for f in folder.glob(f"{_stem(arm)}.*.jsonl"):
        for line in f.read_text().splitlines():
            for rs in json.loads(line).get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    count += len(ss.get("spans", []))
    return count


def measure(make_agent: Callable[[Telemetry], Agent], tasks: Sequence[Task], arms: Sequence[str], repeats: int,
            clock: Clock, progress: Callable[[], None] = lambda: None) -> dict[str, ArmRuns]:
    """Every task under every arm, `repeats` times, the arm order rotating each repeat; one
    Telemetry (and trace file) per arm and repeat, shut down outside the timed part."""
    runs = {a: ArmRuns() for a in arms}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    otlp = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    try:
        with TemporaryDirectory() as tmp:
            folder = Path(tmp)
            # Untimed, once: imports, the prefix cache's first fill and the allocator's growth must
            # not fall on whichever arm runs first.
            warm = _Off(clock=clock)
            for task in tasks:
                make_agent(warm).run(task)
            for r in range(repeats):
                order = list(arms[r % len(arms):]) + list(arms[: r % len(arms)])
                for arm in order:
                    tel = telemetry_for(arm, folder, r, otlp, clock)
                    agent = make_agent(tel)
                    for task in tasks:
                        start = clock.now_ns()
                        result = agent.run(task)
                        runs[arm].task_s.append((clock.now_ns() - start) / 1e9)
                        runs[arm].steps += len(result.steps)
                        progress()
                    tel.shutdown()
            for arm in arms:
                runs[arm].spans = _spans_in(folder, arm) if arm != "off" else 0
    finally:
        server.shutdown()
    return runs


@dataclass(frozen=True)
class OverheadRow:
    arm: str
    ratio: RatioEstimate  # task time, arm / off, paired per task and repeat
    us_per_span: float | None  # extra time per span written, from the medians
    spans_per_step: float | None
    share_of_step: float | None  # of the bundled model's mean step wall time


def rows(runs: dict[str, ArmRuns], *, step_s: float | None = None, spans_per_step: dict[str, float] | None = None) -> list[OverheadRow]:
    off = runs["off"].task_s
    out = []
    for arm, r in runs.items():
        if arm == "off":
            continue
        pairs = list(zip(off, r.task_s, strict=True))
        ratio = bootstrap_paired_ratio(pairs)
        per_task = r.spans / len(r.task_s) if r.task_s else 0
        extra_s = statistics.median(b - a for a, b in pairs) if pairs else 0.0  # paired, as the ratio
        us = extra_s / per_task * 1e6 if per_task else None
        sps = (spans_per_step or {}).get(arm) or (r.spans / r.steps if r.steps else None)
        share = us * 1e-6 * sps / step_s if us is not None and sps and step_s else None
        out.append(OverheadRow(arm, ratio, us, sps, share))
    return out


def _ratio_text(e: RatioEstimate) -> str:
    if e.ratio is None:
        return "n/a"
    return f"{e.ratio:.4f} [{e.low:.4f}, {e.high:.4f}] {e.verdict}"


def markdown(scripted: list[OverheadRow], bundled: list[OverheadRow] | None, step_s: float | None, header: str) -> str:
    lines = [header, "", "| arm | scripted task time / off (95% CI) | µs per span | spans per step | share of a bundled step |"
             + (" bundled task time / off (95% CI) |" if bundled else ""),
             "|---|---|---|---|---|" + ("---|" if bundled else "")]
    by_arm = {r.arm: r for r in bundled or []}
    for r in scripted:
        cells = [r.arm, _ratio_text(r.ratio), f"{r.us_per_span:.1f}" if r.us_per_span is not None else "n/a",
                 f"{r.spans_per_step:.1f}" if r.spans_per_step else "n/a",
                 f"{r.share_of_step:.3%}" if r.share_of_step is not None else "n/a"]
        if bundled:
            cells.append(_ratio_text(by_arm[r.arm].ratio) if r.arm in by_arm else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    if step_s:
        lines += ["", f"Bundled model: mean step wall time {step_s:.2f} s (arm off)."]
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("overhead", help="what tracing costs an agent: telemetry off, file, file+OTLP, fine detail, content")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats of the scripted tasks (default 5)")
    p.add_argument("--tasks", type=int, default=40, help="scripted tasks per arm and repeat (default 40)")
    p.add_argument("--bundled-tasks", type=int, default=2,
                   help="tasks of the reference agent on the bundled model per arm and repeat; 0 skips it (default 2)")
    p.add_argument("--bundled-repeats", type=int, default=2, help="interleaved repeats on the bundled model (default 2)")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, 'off' always included (default {','.join(ARMS)})")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads for the bundled model")
    p.set_defaults(func=run)


def _bundled(args: argparse.Namespace, arms: list[str], clock: Clock, progress) -> tuple[dict[str, ArmRuns], float]:
    import torch

    from agenttrace.bench.workloads import EXAMPLES, default_tools, tool_call_tasks
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.models import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model()
    model = LocalChatModel(loaded.model, loaded.tokenizer, name=loaded.name, drafter=PromptLookupDrafter(),
                           num_speculative_tokens=8, adaptive=True, prefix_cache=True)
    tools = default_tools()
    config = AgentConfig(name="function-calling-agent", max_steps=4, max_attempts=3)
    runs = measure(lambda tel: Agent(model, tools, telemetry=tel, examples=EXAMPLES, config=config),
                   tool_call_tasks()[: args.bundled_tasks], arms, args.bundled_repeats, clock, progress)
    off = runs["off"]
    return runs, sum(off.task_s) / max(1, off.steps)  # the mean step's wall time, untraced


def run(args: argparse.Namespace) -> int:
    from rich.progress import Progress

    arms = ["off", *[a for a in dict.fromkeys(a.strip() for a in args.arms.split(",")) if a and a != "off"]]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"agenttrace bench overhead: unknown arm(s) {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    clock = default_clock()
    tasks = [Task(id=f"t{i}", prompt="Echo hi, then say done.") for i in range(args.tasks)]
    total = len(arms) * (args.repeats * args.tasks + args.bundled_repeats * args.bundled_tasks)
    with Progress(transient=True) as bar:
        job = bar.add_task("tracing overhead", total=total)
        tick = lambda: bar.advance(job)  # noqa: E731
        scripted = measure(lambda tel: Agent(InstantModel(clock), [ECHO], telemetry=tel,
                                             config=AgentConfig(name="overhead", max_steps=2)),
                           tasks, arms, args.repeats, clock, tick)
        bundled, step_s, per_step = None, None, None
        if args.bundled_tasks > 0:
            bundled, step_s = _bundled(args, arms, clock, tick)
            per_step = {a: r.spans / r.steps for a, r in bundled.items() if r.steps and r.spans}
    scripted_rows = rows(scripted, step_s=step_s, spans_per_step=per_step)
    bundled_rows = rows(bundled) if bundled else None
    header = (f"`agenttrace bench overhead --repeats {args.repeats} --tasks {args.tasks} --bundled-tasks {args.bundled_tasks} "
              f"--bundled-repeats {args.bundled_repeats}" + (f" --threads {args.threads}" if args.threads else "") + "`")
    print(markdown(scripted_rows, bundled_rows, step_s, header))
    return 0
