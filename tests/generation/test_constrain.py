"""Grammar-constrained decoding (generation/constrain.py, the loop, the runtime's decision grammar).

The distribution tests run the real loop with a real llguidance matcher over a tiny byte-level
tokenizer (eight one-character tokens) and a tiny random model: constrained sampling, plain or
speculative, must give the target's distribution masked by the grammar and renormalised, exactly
as the unconstrained test in test_verify.py checks losslessness, with the same negative control.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from agenttrace import Agent, AgentConfig, FakeClock, GenerationParams, Telemetry, Tool
from agenttrace import semconv as sc
from agenttrace.core.chat import Constraint
from agenttrace.errors import ConstraintUnavailable
from agenttrace.generation import loop as loop_module
from agenttrace.generation import sampling
from agenttrace.generation.constrain import GrammarCompiler
from agenttrace.generation.draft_model import DraftModelDrafter
from agenttrace.generation.drafters import Draft
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.runtime.decision_grammar import decision_constraint, decision_schema
from agenttrace.testing import ScriptedModel, capture_telemetry

pytest.importorskip("llguidance")
from test_verify import P_MIN, broken_verify, tiny  # noqa: E402

CHARS = ["<eos>", "a", "b", "c", "d", "e", "f", "g"]  # token i is CHARS[i]; V = 8 as in test_verify
V = len(CHARS)
PROMPT = [1, 5, 3]
# position 1: a or b; position 2: after a, b or c; after b, c, d or e; position 3: any letter
REGEX = "(a[bc]|b[cde])[a-g]{1,3}"


def allowed_after(prefix: tuple[int, ...]) -> set[int]:
    """The reference the matcher is checked against, written from REGEX by hand."""
    if not prefix:
        return {1, 2}
    if len(prefix) == 1:
        return {2, 3} if prefix[0] == 1 else {3, 4, 5}
    return set(range(1, 8))


def tiny_tokenizer(decoder: bool = True):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(CHARS)}, merges=[], unk_token=None))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if decoder:
        tk.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>")


@pytest.fixture(scope="module")
def compiler():
    return GrammarCompiler(tiny_tokenizer(), V, {0})


@pytest.fixture(scope="module")
def models():
    return tiny(0), tiny(1)


class FixedDrafter:
    """A deterministic drafter (q one-hot, like prompt lookup) that always proposes `tokens`."""

    method = "fixed"

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = tokens

    def propose(self, context, k, params):
        return Draft(self.tokens[:k], None)

    def reset(self) -> None:
        pass


class PeakedDrafter:
    """A sampling drafter whose q puts most of its mass on "c": rejection sampling is lossless
    for any q, and a peaked one makes a broken correction step easy to see."""

    method = "peaked"
    Q = torch.tensor([0.02, 0.03, 0.03, 0.8, 0.03, 0.03, 0.03, 0.03])

    def __init__(self, seed: int = 7) -> None:
        self.gen = torch.Generator().manual_seed(seed)

    def propose(self, context, k, params):
        tokens = torch.multinomial(self.Q, k, replacement=True, generator=self.gen).tolist()
        return Draft(tokens, self.Q.expand(k, V).clone())

    def reset(self) -> None:
        pass


REGEX_C = Constraint("regex", REGEX, "test_regex")


@torch.inference_mode()
def masked_joint(model, params: GenerationParams) -> np.ndarray:
    """The exact distribution of the first three tokens under the grammar: at each position the
    target's logits with refused tokens at -inf, then the sampling transform (renormalised)."""
    joint = np.zeros(V**3)
    for x1 in range(V):
        for x2 in range(V):
            for x3 in range(V):
                seq = (x1, x2, x3)
                if not all(seq[j] in allowed_after(seq[:j]) for j in range(3)):
                    continue
                ids = torch.tensor([PROMPT + [x1, x2]])
                logits = model(input_ids=ids).logits[0, len(PROMPT) - 1 :].float()  # [3, V]
                p = 1.0
                for j in range(3):
                    row = logits[j].clone()
                    refused = [t for t in range(V) if t not in allowed_after(seq[:j])]
                    row[refused] = float("-inf")
                    p *= float(sampling.probabilities(row, params)[seq[j]])
                joint[x1 * V * V + x2 * V + x3] = p
    return joint / joint.sum()


def chi_square_p(codes: list[int], expected: np.ndarray) -> float:
    counts = np.bincount(codes, minlength=V**3).astype(float)
    n = counts.sum()
    assert counts[expected == 0].sum() == 0, "a sequence the grammar refuses was sampled"
    exp = expected * n
    keep = exp >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(exp[keep], exp[~keep].sum())
    nz = exp > 0
    stat = float(((obs[nz] - exp[nz]) ** 2 / exp[nz]).sum())
    df = int(nz.sum()) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def sample_codes(target, compiler, params, samples, drafter=None, k=3) -> list[int]:
    stop = StopCriteria(frozenset({0}), 3)
    clock = FakeClock()
    codes = []
    for seed in range(samples):
        out = generate(target, PROMPT, replace(params, seed=seed), stop, clock, drafter=drafter,
                       num_speculative_tokens=k if drafter is not None else 0,
                       matcher=compiler.matcher(REGEX_C, clock))
        assert out.constrain is not None and out.constrain.dead_end is None
        t = out.tokens
        codes.append(t[0] * V * V + t[1] * V + t[2])
    return codes


def test_the_matcher_masks_what_the_grammar_allows_and_rolls_back(compiler):
    m = compiler.matcher(REGEX_C, FakeClock())
    rows, consumed, cut = m.masks_along([2, 4, 6])  # "bdf"
    assert cut is False and consumed == 3
    assert set(rows[0].nonzero()[:, 0].tolist()) == allowed_after(())
    assert set(rows[1].nonzero()[:, 0].tolist()) == allowed_after((2,))
    assert set(rows[2].nonzero()[:, 0].tolist()) == allowed_after((2, 4))
    assert set(rows[3].nonzero()[:, 0].tolist()) == {0, *range(1, 8)}  # complete: EOS or more letters
    m.rollback(2)  # the target kept only "b"
    assert m.rollbacks == 1
    again, consumed, _ = m.masks_along([1])  # "a" cannot follow "b"
    assert consumed == 0 and set(again[0].nonzero()[:, 0].tolist()) == allowed_after((2,))


SAMPLES = 1200  # per arm: each is one call of the real loop
DRAFTERS = {"plain": lambda m: None, "draft model": lambda m: DraftModelDrafter(m), "fixed": lambda m: FixedDrafter([2, 6, 3]),
            "peaked": lambda m: PeakedDrafter()}


def test_a_drafted_eos_is_verified_not_consumed_and_a_complete_grammar_cuts_the_draft(compiler):
    clock = FakeClock()
    m = compiler.matcher(Constraint("regex", "[ab]+", "eos"), clock)
    first = m.masks_along([])[0][0].clone()
    rows, consumed, cut = m.masks_along([1, 0, 2])  # "a", EOS, "b"
    assert (consumed, cut) == (1, False) and bool(rows[1, 0])  # EOS allowed after "a", left to verification
    m.rollback(1)  # rejected: back to the start, which an EOS consumed by the matcher could not do
    assert torch.equal(m.masks_along([])[0][0], first)
    done = compiler.matcher(Constraint("regex", "ab", "complete"), clock)
    rows, consumed, cut = done.masks_along([1, 2, 0, 1])
    assert (consumed, cut) == (2, True) and rows.shape[0] == 3 and done.stopped


def test_greedy_drafts_through_the_end_of_the_grammar_match_plain_decoding(models, compiler):
    target, _ = models
    clock = FakeClock()
    stop = StopCriteria(frozenset({0}), 8)
    for regex in ("[ab]+", "(a|b)(c|d)", "[a-g]{2,5}"):
        c = Constraint("regex", regex, "t")
        plain = generate(target, PROMPT, GenerationParams(), stop, clock, matcher=compiler.matcher(c, clock))
        for draft in ([1, 0, 1, 0], [1, 3, 0, 2], plain.tokens + [0, 4], [2, 2, 2, 2]):
            spec = generate(target, PROMPT, GenerationParams(), stop, clock, drafter=FixedDrafter(draft),
                            num_speculative_tokens=4, matcher=compiler.matcher(c, clock))
            assert spec.tokens == plain.tokens and spec.constrain.dead_end is None, (regex, draft)


@pytest.mark.parametrize("params,drafters", [
    (GenerationParams(temperature=1.0), ("plain", "draft model", "fixed", "peaked")),
    (GenerationParams(temperature=0.8, top_k=4), ("draft model",)),
], ids=["t1", "t0.8-topk4"])
def test_constrained_sampling_plain_and_speculative_has_the_masked_distribution(models, compiler, params, drafters):
    target, draft = models
    expected = masked_joint(target, params)
    for name in drafters:
        p = chi_square_p(sample_codes(target, compiler, params, SAMPLES, DRAFTERS[name](draft)), expected)
        assert p > P_MIN, f"{name}: chi-square p={p:.2e}"


def test_the_negative_control_fails_under_the_constraint_too(models, compiler, monkeypatch):
    """test_verify's broken sampler (rejections resampled from p, not the residual) in the
    constrained loop: the same test must catch it."""
    target, _ = models
    params = GenerationParams(temperature=1.0)
    expected = masked_joint(target, params)

    def broken(draft_tokens, q, p, gen):
        d = torch.tensor([draft_tokens])
        accepted, extra = broken_verify(d, q.unsqueeze(0) if q is not None else None, p.unsqueeze(0), gen)
        return int(accepted[0]), int(extra[0])

    monkeypatch.setattr(loop_module, "verify_sampled", broken)
    p = chi_square_p(sample_codes(target, compiler, params, SAMPLES, PeakedDrafter()), expected)
    assert p < 1e-6, f"the broken sampler passed: p={p:.2e}"


def test_greedy_speculative_constrained_equals_plain_constrained_and_refused_drafts_are_cut(models, compiler):
    target, _ = models
    stop = StopCriteria(frozenset({0}), 6)
    clock = FakeClock()
    plain = generate(target, PROMPT, GenerationParams(), stop, clock, matcher=compiler.matcher(REGEX_C, clock))
    assert all(t in allowed_after(tuple(plain.tokens[:j])) for j, t in enumerate(plain.tokens[:2]))
    # "a a ..." is refused at its second token: one drafted token reaches verification per round at most
    for drafter in (FixedDrafter([1, 1, 1, 1]), FixedDrafter(plain.tokens[:2] + [7, 7])):
        spec = generate(target, PROMPT, GenerationParams(), stop, clock, drafter=drafter, num_speculative_tokens=4,
                        matcher=compiler.matcher(REGEX_C, clock))
        assert spec.tokens == plain.tokens
    first = generate(target, PROMPT, GenerationParams(), stop, clock, drafter=FixedDrafter([1, 1, 1, 1]),
                     num_speculative_tokens=4, matcher=compiler.matcher(REGEX_C, clock))
    assert first.constrain.drafts_cut >= 3  # "a" never follows the first letter: the whole draft is cut


def test_a_dead_end_ends_the_output_and_says_so(models, compiler):
    target, _ = models
    clock = FakeClock()
    # "z" is not in the vocabulary: after "a" nothing can follow
    out = generate(target, PROMPT, GenerationParams(), StopCriteria(frozenset({0}), 8), clock,
                   matcher=compiler.matcher(Constraint("regex", "az", "dead"), clock))
    assert out.tokens == [1] and out.finish_reason == "stop"
    assert "no token" in out.constrain.dead_end


def test_a_grammar_that_does_not_compile_falls_back_with_a_reason(models, compiler):
    target, _ = models
    clock = FakeClock()
    stop = StopCriteria(frozenset({0}), 5)
    for bad in (Constraint("json_schema", json.dumps({"not": {"type": "string"}}), "bad"),
                Constraint("json_schema", "{not json", "bad"),
                Constraint("regex", "(?=a)b", "bad")):
        m = compiler.matcher(bad, clock)
        out = generate(target, PROMPT, GenerationParams(), stop, clock, matcher=m)
        assert out.constrain.fallback and not m.active
        assert out.tokens == generate(target, PROMPT, GenerationParams(), stop, clock).tokens
    assert "Unimplemented keys" in compiler.matcher(Constraint("json_schema", json.dumps({"not": {}}), "x"), clock).stats().fallback


def test_compiled_grammars_are_cached(compiler):
    clock = FakeClock()
    c = Constraint("regex", "[ab]+c", "cached")
    compiler.compile(c, clock)
    assert compiler.matcher(c, clock).stats().compile_s == 0.0


def test_a_tokenizer_the_engine_cannot_map_fails_at_set_up():
    with pytest.raises(ConstraintUnavailable, match="cannot map the tokenizer"):
        GrammarCompiler(tiny_tokenizer(decoder=False), V, {0})


# -- the runtime ------------------------------------------------------------------------------
def _tool(name: str, schema: dict) -> Tool:
    return Tool(name, f"the {name} tool", schema, lambda **kw: "ok")


def test_the_decision_schema_is_the_parse_envelope_with_each_tools_schema():
    calc = _tool("calculator", {"type": "object", "properties": {"expression": {"type": "string"}},
                                "required": ["expression"], "additionalProperties": False})
    schema = decision_schema([calc], 40)
    call, answer = schema["anyOf"]
    assert list(call["properties"]) == ["tool", "arguments"]
    # the tool's schema, its free strings bounded like the answer (the grammar's copy only)
    args = call["properties"]["arguments"]
    assert args["properties"]["expression"] == {"type": "string", "maxLength": 40}
    assert {k: v for k, v in args.items() if k != "properties"} == {k: v for k, v in calc.parameters.items()
                                                                    if k != "properties"}
    assert "maxLength" not in calc.parameters["properties"]["expression"]
    assert decision_schema([calc])["anyOf"][0]["properties"]["arguments"] is calc.parameters  # no budget: as it is
    assert answer["properties"]["answer"]["maxLength"] == 40
    assert len(decision_schema([calc], answer=False)["anyOf"]) == 1
    assert decision_constraint([calc], 48) == decision_constraint([calc], 48)  # one cache key per tool set


def test_an_agent_over_a_model_that_cannot_constrain_fails_at_construction():
    with pytest.raises(ConstraintUnavailable, match="cannot constrain decoding"):
        Agent(ScriptedModel([], FakeClock()), [_tool("t", {"type": "object"})], config=AgentConfig(constrained=True))


class DeadEndModel(ScriptedModel):
    """A model that constrains: every reply ends at a grammar dead end."""

    def prepare_constraint(self, constraint):
        return None

    def chat(self, messages, params, *, cancel=None):
        from agenttrace.core.chat import ConstrainStats

        assert params.constraint is not None
        gen = super().chat(messages, params, cancel=cancel)
        return replace(gen, constrain=ConstrainStats("llguidance", params.constraint.name, dead_end="no token"))


def test_a_dead_end_is_a_parse_error_with_its_reason():
    tel, spans = capture_telemetry(FakeClock())
    agent = Agent(DeadEndModel(['{"tool": "t"'], tel.clock), [_tool("t", {"type": "object"})], telemetry=tel,
                  config=AgentConfig(constrained=True, max_attempts=1, max_steps=1))
    result = agent.run("go")
    (attempt,) = result.steps[0].attempts
    assert attempt.outcome is sc.AttemptOutcome.PARSE_ERROR and "dead end" in attempt.error
    assert attempt.mistake.error_type == "grammar_dead_end"


class RecordingConstrainer(ScriptedModel):
    """A scripted model that can constrain: it records the constraint of every call."""

    seen: list

    def prepare_constraint(self, constraint):
        return None

    def chat(self, messages, params, *, cancel=None):
        self.seen = getattr(self, "seen", []) + [params.constraint]
        return super().chat(messages, params, cancel=cancel)


def test_a_first_step_that_must_call_a_tool_decodes_under_the_grammar_of_a_call():
    tel, _ = capture_telemetry(FakeClock())
    tool = _tool("t", {"type": "object"})
    model = RecordingConstrainer(['{"tool": "t", "arguments": {}}', '{"answer": "done"}'], tel.clock)
    result = Agent(model, [tool], telemetry=tel, config=AgentConfig(first_step="tool")).run("go")
    assert result.outcome is sc.TaskOutcome.COMPLETED
    first, second = model.seen
    assert first == decision_constraint([tool], 128, answer=False)  # a call, no answer allowed
    assert second is None  # later steps decode as configured (unconstrained here)


def test_a_first_step_that_must_call_a_tool_refuses_an_answer_where_the_model_cannot_constrain():
    tel, _ = capture_telemetry(FakeClock())
    model = ScriptedModel(['{"answer": "from my own weights"}', '{"tool": "t", "arguments": {}}', '{"answer": "ok"}'],
                          tel.clock)
    result = Agent(model, [_tool("t", {"type": "object"})], telemetry=tel,
                   config=AgentConfig(first_step="tool")).run("go")
    refused, called = result.steps[0].attempts
    assert refused.outcome is sc.AttemptOutcome.PARSE_ERROR and refused.mistake.error_type == "tool_required"
    assert "call a tool first" in model.calls[1][-1].content  # what the model was told
    assert called.outcome is sc.AttemptOutcome.OK and result.outcome is sc.TaskOutcome.COMPLETED


@pytest.mark.model
def test_constrained_agent_on_the_bundled_model_speculative_equals_plain(bundled, tmp_path):
    """Under the grammar every reply is one parseable decision; prompt lookup changes no text;
    the trace carries agenttrace.constrain.* and the report a constrain segment."""
    from agenttrace.examples.agents.function_calling import DEFAULT_CONFIG, EXAMPLES
    from agenttrace.examples.tools import default_tools

    from agenttrace import LocalChatModel, PromptLookupDrafter, report_from_files

    tasks = ["What is 17 * 23?", "Is it clear in Tokyo today?", "Convert 3 miles to km."]
    texts = {}
    for arm, drafter in (("plain", None), ("speculative", PromptLookupDrafter())):
        path = tmp_path / f"{arm}.jsonl"
        tel = Telemetry(service_name="t", trace_file=path)
        model = LocalChatModel(bundled.model, bundled.tokenizer, drafter=drafter, num_speculative_tokens=8)
        agent = Agent(model, default_tools(), telemetry=tel, examples=EXAMPLES,
                      config=replace(DEFAULT_CONFIG, constrained=True, max_steps=2))
        results = [agent.run(t) for t in tasks]
        tel.shutdown()
        texts[arm] = [a.text for r in results for s in r.steps for a in s.attempts]
        for r in results:
            for s in r.steps:
                for a in s.attempts:
                    json.loads(a.text)  # always one whole JSON object
                    assert a.generation.constrain.engine == "llguidance" and a.generation.constrain.fallback is None
        report = report_from_files([str(path)])
        assert report.problems == []
        for task in report.tasks:
            assert task.segments.constrain > 0
            assert task.segments.total() == pytest.approx(task.wall_s, abs=1e-6)
    assert texts["plain"] == texts["speculative"]
    gens = [json.loads(line) for line in (tmp_path / "speculative.jsonl").read_text().splitlines()]
    keys = {a["key"] for req in gens for rs in req["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]
            for a in s.get("attributes", [])}
    assert {sc.CONSTRAIN_ENGINE, sc.CONSTRAIN_MASK_S, sc.CONSTRAIN_DRAFTS_CUT, sc.CONSTRAIN_ROLLBACKS} <= keys


# -- reports -----------------------------------------------------------------------------------
class ConstrainedScript(ScriptedModel):
    """A scripted model whose calls say they were constrained, with known mask and compile times
    (mask time is extra wall time inside the call, outside prefill and the rounds)."""

    MASK_S, COMPILE_S = 0.05, 0.01

    def prepare_constraint(self, constraint):
        return None

    def chat(self, messages, params, *, cancel=None):
        from agenttrace.core.chat import ConstrainStats

        gen = super().chat(messages, params, cancel=cancel)
        end = self.clock.advance_s(self.MASK_S + self.COMPILE_S)
        return replace(gen, end_ns=end, constrain=ConstrainStats("llguidance", params.constraint.name, self.MASK_S,
                                                                 self.COMPILE_S, drafts_cut=2, rollbacks=1))


def _scripted_run(path, constrained: bool, label: str):
    from agenttrace.testing import ScriptedReply

    clock = FakeClock()
    tel = Telemetry(service_name="t", run_label=label, trace_file=path, clock=clock)
    replies = [ScriptedReply('{"tool": "t", "arguments": {}}', rounds=((3, 2, 0.01, 0.05),)),
               ScriptedReply('{"answer": "ok"}', rounds=((3, 1, 0.01, 0.05),))]
    cls = ConstrainedScript if constrained else ScriptedModel
    model = cls(replies, clock, method="prompt_lookup", num_speculative_tokens=3)
    Agent(model, [_tool("t", {"type": "object"})], telemetry=tel, config=AgentConfig(constrained=constrained)).run("go")
    tel.shutdown()


def test_reports_carve_the_constrain_segment_and_compare_constrained_with_unconstrained(tmp_path, capsys):
    from agenttrace.cli import main
    from agenttrace.report import report_from_files

    on, off = tmp_path / "constrained.jsonl", tmp_path / "free.jsonl"
    _scripted_run(on, True, "constrained")
    _scripted_run(off, False, "free")
    report = report_from_files([str(on)])
    (task,) = report.tasks
    for step in task.steps:  # mask + compile of the step's one call, and the segments still sum
        assert step.segments.constrain == pytest.approx(0.06, abs=1e-6)
        assert step.segments.total() == pytest.approx(step.wall_s, abs=1e-6)
    run = report.run
    assert (run.constrained_generations, run.generations, run.drafts_cut) == (2, 2, 4)
    both = report_from_files([str(on), str(off)])
    methods = {(w.label, w.method, w.constrained) for w in both.whatif}
    assert methods == {("constrained", "prompt_lookup", True), ("free", "prompt_lookup", False)}
    for fmt in ("markdown", "html", "json"):
        page = tmp_path / f"report.{fmt}"
        assert main(["report", str(on), "--format", fmt, "-o", str(page)]) == 0
        assert ("constrain_engine" if fmt == "json" else "2/2 generations under a grammar") in page.read_text()
    assert main(["compare", str(off), str(on)]) == 0
    out = capsys.readouterr().out
    assert "constrained decoding" in out and "step time: constrain" in out
