"""The tables of `agenttrace bench generation`: its rows as the harness's `TextTable`s, for the
terminal and for BENCHMARKS.md alike."""

from __future__ import annotations

from agenttrace.bench.generation_records import Row, StepRow


def _fmt(x: float | None, spec: str = ".2f", suffix: str = "") -> str:
    return "-" if x is None or x != x else f"{x:{spec}}{suffix}"


ARM_COLUMNS = ("weights", "arm", "prompts", "e2e tok/s", "vs HF generate", "decode tok/s", "vs fp32 plain",
               "acceptance", "mean acc. len", "tool call s", "= greedy", "ceiling tok/s", "of ceiling", "peak RSS MiB", "compile s",
               "text vs anchor")
STEP_COLUMNS = ("step", "without prefix cache s", "with prefix cache s", "speedup", "cached tokens", "same output")
STEPS_TITLE = "agent steps (prompt lookup k=8): time to the end of the tool call"


def arm_cells(r: Row) -> list[str]:
    return [
        r.weights, r.arm, r.prompts, _fmt(r.e2e_tok_s, ".1f"), _fmt(r.e2e_vs_hf_generate, ".2f", "x"), _fmt(r.decode_tok_s, ".1f"),
        _fmt(r.decode_vs_our_plain, ".2f", "x"),
        _fmt(r.acceptance_rate * 100 if r.acceptance_rate is not None else None, ".0f", "%"),
        _fmt(r.mean_acceptance_length), _fmt(r.time_to_tool_call_s), "yes" if r.same_as_plain_greedy else "NO",
        _fmt(r.ceiling_tok_s, ".0f"), _fmt(r.ceiling_share * 100 if r.ceiling_share is not None else None, ".0f", "%"),
        _fmt(r.peak_rss_mb, ".0f"), _fmt(r.compile_s, ".0f"),
        "-" if r.parting is None else r.parting.describe(),
    ]


def step_cells(s: StepRow) -> list[str]:
    return [s.step, _fmt(s.without_cache_s), _fmt(s.with_cache_s), _fmt(s.speedup, ".2f", "x"), str(s.cached_tokens),
            "yes" if s.same_output else "NO"]


def tables(rows: list[Row], steps: list[StepRow], header: str) -> list:
    """The benchmark's tables as the harness's `TextTable`s, so both render them alike."""
    from agenttrace.bench.harness.render import TextTable

    anchor = next((r.parting.anchor for r in rows if r.parting is not None), None)
    if anchor is not None:  # what the plain arms' texts were compared with, and what a near-tie is
        from agenttrace.bench.divergence import NEAR_TIE_LOGITS

        header += (f"; texts vs the anchor, {anchor}: prompts where a plain arm's text parts from it, near-ties "
                   f"(the anchor's top two within {NEAR_TIE_LOGITS} logits) or wide, and the widest margin")
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
