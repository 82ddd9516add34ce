"""Binary bracketings by enumeration: every constituency tree of a tiny sentence and the brute-force CRF quantities."""

from __future__ import annotations

from functools import cache

import torch


@cache
def bracketings(i: int, j: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Every binary bracketing of words ``i..j`` as a tuple of inclusive spans."""
    if i == j:
        return (((i, i),),)
    return tuple(((i, j),) + left + right for k in range(i, j)
                 for left in bracketings(i, k) for right in bracketings(k + 1, j))


def tree_scores(scores: torch.Tensor, n: int) -> torch.Tensor:
    """``[T]`` scores of every bracketing of ``n`` words under ``scores [N, N]``."""
    return torch.stack([sum(scores[i, j] for i, j in tree) for tree in bracketings(0, n - 1)])


def brute_force(scores: torch.Tensor, n: int):
    """log Z, span marginals ``[N, N]``, best score and tree probabilities of one sentence."""
    values = tree_scores(scores, n)
    log_z = torch.logsumexp(values, 0)
    prob = (values - log_z).exp()
    marginals = scores.new_zeros(scores.shape)
    for tree, p in zip(bracketings(0, n - 1), prob):
        for i, j in tree:
            marginals[i, j] += p
    return log_z, marginals, values.max(), prob


def random_batch(seed: int, lengths: list[int], scale: float = 1.0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    N = max(lengths)
    scores = torch.randn(len(lengths), N, N, generator=gen, dtype=dtype) * scale
    return scores, torch.tensor(lengths)
