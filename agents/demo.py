"""The main job: the reference agent on the bundled model with speculative decoding, a trace
under traces/ and the per-step report (`--suite` runs another task set with its own agent: the
long-horizon one remembers, compacts its context and delegates). With several arms (e.g.
baseline and speculative) each task runs under every arm in turn, alternating the order, so both
see the same machine drift."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from agenttrace.examples.agents.suites import SUITES, load_suite
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from agenttrace import (
    BackendChoice,
    ChatModel,
    Clock,
    LocalChatModel,
    LookupThenHead,
    ModelUnavailable,
    PromptLookupDrafter,
    TaskResult,
    Telemetry,
    TreeShape,
    choose_backend,
    head_drafter,
    load_model,
    make_console,
    render_report,
    report_from_files,
    shutdown_all,
)
from agenttrace.clock import default_clock, elapsed_s

ARMS = ("baseline", "speculative")
DRAFTERS = ("lookup", "eagle", "lookup+eagle")
SUITE_NAMES = tuple(SUITES)


@dataclass
class DemoOutcome:
    files: dict[str, Path]
    results: dict[str, list[TaskResult]]
    load_s: float
    run_s: float

    @property
    def identical_outputs(self) -> bool:
        """Every arm produced exactly the same texts as the first (true for greedy speculation)."""
        arms = list(self.results)
        return all(
            _texts(a) == _texts(b) for arm in arms[1:] for a, b in zip(self.results[arm], self.results[arms[0]], strict=True)
        )


@dataclass(frozen=True)
class DemoOptions:
    tasks: int = 12
    arms: tuple[str, ...] = ("speculative",)
    num_speculative_tokens: int = 8  # the most draft tokens per round; k adapts below it
    prefix_cache: bool = True  # both arms reuse earlier calls' KV cache (so the A/B isolates speculation)
    trace_dir: Path = Path("traces")
    otlp_endpoint: str | None = None
    otlp_protocol: str | None = None  # http/protobuf or grpc; None: OTEL_EXPORTER_OTLP_PROTOCOL
    detail: str = "default"
    show_tasks: bool = True
    metrics: bool = False  # also write the GenAI client metrics (beside each trace file, and to OTLP)
    constrained: bool = False  # decode every reply under the grammar of a decision (AgentConfig.constrained)
    quantize: str | None = None  # "int4" / "int8": weight-only quantized linear layers (quantized once, cached)
    drafter: str = "lookup+eagle"  # the speculative arm's: lookup, eagle, or lookup+eagle (DRAFTERS)
    suite: str = "tool_calls"  # the task set and its agent (agents/suites.py); its first `tasks` tasks run
    # torch, llama.cpp (the GGUF on llama.cpp's kernels), or auto: the one measured faster on this
    # machine for this demo (choose_backend: once, then read from the cache)
    backend: str = "auto"


def _drafter(name: str, loaded, console: Console | None):
    """The speculative arm's drafter: prompt lookup, the trained EAGLE head's draft trees (the
    bundled model's head ships with agenttrace; another model needs `agenttrace train-drafter`),
    or prompt lookup where it matches and EAGLE elsewhere. Without a head, or on llama.cpp's
    kernels (no draft trees there, and chains do not pay), prompt lookup alone, saying why."""
    if name == "lookup":
        return PromptLookupDrafter()
    if loaded.weights == "gguf":
        if console is not None:
            console.print("on llama.cpp's kernels the speculative arm drafts with prompt lookup (EAGLE's draft trees "
                          "need an attention mask llama.cpp's batch does not take, and its chains do not pay there: "
                          "BENCHMARKS.md)")
        return PromptLookupDrafter()
    try:
        # on a CPU the int8 head drafts 3-4x faster than the fp32 one, accepted as often
        eagle = head_drafter("eagle", loaded.model, loaded.name, tree=TreeShape(),
                             int8=loaded.model.device.type == "cpu")
    except ModelUnavailable as exc:
        if console is not None:
            console.print(f"[yellow]{exc}; the speculative arm drafts with prompt lookup alone[/]")
        return PromptLookupDrafter()
    return eagle if name == "eagle" else LookupThenHead(PromptLookupDrafter(), eagle)


def _model_for(arm: str, loaded, opts: DemoOptions, console: Console | None) -> ChatModel:
    if arm == "baseline":
        return LocalChatModel(loaded.model, loaded.tokenizer, name=loaded.name, prefix_cache=opts.prefix_cache)
    if arm == "speculative":
        return LocalChatModel(
            loaded.model,
            loaded.tokenizer,
            name=loaded.name,
            drafter=_drafter(opts.drafter, loaded, console),
            num_speculative_tokens=opts.num_speculative_tokens,
            adaptive=True,
            prefix_cache=opts.prefix_cache,
        )
    raise ValueError(f"unknown arm {arm!r}; choose from {', '.join(ARMS)}")


def _load(backend: str, opts: DemoOptions):
    if backend == "llama.cpp":
        if opts.quantize:
            raise ModelUnavailable("--quantize makes torch weight variants; the llama.cpp backend runs the GGUF's own "
                                   "(drop one of the two)")
        return load_model(backend="llama.cpp")
    # the GPU where there is one (the quantized variants are CPU kernels)
    return load_model(quantize=opts.quantize, device="cpu" if opts.quantize else "auto")


def _choose_backend(opts: DemoOptions, suite):
    """The backend on which the demo's speculative arm takes the suite's first task to its first
    step's end (its first valid tool call) sooner, measured on this machine (once: later demos
    read the answer from the cache). One step, not the whole task: the two backends' greedy texts
    can part at a near-tie, and a task that takes another step on one of them timed how many steps
    the text needed, not how fast the backend runs (a fresh clone here chose torch that way)."""
    import tempfile

    models = {}
    task = suite.tasks[0]

    def prepare(backend: str) -> None:
        models[backend] = _load(backend, opts)

    def measure(backend: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            tel = Telemetry(service_name="agenttrace-demo-backend-probe")
            agent = suite.build_agent(_model_for("speculative", models[backend], opts, None), tel,
                                      config=replace(suite.config, max_steps=1), workdir=Path(tmp))
            agent.run(task)
            tel.shutdown()

    if opts.quantize:  # torch's weight variants: nothing to compare on llama.cpp
        return BackendChoice("torch", {}, False, f"--quantize {opts.quantize} is a weight variant of the torch backend"), models
    choice = choose_backend(f"demo:{opts.suite}:{task.id}:step1:{opts.drafter}:k{opts.num_speculative_tokens}:"
                            f"prefix{int(opts.prefix_cache)}", measure, prepare=prepare)
    return choice, models


def _texts(result: TaskResult) -> list[str]:
    return [a.text for s in result.steps for a in s.attempts]


def run_demo(opts: DemoOptions, console: Console | None = None, clock: Clock | None = None) -> DemoOutcome:
    """Run the demo; its load and run times read `clock` (default: the shared clock, the one the
    spans and the model read too)."""
    console = console or make_console()
    clock = clock if clock is not None else default_clock()
    t0 = clock.now_ns()
    suite = load_suite(opts.suite)
    backend, probed = opts.backend, {}
    if backend == "auto":
        console.print("Choosing the generation backend...")
        choice, probed = _choose_backend(opts, suite)
        backend = choice.backend
        console.print(f"backend: {choice.describe()} (--backend torch or llama.cpp to choose)")
        t0 = clock.now_ns()
    console.print("Loading the bundled model (the first run converts it once, about 30 s)...")
    loaded = probed.pop(backend, None) or _load(backend, opts)  # (the measured one, else loaded now)
    probed.clear()  # the other backend's model goes
    load_s = elapsed_s(clock, t0)
    how = "converted and loaded" if loaded.converted else "loaded from the cache"
    on = "on llama.cpp's kernels" if backend == "llama.cpp" else f"on torch, {loaded.model.device.type}"
    note = f"; {loaded.note}" if loaded.note else ""
    console.print(f"{loaded.name} ({loaded.weights} weights, {on}{note}) {how} in {load_s:.1f} s")

    tasks = suite.tasks[: opts.tasks]
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    files: dict[str, Path] = {}
    telemetry: dict[str, Telemetry] = {}
    agents = {}
    for arm in opts.arms:
        suffix = "" if len(opts.arms) == 1 else f"-{arm}"
        files[arm] = opts.trace_dir / f"demo-{stamp}{suffix}.jsonl"
        telemetry[arm] = Telemetry(
            service_name="agenttrace-demo",
            run_label=arm,
            trace_file=files[arm],
            otlp_endpoint=opts.otlp_endpoint,
            otlp_protocol=opts.otlp_protocol,
            detail=opts.detail,  # type: ignore[arg-type]
            metrics=opts.metrics,
        )
        config = replace(suite.config, constrained=opts.constrained or suite.config.constrained)
        # an agent with memory keeps its file beside the trace: traces/demo-<time>[-arm]/memory.sqlite
        agents[arm] = suite.build_agent(_model_for(arm, loaded, opts, console), telemetry[arm], config=config,
                                        workdir=opts.trace_dir / f"demo-{stamp}{suffix}")

    results: dict[str, list[TaskResult]] = {arm: [] for arm in opts.arms}
    run_start = clock.now_ns()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("tasks", total=len(tasks) * len(opts.arms))
        for i, task in enumerate(tasks):
            order = opts.arms if i % 2 == 0 else tuple(reversed(opts.arms))
            for arm in order:
                progress.update(bar, description=f"{task.id} [{arm}]")
                results[arm].append(agents[arm].run(task))
                progress.advance(bar)
    run_s = elapsed_s(clock, run_start)

    # together: with a collector down, the arms' exit bounds overlap instead of adding up
    for summary in shutdown_all(telemetry[arm] for arm in opts.arms):
        if summary.failures:
            console.print(f"[yellow]telemetry failures (the run was not affected): {summary.failures}[/]")
    for arm in opts.arms:
        if len(opts.arms) > 1:
            console.rule(f"arm: {arm}")
        render_report(report_from_files([str(files[arm])]), console, tasks=opts.show_tasks)
    if len(opts.arms) > 1:
        _compare(opts.arms, files, results, console)
    console.print(f"demo: {len(tasks)} tasks x {len(opts.arms)} arm(s) in {run_s:.1f} s (model load {load_s:.1f} s)")
    for arm, path in files.items():
        console.print(f"trace ({arm}): {path}")
    return DemoOutcome(files, results, load_s, run_s)


def _compare(arms: tuple[str, ...], files: dict[str, Path], results: dict[str, list[TaskResult]], console: Console) -> None:
    """Tokens per second side by side, measured in this run, and whether the outputs agree."""
    reports = {arm: report_from_files([str(files[arm])]) for arm in arms}
    base = arms[0]
    table = Table(title="arms side by side (same run, interleaved)", title_justify="left")
    for col in ("arm", "tokens", "generation s", "tok/s", "vs " + base, "acceptance", "mean acc. len", "same output"):
        table.add_column(col, justify="right")
    base_tps = reports[base].run.speculation.tokens_per_s or 0.0
    for arm in arms:
        spec = reports[arm].run.speculation
        same = all(_texts(a) == _texts(b) for a, b in zip(results[arm], results[base], strict=True))
        table.add_row(
            arm,
            str(spec.output_tokens),
            f"{spec.generation_s:.2f}",
            f"{spec.tokens_per_s or 0:.1f}",
            f"{(spec.tokens_per_s or 0) / base_tps:.2f}x" if base_tps else "-",
            "-" if spec.acceptance_rate is None else f"{100 * spec.acceptance_rate:.0f}%",
            "-" if spec.mean_acceptance_length is None else f"{spec.mean_acceptance_length:.2f}",
            "yes" if same else "no",
        )
    console.print(table)
