"""Training draft heads (agenttrace/training/): the data stage resumes and records the features a
plain pass gives, the training-time passes are exactly what drafting computes, training makes a
head guess what it was trained on, and the prompts keep the benchmark's own out of training."""

from __future__ import annotations

import json

import torch

from agenttrace.generation import kv
from agenttrace.generation.heads import HeadConfig, init_eagle
from agenttrace.training import data as datamod
from agenttrace.training.fit import (
    choose_draft_vocab,
    eagle_acceptance,
    eagle_passes,
    medusa_acceptance,
    vocab_coverage,
)
from tests.generation.test_quantize import small
from tests.tiny_heads import EOS, prompts


def test_training_time_passes_are_what_the_head_computes_when_drafting():
    """Pass m at pair j must equal the head's m-th drafted feature after a context ending at
    pair j - m + 1, drafting through its own KV cache (given the earlier drafts were right)."""
    torch.manual_seed(0)
    d, vocab = 32, 50
    head = init_eagle(HeadConfig("eagle", d, vocab, vocab, 4, 2, 8, 64, 10000.0, 1e-5), 1)
    head.bind(torch.randn(vocab, d), torch.randn(vocab, d))
    feats, tokens = torch.randn(20, d), torch.randint(0, vocab, (20,))
    first = 8
    with torch.no_grad():
        outs = eagle_passes(head, feats, tokens, first, 3)
        for n in range(first + 1, 17):  # the pending token is tokens[n]
            cache = head.new_cache()
            h1 = head(feats[:n], tokens[1 : n + 1], torch.arange(n), cache)[-1]
            h2 = head(h1[None], tokens[n + 1 : n + 2], torch.tensor([n]), cache)[-1]
            h3 = head(h2[None], tokens[n + 2 : n + 3], torch.tensor([n + 1]), cache)[-1]
            torch.testing.assert_close(h1, outs[0][n - 1], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(h2, outs[1][n], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(h3, outs[2][n + 1], atol=1e-5, rtol=1e-5)


def test_recorded_features_equal_one_plain_pass_over_each_sequence(tmp_path):
    """Sequences reuse the previous one's KV cache for a shared prefix; the features must be
    what a pass over the whole sequence gives."""
    model = small()
    records = datamod.answer_prompts(model, prompts(6), tmp_path / "answers.jsonl", eos={EOS}, pad=EOS, batch_size=4)
    datamod.record_features(model, records, tmp_path / "features")
    seqs = datamod.load_sequences(tmp_path / "features")
    assert {s.id for s in seqs} == set(records) and len(seqs) == 6
    with torch.inference_mode():
        for s in seqs:
            _, hidden = kv.forward_features(model, s.tokens.tolist(), kv.new_cache(model))
            torch.testing.assert_close(s.features.float(), hidden.float(), atol=2e-3, rtol=2e-3)
            assert s.prompt_len == len(records[s.id]["prompt"])


def test_answering_resumes_and_a_torn_line_is_answered_again(tmp_path):
    model = small()
    path = tmp_path / "answers.jsonl"
    batch = prompts(10)
    first = datamod.answer_prompts(model, batch[:4], path, eos={EOS}, pad=EOS, batch_size=4)
    with path.open("a") as f:
        f.write('{"id": "p5", "sour')  # an interrupted write
    answered = []
    again = datamod.answer_prompts(model, batch, path, eos={EOS}, pad=EOS, batch_size=4,
                                   progress=answered.append)
    assert answered[0] == 4 and sum(answered) == 10  # the four done counted, six answered
    assert set(again) == {p[0] for p in batch}
    assert all(again[k]["answer"] == v["answer"] for k, v in first.items())
    for r in again.values():  # greedy answers end at EOS or the budget
        assert len(r["answer"]) <= 24 and (r["answer"][-1] == EOS or len(r["answer"]) == 24)
        assert EOS not in r["answer"][:-1]
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith('{"id"') and line.endswith("}")]
    assert len({r["id"] for r in lines}) == 10


def test_training_makes_the_heads_guess_what_they_were_trained_on(heads):
    trained = eagle_acceptance(heads.eagle, heads.train, 3)
    untrained = eagle_acceptance(heads.untrained_eagle, heads.train, 3)
    assert trained[0] > 0.25 > untrained[0] * 3
    assert trained[1] > untrained[1] and trained[0] >= trained[1] >= trained[2]
    assert medusa_acceptance(heads.medusa, heads.train, 3)[0] > untrained[0]


def test_the_draft_vocabulary_keeps_eos_and_the_most_frequent_answer_tokens(heads):
    ids = choose_draft_vocab(heads.train, 20, [EOS])
    assert len(ids) == 20 and EOS in ids.tolist() and ids.tolist() == sorted(ids.tolist())
    counts: dict[int, int] = {}
    for s in heads.train:
        for t in s.tokens[s.prompt_len :].tolist():
            counts[t] = counts.get(t, 0) + 1
    top = sorted(counts, key=lambda t: -counts[t])[:10]
    assert set(top) <= set(ids.tolist())
    assert vocab_coverage(heads.train, ids) < vocab_coverage(heads.train, choose_draft_vocab(heads.train, 60, [EOS]))


def test_the_benchmark_prompts_and_whole_tasks_are_held_out():
    from agenttrace.bench.prompts import FREE_TEXT
    from agenttrace.bench.workloads import tool_call_tasks
    from agenttrace.training.corpus import training_prompts

    prompts_ = training_prompts()
    split = {p.id: p.split for p in prompts_}
    assert all(split[f"bench-free-{i}"] == "heldout" for i in range(len(FREE_TEXT)))
    for task in tool_call_tasks()[:2]:
        assert split[f"tool_calls/{task.id}/first"] == split[f"tool_calls/{task.id}/second"] == "heldout"
    by_task: dict[str, set[str]] = {}
    for p in prompts_:
        if p.id.count("/") == 2:
            by_task.setdefault(p.id.rsplit("/", 1)[0], set()).add(p.split)
    assert all(len(splits) == 1 for splits in by_task.values())  # a task's steps share a split
    assert 0.08 < sum(p.split == "heldout" for p in prompts_) / len(prompts_) < 0.3
    assert len({p.id for p in prompts_}) == len(prompts_) > 300
