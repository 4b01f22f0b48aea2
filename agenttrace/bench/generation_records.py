"""The records of `agenttrace bench generation`: one run, one table row, one agent-step row."""

from __future__ import annotations

from dataclasses import dataclass

from agenttrace.bench.divergence import PartingSummary

__all__ = ["Row", "Run", "StepRow"]


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
    decode_vs_our_plain: float  # over fp32 ours_plain, within each repeat
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    time_to_tool_call_s: float | None  # median end-to-end time of a tool-call prompt
    # same tokens as the plain arm of the same weights and decode path (llama_cpp for its lookup
    # arm; ours_plain_compiled for the compiled speculative arms, eager ours_plain for that one)
    same_as_plain_greedy: bool
    weights: str = "fp32"  # fp32, bf16, int8, int4, or the GGUF's own for the llama.cpp arms
    ceiling_tok_s: float | None = None  # read bandwidth / bytes of one decode step at the set's mean context
    ceiling_share: float | None = None  # decode tok/s over that ceiling (above 1: more than a token per weight read)
    peak_rss_mb: float | None = None  # of a process running the weights' arms (the llama.cpp worker for its arms)
    compile_s: float | None = None  # a compiled arm's torch.compile time for its shapes (before timing)
    # a plain arm's greedy text against the most exact torch weights' (another configuration may
    # part from it, legitimately only at a near-tie of the top two logits): bench/divergence.py
    parting: PartingSummary | None = None


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
