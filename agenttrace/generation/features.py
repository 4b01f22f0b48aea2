"""The target's features of one call's confirmed positions, for drafters that read them
(`reads_features`: EAGLE and Medusa heads): row i is position i's last hidden state after the
final norm. The loop fills it from the prefix cache, the prefill and each pass (which compute
the features anyway) and hands the drafter a view each round."""

from __future__ import annotations

import torch

__all__ = ["FeatureLog"]


class FeatureLog:
    """Features of every token but the pending one, preallocated for the call so a round
    appends without copying the rest."""

    def __init__(self, first: torch.Tensor, room: int) -> None:
        self.rows = first.new_empty(max(room, first.shape[0]), first.shape[-1])  # [room, d]
        self.count = 0
        self.add(first)

    def add(self, rows: torch.Tensor) -> None:
        n = rows.shape[0]
        if self.count + n > self.rows.shape[0]:
            grown = self.rows.new_empty(2 * (self.count + n), self.rows.shape[-1])
            grown[: self.count] = self.rows[: self.count]
            self.rows = grown
        self.rows[self.count : self.count + n] = rows
        self.count += n

    def view(self) -> torch.Tensor:
        return self.rows[: self.count]
