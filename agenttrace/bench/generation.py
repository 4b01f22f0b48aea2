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
import importlib.util
import json
import platform
import random
import shlex
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from agenttrace.bench.generation_arms import build_arms, warm_up
from agenttrace.bench.generation_records import Row, Run, StepRow
from agenttrace.bench.prompts import agent_steps, free_text_prompts, tool_call_prompts
from agenttrace.clock import Clock

DEFAULT_ARMS = [
    "hf_generate", "hf_prompt_lookup_k10", "hf_assisted_early_exit8", "ours_plain", "ours_prompt_lookup_k3",
    "ours_prompt_lookup_k8", "ours_prompt_lookup_adaptive16", "ours_early_exit8_k3", "ours_early_exit8_adaptive",
    "ours_eagle_tree", "ours_lookup_eagle_tree",
]
if importlib.util.find_spec("llama_cpp_py_sync") is not None:  # the llamacpp extra: our loop on llama.cpp's kernels
    DEFAULT_ARMS += ["ours_llama_plain", "ours_llama_prompt_lookup_k3", "ours_llama_prompt_lookup_adaptive16",
                     "ours_llama_q8_plain", "ours_llama_q8_prompt_lookup_k3", "ours_llama_q8_prompt_lookup_adaptive16"]


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def measure_arms(models, arm_names: list[str], repeats: int, seed: int, progress, clock: Clock,
                 peer=None, peaks=None) -> list[Row]:
    """Every arm on every weight variant in `models` (weights label -> loaded model; a single
    loaded model is the fp32 one), interleaved: each prompt runs every (weights, arm) pair in a
    shuffled order. The llama.cpp arms run once, on `peer`. With `peaks` (MachinePeaks) each row
    gets its bandwidth ceiling."""
    from agenttrace.bench.generation_arms import NATIVE_ARMS
    from agenttrace.bench.llama_peer import LLAMA_ARMS
    from agenttrace.generation.local import LocalChatModel

    if not isinstance(models, dict):
        models = {"fp32": models}
    first = next(iter(models.values()))
    encoder = LocalChatModel(first.model, first.tokenizer)
    sets = {
        "tool_call": ([encoder.encode_chat(m) for m in tool_call_prompts()], 64),
        "free_text": ([encoder.encode_chat(m) for m in free_text_prompts()], 96),
    }
    on_gguf = (*LLAMA_ARMS, *NATIVE_ARMS)  # arms over the GGUF file itself, run once
    ours = [a for a in arm_names if a not in on_gguf]
    lengths = [len(ids) + budget for prompts, budget in sets.values() for ids in prompts]
    arms: dict[tuple[str, str], Callable[[list[int], int], Run]] = {}
    for weights, loaded in models.items():
        arms.update({(weights, n): f for n, f in build_arms(loaded, ours, clock, longest=max(lengths)).items()})
    llama = [a for a in arm_names if a in on_gguf]
    if llama:
        arms.update({("gguf", n): f for n, f in build_arms(first, llama, clock, peer).items()})
    runs: dict[tuple[tuple[str, str], str, int], list[Run]] = {}  # (arm, set, repeat) -> runs over the set's prompts
    rng = random.Random(seed)
    # compiled arms compile their shapes first; then one untimed pass so every arm's first call
    # (allocations, lazy init) is not measured
    compile_s = {key: warm_up(arm, lengths) for key, arm in arms.items()}
    for arm in arms.values():
        arm(sets["tool_call"][0][0], 4)
    task = progress.add_task("generation bench", total=repeats * len(arms) * sum(len(p) for p, _ in sets.values()))
    for r in range(repeats):
        for set_name, (prompts, budget) in sets.items():
            for ids in prompts:
                order = list(arms)
                rng.shuffle(order)
                for key in order:
                    runs.setdefault((key, set_name, r), []).append(arms[key](ids, budget))
                    progress.advance(task)
    step_bytes = _step_bytes(models, peer)
    partings = _partings(models, arms, runs, sets)
    rows = []
    for set_name, (prompts, _) in sets.items():

        def per_repeat(key, kind: str) -> list[float]:
            out = []
            for r in range(repeats):
                rs = runs[(key, set_name, r)]
                if kind == "e2e":
                    out.append(sum(len(x.tokens) for x in rs) / sum(x.e2e_s for x in rs))
                else:
                    out.append(sum(len(x.tokens) - 1 for x in rs) / sum(x.decode_s for x in rs))
            return out

        def ratio(base, values: list[float], kind: str) -> float:
            if base not in arms:
                return float("nan")
            return _median([v / b for v, b in zip(values, per_repeat(base, kind), strict=True)])

        for key in arms:
            weights, name = key
            per = [runs[(key, set_name, r)] for r in range(repeats)]
            e2e, dec = per_repeat(key, "e2e"), per_repeat(key, "decode")
            ref_key = _reference(key, arms)
            reference = [x.tokens for x in runs[(ref_key, set_name, 0)]] if ref_key in arms else None
            drafted = sum(x.drafted for rs in per for x in rs)
            accepted = sum(x.accepted for rs in per for x in rs)
            rounds = sum(x.rounds for rs in per for x in rs)
            same = reference is None or all(rs[i].tokens == reference[i] for rs in per for i in range(len(prompts)))
            ceiling = None
            if peaks is not None and weights in step_bytes:
                # the mean context of a decode step: the prompt and half of what was generated
                context = statistics.mean(len(ids) + len(x.tokens) / 2 for ids, x in zip(prompts, per[0], strict=True))
                ceiling = peaks.read_gb_s * 1e9 / step_bytes[weights].at(int(context))
            decode = _median(dec)
            rows.append(
                Row(
                    arm=name, prompts=set_name, repeats=repeats,
                    e2e_tok_s=_median(e2e), e2e_vs_hf_generate=ratio(("fp32", "hf_generate"), e2e, "e2e"),
                    decode_tok_s=decode, decode_vs_our_plain=ratio(("fp32", "ours_plain"), dec, "decode"),
                    acceptance_rate=accepted / drafted if drafted else None,
                    mean_acceptance_length=1 + accepted / rounds if rounds else None,
                    time_to_tool_call_s=_median([x.e2e_s for rs in per for x in rs]) if set_name == "tool_call" else None,
                    same_as_plain_greedy=same, weights=_weights_label(weights, name),
                    ceiling_tok_s=ceiling, ceiling_share=decode / ceiling if ceiling else None,
                    compile_s=compile_s[key], parting=partings.get((key, set_name)),
                )
            )
    return rows


# the arms whose text is their configuration's own greedy text (the others must equal one of these)
_PLAIN = ("hf_generate", "ours_plain", "ours_plain_packed", "ours_plain_compiled", "ours_llama_plain",
          "ours_llama_q8_plain", "llama_cpp")


def _partings(models, arms, runs, sets) -> dict:
    """Each plain arm's greedy text against that of the most exact torch weights in the run, per
    prompt set: where they part, and at what margin in the anchor's logits (bench/divergence.py)."""
    from agenttrace.bench.divergence import partings, summarize
    from agenttrace.bench.generation_arms import stop_ids
    from agenttrace.generation.quantize import WEIGHTS

    exact = [w for w in WEIGHTS if (w, "ours_plain") in arms]  # WEIGHTS runs from the most exact
    if not exact:
        return {}
    anchor = (exact[0], "ours_plain")
    loaded = models[exact[0]]
    eos = stop_ids(loaded)
    others = [key for key in arms if key != anchor and key[1] in _PLAIN]
    out = {}
    for set_name, (prompts, _) in sets.items():
        mine = [x.tokens for x in runs[(anchor, set_name, 0)]]
        for key in others:
            theirs = [x.tokens for x in runs[(key, set_name, 0)]]
            found = partings(loaded.model, prompts, mine, theirs, eos)
            out[(key, set_name)] = summarize(f"{exact[0]} ours_plain", len(prompts), found)
    return out


# the GGUF variants our loop on llama.cpp runs (rss_child's names) and how the table labels them
GGUF_LABELS = {"gguf": "gguf Q4_1", "gguf_q8": "gguf Q8_0 copy"}


def _gguf_variant(name: str) -> str:
    """Which GGUF variant an arm on the gguf weights runs: the Q8_0 copy for ours_llama_q8_*, else the file."""
    return "gguf_q8" if name.startswith("ours_llama_q8") else "gguf"


def _weights_label(weights: str, name: str) -> str:
    return GGUF_LABELS[_gguf_variant(name)] if weights == "gguf" else weights


def _reference(key: tuple[str, str], arms) -> tuple[str, str]:
    """The arm whose tokens `key`'s must equal: llama.cpp's plain arm for its own, the compiled
    plain arm for a compiled speculative one (losslessness within one decode path), and the
    eager plain arm of the same weights for the rest (so `ours_plain_compiled` shows whether
    compiling changed the text)."""
    weights, name = key
    if weights == "gguf":  # llama.cpp's own build, and our loop on the prebuilt one (each weights): each its own plain
        if name.startswith("ours_llama"):
            return ("gguf", "ours_llama_q8_plain" if _gguf_variant(name) == "gguf_q8" else "ours_llama_plain")
        return ("gguf", "llama_cpp")
    if name.endswith("_compiled") and name != "ours_plain_compiled" and (weights, "ours_plain_compiled") in arms:
        return (weights, "ours_plain_compiled")
    return (weights, "ours_plain")


def _step_bytes(models, peer) -> dict:
    from agenttrace.generation.ceiling import decode_bytes

    out = {w: decode_bytes(m.model) for w, m in models.items()}
    if peer is not None:
        out["gguf"] = peer.step_bytes(next(iter(out.values())), next(iter(models.values())).model.dtype.itemsize)
    return out


def measure_agent_steps(loaded, repeats: int, progress, clock: Clock) -> list[StepRow]:
    """Step 2 and a retry of step 1, after step 1 ran: with the prefix cache each starts from the
    KV entries of step 1's call; without it each prefills its whole prompt."""
    from agenttrace.core.chat import GenerationParams
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


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generation", help="our decoding loop and drafters against transformers generate (bundled model)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default 5)")
    p.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                   help="comma-separated arms (default: all but the llama.cpp peer's: llama_cpp, llama_cpp_lookup "
                        "need scripts/llama_cpp.sh; our loop on llama.cpp's prebuilt kernels, ours_llama_plain, "
                        "ours_llama_prompt_lookup_k3 and _adaptive16 (and the same on the GGUF's Q8_0 copy, ours_llama_q8_*), "
                        "when the llamacpp extra is installed, and ours_llama[_q8]_prompt_lookup_k8, _eagle_k4 and _medusa_k3 "
                        "(the trained heads on llama.cpp's features) when asked; the compiled ones, ours_plain_compiled, "
                        "ours_prompt_lookup_k3_compiled, ours_prompt_lookup_k8_compiled, which compile for minutes "
                        "first; and the trained heads' beyond ours_eagle_tree and ours_lookup_eagle_tree: "
                        "ours_eagle_k4, ours_eagle_tree_int8, ours_medusa_k3)")
    p.add_argument("--weights", default="fp32",
                   help="comma-separated weight variants every arm runs on: fp32, bf16, int8, int4 (default fp32)")
    p.add_argument("--no-rss", action="store_true", help="skip the peak-RSS child process per weight variant")
    p.add_argument("--no-steps", action="store_true", help="skip the agent-step (prefix cache) sequence")
    p.add_argument("--seed", type=int, default=0, help="seed of the arm order shuffle")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own choice)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default cpu)")
    p.add_argument("--json", action="store_true", help="print rows as JSON instead of tables")
    p.add_argument("--update-doc", type=Path, default=None, metavar="FILE",
                   help="also replace the `generation[-WEIGHTS]-DEVICE-tTHREADS` section of FILE (e.g. BENCHMARKS.md) with the tables")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch
    from rich.progress import Progress

    from agenttrace.bench.generation_tables import markdown, print_table
    from agenttrace.bench.llama_peer import LLAMA_ARMS, LlamaPeer
    from agenttrace.bench.rss_child import measure_peak_rss_mb
    from agenttrace.generation.ceiling import machine_peaks
    from agenttrace.generation.device import device_clock
    from agenttrace.generation.models import cache_dir, find_bundled_gguf, load_weights
    from agenttrace.generation.quantize import WEIGHTS

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"agenttrace bench generation: --device {args.device} but torch sees no CUDA device")
    variants = [w for w in args.weights.split(",") if w]
    bad = [w for w in variants if w not in WEIGHTS]
    if bad or not variants:
        raise SystemExit(f"unknown weights {', '.join(bad) or '(none)'}; choose from {', '.join(WEIGHTS)}")
    models = {w: load_weights(w, device=args.device) for w in variants}
    first = next(iter(models.values()))
    clock = device_clock(first.model.device)  # one clock for every arm, synchronised on CUDA
    arm_names = [a for a in args.arms.split(",") if a]
    peer = None
    if any(a in LLAMA_ARMS for a in arm_names):
        if args.device != "cpu":
            raise SystemExit("the llama_cpp arms run on the CPU build of llama-cpp-python; drop them with --device cuda")
        peer = LlamaPeer(find_bundled_gguf(), torch.get_num_threads())
    peaks = machine_peaks(cache_dir(), args.device)
    try:
        with Progress(transient=True) as progress:
            rows = measure_arms(models, arm_names, args.repeats, args.seed, progress, clock, peer, peaks)
            steps = [] if args.no_steps else measure_agent_steps(first, args.repeats, progress, clock)
    finally:
        if peer is not None:
            peer.close()
    if not args.no_rss and args.device == "cpu":
        from agenttrace.bench.generation_arms import NATIVE_ARMS

        native = sorted({_gguf_variant(a) for a in arm_names if a in NATIVE_ARMS})  # our loop on llama.cpp
        rss = {w: measure_peak_rss_mb(w, torch.get_num_threads()) for w in [*variants, *native]}
        for r in rows:
            if r.arm in LLAMA_ARMS and peer is not None:
                r.peak_rss_mb = peer.peak_rss_mb[r.arm == "llama_cpp_lookup"] or None
            else:
                r.peak_rss_mb = rss.get(_gguf_variant(r.arm) if r.arm in NATIVE_ARMS else r.weights)
    header = (f"{first.name}, batch 1, greedy, medians of {args.repeats} interleaved repeats; {machine()}; "
              f"read bandwidth {peaks.read_gb_s:.1f} GB/s, fp32 matmul {peaks.matmul_gflop_s:.0f} GFLOP/s")
    if args.json:
        print(json.dumps({"machine": header, "rows": [asdict(r) for r in rows], "agent_steps": [asdict(s) for s in steps]}, indent=2))
    else:
        print_table(rows, steps, header)
    if args.update_doc is not None:
        from agenttrace.bench.harness.render import update_section

        # named after where the model ran (not whether the machine has a GPU)
        device = "cuda" if first.model.device.type == "cuda" else f"cpu-t{torch.get_num_threads()}"
        command = "agenttrace bench generation " + " ".join(shlex.quote(a) for a in sys.argv[3:])
        weights = "" if variants == ["fp32"] else "-" + "-".join(variants)  # its own section per variant set
        update_section(args.update_doc, f"generation{weights}-{device}", markdown(rows, steps, header, command.strip()))
    return 0
