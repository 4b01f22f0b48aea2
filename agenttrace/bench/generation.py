"""`agenttrace bench generation`: our decoding loop and drafters against transformers'
`generate`, on the bundled model at batch 1, as medians of interleaved repeats.

Each repeat runs every arm on every prompt, arms in a shuffled order, so drift of the machine's
speed (±30% over minutes on these CPUs) hits all arms alike; figures are medians over repeats of
per-repeat totals, and ratios are taken within a repeat before the median.

Every arm reads one clock, the one `run` builds for the model's device: on CUDA each reading waits
for the queued kernels, so transformers' `generate` is timed as our loop is (its calls return
before the GPU is done); on a CPU it is the plain shared clock.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shlex
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from agenttrace.bench.prompts import agent_steps, free_text_prompts, tool_call_prompts
from agenttrace.clock import Clock


@dataclass
class Run:
    """One arm on one prompt in one repeat."""

    e2e_s: float  # call start to last token, prefill included
    decode_s: float  # first token to last token
    tokens: list[int]
    drafted: int = 0
    accepted: int = 0
    rounds: int = 0


@dataclass
class Row:
    """One arm on one prompt set: the table's row (and a `--json` record)."""

    arm: str
    prompts: str
    repeats: int
    e2e_tok_s: float
    e2e_vs_hf_generate: float
    decode_tok_s: float
    decode_vs_our_plain: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    time_to_tool_call_s: float | None  # median end-to-end time of a tool-call prompt
    same_as_plain_greedy: bool


@dataclass
class StepRow:
    """The agent-step sequence: time to the end of the tool call with and without prefix cache."""

    step: str
    repeats: int
    without_cache_s: float
    with_cache_s: float
    speedup: float
    cached_tokens: int
    same_output: bool


def _hf_arm(model, tokenizer, clock: Clock, **kwargs) -> Callable[[list[int], int], Run]:
    """transformers' `generate` (greedy) as an arm, timed on `clock`: end to end around the call,
    decode from its first new token."""
    import torch
    from transformers.generation.streamers import BaseStreamer

    class FirstToken(BaseStreamer):
        """Marks when generate() emits its first new token (its first put is the prompt)."""

        def __init__(self) -> None:
            self.calls, self.first = 0, None

        def put(self, value) -> None:
            self.calls += 1
            if self.calls == 2:
                self.first = clock.now_ns()

        def end(self) -> None:
            pass

    def run(ids: list[int], budget: int) -> Run:
        streamer = FirstToken()
        start = clock.now_ns()  # the prompt's tensor is built inside, as our loop builds its own
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([ids], device=model.device), max_new_tokens=budget, do_sample=False, streamer=streamer,
                pad_token_id=tokenizer.eos_token_id, **kwargs,
            )
        end = clock.now_ns()
        new = out[0, len(ids) :].tolist()
        first = streamer.first if streamer.first is not None else end
        return Run((end - start) / 1e9, (end - first) / 1e9, new)

    return run


def _our_arm(chat_model) -> Callable[[list[int], int], Run]:
    from agenttrace.generation.chat import GenerationParams

    def run(ids: list[int], budget: int) -> Run:
        gen, out = chat_model.complete_ids(ids, GenerationParams(max_tokens=budget))
        return Run(
            gen.duration_s, out.decode_s, out.tokens,
            sum(r.drafted for r in out.rounds), sum(r.accepted for r in out.rounds), len(out.rounds),
        )

    return run


def build_arms(loaded, names: list[str], clock: Clock) -> dict[str, Callable[[list[int], int], Run]]:
    """The arms `names` over the loaded model, every one timed on `clock`; SystemExit naming the
    arms there are when one is unknown."""
    from agenttrace.generation.draft_model import early_exit_drafter, early_exit_view
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel

    m, tok = loaded.model, loaded.tokenizer

    def ours(**kw):
        return _our_arm(LocalChatModel(m, tok, name=loaded.name, clock=clock, **kw))

    factories: dict[str, Callable[[], Callable]] = {
        "hf_generate": lambda: _hf_arm(m, tok, clock),
        "hf_prompt_lookup_k10": lambda: _hf_arm(m, tok, clock, prompt_lookup_num_tokens=10),
        "hf_assisted_early_exit8": lambda: _hf_arm(m, tok, clock, assistant_model=early_exit_view(m, 8)),
        "ours_plain": lambda: ours(),
        "ours_prompt_lookup_k3": lambda: ours(drafter=PromptLookupDrafter(), num_speculative_tokens=3, fallback=False),
        "ours_prompt_lookup_k8": lambda: ours(drafter=PromptLookupDrafter(), num_speculative_tokens=8, fallback=False),
        "ours_prompt_lookup_adaptive16": lambda: ours(drafter=PromptLookupDrafter(), num_speculative_tokens=16, adaptive=True),
        "ours_early_exit8_k3": lambda: ours(drafter=early_exit_drafter(m, 8), num_speculative_tokens=3, fallback=False),
        "ours_early_exit8_adaptive": lambda: ours(drafter=early_exit_drafter(m, 8), num_speculative_tokens=4, adaptive=True),
    }
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise SystemExit(f"unknown arm(s): {', '.join(unknown)}; choose from {', '.join(factories)}")
    return {n: factories[n]() for n in names}


DEFAULT_ARMS = [
    "hf_generate", "hf_prompt_lookup_k10", "hf_assisted_early_exit8", "ours_plain", "ours_prompt_lookup_k3",
    "ours_prompt_lookup_k8", "ours_prompt_lookup_adaptive16", "ours_early_exit8_k3", "ours_early_exit8_adaptive",
]


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def measure_arms(loaded, arm_names: list[str], repeats: int, seed: int, progress, clock: Clock) -> list[Row]:
    from agenttrace.generation.local import LocalChatModel

    encoder = LocalChatModel(loaded.model, loaded.tokenizer)
    sets = {
        "tool_call": ([encoder.encode_chat(m) for m in tool_call_prompts()], 64),
        "free_text": ([encoder.encode_chat(m) for m in free_text_prompts()], 96),
    }
    arms = build_arms(loaded, arm_names, clock)
    runs: dict[tuple[str, str, int], list[Run]] = {}  # (arm, set, repeat) -> runs over the set's prompts
    rng = random.Random(seed)
    # one untimed pass so every arm's first call (allocations, lazy init) is not measured
    for arm in arms.values():
        arm(sets["tool_call"][0][0], 4)
    task = progress.add_task("generation bench", total=repeats * len(arms) * sum(len(p) for p, _ in sets.values()))
    for r in range(repeats):
        for set_name, (prompts, budget) in sets.items():
            for ids in prompts:
                order = list(arms)
                rng.shuffle(order)
                for name in order:
                    runs.setdefault((name, set_name, r), []).append(arms[name](ids, budget))
                    progress.advance(task)
    rows = []
    for set_name, (prompts, _) in sets.items():
        reference = {i: runs[("ours_plain", set_name, 0)][i].tokens for i in range(len(prompts))} if "ours_plain" in arms else None
        for name in arms:
            per = [runs[(name, set_name, r)] for r in range(repeats)]
            e2e = [sum(len(x.tokens) for x in rs) / sum(x.e2e_s for x in rs) for rs in per]
            dec = [sum(len(x.tokens) - 1 for x in rs) / sum(x.decode_s for x in rs) for rs in per]

            def ratio(base: str, values: list[float], kind: str) -> float:
                if base not in arms:
                    return float("nan")
                base_per = [runs[(base, set_name, r)] for r in range(repeats)]
                if kind == "e2e":
                    b = [sum(len(x.tokens) for x in rs) / sum(x.e2e_s for x in rs) for rs in base_per]
                else:
                    b = [sum(len(x.tokens) - 1 for x in rs) / sum(x.decode_s for x in rs) for rs in base_per]
                return _median([v / bb for v, bb in zip(values, b, strict=True)])

            drafted = sum(x.drafted for rs in per for x in rs)
            accepted = sum(x.accepted for rs in per for x in rs)
            rounds = sum(x.rounds for rs in per for x in rs)
            same = reference is None or all(rs[i].tokens == reference[i] for rs in per for i in range(len(prompts)))
            rows.append(
                Row(
                    arm=name, prompts=set_name, repeats=repeats,
                    e2e_tok_s=_median(e2e), e2e_vs_hf_generate=ratio("hf_generate", e2e, "e2e"),
                    decode_tok_s=_median(dec), decode_vs_our_plain=ratio("ours_plain", dec, "decode"),
                    acceptance_rate=accepted / drafted if drafted else None,
                    mean_acceptance_length=1 + accepted / rounds if rounds else None,
                    time_to_tool_call_s=_median([x.e2e_s for rs in per for x in rs]) if set_name == "tool_call" else None,
                    same_as_plain_greedy=same,
                )
            )
    return rows


def measure_agent_steps(loaded, repeats: int, progress, clock: Clock) -> list[StepRow]:
    """Step 2 and a retry of step 1, after step 1 ran: with the prefix cache each starts from the
    KV entries of step 1's call; without it each prefills its whole prompt."""
    from agenttrace.generation.chat import GenerationParams
    from agenttrace.generation.drafters import PromptLookupDrafter
    from agenttrace.generation.local import LocalChatModel
    from agenttrace.generation.prefix_cache import PrefixCache

    steps = agent_steps(0)
    params = GenerationParams(max_tokens=64)
    cache = PrefixCache()
    with_cache = LocalChatModel(loaded.model, loaded.tokenizer, drafter=PromptLookupDrafter(), num_speculative_tokens=8,
                                prefix_cache=cache, clock=clock)
    without = LocalChatModel(loaded.model, loaded.tokenizer, drafter=PromptLookupDrafter(), num_speculative_tokens=8,
                             clock=clock)
    times: dict[tuple[str, bool], list[float]] = {}
    texts: dict[tuple[str, bool], str] = {}
    cached: dict[str, int] = {}
    task = progress.add_task("agent steps", total=repeats * 4)
    for _ in range(repeats):
        for name, messages in (("second step", steps.second), ("retry", steps.retry)):
            for use_cache in (True, False) if random.random() < 0.5 else (False, True):
                model = with_cache if use_cache else without
                if use_cache:
                    cache.clear()
                    model.chat(steps.first, params)  # step 1 ran before: its KV entries are cached
                gen = model.chat(messages, params)
                times.setdefault((name, use_cache), []).append(gen.duration_s)
                texts[(name, use_cache)] = gen.text
                if use_cache:
                    cached[name] = gen.cached_input_tokens
                progress.advance(task)
    rows = []
    for name in ("second step", "retry"):
        w, wo = _median(times[(name, True)]), _median(times[(name, False)])
        rows.append(StepRow(name, repeats, wo, w, wo / w, cached[name], texts[(name, True)] == texts[(name, False)]))
    return rows


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU, {torch.get_num_threads()} threads"
    return f"{cpu}; {device}; torch {torch.__version__}"


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if x is None or x != x else f"{x:{spec}}{suffix}"


ARM_COLUMNS = ("arm", "prompts", "e2e tok/s", "vs HF generate", "decode tok/s", "vs our plain", "acceptance",
               "mean acc. len", "tool call s", "= greedy")
STEP_COLUMNS = ("step", "without prefix cache s", "with prefix cache s", "speedup", "cached tokens", "same output")
STEPS_TITLE = "agent steps (prompt lookup k=8): time to the end of the tool call"


def arm_cells(r: Row) -> list[str]:
    return [
        r.arm, r.prompts, _fmt(r.e2e_tok_s, ".1f"), _fmt(r.e2e_vs_hf_generate, ".2f", "x"), _fmt(r.decode_tok_s, ".1f"),
        _fmt(r.decode_vs_our_plain, ".2f", "x"),
        _fmt(r.acceptance_rate * 100 if r.acceptance_rate is not None else None, ".0f", "%"),
        _fmt(r.mean_acceptance_length), _fmt(r.time_to_tool_call_s), "yes" if r.same_as_plain_greedy else "NO",
    ]


def step_cells(s: StepRow) -> list[str]:
    return [s.step, _fmt(s.without_cache_s), _fmt(s.with_cache_s), _fmt(s.speedup, ".2f", "x"), str(s.cached_tokens),
            "yes" if s.same_output else "NO"]


def tables(rows: list[Row], steps: list[StepRow], header: str) -> list:
    """The benchmark's tables as the harness's `TextTable`s, so both render them alike."""
    from agenttrace.bench.harness.render import TextTable

    out = [TextTable(f"generation benchmark: {header}", list(ARM_COLUMNS), [arm_cells(r) for r in rows])]
    if steps:
        out.append(TextTable(STEPS_TITLE, list(STEP_COLUMNS), [step_cells(s) for s in steps]))
    return out


def print_table(rows: list[Row], steps: list[StepRow], header: str) -> None:
    from agenttrace.bench.harness.render import to_terminal
    from agenttrace.report.terminal import make_console

    to_terminal(make_console(), tables(rows, steps, header), [])


def markdown(rows: list[Row], steps: list[StepRow], header: str, command: str) -> str:
    from agenttrace.bench.harness.render import table_markdown

    first, *rest = tables(rows, steps, header)
    lines = table_markdown(first, 2)
    lines[2:2] = [f"Command: `{command}`", ""]  # under the heading
    for t in rest:
        lines += table_markdown(t, 3)
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generation", help="our decoding loop and drafters against transformers generate (bundled model)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default 5)")
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS), help="comma-separated arms (default: all)")
    p.add_argument("--no-steps", action="store_true", help="skip the agent-step (prefix cache) sequence")
    p.add_argument("--seed", type=int, default=0, help="seed of the arm order shuffle")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own choice)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    p.add_argument("--json", action="store_true", help="print rows as JSON instead of tables")
    p.add_argument("--update-doc", type=Path, default=None, metavar="FILE",
                   help="also replace the `generation-DEVICE-tTHREADS` section of FILE (e.g. BENCHMARKS.md) with the tables")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch
    from rich.progress import Progress

    from agenttrace.generation.local import device_clock
    from agenttrace.generation.models import load_model

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"agenttrace bench generation: --device {args.device} but torch sees no CUDA device")
    loaded = load_model(device=args.device)
    clock = device_clock(loaded.model.device)  # one clock for every arm, synchronised on CUDA
    with Progress(transient=True) as progress:
        rows = measure_arms(loaded, [a for a in args.arms.split(",") if a], args.repeats, args.seed, progress, clock)
        steps = [] if args.no_steps else measure_agent_steps(loaded, args.repeats, progress, clock)
    header = f"{loaded.name}, batch 1, greedy, medians of {args.repeats} interleaved repeats; {machine()}"
    if args.json:
        print(json.dumps({"machine": header, "rows": [asdict(r) for r in rows], "agent_steps": [asdict(s) for s in steps]}, indent=2))
    else:
        print_table(rows, steps, header)
    if args.update_doc is not None:
        from agenttrace.bench.harness.render import update_section

        # named after where the model ran (not whether the machine has a GPU)
        device = "cuda" if loaded.model.device.type == "cuda" else f"cpu-t{torch.get_num_threads()}"
        command = "agenttrace bench generation " + " ".join(shlex.quote(a) for a in sys.argv[3:])
        update_section(args.update_doc, f"generation-{device}", markdown(rows, steps, header, command.strip()))
    return 0
