"""Draft trees: several candidate continuations scored by the target in one forward pass.

A tree's nodes are draft tokens; node i follows its parent (-1: the pending token, the root),
at depth 1 + its parent's depth. Nodes come parents first, and siblings are distinct tokens,
best first. The verify pass feeds the pending token and every node, each at the position its
depth gives, each seeing the context, its ancestors and itself (`tree_inputs`); then the
target walks down from the root, keeping one path (`verify_tree_greedy`, `verify_tree_sampled`)
and the cache keeps only that path's entries (`kv.keep_path`).

Lossless sampling with deterministic candidates: at a node whose target distribution is p,
the children c_1, c_2, ... are tried in order, c_j accepted with probability
r_j(c_j) / sum(r_j), where r_1 = p and r_{j+1} is r_j with c_j removed; when every child is
refused the token is drawn from the last r. That is the chain rule of drawing x ~ p and asking
"is it c_1? if not, is it c_2?", so the token kept has exactly distribution p, whatever the
candidates were, as long as they were chosen without looking at the target's draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["TreeDraft", "tree_inputs", "verify_tree_greedy", "verify_tree_sampled"]


@dataclass(frozen=True)
class TreeDraft:
    """Draft tokens as a tree (module docstring). `depths[i]` is 1 for the root's children."""

    tokens: list[int]
    parents: list[int]
    depths: list[int]

    def __post_init__(self) -> None:
        assert len(self.tokens) == len(self.parents) == len(self.depths)
        assert all(p < i for i, p in enumerate(self.parents)), "parents come before their children"

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depth(self) -> int:
        return max(self.depths, default=0)

    def children(self, node: int) -> list[int]:
        """The children of `node` (-1: the root), best first."""
        return [i for i, p in enumerate(self.parents) if p == node]

    def chain(self) -> list[int]:
        """The tokens of the path through every first child: the drafter's single best guess."""
        out, node = [], -1
        while kids := self.children(node):
            node = kids[0]
            out.append(self.tokens[node])
        return out


def tree_inputs(tree: TreeDraft, pending: int, base: int) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """(ids, positions [n], visible [n, base + n]) of the verify pass for the pending token at
    position `base` followed by every node: row 0 is the pending token, row i + 1 node i."""
    n = len(tree) + 1
    positions = torch.tensor([base] + [base + d for d in tree.depths])
    visible = torch.zeros(n, base + n, dtype=torch.bool)
    visible[:, :base] = True
    visible[0, base] = True
    for i, parent in enumerate(tree.parents):
        row = i + 1
        visible[row] = visible[parent + 1]  # the parent's row (the root's is row 0): its ancestors
        visible[row, base + row] = True
    return [pending, *tree.tokens], positions, visible


def verify_tree_greedy(tree: TreeDraft, target_logits: torch.Tensor) -> tuple[list[int], int]:
    """Walk down while the target's argmax is a child: the accepted nodes (in order) and the
    target's own next token. Exactly plain greedy decoding's tokens. target_logits: [n + 1, V]."""
    best = target_logits.argmax(-1).tolist()
    path: list[int] = []
    node = -1
    while True:
        want = best[node + 1]
        nxt = next((c for c in tree.children(node) if tree.tokens[c] == want), None)
        if nxt is None:
            return path, want
        path.append(nxt)
        node = nxt


def verify_tree_sampled(tree: TreeDraft, target_probs: torch.Tensor,
                        generator: torch.Generator | None) -> tuple[list[int], int]:
    """The lossless walk of the module docstring: the accepted nodes and the next token, drawn
    from the target's distributions target_probs [n + 1, V] (already transformed)."""
    path: list[int] = []
    node = -1
    while True:
        residual = target_probs[node + 1].clone()
        accepted = None
        for child in tree.children(node):
            token = tree.tokens[child]
            mass = float(residual.sum())
            if mass <= 0:
                break
            u = float(torch.rand((), generator=generator, device=residual.device))
            if u * mass < float(residual[token]):
                accepted = child
                break
            residual[token] = 0.0
        if accepted is None:
            mass = residual.sum()
            dist = residual / mass if float(mass) > 0 else target_probs[node + 1]
            return path, int(torch.multinomial(dist, 1, generator=generator).item())
        path.append(accepted)
        node = accepted
