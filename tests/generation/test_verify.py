"""Losslessness of rejection sampling, as statistics: speculative sampling must produce the
target's own distribution over the first three tokens, and a broken sampler must be caught.

The first three tokens' joint distribution is known exactly from the target model's conditionals
(one batched forward over every 3-token continuation of the prompt gives p(. | prefix) for every
prefix up to length 3). 20,000 speculative samples, drafted from a second random model (q) and
verified by `verify_sampled_batch`, are drawn in batches and compared with that distribution by
a chi-square goodness-of-fit test; the negative control (on rejection, resample from p instead of
the residual max(0, p - q)) must fail the same test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from agenttrace import FakeClock, GenerationParams
from agenttrace.generation import sampling
from agenttrace.generation.draft_model import DraftModelDrafter
from agenttrace.generation.loop import StopCriteria, generate
from agenttrace.generation.verify import verify_greedy, verify_sampled_batch

V = 8  # vocabulary
PROMPT = [1, 5, 3]
SAMPLES = 20_000
P_MIN = 1e-3  # a correct sampler passes the chi-square test at this level (seeded: deterministic)


def tiny(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=V, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, initializer_range=0.3, bos_token_id=0, eos_token_id=None,
    )
    return LlamaForCausalLM(config).eval()


@torch.inference_mode()
def conditionals(model, params: GenerationParams) -> torch.Tensor:
    """p(. | prompt, x1..xj) for every prefix of length j <= 3, transformed by `params`:
    a [V**3, 4, V] table indexed by the base-V code of (x1, x2, x3) and the prefix length j."""
    grid = torch.cartesian_prod(*[torch.arange(V)] * 3)  # [V^3, 3]
    ids = torch.cat([torch.tensor(PROMPT).expand(len(grid), -1), grid], dim=1)
    logits = model(input_ids=ids).logits[:, len(PROMPT) - 1 :]  # [V^3, 4, V]
    return sampling.probabilities(logits.float(), params)


def code(prefix: torch.Tensor, length: torch.Tensor) -> torch.Tensor:
    """Row index into the table for prefixes (padded with zeros beyond `length`)."""
    digits = torch.where(torch.arange(3) < length.unsqueeze(-1), prefix, 0)
    return digits[:, 0] * V * V + digits[:, 1] * V + digits[:, 2]


def sample_first_three(p_tab, q_tab, k: int, seed: int, verify=verify_sampled_batch) -> np.ndarray:
    """SAMPLES speculative runs, each drafting up to k tokens per round until 3 tokens exist.
    Rounds beyond the third token are cut short (any k is lossless)."""
    gen = torch.Generator().manual_seed(seed)
    n = SAMPLES
    out = torch.zeros(n, 3, dtype=torch.long)
    length = torch.zeros(n, dtype=torch.long)
    while (length < 3).any():
        active = (length < 3).nonzero()[:, 0]
        L = length[active]
        kk = int(min(k, 3 - int(L.max())))  # same k for the batch; rows with more room still progress
        kk = max(kk, 0)
        prefix = out[active].clone()
        drafts, qs = [], []
        for i in range(kk):  # draft autoregressively from q
            q = q_tab[code(prefix, L + i), L + i]  # [B, V]
            d = torch.multinomial(q, 1, generator=gen)[:, 0]
            pos = (L + i).clamp(max=2)
            prefix[torch.arange(len(active)), pos] = torch.where(L + i < 3, d, prefix[torch.arange(len(active)), pos])
            drafts.append(d)
            qs.append(q)
        # p at the k+1 verify positions: after the prefix and after each draft token
        ps = [p_tab[code(prefix, L + i), (L + i).clamp(max=3)] for i in range(kk + 1)]
        draft = torch.stack(drafts, 1) if drafts else torch.zeros(len(active), 0, dtype=torch.long)
        q = torch.stack(qs, 1) if qs else None
        accepted, extra = verify(draft, q, torch.stack(ps, 1), gen)
        for b, row in enumerate(active.tolist()):
            new = draft[b, : accepted[b]].tolist() + [int(extra[b])]
            for t in new:
                if length[row] < 3:
                    out[row, length[row]] = t
                    length[row] += 1
    return (out[:, 0] * V * V + out[:, 1] * V + out[:, 2]).numpy()


def exact_joint(p_tab) -> np.ndarray:
    grid = torch.cartesian_prod(*[torch.arange(V)] * 3)
    codes = grid[:, 0] * V * V + grid[:, 1] * V + grid[:, 2]
    p1 = p_tab[0, 0][grid[:, 0]]
    p2 = p_tab[grid[:, 0] * V * V, 1, :].gather(-1, grid[:, 1:2])[:, 0]
    p3 = p_tab[grid[:, 0] * V * V + grid[:, 1] * V, 2, :].gather(-1, grid[:, 2:3])[:, 0]
    joint = torch.zeros(V**3, dtype=torch.float64)
    joint[codes] = (p1 * p2 * p3).double()
    return (joint / joint.sum()).numpy()


def chi_square_p(observed_codes: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(p-value, total variation) of the observed codes against the expected distribution.
    Cells with an expected count under 5 are pooled, as the test requires; the p-value uses the
    Wilson-Hilferty normal approximation of the chi-square tail (no scipy needed)."""
    counts = np.bincount(observed_codes, minlength=V**3).astype(float)
    n = counts.sum()
    exp_counts = expected * n
    small = exp_counts < 5
    obs = np.append(counts[~small], counts[small].sum())
    exp = np.append(exp_counts[~small], exp_counts[small].sum())
    keep = exp > 0
    stat = float(((obs[keep] - exp[keep]) ** 2 / exp[keep]).sum())
    df = int(keep.sum()) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    p_value = 0.5 * math.erfc(z / math.sqrt(2))
    tv = 0.5 * float(np.abs(counts / n - expected).sum())
    return p_value, tv


def broken_verify(draft, q, p, gen):
    """The classic mistake: accept with min(1, p/q) but resample rejections from p itself."""
    b, k = draft.shape
    accepted, _ = verify_sampled_batch(draft, q, p, gen)
    rows = torch.arange(b)
    return accepted, torch.multinomial(p[rows, accepted], 1, generator=gen)[:, 0]


PARAMS = [
    GenerationParams(temperature=1.0),
    GenerationParams(temperature=0.7, top_k=5),
    GenerationParams(temperature=1.3, top_p=0.9),
]


@pytest.fixture(scope="module")
def models():
    return tiny(0), tiny(1)


@pytest.mark.parametrize("params", PARAMS, ids=["t1", "t0.7-topk5", "t1.3-topp0.9"])
@pytest.mark.parametrize("k", [1, 3])
def test_speculative_sampling_matches_the_target_distribution(models, params, k):
    target, drafter = models
    p_tab, q_tab = conditionals(target, params), conditionals(drafter, params)
    expected = exact_joint(p_tab)
    p_value, tv = chi_square_p(sample_first_three(p_tab, q_tab, k, seed=1234), expected)
    assert p_value > P_MIN, f"chi-square p={p_value:.2e}, TV={tv:.4f}"
    assert tv < 0.06


def test_a_deterministic_drafter_is_lossless_too(models):
    target, _ = models
    params = GenerationParams(temperature=1.0)
    p_tab = conditionals(target, params)
    # a "prompt lookup" drafter: always proposes token 3 (q one-hot), verified with q=None
    one_hot = torch.zeros_like(p_tab)
    one_hot[..., 3] = 1.0

    def verify_one_hot(draft, q, p, gen):
        return verify_sampled_batch(torch.full_like(draft, 3), None, p, gen)

    codes = sample_first_three(p_tab, one_hot, 2, seed=99, verify=verify_one_hot)
    p_value, _ = chi_square_p(codes, exact_joint(p_tab))
    assert p_value > P_MIN


def test_the_negative_control_fails_the_same_test(models):
    target, drafter = models
    params = GenerationParams(temperature=1.0)
    p_tab, q_tab = conditionals(target, params), conditionals(drafter, params)
    p_value, tv = chi_square_p(sample_first_three(p_tab, q_tab, 3, seed=1234, verify=broken_verify), exact_joint(p_tab))
    assert p_value < 1e-6, f"the broken sampler passed: p={p_value:.2e}, TV={tv:.4f}"


def test_the_generation_loop_samples_the_target_distribution(models):
    """The real loop (draft model drafter, q transformed like p, seeded per call) over fewer
    samples: the first two tokens against the exact distribution."""
    target, draft = models
    params = GenerationParams(temperature=1.0, top_k=6)
    p_tab = conditionals(target, params)
    exact2 = exact_joint(p_tab).reshape(V, V, V).sum(-1).ravel()
    drafter = DraftModelDrafter(draft)
    stop = StopCriteria(frozenset(), 4)  # after the first token a round drafts up to 2: token 2 is verified
    codes = []
    for seed in range(1500):
        out = generate(target, PROMPT, GenerationParams(temperature=1.0, top_k=6, seed=seed), stop, FakeClock(),
                       drafter=drafter, num_speculative_tokens=3)
        assert out.rounds
        codes.append(out.tokens[0] * V + out.tokens[1])
    counts = np.bincount(codes, minlength=V * V)
    exp = exact2 * len(codes)
    keep = exp >= 5
    stat = float((((counts - exp) ** 2)[keep] / exp[keep]).sum())
    df = int(keep.sum()) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    assert 0.5 * math.erfc(z / math.sqrt(2)) > P_MIN


def test_greedy_verification_keeps_the_matching_prefix():
    logits = torch.full((4, 10), -1.0)
    for pos, tok in enumerate([7, 2, 9, 4]):
        logits[pos, tok] = 5.0
    assert verify_greedy([7, 2, 9], logits) == (3, 4)  # all accepted, bonus 4
    assert verify_greedy([7, 3, 9], logits) == (1, 2)  # rejected at 2: the target's 2 replaces 3
    assert verify_greedy([], logits[:1]) == (0, 7)
