"""`agenttrace bench` (also `agenttrace bench run`): the evaluation harness. Baseline and
speculative arms on four task suites, interleaved and repeated, with percentiles, validity,
correctness, memory and energy per suite and arm; each arm against the baseline with bootstrap
intervals; then the scenarios (cold start, cancellation, concurrency, drafter failure, a hanging
tool), each ending in a pass/fail line. Resumable: rerun with the same --out to continue.

    options.py   what a run measures and how big it is
    arms.py      how each arm decodes
    runner.py    the suite runs, chunk by chunk, into the output folder
    sensors.py   peak RSS, GPU memory, NVML energy
    records.py   what the output folder holds
    figures.py   per suite and arm, and against the baseline
    scenarios/   one module per scenario
    render.py    the tables, in the terminal and in Markdown
    session.py   one session: measure what is missing, render everything
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import fields, replace
from pathlib import Path

from agenttrace.bench.harness.options import ARMS, OPT_IN_SUITES, SCENARIOS, SUITES, HarnessOptions, quick

_DEFAULTS = HarnessOptions()


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip() and x.strip() != "none")


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_options(p: argparse.ArgumentParser) -> None:
    """The harness's options. An option not given leaves the namespace alone, so `options_from`
    can tell what was asked for (over --quick's sizes) from what was not, and `agenttrace bench
    --quick run` keeps its --quick."""
    unset = argparse.SUPPRESS

    a = p.add_argument
    a("--suites", type=_names, default=unset,
      help=f"comma-separated (default: {','.join(SUITES)}; also {','.join(OPT_IN_SUITES)}: memory, compaction, "
      "delegation)")
    a("--arms", type=_names, default=unset,
      help=f"comma-separated, the first is the baseline (default: {','.join(ARMS)}; also prompt_lookup_fixed, "
      "early_exit_fixed, the trained heads eagle, eagle_tree, medusa, lookup_eagle, and each under the "
      "decision grammar: constrained, prompt_lookup_constrained, ...)")
    a("--tasks-per-suite", type=int, default=unset,
      help=f"tasks of each suite per repeat (default {_DEFAULTS.tasks_per_suite})")
    a("--repeats", type=int, default=unset, help=f"repeats (default {_DEFAULTS.repeats})")
    a("--seed", type=int, default=unset, help="seed of the task and arm orders (default 0)")
    a("--device", default=unset, help="cpu or cuda[:N] (default cpu)")
    a("--model", default=unset, help="a model folder or hub name (default: the bundled SmolLM2-135M-Instruct)")
    a("--threads", type=int, default=unset,
      help="torch intra-op threads (default: torch's own, one per core; use 1 on a machine shared with other work)")
    a("--dtype", default=unset, help="float32, bfloat16 or float16 (default float32)")
    a("--quantize", choices=("int8", "int4"), default=unset,
      help="weight-only quantized linear layers on the CPU, bf16 activations (quantized once, then cached)")
    a("--backend", choices=("torch", "llama.cpp"), default=unset,
      help="torch (default), or llama.cpp: the bundled GGUF (or --model FILE.gguf) on llama.cpp's kernels, with "
           "the baseline and prompt-lookup arms (the llamacpp extra)")
    a("--compiled", action="store_true", default=unset,
      help="every arm decodes through torch.compile graphs over a static KV cache; each new shape compiles "
           "on first use (tens of seconds on a CPU; the warm-up task compiles the common ones)")
    a("--scenarios", type=_names, default=unset,
      help=f"comma-separated, or none (default: {','.join(SCENARIOS)})")
    a("--concurrency", type=_ints, default=unset, help="agent counts (default 1,2,4,8)")
    a("--concurrency-tasks", type=int, default=unset,
      help=f"tasks per concurrency level and arm (default {_DEFAULTS.concurrency_tasks})")
    a("--cold-start-repeats", type=int, default=unset,
      help=f"warm-cache starts per arm (default {_DEFAULTS.cold_start_repeats})")
    a("--no-cold-cache", dest="cold_cache", action="store_false", default=unset,
      help="skip the start with an empty model cache (it converts the GGUF, ~30 s)")
    a("--prefix-cache-mb", type=int, default=unset,
      help=f"prefix cache per arm, MiB; 0 turns it off for every arm (default {_DEFAULTS.prefix_cache_mb})")
    a("--task-deadline", dest="task_deadline_s", type=float, default=unset,
      help=f"wall-clock budget per task, s (default {_DEFAULTS.task_deadline_s:g})")
    a("--out", type=Path, default=unset,
      help=f"output folder; an unfinished run there is resumed (default {_DEFAULTS.out})")
    a("--fresh", action="store_true", default=unset, help="discard what --out holds and start over")
    a("--quick", action="store_true", default=unset,
      help="the smoke configuration: 2 tasks per suite, 1 repeat, N = 1,2, no cold-cache start")
    a("--render-only", action="store_true", default=unset, help="measure nothing: render what --out holds")
    a("--update-doc", type=Path, default=unset, metavar="FILE",
      help="also replace this device's section of FILE (e.g. BENCHMARKS.md) with the report")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="the evaluation harness (also what a bare `agenttrace bench` runs)")
    add_options(p)
    p.set_defaults(func=run)


def options_from(args: argparse.Namespace) -> HarnessOptions:
    """The defaults, --quick's sizes over them, then every option given over both."""
    base = quick(HarnessOptions()) if getattr(args, "quick", False) else HarnessOptions()
    return replace(base, **{f.name: getattr(args, f.name) for f in fields(HarnessOptions) if hasattr(args, f.name)})


def run(args: argparse.Namespace) -> int:
    from agenttrace.bench.harness.session import run_session
    from agenttrace.report.terminal import make_console

    try:
        opts = options_from(args)
    except TypeError as exc:
        raise SystemExit(f"agenttrace bench: {exc}") from None
    if opts.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise SystemExit(f"agenttrace bench: --device {opts.device} but torch {torch.__version__} sees no CUDA "
                             "device; run on a machine with a GPU and a CUDA build of torch, or use --device cpu")
    command = "agenttrace " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:] else "agenttrace bench"
    try:
        outcome = run_session(opts, fresh=getattr(args, "fresh", False), command=command, console=make_console(),
                              update_doc=getattr(args, "update_doc", None), render_only=getattr(args, "render_only", False))
    except ValueError as exc:
        raise SystemExit(f"agenttrace bench: {exc}") from None
    return 0 if outcome.passed else 1


__all__ = ["HarnessOptions", "add_options", "options_from", "quick", "register", "run"]
