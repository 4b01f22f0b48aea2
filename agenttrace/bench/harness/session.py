"""One `agenttrace bench` session: open (or resume) the output folder, run the chunks and the
scenarios not yet done with a progress display, then compute the figures and write the summary
table, `report.md`, `summary.json` and, when asked, the BENCHMARKS.md section."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from agenttrace.bench.harness import render
from agenttrace.bench.harness.arm_figures import BenchFigures, compute
from agenttrace.bench.harness.arms import build_model, check_arms
from agenttrace.bench.harness.options import SCENARIOS, HarnessOptions
from agenttrace.bench.harness.records import Manifest, ScenarioResult, read_model, read_records, write_json_atomic
from agenttrace.bench.harness.runner import SuiteRunner, drop_unfinished, open_output, plan, save_manifest
from agenttrace.bench.harness.scenarios import ScenarioContext, expected_ticks, runner
from agenttrace.bench.harness.sensors import ResourceMeter
from agenttrace.clock import Clock, elapsed_s


@dataclass
class Outcome:
    figures: BenchFigures
    scenarios: list[ScenarioResult]
    manifest: Manifest
    report: Path
    tables: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.scenarios)


class Ticker:
    """Advances a progress bar one unit per call, showing what runs now."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress = progress
        self.bar = progress.add_task("starting", total=total)
        self.started = False

    def __call__(self, what: str) -> None:
        if self.started:
            self.progress.advance(self.bar)
        self.started = True
        self.progress.update(self.bar, description=escape(what))

    def note(self, what: str) -> None:
        """Show `what` without counting it as a unit (untimed work such as the warm-up)."""
        self.progress.update(self.bar, description=escape(what))

    def finish_unit(self) -> None:
        if self.started:
            self.progress.advance(self.bar)
        self.started = False


def machine_description(device: str) -> str:
    from agenttrace.bench.generation import machine

    mem = ""
    try:
        with open("/proc/meminfo") as f:
            kib = int(next(line for line in f if line.startswith("MemTotal")).split()[1])
        mem = f", {kib / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{machine()}; {os.cpu_count()} logical cores{mem}"


def _scenario_path(out: Path, name: str) -> Path:
    # (NAME.json is the scenario's own data where it writes some: concurrency's records)
    return out / "scenarios" / f"{name}.result.json"


def _comparable(options: dict) -> dict:
    return {k: v for k, v in options.items() if k != "out"}


def _scenario_done(opts: HarnessOptions, name: str) -> bool:
    path = _scenario_path(opts.out, name)
    if not path.exists():
        return False
    result = read_model(path, ScenarioResult)
    return _comparable(result.options) == _comparable(json.loads(json.dumps(opts.to_json())))


def _load_suites(opts: HarnessOptions) -> dict:
    from agenttrace.bench.workloads import load_suites

    return load_suites([*opts.suites, "tool_calls"])  # the scenarios run tool-call tasks


def run_session(opts: HarnessOptions, *, fresh: bool, command: str, console: Console,
                update_doc: Path | None = None, render_only: bool = False, clock: Clock | None = None) -> Outcome:
    """Measure what is not measured yet in `opts.out`, then render everything there. Every time
    the harness itself reads comes from `clock` (default: the shared clock, synchronised with the
    model's device)."""
    check_arms(opts.arms)
    unknown = [s for s in opts.scenarios if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"agenttrace bench: unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    suites = _load_suites(opts)
    if opts.threads and not render_only:
        import torch

        torch.set_num_threads(opts.threads)
    if render_only:
        if not (opts.out / "manifest.json").exists():
            raise SystemExit(f"agenttrace bench: nothing to render in {opts.out} (no manifest.json)")
        manifest = read_model(opts.out / "manifest.json", Manifest)
        opts = HarnessOptions.from_json({**manifest.options, "out": str(opts.out)})
    else:
        manifest = open_output(opts, fresh=fresh, machine=machine_description(opts.device), command=command)
        drop_unfinished(opts.out, manifest)
        _measure(opts, manifest, suites, console, clock)
    return _render(opts, manifest, console, update_doc)


def _measure(opts: HarnessOptions, manifest: Manifest, suites: dict, console: Console, clock: Clock | None) -> None:
    chunks = [c for c in plan(opts, {n: suites[n] for n in opts.suites}) if c.key not in manifest.chunks_done]
    pending = [s for s in opts.scenarios if not _scenario_done(opts, s)]
    if not chunks and not pending:
        console.print(f"{opts.out}: every chunk and scenario is measured already; rendering.")
        return
    from agenttrace.bench.harness.arms import load_for
    from agenttrace.generation.device import device_clock

    done = len(manifest.chunks_done)
    if done:
        console.print(f"Resuming {opts.out}: {done} chunk(s) measured, {len(chunks)} to go, {len(pending)} scenario(s).")
    console.print("Loading the model (the first run converts the bundled model once, about 30 s)...")
    loaded = load_for(opts)
    # On CUDA a reading waits for the queued kernels, as the models' own clocks do (same time base).
    clock = device_clock(loaded.model.device, clock)
    meter = ResourceMeter(opts.device)
    manifest.sensors = meter.sensors
    save_manifest(opts.out, manifest)
    total = sum(len(c.tasks) for c in chunks) * len(opts.arms) + sum(expected_ticks(s, opts) for s in pending)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        tick = Ticker(progress, total)
        if chunks:
            if opts.compiled:
                tick.note("compiling the decode and verify passes (not measured; minutes on a CPU)")
            models = {arm: build_model(arm, loaded, opts) for arm in opts.arms}
            run = SuiteRunner(opts, loaded, suites, manifest, meter, models, clock)
            first = suites[chunks[0].suite]
            tick.note("warming up every arm (not measured)")
            run.warm_up(first.tasks[0], first)
            for chunk in chunks:
                t0 = clock.now_ns()
                records = run.run_chunk(chunk, tick)
                tick.finish_unit()
                run.commit(chunk, records, elapsed_s(clock, t0))
            del models, run
        for name in pending:
            out = opts.out / "scenarios" / name
            out.mkdir(parents=True, exist_ok=True)
            for f in out.glob("*.jsonl"):
                f.unlink()  # a scenario reruns whole: traces of an interrupted attempt go
            ctx = ScenarioContext(opts=opts, loaded=loaded, suites=suites, out=out, tick=tick, clock=clock)
            result = runner(name)(ctx)
            tick.finish_unit()
            result.options = opts.to_json()
            write_json_atomic(_scenario_path(opts.out, name), result.model_dump_json(indent=2))
            manifest.run_s += result.wall_s
            save_manifest(opts.out, manifest)
            line = render.pass_lines([result])[0]
            progress.console.print(("[green]" if result.passed else "[red]") + escape(line) + "[/]", highlight=False)


def _render(opts: HarnessOptions, manifest: Manifest, console: Console, update_doc: Path | None) -> Outcome:
    records = read_records(opts.out / "records.jsonl")
    figs = compute(opts.out, records, opts.suites, opts.arms, seed=opts.seed)
    scenarios = [read_model(_scenario_path(opts.out, s), ScenarioResult) for s in opts.scenarios
                 if _scenario_path(opts.out, s).exists()]
    tables = render.all_tables(figs, scenarios, opts)
    for problem in figs.problems:
        console.print(f"[yellow]warning:[/] {problem}", highlight=False)
    render.to_terminal(console, tables, scenarios)
    report = opts.out / "report.md"
    write_json_atomic(report, render.report_markdown(figs, scenarios, opts, manifest))
    write_json_atomic(opts.out / "summary.json", TypeAdapter(BenchFigures).dump_json(figs, indent=2).decode())
    if update_doc is not None:
        render.update_section(update_doc, opts.device.split(":")[0],
                              render.report_markdown(figs, scenarios, opts, manifest, level=2))
        console.print(f"updated the {opts.device.split(':')[0]} section of {update_doc}")
    console.print(f"report: {report} (measuring took {manifest.run_s / 60:.1f} min)")
    return Outcome(figs, scenarios, manifest, report, tables)
