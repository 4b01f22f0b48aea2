"""`agenttrace bench generation` on a tiny random-weight model: every arm, transformers'
`generate` included, is timed on the one clock it is given, synchronised before each reading."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agenttrace.bench.generation_arms import build_arms
from agenttrace.clock import FakeClock, with_sync

MS = 1_000_000
PROMPT = list(range(3, 15))


class Tokenizer:
    """What the arms use of a tokenizer: the EOS id and a toy detokenizer."""

    eos_token_id = 2

    def decode(self, ids, skip_special_tokens=True) -> str:
        return " ".join(map(str, ids))


def synced_fake_clock():
    """A fake clock whose device takes 1 ms to finish what is queued before each reading."""
    fake = FakeClock()
    syncs: list[int] = []

    def sync() -> None:
        syncs.append(fake.now_ns())
        fake.advance(MS)

    return with_sync(fake, sync), syncs


@pytest.fixture
def loaded(tiny_model):
    return SimpleNamespace(model=tiny_model, tokenizer=Tokenizer(), name="tiny")


def test_the_hf_arm_syncs_before_its_start_first_token_and_end_readings(loaded):
    clock, syncs = synced_fake_clock()
    run = build_arms(loaded, ["hf_generate"], clock)["hf_generate"](PROMPT, 4)
    assert 1 <= len(run.tokens) <= 4
    # three readings (call start, first new token, call end), each after its sync: a reading
    # taken before the device finished would be 1 ms early and these would not be exact
    assert len(syncs) == 3
    assert run.e2e_s == 0.002 and run.decode_s == 0.001


def test_our_arm_reads_the_same_clock_and_agrees_with_hf_greedy(loaded):
    clock, syncs = synced_fake_clock()
    arms = build_arms(loaded, ["hf_generate", "ours_plain"], clock)
    hf = arms["hf_generate"](PROMPT, 4)
    before = len(syncs)
    ours = arms["ours_plain"](PROMPT, 4)
    readings = len(syncs) - before
    assert readings >= 3  # start, prefill, end at least: our loop reads the bench's clock
    assert ours.e2e_s == (readings - 1) * MS / 1e9  # start to end on that clock, every reading synced
    assert ours.tokens == hf.tokens  # both greedy over the same weights


def test_an_unknown_arm_is_refused_with_the_choices(loaded):
    clock, _ = synced_fake_clock()
    with pytest.raises(SystemExit, match="hf_generate"):
        build_arms(loaded, ["nope"], clock)


def test_the_compiled_arms_share_one_compiled_model_warm_up_before_timing_and_agree_with_eager(loaded):
    from agenttrace.bench.generation_arms import warm_up as _warm_up

    clock, _ = synced_fake_clock()
    names = ["ours_plain", "ours_plain_compiled", "ours_prompt_lookup_k3_compiled"]
    arms = build_arms(loaded, names, clock, longest=len(PROMPT) + 4)
    plain, lookup = arms["ours_plain_compiled"], arms["ours_prompt_lookup_k3_compiled"]
    assert plain.compiled is lookup.compiled and arms["ours_plain"].compiled is None
    assert _warm_up(arms["ours_plain"], [16]) is None
    first = _warm_up(plain, [len(PROMPT) + 4])  # width 1 only
    assert set(plain.compiled.compile_s) == {(512, 1)} and first == plain.compiled.compile_s[(512, 1)] > 0
    _warm_up(lookup, [len(PROMPT) + 4])  # up to k + 1 = 4 tokens: widths 1, 2 and 4
    assert set(lookup.compiled.compile_s) == {(512, 1), (512, 2), (512, 4)}
    eager = arms["ours_plain"](PROMPT, 4).tokens
    assert plain(PROMPT, 4).tokens == eager == lookup(PROMPT, 4).tokens
