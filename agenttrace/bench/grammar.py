"""`agenttrace bench grammar`: the grammar engines side by side on our own workload, the
measurement behind the engine `generation/constrain.py` uses.

For each engine installed (llguidance, a dependency; xgrammar when the user installs it), in
interleaved repeats: mapping the bundled model's tokenizer, compiling the decision grammar of
every suite's tools (cold, no cache), and the time of one token mask (computed and applied to a
logits row) at every position of the suites' expected tool calls and of some answers, walked
token by token as a constrained decoder would. Medians of the repeats; ratios against llguidance.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from agenttrace.clock import Clock, default_clock

ENGINES = ("llguidance", "xgrammar")
ANSWERS = ("It is 12 degrees and raining in Paris.", "17 * 23 = 391", "Il fait beau à Nice.")


@dataclass
class EngineRuns:
    tokenizer_s: list[float] = field(default_factory=list)
    compile_s: list[float] = field(default_factory=list)
    mask_s: list[float] = field(default_factory=list)  # per token, over every repeat
    refused: int = 0  # expected tokens the grammar refused (a wrong grammar would show here)


def _workload() -> tuple[list[dict], list[list[str]]]:
    """The decision grammars' JSON schemas (one per distinct tool set of the suites) and, for
    each, the texts to walk under it: its suites' expected calls (the first also the answers)."""
    from agenttrace.bench.workloads import load_suites
    from agenttrace.runtime.decision_grammar import decision_schema
    from agenttrace.runtime.parse import FinalAnswer, ToolCall
    from agenttrace.runtime.prompt import decision_text

    suites = load_suites(("tool_calls", "long_reasoning", "code", "multilingual"))
    schemas: list[dict] = []
    texts: list[list[str]] = []
    index: dict[tuple[str, ...], int] = {}
    for suite in suites.values():
        tools = suite.tools()
        key = tuple(t.name for t in tools)
        if key not in index:
            index[key] = len(schemas)
            schemas.append(decision_schema(tools, 56))
            texts.append([])
        by_name = {t.name: t for t in tools}
        # only expected calls that are whole calls (some tasks name the tool and leave the arguments free)
        texts[index[key]] += [decision_text(ToolCall(t.expected_call.tool, dict(t.expected_call.arguments)))
                              for t in suite.tasks if t.expected_call is not None and t.expected_call.tool in by_name
                              and by_name[t.expected_call.tool].validator.is_valid(t.expected_call.arguments)]
    texts[0] += [decision_text(FinalAnswer(a)) for a in ANSWERS]
    return schemas, texts


def _llguidance(tok, vocab: int, clock: Clock) -> Callable[[list[dict], list[list[int]], EngineRuns], None]:
    import llguidance
    import numpy as np
    import torch

    from agenttrace.generation.constrain import JSON_OPTIONS, apply_mask_, llguidance_tokenizer

    def once(schemas, seqs, runs):
        t0 = clock.now_ns()
        lt = llguidance_tokenizer(tok, vocab)
        runs.tokenizer_s.append((clock.now_ns() - t0) / 1e9)
        t0 = clock.now_ns()
        grammars = [llguidance.LLMatcher(lt, llguidance.LLMatcher.grammar_from_json_schema(s, defaults=JSON_OPTIONS))
                    for s in schemas]
        runs.compile_s.append((clock.now_ns() - t0) / 1e9 / len(schemas))
        logits = torch.zeros(vocab)
        for g, seq in ((g, seq) for g, group in zip(grammars, seqs) for seq in group):
            m = g.deep_copy()
            for t in seq:
                t0 = clock.now_ns()
                bits = np.frombuffer(m.compute_bitmask(), dtype=np.uint8)
                allowed = torch.from_numpy(np.unpackbits(bits, bitorder="little")[:vocab].view(np.bool_))
                apply_mask_(logits.clone(), allowed)
                runs.mask_s.append((clock.now_ns() - t0) / 1e9)
                if not allowed[t]:
                    runs.refused += 1
                    break
                m.consume_token(t)
    return once


def _xgrammar(tok, vocab: int, clock: Clock) -> Callable[[list[dict], list[list[int]], EngineRuns], None]:
    import torch
    import xgrammar as xgr

    def once(schemas, seqs, runs):
        t0 = clock.now_ns()
        info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=vocab)
        runs.tokenizer_s.append((clock.now_ns() - t0) / 1e9)
        compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        t0 = clock.now_ns()
        compiled = [compiler.compile_json_schema(json.dumps(s), any_whitespace=False, separators=(", ", ": "),
                                                 strict_mode=True) for s in schemas]
        runs.compile_s.append((clock.now_ns() - t0) / 1e9 / len(schemas))
        bitmask = xgr.allocate_token_bitmask(1, vocab)
        logits = torch.zeros(1, vocab)
        for g, seq in ((g, seq) for g, group in zip(compiled, seqs) for seq in group):
            m = xgr.GrammarMatcher(g)
            for t in seq:
                t0 = clock.now_ns()
                m.fill_next_token_bitmask(bitmask)
                row = logits.clone()
                xgr.apply_token_bitmask_inplace(row, bitmask)
                runs.mask_s.append((clock.now_ns() - t0) / 1e9)
                if row[0, t] == float("-inf"):
                    runs.refused += 1
                    break
                m.accept_token(t)
    return once


def measure(repeats: int, clock: Clock) -> tuple[dict[str, EngineRuns], list[str], int]:
    """Runs per installed engine, the engines missing, and the number of texts walked."""
    import importlib.util

    from agenttrace.generation.models import load_model

    loaded = load_model()
    tok = loaded.tokenizer
    vocab = int(loaded.model.config.vocab_size)
    schemas, texts = _workload()
    seqs = [[tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for t in group] for group in texts]
    makers = {"llguidance": _llguidance, "xgrammar": _xgrammar}
    present = [e for e in ENGINES if importlib.util.find_spec(e) is not None]
    missing = [e for e in ENGINES if e not in present]
    engines = {e: makers[e](tok, vocab, clock) for e in present}
    runs = {e: EngineRuns() for e in present}
    for r in range(repeats):  # interleaved, the order alternating, so drift hits both alike
        for e in (present if r % 2 == 0 else list(reversed(present))):
            engines[e](schemas, seqs, runs[e])
    return runs, missing, sum(map(len, seqs))


def table(runs: dict[str, EngineRuns], missing: list[str], texts: int, repeats: int) -> str:
    base = runs.get("llguidance")
    lines = ["| engine | map tokenizer s | compile ms (per tool set) | mask us/token p50 | p95 | vs llguidance (mask) | refused |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for e, r in runs.items():
        p50 = statistics.median(r.mask_s)
        p95 = sorted(r.mask_s)[int(0.95 * (len(r.mask_s) - 1))]
        ratio = p50 / statistics.median(base.mask_s) if base and base.mask_s else None
        lines.append(f"| {e} | {statistics.median(r.tokenizer_s):.2f} | {1e3 * statistics.median(r.compile_s):.1f} | "
                     f"{1e6 * p50:.0f} | {1e6 * p95:.0f} | {'-' if ratio is None else f'{ratio:.2f}x'} | {r.refused} |")
    notes = [f"Medians over {repeats} interleaved repeats; masks over {texts} texts (the suites' expected calls and "
             "some answers) walked token by token under their suite's decision grammar; compile: the "
             "decision grammar of each distinct tool set, cold."]
    if missing:
        notes.append(f"Not installed, not measured: {', '.join(missing)} (pip install {' '.join(missing)} to compare).")
    return "\n".join(lines + [""] + notes)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("grammar", help="grammar engines side by side: tokenizer mapping, compile and mask time on our tools")
    p.add_argument("--repeats", type=int, default=5, help="interleaved repeats (default 5)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    runs, missing, texts = measure(args.repeats, default_clock())
    print(table(runs, missing, texts, args.repeats))
    return 0
